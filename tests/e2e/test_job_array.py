"""Job arrays (Slurm's --array) through a real `corral run` on the loopback cloud: each task sees
its place in its environment, and the throttle keeps no more than its number running at once."""

from __future__ import annotations

from tests.e2e.conftest import Corral, wait_until


def test_an_array_runs_its_tasks_with_their_ids_never_more_at_once_than_its_throttle(corral: Corral) -> None:
    corral.start()
    report = 'echo "$CORRAL_ARRAY_JOB_ID $CORRAL_ARRAY_TASK_ID $CORRAL_ARRAY_TASK_COUNT $CORRAL_ARRAY_TASK_MIN'
    script = f'{report} $CORRAL_ARRAY_TASK_MAX"; sleep 1.5'
    ids = [int(line) for line in corral.cli("submit", "--array", "0-3%2", "--", "sh", "-c", script).stdout.split()]
    assert len(ids) == 4
    array = ids[0]
    throttled = f"JobArrayTaskLimit: array {array} runs at most 2 tasks at once"
    wait_until(lambda: corral.jobs()[ids[3]]["wait_reason"] == throttled, 60, "the last task to wait for the throttle")
    listed = corral.cli_json("jobs", "--array", str(array))
    assert [(j["id"], j["array_job_id"], j["array_task_id"]) for j in listed] == [
        (job_id, array, task_id) for task_id, job_id in enumerate(ids)
    ]
    assert f"{array}_3" in corral.cli("jobs", "--array", str(array)).stdout
    assert corral.cli("throttle", str(array), "2").stdout.startswith(f"array {array}: at most 2 at once")

    wait_until(lambda: all(corral.jobs()[i]["state"] == "complete" for i in ids), 90, "every task to complete")
    for task_id, job_id in enumerate(ids):
        assert corral.api("GET", f"/api/jobs/{job_id}/logs").text == f"{array} {task_id} 4 0 3\n"
    runs = [
        (a["started_at"], a["finished_at"])
        for i in ids
        for a in corral.api("GET", f"/api/jobs/{i}").json()["attempt_list"]
    ]
    assert len(runs) == 4
    at_once = max(sum(1 for start, end in runs if start <= moment < end) for moment, _ in runs)
    assert at_once == 2  # the throttle's number, and it was reached

    # A cancel by array ends its open tasks, and only those.
    sleepers = corral.cli("submit", "--array", "0-1", "--", "sleep", "60").stdout.split()
    assert (
        corral.cli("cancel", "--array", sleepers[0]).stdout == f"cancel requested for 2 jobs: {', '.join(sleepers)}\n"
    )
    wait_until(lambda: all(corral.jobs()[int(i)]["state"] == "cancelled" for i in sleepers), 60, "the sleepers to end")
    assert all(corral.jobs()[i]["state"] == "complete" for i in ids)

    # `corral job` gives the throttle in force, not the one the spec was submitted with.
    held_back = corral.cli("submit", "--array", "0-1%1", "--", "sleep", "60").stdout.split()
    corral.cli("throttle", held_back[0], "2")
    assert f"of array {held_back[0]} (0-1; at most 2 at once)" in corral.cli("job", held_back[1]).stdout
    corral.cli("cancel", "--array", held_back[0])
