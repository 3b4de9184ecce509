"""`corral queue` in a running corral under queue.order = "multifactor" (Slurm's sprio): the queued
jobs in the order the next pass takes them, priority first, then the score of age and fair share
that puts the user who has not run anything before the one who has; held jobs left out."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import Corral, wait_until

MULTIFACTOR = """
[policy.placement.queue]
order = "multifactor"

[policy.placement.queue.fairshare]
calc_period = "1s"

[policy.placement.queue.multifactor]
max_age = "1h"
"""


def test_the_queue_shows_the_order_of_the_next_pass_and_its_factors(corral: Corral) -> None:
    # One two-vCPU node, taken whole by alice's first job while the others queue.
    corral.config.write_text(corral.config.read_text().replace("max_instances = 4", "max_instances = 1") + MULTIFACTOR)
    corral.start()

    def submit(user: str, *options: str) -> int:
        return int(corral.cli("submit", "--user", user, "--vcpus", "2", *options, "--", "sleep", "60").stdout)

    running = submit("alice")
    wait_until(lambda: corral.jobs()[running]["state"] == "running", 60, "alice's first job to run")
    older = submit("alice")
    bobs = submit("bob")
    urgent = submit("alice", "--priority", "5")
    held = submit("carol")
    corral.cli("hold", str(held))

    def ranked() -> list[int]:
        return [row["id"] for row in corral.cli_json("queue")["rows"]]

    # Once alice's run counts (usage is brought up to date each calc period): bob, who has run
    # nothing, before her older job; her urgent one before both.
    wait_until(lambda: ranked() == [urgent, bobs, older], 30, "the queue in multifactor order")
    report = corral.cli_json("queue")
    assert report["order"] == "multifactor" and report["queued"] == 3  # carol's held job left out
    rows = {row["id"]: row for row in report["rows"]}
    assert rows[bobs]["fairshare"] == 1.0 > rows[older]["fairshare"]
    for row in rows.values():
        assert 0.0 <= row["age"] < 1.0
        assert row["score"] == pytest.approx(1000 * row["age"] + 10000 * row["fairshare"])

    text = corral.cli("queue", "--limit", "1").stdout
    assert "1 of 3 queued" in text and "multifactor" in text and "alice" in text and "bob" not in text
