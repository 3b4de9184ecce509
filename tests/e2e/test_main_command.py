"""The README's main command, end to end: real server, real loopback agents, real commands."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from corral.cloud.loopback import LoopbackCloud
from tests.e2e.conftest import Corral, wait_until

TERMINAL = {"complete", "failed", "cancelled"}


def test_fifty_mixed_jobs_complete_with_their_exit_codes_and_output_then_the_fleet_shrinks(
    corral: Corral, tmp_path: Path
) -> None:
    corral.start()
    sizes = [(1, "256MiB"), (2, "1GiB"), (1, "3GiB"), (4, "6GiB")]
    lines = []
    for i in range(50):
        vcpus, ram = sizes[i % len(sizes)]
        command = ["sh", "-c", f"echo job-{i} on $CORRAL_NODELIST; exit {i % 3}"]
        lines.append(json.dumps({"command": command, "name": f"mixed-{i}", "vcpus": vcpus, "ram": ram}))
    jobs_file = tmp_path / "jobs.jsonl"
    jobs_file.write_text("\n".join(lines) + "\n")
    ids = [int(x) for x in corral.cli("submit", "-f", str(jobs_file)).stdout.split()]
    assert len(ids) == 50

    def all_done() -> bool:
        jobs = corral.jobs()
        return all(jobs[i]["state"] in TERMINAL for i in ids)

    wait_until(all_done, 120, "all 50 jobs to finish")
    listed = {j["id"]: j for j in corral.cli_json("jobs")}
    for n, job_id in enumerate(ids):
        job = listed[job_id]
        assert job["exit_code"] == n % 3, job
        assert job["state"] == ("complete" if n % 3 == 0 else "failed"), job
        assert job["attempts"] == 1 and job["node"]
        output = corral.api("GET", f"/api/jobs/{job_id}/logs").text
        assert output == f"job-{n} on {job['node']}\n"
        if n < 3:  # `corral logs` prints it as kept, of a job of each exit code (a process each: 1 s)
            assert corral.cli("logs", str(job_id)).stdout == output

    peak = {e["node_id"] for e in corral.cli_json("events", "--kind", "node.booting")}
    assert 1 <= len(peak) <= 4  # max_instances
    wait_until(lambda: corral.live_nodes() == [], 60, "the fleet to shrink to zero after the idle grace")
    kinds = [e["kind"] for e in corral.cli_json("events", "--kind", "node.", "--limit", "1000")]
    assert "node.draining" in kinds and "node.gone" in kinds


def test_cancel_and_priority_zero_stop_running_jobs(corral: Corral) -> None:
    corral.start()
    first = int(corral.cli("submit", "--", "sleep", "300").stdout)
    second = int(corral.cli("submit", "--", "sleep", "300").stdout)
    # Beside them, a command SIGKILLed (as an out-of-memory kill takes one) and one that exits 137:
    # both exit 137 as ever, and only the first has a signal.
    # (Through the API, as `corral submit` sends them: a CLI process costs a second.)
    quick = [{"command": ["sh", "-c", "kill -KILL $$"]}, {"command": ["sh", "-c", "exit 137"]}]
    killed, exits_137 = corral.api("POST", "/api/jobs", json={"jobs": quick}).json()["ids"]
    wait_until(lambda: all(corral.jobs()[i]["state"] == "running" for i in (first, second)), 60, "both to run")
    corral.cli("cancel", str(first))
    corral.cli("priority", str(second), "0")
    wait_until(lambda: all(corral.jobs()[i]["state"] == "cancelled" for i in (first, second)), 30, "cancellation")
    # Who asked is on the job: here the data directory's token, which names no user. (The API, as
    # `corral jobs --json` prints it: a CLI process costs a second.)
    listed = corral.jobs()
    assert [(listed[i]["end_cause"], listed[i]["cancelled_by"]) for i in (first, second)] == [
        ("cancelled", "(operator)")
    ] * 2

    wait_until(lambda: all(corral.jobs()[i]["state"] == "failed" for i in (killed, exits_137)), 60, "both to fail")
    listed = corral.jobs()
    assert [(listed[i]["exit_code"], listed[i]["exit_signal"]) for i in (killed, exits_137)] == [(137, 9), (137, None)]
    assert listed[killed]["cancelled_by"] is None
    assert "  exit code  137 (killed by signal 9 (SIGKILL))" in corral.cli("job", str(killed)).stdout
    failed = corral.api("GET", "/api/events", params={"job": killed, "kind": "job.failed"}).json()
    assert [e["message"] for e in failed] == ["exit 137: killed by signal 9 (SIGKILL)"]

    # The agents killed the commands: neither process (the pid each agent reported) is left. Only
    # these two are looked at: a `sleep 300` of anything else on the machine is none of this test's.
    pids = [
        int(e["message"].rsplit("pid ", 1)[1])
        for i in (first, second)
        for e in corral.cli_json("events", "--job", str(i), "--kind", "job.running")
    ]
    assert len(pids) == 2

    def sleepers() -> list[int]:
        found = []
        for pid in pids:
            try:
                if (Path("/proc") / str(pid) / "cmdline").read_bytes() == b"sleep\x00300\x00":
                    found.append(pid)
            except OSError:
                pass  # gone
        return found

    wait_until(lambda: sleepers() == [], 30, "the cancelled commands to be killed")
    events = [e["kind"] for e in corral.cli_json("events", "--job", str(first))]
    assert events[:1] == ["job.queued"] and "job.cancelled" in events


def test_ctrl_c_stops_agents_requeues_work_and_records_the_fleet(corral: Corral) -> None:
    corral.start()
    job_id = int(corral.cli("submit", "--", "sleep", "300").stdout)
    wait_until(lambda: corral.jobs()[job_id]["state"] == "running", 60, "the job to run")
    # uvicorn re-raises SIGINT after a clean shutdown, so the shell sees the usual 130.
    assert corral.stop(signal.SIGINT) in (0, 130)
    assert "Application shutdown complete" in corral.server_log()
    wait_until(lambda: LoopbackCloud(corral.home, "", "corral", 0.5).list() == [], 20, "agents to stop")
    corral.start()
    job = corral.cli_json("job", str(job_id))
    assert job["state"] in ("queued", "claimed", "running")
    assert job["attempt_list"][0]["state"] == "tempfail" and "corral stopped" in job["attempt_list"][0]["reason"]
    gone = corral.cli_json("nodes", "--all")
    assert gone and all(n["state"] == "gone" for n in gone if n["id"] == job["attempt_list"][0]["node"])
