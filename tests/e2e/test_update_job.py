"""`corral update` in a running corral (Slurm's scontrol update JobId=): a job that asked for more
than any instance holds is made placeable without losing its id, so the job that depends on it
runs too; a running job's time limit is raised before it runs out (TimeLimit=+), so it completes
instead of timing out; what its state does not take, or a bad value, is refused by its option."""

from __future__ import annotations

from tests.e2e.conftest import Corral, wait_until

TERMINAL = {"complete", "failed", "cancelled"}


def test_update_makes_a_job_placeable_and_gives_a_running_one_more_time(corral: Corral) -> None:
    corral.start()
    big = int(corral.cli("submit", "--vcpus", "500", "--", "echo", "fits now").stdout)
    after = int(corral.cli("submit", "--dependency", f"afterok:{big}", "--", "echo", "after").stdout)
    wait_until(lambda: corral.cli_json("job", str(big))["unplaceable"], 30, "the big job found unplaceable")
    assert corral.cli("update", str(big), "--vcpus", "1").stdout == f"{big}: vcpus 500 -> 1\n"
    slow = int(corral.cli("submit", "--time-limit", "6s", "--", "sleep", "9").stdout)
    wait_until(lambda: corral.jobs()[slow]["state"] == "running", 60, "the slow job to run")
    assert corral.cli("update", str(slow), "--time-limit", "+30s").stdout == f"{slow}: time_limit 6s -> 36s\n"

    refused = corral.cli("update", str(slow), "--vcpus", "2", check=False)
    assert refused.returncode != 0 and "vcpus change only while it is queued" in refused.stderr
    bad = corral.cli("update", str(after), "--ram", "lots", check=False)
    assert bad.returncode != 0 and "--ram: not a size: 'lots'" in bad.stderr

    wait_until(lambda: all(corral.jobs()[i]["state"] in TERMINAL for i in (big, after, slow)), 90, "all to end")
    states = {i: corral.jobs()[i]["state"] for i in (big, after, slow)}
    assert states == {big: "complete", after: "complete", slow: "complete"}
    assert "job.updated" in [e["kind"] for e in corral.cli_json("events", "--job", str(slow))]
