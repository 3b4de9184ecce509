"""Bad requests to corral's server app, through the real CLI and over HTTP: each refusal names the
value refused and where it was given, with the status the API documents, and nothing stored is lost."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from corral.jobspec import JobRequest
from corral.store import Store
from tests.server.cli import CORRAL, corral, corral_json
from tests.support import served_app

TOKEN = {"Authorization": "Bearer t"}


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Store]]:
    with served_app(tmp_path) as (url, store):
        store.submit([JobRequest(command=["true"], name=name) for name in ("first", "second")], 1000.0)
        yield url, store


def test_state_filters_take_slurm_names_and_name_the_one_refused(served: tuple[str, Store]) -> None:
    url, _store = served
    # squeue -t PENDING / -t PD,R: what an operator from Slurm types.
    for spelling in (["--state", "PENDING"], ["--state", "pd,R"], ["--state", "Queued"]):
        assert [j["name"] for j in corral_json(url, "jobs", *spelling)] == ["first", "second"], spelling
    assert corral_json(url, "jobs", "--state", "CD") == []
    # Which of several values is wrong, named as typed (it said "--state.0: Input should be ...").
    for command in ("jobs", "cancel"):
        bad = corral(url, command, "--state", "queued", "--state", "bogus", check=False)
        assert bad.returncode == 1
        assert bad.stderr.startswith("error: --state 'bogus': not a job state; give queued, claimed, running"), bad
    # scancel takes no finished state either: `cancel --state CD` matched nothing and said "0 jobs".
    finished = corral(url, "cancel", "--state", "queued,CD", check=False)
    assert finished.returncode == 1
    assert finished.stderr.startswith("error: --state complete: a finished job cannot be cancelled; give queued,")
    assert [j["state"] for j in corral_json(url, "jobs")] == ["queued", "queued"]
    # Over HTTP, the parameter and the value refused.
    answer = httpx.get(f"{url}/api/jobs", params={"state": ["queued", "bogus"]}, headers=TOKEN)
    assert answer.status_code == 422
    assert answer.json()["detail"] == [
        "query.state.1: Input should be 'queued', 'claimed', 'running', 'complete', 'cancelled' or 'failed'"
        " (got 'bogus')"
    ]


def test_a_job_id_past_the_store_names_the_argument_and_the_value(served: tuple[str, Store]) -> None:
    url, _store = served
    bad = corral(url, "job", "99999999999", check=False)
    assert bad.returncode == 1
    assert bad.stderr == "error: JOB_ID: Input should be less than or equal to 2147483647 (got '99999999999')\n"


def test_a_body_that_is_not_json_is_a_400_and_submits_nothing(served: tuple[str, Store]) -> None:
    url, store = served
    answer = httpx.post(f"{url}/api/jobs", content=b'{"jobs": [', headers={**TOKEN, "Content-Type": "application/json"})
    assert answer.status_code == 400
    assert answer.json() == {"detail": "the body is not JSON: Expecting value (at character 10)"}
    assert [j["name"] for j in store.list_job_rows()] == ["first", "second"]


def test_a_wrong_token_names_where_the_cli_took_it_from(served: tuple[str, Store], tmp_path: Path) -> None:
    """A CORRAL_TOKEN left in a shell overrides the data directory's token: the refusal pointed at
    CORRAL_HOME/token alone, which was right all along."""
    url, _store = served
    env = {**os.environ, "CORRAL_URL": url, "CORRAL_TOKEN": "stale", "CORRAL_HOME": str(tmp_path)}
    refused = subprocess.run([CORRAL, "jobs"], env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1
    assert refused.stderr.startswith("error: wrong API token") and "(the token of CORRAL_TOKEN)" in refused.stderr


def test_no_running_corral_says_where_it_looked_and_how_to_point_at_one(tmp_path: Path) -> None:
    """After `corral run --home DIR`, the CLI looked in the default data directory and said only
    "start one with `corral run`", though one was running."""
    env = {k: v for k, v in os.environ.items() if k not in ("CORRAL_URL", "CORRAL_TOKEN")}
    env["CORRAL_HOME"] = str(tmp_path)
    refused = subprocess.run([CORRAL, "jobs"], env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1
    assert refused.stderr == (
        f"error: no running corral found (no {tmp_path / 'server.json'}); start one with `corral run`, set"
        " CORRAL_HOME to the data directory of one started with --home DIR, or set CORRAL_URL\n"
    )
