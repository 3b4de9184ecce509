"""`corral backoff clear` on a running corral: the type is booted at once, not when its back-off ends."""

from __future__ import annotations

import time

from corral.core.snapshot import BootFailures
from corral.store import Store
from tests.e2e.conftest import CONFIG, Corral, wait_until


def test_a_cleared_type_boots_for_the_waiting_job_at_once(corral: Corral) -> None:
    # Passes only when something wakes one (a submission, an agent, an operator's call): the job below
    # could run within the test only if clearing the back-off wakes a pass.
    config = CONFIG.replace('[loop]\ninterval = "0.5s"', '[loop]\ninterval = "1h"')
    assert config != CONFIG
    corral.config.write_text(config)
    corral.start()
    now = time.time()
    store = Store(f"sqlite:///{corral.home / 'corral.db'}")
    try:
        # Both types were backed off: small's instances never paired (a broken image, since fixed),
        # medium had no capacity.
        store.set_unavailable("small", now + 3600, "did not pair", now, "type.boot_failed", BootFailures(5, now))
        store.set_unavailable("medium", now + 3600, "InsufficientInstanceCapacity", now)
    finally:
        store.close()
    job = int(corral.cli("submit", "--", "true").stdout.strip())
    wait_until(lambda: "backed off" in (corral.jobs()[job]["wait_reason"] or ""), 30, "the job to wait for a type")
    assert corral.live_nodes() == []

    said = corral.cli("backoff", "clear", "small").stdout
    assert said.startswith("small: back-off cleared (was until ") and "5 failed boots in a row forgotten" in said

    wait_until(lambda: corral.jobs()[job]["state"] == "complete", 60, "the job to run on a new small")
    assert {node["instance_type"] for node in corral.api("GET", "/api/nodes?all=true").json()} == {"small"}
    assert [b["instance_type"] for b in corral.cli_json("status")["backoffs"]] == ["medium"]
