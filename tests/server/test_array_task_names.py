"""An array's task named as Slurm writes it (`12_3`, as `corral jobs` shows it), through the real CLI
and over HTTP: it is that task, never the job whose id the digits make (Python's int() reads
`1_3` as 13), and a name that is no task is refused, naming it, with nothing changed."""

from __future__ import annotations

import httpx

from corral.jobspec import JobRequest
from corral.store import Store
from tests.server.cli import corral, corral_json

TOKEN = {"Authorization": "Bearer t"}


def test_a_task_named_array_underscore_task_is_that_task_and_never_the_job_its_digits_make(
    served: tuple[str, Store],
) -> None:
    url, store = served
    tasks = store.submit([JobRequest(command=["sweep"], name="sweep", array="0-3")], 1000.0)
    array = tasks[0]
    assert array == 1
    # Jobs 5 to 14: job 13 is what `1_3` read as a number would name.
    others = store.submit([JobRequest(command=["other"], name=f"other-{i}") for i in range(10)], 1001.0)
    assert 13 in others

    assert corral_json(url, "job", "1_2")["id"] == tasks[2]
    assert corral(url, "cancel", "1_3").stdout == "1_3: cancel requested\n"
    assert corral(url, "hold", "1_1", "--reason", "input not ready").stdout == "1_1: held\n"
    assert corral(url, "update", "1_0", "--time-limit", "2h").stdout == "1_0: time_limit none -> 2h00m\n"
    rows = {row["id"]: row for row in store.list_job_rows()}
    assert rows[tasks[3]]["cancel_requested"] and rows[tasks[1]]["held"]
    assert not rows[13]["cancel_requested"] and not rows[13]["held"] and rows[13]["state"] == "queued"
    assert [e["kind"] for e in corral_json(url, "events", "--job", "1_3")] == ["job.queued", "job.cancel_requested"]
    assert [e["kind"] for e in corral_json(url, "events", "--job", "13")] == ["job.queued"]

    # A task that is not there, an array that is not there, a name that is neither: each said, by
    # name, and the others given still handled.
    missing = corral(url, "cancel", "1_9", "99_0", "1_2", check=False)
    assert missing.returncode == 1
    assert missing.stdout == "1_2: cancel requested\n"
    assert missing.stderr == (
        "error: 1_9: job array 1 has no task 9\n"
        "error: 99_0: no job array 99 (an array's id is its first task's job id)\n"
    )
    for command in (["job", "1__3"], ["cancel", "1_x"], ["logs", "_3"]):
        bad = corral(url, *command, check=False)
        assert bad.returncode == 2 and "not a job id, nor an array's task as ARRAY_TASK (12_3)" in bad.stderr, bad
    # Where only an array's id (or a number) is meant, a task's name is refused, not read as 10.
    for command in (["throttle", "1_0", "2"], ["jobs", "--array", "1_0"], ["cancel", "--array", "1_0"]):
        bad = corral(url, *command, check=False)
        assert bad.returncode == 2 and "'1_0': not a number" in bad.stderr, bad
    assert all(row["array_throttle"] is None for row in store.list_job_rows())

    # Over HTTP: the same names in the path, the same refusals with the value given.
    assert httpx.get(f"{url}/api/jobs/1_2", headers=TOKEN).json()["id"] == tasks[2]
    unknown = httpx.post(f"{url}/api/jobs/1_9/cancel", headers=TOKEN)
    assert (unknown.status_code, unknown.json()) == (404, {"detail": "job array 1 has no task 9"})
    refused = httpx.get(f"{url}/api/jobs/1_x", headers=TOKEN)
    assert refused.status_code == 422
    assert refused.json()["detail"] == [
        "path.job_id: not a job id, nor an array's task as ARRAY_TASK (12_3) (got '1_x')"
    ]
    for answer, given in (
        (httpx.patch(f"{url}/api/arrays/1_0", json={"throttle": 2}, headers=TOKEN), "path.array_job_id: not a number"),
        (httpx.get(f"{url}/api/jobs", params={"array": "1_0"}, headers=TOKEN), "query.array: not a number"),
        (httpx.get(f"{url}/api/events", params={"job": "1_3"}, headers=TOKEN), "query.job: not a number"),
    ):
        assert answer.status_code == 422 and answer.json()["detail"][0].startswith(given), answer.text


def test_a_cancel_by_an_array_id_that_names_no_array_says_so_and_cancels_nothing(served: tuple[str, Store]) -> None:
    """It said "cancel requested for 0 jobs", which reads as "that array has nothing left open"."""
    url, store = served
    [plain, *_] = store.submit([JobRequest(command=["x"]), JobRequest(command=["y"], array="0-1")], 1000.0)
    refused = corral(url, "cancel", "--array", str(plain), check=False)
    assert refused.returncode == 1
    assert refused.stderr == f"error: no job array {plain} (an array's id is its first task's job id)\n"
    assert not any(row["cancel_requested"] for row in store.list_job_rows())
    assert corral_json(url, "events", "--kind", "job.cancel_requested") == []
    answer = httpx.post(f"{url}/api/jobs/cancel", json={"array": plain}, headers=TOKEN)
    assert (answer.status_code, answer.json()) == (
        404,
        {"detail": f"no job array {plain} (an array's id is its first task's job id)"},
    )
