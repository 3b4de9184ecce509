"""/metrics as Prometheus scrapes it from a running corral: real server, real agents, real jobs."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from corral.core.snapshot import BootFailures
from corral.store import Store
from tests.e2e.conftest import CONFIG, Corral, wait_until
from tests.support import debian_packages_missing, require

LAST_PASS = ("corral_pass_last_success_timestamp_seconds", ())
# Every job that ends is notified, and the command always fails: the notifier tries it again.
FAILING_NOTIFIER = """
[[notify]]
on = ["job.complete"]
command = ["false"]
"""


def scrape(corral: Corral) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = httpx.get(f"http://127.0.0.1:{corral.port}/metrics", timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def test_metrics_show_the_fleet_bill_the_waits_and_what_happened(corral: Corral) -> None:
    corral.start()
    sleeper = int(corral.cli("submit", "--", "sleep", "60").stdout)  # keeps a node, and its bill, up
    done = [int(corral.cli("submit", "--name", f"quick-{i}", "--", "true").stdout) for i in range(3)]
    too_big = int(corral.cli("submit", "--vcpus", "64", "--", "true").stdout)  # no type has 64 vcpus

    def started() -> bool:
        jobs = corral.jobs()
        return jobs[sleeper]["state"] == "running" and all(jobs[i]["state"] == "complete" for i in done)

    wait_until(started, 60, "three jobs to complete and the sleeper to run")

    figures = scrape(corral)
    assert figures[("corral_jobs", (("state", "complete"),))] == 3
    assert figures[("corral_jobs", (("state", "queued"),))] == 1
    assert figures[("corral_job_wait_seconds_count", ())] == 4
    assert figures[("corral_events_total", (("kind", "job.queued"),))] == 5
    assert figures[("corral_events_total", (("kind", "job.complete"),))] == 3
    assert figures[("corral_events_total", (("kind", "node.booting"),))] >= 1
    assert figures[("corral_passes_total", ())] >= 1
    # The 64-vcpu job can never run here: it is the oldest job waiting, since its submission.
    assert corral.jobs()[too_big]["state"] == "queued"
    assert 0 < figures[("corral_queue_oldest_wait_seconds", ())] < 120

    # What the fleet costs now is what `corral nodes` lists, priced (read when the fleet held still).
    def bill_matches_the_listing() -> bool:
        before = {node["id"]: node["price_per_hour"] for node in corral.live_nodes()}
        billed = scrape(corral)[("corral_fleet_cost_per_hour", ())]
        if {node["id"]: node["price_per_hour"] for node in corral.live_nodes()} != before:
            return False
        assert before and abs(billed - sum(before.values())) < 1e-6
        return True

    wait_until(bill_matches_the_listing, 30, "a scrape while the fleet holds still")
    corral.cli("cancel", str(sleeper))
    # Once the idle grace has passed the fleet is gone, and so is its bill.
    wait_until(lambda: corral.live_nodes() == [], 60, "the fleet to shrink to zero")
    figures = scrape(corral)
    assert figures[("corral_fleet_cost_per_hour", ())] == 0
    assert figures[("corral_fleet_instances", (("instance_type", "small"),))] == 0
    assert figures[("corral_events_total", (("kind", "node.gone"),))] >= 1


def test_the_fleet_cost_in_all_the_loop_the_back_offs_dispatchers_and_notifier(corral: Corral) -> None:
    """What an on-call asks of /metrics beyond the queue: is the loop passing, what has the fleet
    cost in all, is an instance type backed off, do the dispatchers live, is the notifier failing."""
    start_with_idle_nodes_and_a_failing_notifier(corral)
    first = scrape(corral)
    assert first[("corral_dispatchers", (("state", "running"),))] == 1
    # Every configured type is there from 0: its first back-off or bill is a change, not a new series.
    for instance_type in ("small", "medium"):
        assert first[("corral_instance_type_backoff_seconds", (("instance_type", instance_type),))] == 0
        assert first[("corral_fleet_cost_dollars_total", (("instance_type", instance_type),))] == 0

    job = int(corral.cli("submit", "--", "true").stdout)
    wait_until(lambda: corral.jobs()[job]["state"] == "complete", 60, "the job to complete")
    # Another dispatcher on the store had an instance that never paired: medium is backed off.
    now = time.time()
    store = Store(f"sqlite:///{corral.home / 'corral.db'}")
    try:
        store.set_unavailable("medium", now + 600, "did not pair", now, "type.boot_failed", BootFailures(3, now))
    finally:
        store.close()
    wait_until(lambda: scrape(corral)[("corral_notify_retries_pending", ())] >= 1, 30, "the notifier to fail")
    (node,) = corral.live_nodes()
    later = scrape(corral)
    scraped_at = time.time()
    assert scraped_at - 30 < later[LAST_PASS] <= scraped_at
    backoff = later[("corral_instance_type_backoff_seconds", (("instance_type", "medium"),))]
    assert 500 < backoff <= 600
    assert later[("corral_instance_type_boot_failures", (("instance_type", "medium"),))] == 3
    assert later[("corral_instance_type_backoff_seconds", (("instance_type", "small"),))] == 0
    # The small node's price over its life so far, as the store dates it.
    lived = scraped_at - node["created_at"]
    cost = later[("corral_fleet_cost_dollars_total", (("instance_type", "small"),))]
    assert 0 < cost <= 0.085 * lived / 3600
    assert cost >= 0.085 * (lived - 30) / 3600
    assert later[("corral_fleet_cost_dollars_total", (("instance_type", "medium"),))] == 0

    # A clean stop leaves the cost in all where it was: it is the store's, not the process's.
    corral.stop()
    corral.start()
    assert scrape(corral)[("corral_fleet_cost_dollars_total", (("instance_type", "small"),))] >= cost
    # Its first pass's heartbeat says it runs again (till then its row says it stopped).
    wait_until(lambda: scrape(corral)[("corral_dispatchers", (("state", "running"),))] == 1, 30, "a heartbeat")


def promtool_missing() -> list[str]:
    return [] if shutil.which("promtool") else ["promtool"]


def guide_alerts() -> list[dict[str, Any]]:
    """The alert rules the operator guide suggests, as an operator would paste them."""
    guide = (Path(__file__).parents[2] / "docs" / "operator-guide.md").read_text()
    block = guide.split("Alerts an operator would set", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    rules: list[dict[str, Any]] = yaml.safe_load(block)
    return rules


def test_the_operator_guides_alerts_fire_on_what_corral_exports(corral: Corral, tmp_path: Path) -> None:
    """Every alert the guide suggests, run by Prometheus's own rule engine (promtool) over what a
    real corral exported: Prometheus scraped it idle for 10 minutes, then, for 90 minutes, as it
    was after a job completed, one failed, its node stayed up idle, a peer dispatcher hit a
    capacity error and the notifier's command kept failing. An alert whose metric or label is not
    exported, or whose expression never matches what is (CorralIdleBill's `and` between series of
    different labels did not), fails here."""
    require(debian_packages_missing(["prometheus"], promtool_missing), "promtool")
    rules = guide_alerts()
    start_with_idle_nodes_and_a_failing_notifier(corral)
    exported = {name for name, _ in scrape(corral)}
    for rule in rules:
        for name in re.findall(r"\bcorral_[a-z_]+", rule["expr"]):
            assert name in exported, f"{rule['alert']}: {name} is not exported"
    before = scrape(corral)

    done = int(corral.cli("submit", "--", "true").stdout)
    failed = int(corral.cli("submit", "--", "sh", "-c", "exit 3").stdout)
    wait_until(
        lambda: {corral.jobs()[done]["state"], corral.jobs()[failed]["state"]} == {"complete", "failed"},
        60,
        "both to end",
    )
    now = time.time()
    store = Store(f"sqlite:///{corral.home / 'corral.db'}")
    try:  # what a peer dispatcher writes on a capacity error
        store.set_unavailable("medium", now + 7200, "InsufficientInstanceCapacity", now)
        store.add_event(now, "capacity.unavailable", "medium: InsufficientInstanceCapacity")
    finally:
        store.close()
    wait_until(lambda: scrape(corral)[("corral_notify_retries_pending", ())] >= 1, 30, "the notifier to fail")
    after = scrape(corral)
    assert after[("corral_jobs", (("state", "running"),))] == 0 and after[("corral_fleet_cost_per_hour", ())] > 0

    target = {"job": "corral", "instance": "corral:8642"}
    series = [{"series": 'up{job="corral",instance="corral:8642"}', "values": "1x100"}]
    for key in sorted(set(before) | set(after)):
        name, labels = key
        if key == LAST_PASS:  # a loop that passes: a fresh time at every scrape, in promtool's clock
            values = "0+60x100"
        else:
            values = " ".join([_value(before.get(key))] * 10 + [_value(after.get(key))] * 91)
        selector = ",".join(f'{k}="{v}"' for k, v in sorted({**dict(labels), **target}.items()))
        series.append({"series": f"{name}{{{selector}}}", "values": values})

    def fired(*labels: dict[str, str]) -> list[dict[str, Any]]:
        return [{"exp_labels": {**target, **extra}} for extra in labels]

    expected = {  # minutes into the test: what fires then
        12: {
            "CorralCapacityErrors": fired({"kind": "capacity.unavailable"}),
            "CorralJobsFailing": fired({}),
            "CorralDispatcherDown": fired({"state": "running"}),  # one runs, of the two it expects
        },
        75: {
            "CorralIdleBill": fired({}),
            "CorralTypeBackedOff": fired({"instance_type": "medium"}),
            "CorralNotifierFailing": fired({}),
            "CorralDispatcherDown": fired({"state": "running"}),
        },
    }
    names = [rule["alert"] for rule in rules]
    assert {alert for at in expected.values() for alert in at} <= set(names)
    tests = [
        {"eval_time": f"{minute}m", "alertname": name, "exp_alerts": firing.get(name, [])}
        for minute, firing in expected.items()
        for name in names
    ]
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": [{"name": "corral", "rules": rules}]}))
    unit = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": [
        {"interval": "1m", "input_series": series, "alert_rule_test": tests}
    ]}  # fmt: skip
    (tmp_path / "test.yml").write_text(yaml.safe_dump(unit))
    run = subprocess.run(
        ["promtool", "test", "rules", "test.yml"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stdout + run.stderr


def start_with_idle_nodes_and_a_failing_notifier(corral: Corral) -> None:
    """corral whose nodes stay up, idle, for a test's length (their bill is their life so far),
    and whose notifier's command always fails; started, and past its first pass."""
    config = CONFIG.replace('idle_grace = "2s"', 'idle_grace = "1h"')
    assert config != CONFIG
    corral.config.write_text(config + FAILING_NOTIFIER)
    corral.start()
    wait_until(lambda: scrape(corral)[LAST_PASS] > 0, 30, "a first pass")


def _value(value: float | None) -> str:
    return "_" if value is None else repr(value)
