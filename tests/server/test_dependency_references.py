"""A workflow's levels in one submission: a job names an earlier job of its own submission by its
place (`afterok:@0`), through the HTTP API, `corral submit -f` and `corral submit --dependency`,
and sees plain job ids once stored; a bad reference gets the same error every way in, naming the
job and the reference, and nothing of the submission is stored."""

from __future__ import annotations

from pathlib import Path

import httpx

from corral.store import Store
from tests.server.cli import corral, corral_json

TOKEN = {"Authorization": "Bearer t"}
LATER = (
    "afterok:@2: names a later job of the submission: a job names only earlier ones, so that no cycle can form;"
    " this job (@1) may name @0"
)
ALONE = (
    "afterok:@0: @N names an earlier job of the same submission, and this submission has one job: name a job"
    " submitted before by its id"
)


def test_a_dag_posted_at_once_is_stored_by_job_ids_and_sent_again_answers_the_same_ids(
    served: tuple[str, Store],
) -> None:
    url, store = served
    body = {
        "jobs": [
            {"command": ["prepare"]},
            {"command": ["fetch"]},
            {"command": ["merge"], "dependency": "afterok:@0:@1"},
            {"command": ["report"], "dependency": {"afterany": ["@2"]}},
        ],
        "key": "dag-1" * 5,
    }
    with httpx.Client(base_url=url, headers=TOKEN) as client:
        answer = client.post("/api/jobs", json=body)
        assert answer.status_code == 201, answer.text
        prepare, fetch, merge, report = answer.json()["ids"]
        shown = client.get(f"/api/jobs/{merge}").json()
        assert shown["dependency"] == f"afterok:{prepare}:{fetch}"
        assert [(d["kind"], d["job_id"]) for d in shown["depends_on"]] == [("afterok", prepare), ("afterok", fetch)]
        assert [(d["kind"], d["job_id"]) for d in shown["needed_by"]] == [("afterany", report)]
        assert client.get(f"/api/jobs/{report}").json()["dependency"] == f"afterany:{merge}"

        again = client.post("/api/jobs", json=body)  # its answer lost, the client sends it again
        assert again.status_code == 201 and again.json()["ids"] == [prepare, fetch, merge, report]
    assert len(store.list_job_rows()) == 4


def test_a_bad_reference_is_a_422_naming_the_job_and_the_reference_and_stores_nothing(
    served: tuple[str, Store],
) -> None:
    url, store = served
    with httpx.Client(base_url=url, headers=TOKEN) as client:
        later = client.post(
            "/api/jobs",
            json={"jobs": [{"command": ["a"]}, {"command": ["b"], "dependency": "afterok:@2"}, {"command": ["c"]}]},
        )
        assert later.status_code == 422 and later.json()["detail"] == [f"jobs.1.dependency: {LATER}"]
        alone = client.post("/api/jobs", json={"jobs": [{"command": ["a"], "dependency": "afterok:@0"}]})
        assert alone.status_code == 422 and alone.json()["detail"] == [f"jobs.0.dependency: {ALONE}"]
        malformed = client.post(
            "/api/jobs", json={"jobs": [{"command": ["a"]}, {"command": ["b"], "dependency": "afterok:@x"}]}
        )
        assert malformed.status_code == 422
        [detail] = malformed.json()["detail"]
        assert detail.startswith("jobs.1.dependency: 'afterok:@x': '@x' is not a job of the same submission (@N")
        assert store.list_job_rows() == []

        # No submission, no reference: a stored job's dependency is not a change an update takes.
        [job] = client.post("/api/jobs", json={"jobs": [{"command": ["a"]}]}).json()["ids"]
        update = client.post(f"/api/jobs/{job}/update", json={"dependency": "afterok:@0"})
        assert update.status_code == 422, update.text
        assert update.json()["detail"] == ["dependency: unknown field"]
    assert store.job_row(job)["spec"]["dependency"] is None


def test_corral_submit_takes_references_in_a_job_file_and_refuses_a_bad_one_as_the_api_does(
    served: tuple[str, Store], tmp_path: Path
) -> None:
    url, store = served
    dag = tmp_path / "dag.yaml"
    dag.write_text(
        "- {command: [prepare]}\n- {command: [merge], dependency: 'afterok:@0'}\n"
        "- command: [report]\n  dependency: {afterany: ['@1', '@0']}\n"
    )
    prepare, merge, report = map(int, corral(url, "submit", "-f", str(dag)).stdout.split())
    assert corral_json(url, "job", str(merge))["dependency"] == f"afterok:{prepare}"
    assert corral_json(url, "job", str(report))["dependency"] == f"afterany:{merge}:{prepare}"

    bad = tmp_path / "jobs.jsonl"
    bad.write_text(
        '{"command": ["a"]}\n# the next one names the one after it\n'
        '{"command": ["b"], "dependency": "afterok:@2"}\n{"command": ["c"]}\n'
    )
    refused = corral(url, "submit", "-f", str(bad), check=False)
    assert refused.returncode == 1
    assert f"nothing was submitted:\n  {bad}: line 3: dependency: {LATER}" in refused.stderr

    alone = corral(url, "submit", "--dependency", "afterok:@0", "--", "true", check=False)
    assert alone.returncode == 1 and f"nothing was submitted:\n  --dependency: {ALONE}" in alone.stderr
    assert len(store.list_job_rows()) == 3
