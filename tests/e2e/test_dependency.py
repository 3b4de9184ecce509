"""Job dependencies (Slurm's --dependency) through a real `corral run` on the loopback cloud, its
CLI and its HTTP API."""

from __future__ import annotations

import json
from pathlib import Path

from tests.e2e.conftest import Corral, wait_until


def test_afterok_runs_after_the_job_completes_and_is_cancelled_after_one_that_fails(
    corral: Corral, tmp_path: Path
) -> None:
    corral.start()
    go = tmp_path / "go"
    # A runs until the test lets it end, so that B's wait is seen while A runs.
    until_go = f"while [ ! -e {go} ]; do sleep 0.2; done"
    first = int(corral.cli("submit", "--name", "A", "--", "sh", "-c", until_go).stdout)
    second = int(corral.cli("submit", "--name", "B", "--dependency", f"afterok:{first}", "--", "echo", "B").stdout)
    failing = int(corral.cli("submit", "--name", "D", "--", "false").stdout)
    cancelled = int(corral.cli("submit", "-d", f"afterok:{failing}", "--name", "C", "--", "echo", "C").stdout)
    chained = int(corral.cli("submit", "-d", f"afterok:{cancelled},afterany:{first}", "--", "echo", "E").stdout)
    # A workflow's two levels in one submission: the merge names the jobs before it in the file by
    # their places (@0, @1), whose ids no one knows before the file is stored.
    dag = tmp_path / "dag.jsonl"
    made = [tmp_path / "part-0", tmp_path / "part-1"]
    dag.write_text(
        "".join(json.dumps({"command": ["sh", "-c", f"sleep 1; echo {p.name} > {p}"]}) + "\n" for p in made)
        + json.dumps({"command": ["cat", *map(str, made)], "dependency": "afterok:@0:@1"})
        + "\n"
    )
    *parts, merge = map(int, corral.cli("submit", "-f", str(dag)).stdout.split())

    waits = f"Dependency: waits for afterok:{first} (running)"
    wait_until(lambda: corral.jobs()[second]["wait_reason"] == waits, 60, "B to wait for A while A runs")
    assert corral.jobs()[second]["state"] == "queued" and waits in corral.cli("jobs").stdout
    assert corral.cli_json("explain", str(second))["wait_reason"] == waits

    wait_until(lambda: corral.jobs()[cancelled]["state"] == "cancelled", 60, "C to be cancelled after D failed")
    assert corral.jobs()[failing]["state"] == "failed"
    never = f"DependencyNeverSatisfied: afterok:{failing} (job {failing} failed)"
    [event] = corral.cli_json("events", "--job", str(cancelled), "--kind", "job.cancelled")
    assert event["message"] == never
    # The job says why it ended, as Slurm's Reason does: it has no attempt to say it.
    assert corral.jobs()[cancelled]["wait_reason"] == never
    assert f"ended      {never}" in corral.cli("job", str(cancelled)).stdout
    wait_until(lambda: corral.jobs()[chained]["state"] == "cancelled", 30, "E, after C, to be cancelled")
    [event] = corral.cli_json("events", "--job", str(chained), "--kind", "job.cancelled")
    assert event["message"] == f"DependencyNeverSatisfied: afterok:{cancelled} (job {cancelled} cancelled)"
    assert corral.jobs()[second]["state"] == "queued"  # A still runs

    go.touch()
    wait_until(lambda: corral.jobs()[second]["state"] == "complete", 60, "B to run once A completed")
    jobs = corral.jobs()
    assert jobs[first]["state"] == "complete"
    assert jobs[second]["started_at"] >= jobs[first]["finished_at"]
    assert corral.cli("logs", str(second)).stdout == "B\n"

    wait_until(lambda: corral.jobs()[merge]["state"] == "complete", 60, "the merge to run once both parts completed")
    jobs = corral.jobs()
    assert jobs[merge]["started_at"] >= max(jobs[part]["finished_at"] for part in parts)
    assert corral.cli("logs", str(merge)).stdout == "part-0\npart-1\n"
    assert corral.cli_json("job", str(merge))["dependency"] == f"afterok:{parts[0]}:{parts[1]}"

    shown = corral.cli_json("job", str(second))
    assert shown["dependency"] == f"afterok:{first}"
    assert shown["depends_on"] == [{"kind": "afterok", "job_id": first, "state": "complete"}]
    text = corral.cli("job", str(chained)).stdout
    assert f"dependency afterok:{cancelled},afterany:{first}" in text
    assert f"afterok job {cancelled} (cancelled)" in text
    needed = f"needed by  {second} (afterok, complete), {chained} (afterany, cancelled)"
    assert needed in corral.cli("job", str(first)).stdout


def test_a_dependency_on_no_job_or_a_bad_one_is_refused_and_stores_nothing(corral: Corral, tmp_path: Path) -> None:
    corral.start()
    keeper = int(corral.cli("submit", "--name", "keeper", "--", "true").stdout)

    missing = corral.cli("submit", "--dependency", f"afterok:{keeper}:9999", "--", "x", check=False)
    assert missing.returncode != 0 and "--dependency: no job 9999" in missing.stderr
    unknown = corral.cli("submit", "--dependency", f"aftersome:{keeper}", "--", "x", check=False)
    assert unknown.returncode != 0 and f"--dependency: 'aftersome:{keeper}': unknown dependency type" in unknown.stderr
    both = corral.cli("submit", "-d", f"afterok:{keeper},afterany:{keeper}?after:{keeper}", "--", "x", check=False)
    assert both.returncode != 0 and "not both" in both.stderr

    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text(
        f'{{"command": ["echo", "1"], "dependency": "afterok:{keeper}"}}\n'
        "# a comment\n"
        f'{{"command": ["echo", "2"], "dependency": {{"afterany": [{keeper}, 777]}}}}\n'
    )
    refused = corral.cli("submit", "-f", str(jobs), check=False)
    assert refused.returncode != 0
    assert f"nothing was submitted:\n  {jobs}: line 3: dependency: no job 777" in refused.stderr

    response = corral.api(
        "POST", "/api/jobs", json={"jobs": [{"command": ["ok"]}, {"command": ["x"], "dependency": "afterok:4242"}]}
    )
    assert response.status_code == 422 and response.json()["detail"] == ["jobs.1.dependency: no job 4242"]
    malformed = corral.api(
        "POST", "/api/jobs", json={"jobs": [{"command": ["x"], "dependency": {"afterok": f"{keeper},afterany:1"}}]}
    )
    assert malformed.status_code == 422
    [detail] = malformed.json()["detail"]
    assert detail.startswith("jobs.0.dependency: afterok: job ids are whole numbers or an array's tasks (12_3, 12_*)")
    assert detail.endswith(f"not '{keeper},afterany:1'")
    assert list(corral.jobs()) == [keeper]

    # The structured form is stored as Slurm's text.
    yaml_jobs = tmp_path / "jobs.yaml"
    yaml_jobs.write_text(f"- command: [echo, y]\n  dependency:\n    afterany: [{keeper}]\n    satisfy: any\n")
    [stored] = corral.cli("submit", "-f", str(yaml_jobs)).stdout.split()
    assert corral.cli_json("job", stored)["dependency"] == f"afterany:{keeper}"


def test_afternotok_on_an_array_runs_a_cleanup_once_every_task_ended_and_one_failed(
    corral: Corral, tmp_path: Path
) -> None:
    """Slurm's reading of `--dependency afternotok:A` on array A (it was refused at submission), and
    `afterok:A_0`: task 0 alone, whose job id is also the array's."""
    corral.start()
    go = tmp_path / "go"
    # Task 1 fails at once; task 2 runs until the test lets it end, so that the cleanup is seen
    # waiting for it although a task failed already.
    script = 'case "$CORRAL_ARRAY_TASK_ID" in 1) exit 3;; 2) while [ ! -e ' + str(go) + " ]; do sleep 0.2; done;; esac"
    ids = [int(line) for line in corral.cli("submit", "--array", "0-2", "--", "sh", "-c", script).stdout.split()]
    array = ids[0]
    cleanup = int(corral.cli("submit", "-d", f"afternotok:{array}", "--", "echo", "cleanup").stdout)
    after_task_0 = int(corral.cli("submit", "-d", f"afterok:{array}_0", "--", "echo", "task 0").stdout)
    all_ok = [int(line) for line in corral.cli("submit", "--array", "0-1", "--", "true").stdout.split()]
    never = int(corral.cli("submit", "-d", f"afternotok:{all_ok[0]}_*", "--", "echo", "never").stdout)

    wait_until(lambda: corral.jobs()[after_task_0]["state"] == "complete", 60, "the step after task 0 alone to run")
    wait_until(lambda: corral.jobs()[never]["state"] == "cancelled", 60, "the cleanup of an array that all completed")
    [event] = corral.cli_json("events", "--job", str(never), "--kind", "job.cancelled")
    assert event["message"] == (
        f"DependencyNeverSatisfied: afternotok:{all_ok[0]}_* (every task of array {all_ok[0]} completed)"
    )
    wait_until(lambda: corral.jobs()[ids[1]]["state"] == "failed", 60, "task 1 to fail")
    waits = f"Dependency: waits for afternotok:{array}_* (1 of array {array}'s 3 tasks not ended)"
    wait_until(lambda: corral.jobs()[cleanup]["wait_reason"] == waits, 30, "the cleanup to wait for task 2")
    assert corral.jobs()[cleanup]["state"] == "queued"

    go.touch()
    wait_until(lambda: corral.jobs()[cleanup]["state"] == "complete", 60, "the cleanup to run once every task ended")
    jobs = corral.jobs()
    assert jobs[cleanup]["started_at"] >= max(jobs[task]["finished_at"] for task in ids)
    assert corral.cli("logs", str(cleanup)).stdout == "cleanup\n"
    shown = corral.cli_json("job", str(cleanup))
    assert shown["dependency"] == f"afternotok:{array}_*"
    assert [(d["job_id"], d["state"]) for d in shown["depends_on"]] == [
        (ids[0], "complete"),
        (ids[1], "failed"),
        (ids[2], "complete"),
    ]
    assert corral.cli_json("job", str(after_task_0))["dependency"] == f"afterok:{array}"
