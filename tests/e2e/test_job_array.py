"""Job arrays (Slurm's --array) through a real `corral run` on the loopback cloud: each task sees
its place in its environment, and the throttle keeps no more than its number running at once."""

from __future__ import annotations

from tests.e2e.conftest import Corral, wait_until


def test_an_array_runs_its_tasks_with_their_ids_never_more_at_once_than_its_throttle(corral: Corral) -> None:
    corral.start()
    report = 'echo "$CORRAL_ARRAY_JOB_ID $CORRAL_ARRAY_TASK_ID $CORRAL_ARRAY_TASK_COUNT $CORRAL_ARRAY_TASK_MIN'
    script = f'{report} $CORRAL_ARRAY_TASK_MAX $SLURM_ARRAY_TASK_ID"; sleep 1.5'
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
        assert corral.api("GET", f"/api/jobs/{job_id}/logs").text == f"{array} {task_id} 4 0 3 {task_id}\n"
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


def test_hold_release_and_cancel_of_an_arrays_id_act_on_the_whole_array_on_a_live_corral(corral: Corral) -> None:
    """`corral hold 12` held task 0 alone (its job id is the array's), and the other tasks ran."""
    corral.start()
    ids = [int(line) for line in corral.cli("submit", "--array", "0-3%2", "--", "sleep", "60").stdout.split()]
    array = ids[0]

    def states() -> list[str]:
        jobs = corral.jobs()
        return [jobs[i]["state"] for i in ids]

    wait_until(lambda: states().count("running") == 2, 60, "two tasks to run")
    waiting = [i for i, state in zip(ids, states(), strict=True) if state == "queued"]
    held = corral.cli("hold", str(array), "--reason", "input not ready")
    assert held.stdout == f"held 2 of array {array}'s 4 tasks; 2 already running\n"
    assert all(corral.jobs()[i]["held"] for i in waiting)

    # One running task cancelled by its name, that task alone: the held tasks stay held.
    running = [i for i in ids if i not in waiting]
    corral.cli("cancel", f"{array}_{ids.index(running[0])}")
    wait_until(lambda: corral.jobs()[running[0]]["state"] == "cancelled", 60, "the task to be cancelled")
    assert [(corral.jobs()[i]["state"], corral.jobs()[i]["held"]) for i in waiting] == [("queued", True)] * 2
    released = corral.cli("release", str(array))
    assert released.stdout == f"released 2 of array {array}'s 4 tasks; 2 not held\n"
    wait_until(lambda: states().count("running") == 2, 60, "a released task to run in the throttle's room")

    cancelled = corral.cli("cancel", str(array))
    assert cancelled.stdout == f"cancel requested for 3 of array {array}'s 4 tasks; 1 already cancelled\n"
    wait_until(lambda: states() == ["cancelled"] * 4, 60, "every task to be cancelled")
