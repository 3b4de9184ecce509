"""`corral requeue` on a real `corral run` (loopback cloud): the running command is killed, the job
is queued again and runs a second attempt, counting no failure; a finished job is queued again at
once and runs again."""

from __future__ import annotations

from tests.e2e.conftest import Corral, wait_until


def test_a_running_job_is_stopped_and_run_again_and_a_finished_one_runs_again(corral: Corral) -> None:
    corral.start()
    job = int(corral.cli("submit", "--", "sleep", "60").stdout)
    done = int(corral.cli("submit", "--", "true").stdout)
    wait_until(lambda: corral.jobs()[job]["state"] == "running", 60, "the job to run")
    wait_until(lambda: corral.jobs()[done]["state"] == "complete", 60, "the short job to complete")

    said = corral.cli("requeue", str(job)).stdout
    assert said == f"{job}: requeue requested\n"
    wait_until(lambda: corral.jobs()[job]["attempts"] == 2, 60, "a second attempt")
    wait_until(lambda: corral.jobs()[job]["state"] == "running", 60, "the job to run again")
    shown = corral.cli_json("job", str(job))
    first, second = shown["attempt_list"]
    assert first["state"] == "cancelled" and first["reason"] == "requeued by request"
    assert second["state"] == "running"
    assert shown["temp_failures"] == 0 and shown["exit_code"] is None
    kinds = [e["kind"] for e in corral.cli_json("events", "--job", str(job))]
    assert kinds.index("job.requeue_requested") < kinds.index("job.requeued") < len(kinds) - 1

    # Requeued held (scontrol requeuehold): stopped, and not run again until released.
    assert corral.cli("requeue", "--hold", str(job)).stdout == f"{job}: requeue requested\n"
    wait_until(lambda: corral.jobs()[job]["held"], 60, "the job to be requeued held")
    assert corral.jobs()[job]["state"] == "queued" and corral.jobs()[job]["attempts"] == 2
    corral.cli("release", str(job))
    wait_until(lambda: corral.jobs()[job]["state"] == "running", 60, "the released job to run again")

    # A finished job (Slurm requeues those too) is queued again at once and runs a second time.
    both = corral.cli("requeue", str(done), str(job)).stdout
    assert both == f"{done}: queued again\n{job}: requeue requested\n"
    wait_until(lambda: corral.jobs()[done]["attempts"] == 2, 60, "the finished job's second attempt")
    wait_until(lambda: corral.jobs()[done]["state"] == "complete", 60, "it to complete again")
    corral.cli("cancel", str(job))
