"""corral as a workflow engine's backend (a Snakemake or Nextflow executor plugin): it submits a
run's jobs under a tag, and polls their states by that tag, over real HTTP and through `corral
jobs --json`. A run larger than one listing's limit must be readable whole, a page at a time."""

from __future__ import annotations

import httpx

from corral.jobspec import JobRequest
from corral.store import Store
from tests.server.cli import corral

TOKEN = {"Authorization": "Bearer t"}


def test_a_runs_jobs_are_read_page_by_page_through_the_api(served: tuple[str, Store]) -> None:
    """GET /api/jobs gave the newest `limit` jobs of a tag and no way to the older ones: a plugin
    polling a run of 2,500 jobs by its tag saw 1,000 and took the others for lost."""
    url, store = served
    run = store.submit([JobRequest(command=["true"], tags=["run-7"]) for _ in range(2500)], 1000.0)
    store.submit([JobRequest(command=["true"], tags=["run-8"]) for _ in range(10)], 1000.0)
    seen: list[int] = []
    before: int | None = None
    with httpx.Client(base_url=url, headers=TOKEN) as client:
        while True:
            params: dict[str, str | int] = {"tag": "run-7", "limit": 1000}
            if before is not None:
                params["before"] = before
            answer = client.get("/api/jobs", params=params)
            assert answer.status_code == 200, answer.text
            page = [job["id"] for job in answer.json()]
            if not page:
                break
            assert page == sorted(page) and (before is None or page[-1] < before)
            seen = page + seen
            before = page[0]
        assert seen == run
        refused = client.get("/api/jobs", params={"before": "12a"})
        assert refused.status_code == 422 and "before" in refused.text


def test_corral_jobs_json_cut_at_its_limit_says_so_and_pages_back(served: tuple[str, Store]) -> None:
    """`corral jobs --json` printed the newest --limit jobs without a word (only the table said
    there were more), and had no --before to read the rest."""
    url, store = served
    ids = store.submit([JobRequest(command=["true"], tags=["run-7"]) for _ in range(5)], 1000.0)
    newest = corral(url, "jobs", "--tag", "run-7", "--limit", "3", "--json")
    assert [job["id"] for job in httpx.Response(200, content=newest.stdout).json()] == ids[2:]
    assert f"older ones: --before {ids[2]}" in newest.stderr
    older = corral(url, "jobs", "--tag", "run-7", "--limit", "3", "--before", str(ids[2]), "--json")
    assert [job["id"] for job in httpx.Response(200, content=older.stdout).json()] == ids[:2]
    assert older.stderr == ""
