"""A workflow engine's run through a real `corral run` on the loopback cloud and its HTTP API: jobs
submitted under the run's tag, polled by it, each ended job saying how it ended in a field a plugin
can read without parsing text (`end_cause`)."""

from __future__ import annotations

from tests.e2e.conftest import Corral, wait_until

TASK = {"ram": "64MiB", "tags": ["run-7"]}


def test_each_ended_job_of_a_run_says_how_it_ended_in_a_field_of_its_own(corral: Corral) -> None:
    """A failed job said why only in prose (`wait_reason`: "exit 3", "TIMEOUT: ran past ...",
    "DependencyNeverSatisfied: ..."): a plugin deciding whether to retry, to raise the time limit or
    to give up parsed English, and a cancelled job read the same whether a user, a dependency or
    a lost node had ended it."""
    corral.start()
    submitted = corral.api(
        "POST",
        "/api/jobs",
        json={
            "key": "run-7-first-wave-0001",
            "jobs": [
                {**TASK, "name": "ok", "command": ["true"]},
                {**TASK, "name": "exit", "command": ["sh", "-c", "exit 3"]},
                {**TASK, "name": "killed", "command": ["sh", "-c", "kill -KILL $$"]},
                {**TASK, "name": "slow", "command": ["sleep", "600"], "time_limit": "1s"},
                {**TASK, "name": "dropped", "command": ["true"], "hold": True},
            ],
        },
    )
    assert submitted.status_code == 201, submitted.text
    ok, exit3, killed, slow, dropped = submitted.json()["ids"]
    waiting = corral.api(
        "POST",
        "/api/jobs",
        json={"jobs": [{**TASK, "name": "after", "command": ["true"], "dependency": f"afterok:{exit3}"}]},
    )
    [after] = waiting.json()["ids"]
    assert corral.api("POST", f"/api/jobs/{dropped}/cancel").status_code == 200

    def run() -> dict[int, dict[str, object]]:
        answer = corral.api("GET", "/api/jobs", params={"tag": "run-7"})
        assert answer.status_code == 200, answer.text
        return {job["id"]: job for job in answer.json()}

    wait_until(lambda: all(job["finished_at"] for job in run().values()), 120, "every job of the run to end")
    ended = run()
    causes = {job_id: (job["state"], job["end_cause"], job["exit_code"]) for job_id, job in ended.items()}
    assert causes == {
        ok: ("complete", "complete", 0),
        exit3: ("failed", "exit", 3),
        killed: ("failed", "exit", 137),  # 128 + SIGKILL
        slow: ("failed", "timeout", None),
        dropped: ("cancelled", "cancelled", None),
        after: ("cancelled", "dependency", None),
    }
    # The same in one job's answer and in `corral jobs --json`.
    assert corral.api("GET", f"/api/jobs/{slow}").json()["end_cause"] == "timeout"
    assert {j["id"]: j["end_cause"] for j in corral.cli_json("jobs", "--tag", "run-7")}[after] == "dependency"
    # A job still open has none.
    [open_job] = corral.api("POST", "/api/jobs", json={"jobs": [{**TASK, "command": ["true"], "hold": True}]}).json()[
        "ids"
    ]
    assert corral.api("GET", f"/api/jobs/{open_job}").json()["end_cause"] is None
