"""/metrics as Prometheus scrapes it from a running corral: real server, real agents, real jobs."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import Corral, wait_until


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
