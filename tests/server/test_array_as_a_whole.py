"""A job array's id given to a command that changes jobs acts on every task of the array in a state
it applies to, as Slurm's `scontrol hold 12`, `release`, `requeue`, `update JobId=12` and `scancel
12` do, through the real CLI and over HTTP; `12_0` is the first task alone. They acted on the
first task only (its job id is also the array's), so `corral hold 12` let the other 9 tasks run."""

from __future__ import annotations

import httpx

from corral.jobspec import JobRequest
from corral.store import Store
from tests.server.cli import corral, corral_json
from tests.store.storekit import add_node, after_exit, claim

TOKEN = {"Authorization": "Bearer t"}
NOW = 1000.0


def test_hold_release_and_update_of_an_arrays_id_act_on_each_task_that_takes_them(
    served: tuple[str, Store],
) -> None:
    url, store = served
    tasks = store.submit([JobRequest(command=["sweep"], array="0-9")], NOW)
    array = tasks[0]
    add_node(store, "n1", NOW)
    for task in tasks[:3]:  # three already running
        store.attempt_started(claim(store, task, now=NOW), "n1", 42, NOW + 1)

    held = corral(url, "hold", str(array), "--reason", "input not ready")
    assert held.stdout == f"held 7 of array {array}'s 10 tasks; 3 already running\n"
    rows = {row["id"]: row for row in store.list_job_rows()}
    assert [rows[task]["held"] for task in tasks] == [False] * 3 + [True] * 7
    assert sorted(e["job_id"] for e in corral_json(url, "events", "--kind", "job.held")) == tasks[3:]
    listed = corral_json(url, "jobs", "--array", str(array))
    assert sum(j["held"] for j in listed) == 7

    # Task 0 alone, by its name: its own job, and only it.
    alone = corral(url, "update", f"{array}_0", "--time-limit", "1h")
    assert alone.stdout == f"{array}_0: time_limit none -> 1h00m\n"
    assert [e["job_id"] for e in corral_json(url, "events", "--kind", "job.updated")] == [array]

    # An update of the whole array: the queued tasks take new resources, the running ones are
    # told of; a time limit (which a run takes too) goes on every task.
    updated = corral(url, "update", str(array), "--vcpus", "2")
    assert updated.stdout == (
        f"updated 7 of array {array}'s 10 tasks: vcpus 1 -> 2; 3 running (vcpus change only while it is queued)\n"
    )
    assert {row["id"]: row["spec"]["vcpus"] for row in store.list_job_rows()} == {
        **dict.fromkeys(tasks[:3], 1.0),
        **dict.fromkeys(tasks[3:], 2.0),
    }
    limited = corral(url, "update", str(array), "--time-limit", "2h")
    assert limited.stdout == (
        f"updated 10 of array {array}'s 10 tasks: time_limit 1h00m -> 2h00m | time_limit none -> 2h00m\n"
    )

    # A value refused for one task changes none: with task 9's limit removed, TimeLimit=+1h has
    # nothing to add to there, and tasks 0 to 8 keep theirs too.
    corral(url, "update", f"{array}_9", "--time-limit", "0")
    before = {row["id"]: row["spec"] for row in store.list_job_rows()}
    refused = corral(url, "update", str(array), "--time-limit", "+1h", check=False)
    assert refused.returncode == 1
    assert refused.stderr == f"error: --time-limit: job {tasks[9]} has no time limit to add to (set one)\n"
    assert {row["id"]: row["spec"] for row in store.list_job_rows()} == before

    released = corral(url, "release", str(array))
    assert released.stdout == f"released 7 of array {array}'s 10 tasks; 3 not held\n"
    assert not any(row["held"] for row in store.list_job_rows())
    assert len(corral_json(url, "events", "--kind", "job.released")) == 7

    # A hold with no queued task left to hold is refused, naming why, and holds nothing.
    for task in tasks[3:]:
        claim(store, task, now=NOW + 2)
    none_queued = corral(url, "hold", str(array), check=False)
    assert none_queued.returncode == 1
    assert none_queued.stderr.startswith(
        f"error: {array}: job array {array} has no queued task to hold (3 already running, 7 already claimed)"
    )
    assert len(corral_json(url, "events", "--kind", "job.held")) == 7


def test_cancel_requeue_and_priority_of_an_arrays_id_act_on_each_task(served: tuple[str, Store]) -> None:
    url, store = served
    tasks = store.submit([JobRequest(command=["sweep"], array="0-3")], NOW)
    (other,) = store.submit([JobRequest(command=["other"])], NOW)
    array = tasks[0]
    add_node(store, "n1", NOW)
    attempt = claim(store, tasks[0], now=NOW)
    store.finish_attempt(attempt, "n1", 0, NOW + 1, after_exit(0, attempt))

    assert corral(url, "priority", str(array), "5").stdout == (
        f"priority 5 set on 3 of array {array}'s 4 tasks; 1 already complete\n"
    )
    assert {row["id"]: row["priority"] for row in store.list_job_rows()} == {
        tasks[0]: 1,
        **dict.fromkeys(tasks[1:], 5),
        other: 1,
    }
    assert corral(url, "requeue", str(array)).stdout == (
        f"requeued 1 of array {array}'s 4 tasks; 3 queued: nothing to requeue\n"
    )
    assert store.job_row(tasks[0])["state"] == "queued"
    cancelled = corral(url, "cancel", str(array), str(other))
    assert cancelled.stdout == f"cancel requested for 4 of array {array}'s 4 tasks\n{other}: cancel requested\n"
    assert all(row["cancel_requested"] for row in store.list_job_rows())

    # Over HTTP: the same, with what was done to which task.
    answer = httpx.post(f"{url}/api/jobs/{array}/hold", json={"reason": "x"}, headers=TOKEN)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "array_job_id": array,
        "tasks": 4,
        "changed": {"held": tasks},
        "unchanged": {},
        "changes": {},
    }
    alone = httpx.post(f"{url}/api/jobs/{array}_0/release", headers=TOKEN)
    assert (alone.status_code, alone.json()["id"], alone.json()["changed"]) == (200, array, True)
    update = httpx.post(f"{url}/api/jobs/{array}/update", json={"name": "renamed"}, headers=TOKEN)
    assert update.status_code == 200, update.text
    assert update.json()["changes"] == {str(task): {"name": ["", "renamed"]} for task in tasks}
    priority = httpx.patch(f"{url}/api/jobs/{array}", json={"priority": 3}, headers=TOKEN)
    assert priority.json()["changed"] == {"priority 3": tasks}
