"""Held jobs (corral hold / release) and the job action on node failure (seed 002 §5.4.6), through
the real CLI and HTTP API of a running corral."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

from corral.cloud.loopback import LoopbackCloud
from tests.e2e.conftest import Corral, wait_until


def test_an_operator_holds_a_queued_job_nothing_boots_for_it_until_it_is_released(corral: Corral) -> None:
    corral.start()
    # Queued until its requested start, so that the hold finds it queued even on a loaded machine.
    starts_at = time.time() + 12
    start = datetime.fromtimestamp(starts_at, UTC).isoformat()
    job_id = int(corral.cli("submit", "--not-before", start, "--", "echo", "released").stdout)
    assert corral.cli("hold", str(job_id), "--reason", "input not ready").stdout == f"{job_id}: held\n"
    assert corral.cli("hold", str(job_id)).stdout == f"{job_id}: already held\n"
    later = datetime.fromtimestamp(time.time() + 3600, UTC).isoformat()
    markup = int(corral.cli("submit", "--not-before", later, "--", "true").stdout)
    corral.cli("hold", str(markup), "--reason", "[red]not markup[/red]")
    assert "held by an operator: [red]not markup[/red]" in corral.cli("job", str(markup)).stdout
    corral.cli("cancel", str(markup))
    shown = corral.cli_json("job", str(job_id))
    assert shown["held"] and shown["state"] == "queued"
    assert shown["wait_reason"] == "held by an operator: input not ready"
    listing = corral.cli("jobs").stdout
    assert "queued held" in listing and "held by an operator: input not ready" in listing

    # Past its requested start (and a pass or two after it), still held: not run, nothing booted for it.
    time.sleep(max(0.0, starts_at + 2 - time.time()))
    assert corral.jobs()[job_id]["state"] == "queued" and corral.live_nodes() == []

    released = corral.api("POST", f"/api/jobs/{job_id}/release")
    assert released.status_code == 200 and released.json()["changed"] is True
    wait_until(lambda: corral.jobs()[job_id]["state"] == "complete", 60, "the released job to run")
    assert corral.cli("logs", str(job_id)).stdout == "released\n"
    assert corral.cli("release", str(job_id)).stdout == f"{job_id}: not held (complete)\n"
    kinds = [e["kind"] for e in corral.cli_json("events", "--job", str(job_id))]
    assert kinds[:3] == ["job.queued", "job.held", "job.released"]

    # Only a queued job can be held; an unknown one is not found.
    refused = corral.api("POST", f"/api/jobs/{job_id}/hold", json={"reason": "late"})
    assert refused.status_code == 409 and "only a queued job can be held" in refused.json()["detail"]
    missing = corral.cli("hold", "9999", check=False)
    assert missing.returncode != 0 and "no job 9999" in missing.stderr
    # One wrong id spares none after it (as for cancel): the second job is held all the same.
    later = datetime.fromtimestamp(time.time() + 3600, UTC).isoformat()
    other = int(corral.cli("submit", "--not-before", later, "--", "true").stdout)
    both = corral.cli("hold", "9999", str(other), check=False)
    assert both.returncode != 0 and "9999: no job 9999" in both.stderr and both.stdout == f"{other}: held\n"
    corral.cli("cancel", str(other))


def test_a_lost_node_cancels_or_holds_its_job_as_the_job_asks(corral: Corral, tmp_path: Path) -> None:
    corral.start()
    marker = tmp_path / "first-try"
    again = f"if [ -e {marker} ]; then echo second try; else touch {marker}; sleep 300; fi"
    # 2 vcpus each on 2-vcpu instances: a node each.
    cancel = int(corral.cli("submit", "--vcpus", "2", "--on-node-failure", "cancel", "--", "sleep", "300").stdout)
    hold = int(corral.cli("submit", "--vcpus", "2", "--on-node-failure", "HOLD", "--", "sh", "-c", again).stdout)
    for job_id in (cancel, hold):

        def running(job_id: int = job_id) -> bool:
            return corral.jobs()[job_id]["state"] == "running"

        wait_until(running, 60, f"job {job_id} to run")
    assert [corral.cli_json("job", str(j))["on_node_failure"] for j in (cancel, hold)] == ["cancel", "hold"]
    nodes = {j: corral.jobs()[j]["node"] for j in (cancel, hold)}
    cloud = LoopbackCloud(corral.home, "", "corral", 0.5)
    for n in corral.live_nodes():
        cloud.destroy(n["instance_id"])  # both instances vanish: their nodes are lost

    wait_until(lambda: corral.jobs()[cancel]["state"] == "cancelled", 60, "the policy to cancel the job")
    job = corral.cli_json("job", str(cancel))
    reason = f"node {nodes[cancel]} lost; cancelled (on_node_failure=cancel: the job's setting)"
    assert job["attempt_list"][0]["state"] == "tempfail" and job["attempt_list"][0]["reason"] == reason
    cancelled = corral.cli_json("events", "--job", str(cancel), "--kind", "job.cancelled")
    assert [e["message"] for e in cancelled] == [reason]

    wait_until(lambda: corral.jobs()[hold]["held"], 60, "the policy to hold the other job")
    job = corral.cli_json("job", str(hold))
    assert job["state"] == "queued" and job["temp_failures"] == 1
    assert job["wait_reason"] == "held after a node failure (on_node_failure=hold: the job's setting) until released"
    kinds = [e["kind"] for e in corral.cli_json("events", "--job", str(hold))]
    assert kinds[-2:] == ["job.requeued", "job.held"]
    wait_until(lambda: corral.live_nodes() == [], 60, "the lost nodes to be cleaned up")
    time.sleep(2)  # several passes: nothing is booted for the held job
    assert corral.live_nodes() == [] and corral.jobs()[hold]["state"] == "queued"

    assert corral.cli("release", str(hold)).stdout == f"{hold}: released\n"
    wait_until(lambda: corral.jobs()[hold]["state"] == "complete", 60, "the released job to run again")
    assert corral.cli("logs", str(hold)).stdout == "second try\n"
