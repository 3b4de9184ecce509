"""`corral retention`: what the next retention sweep would delete, counted over real HTTP against
corral's server app and deleting nothing; by the running corral's [retention] or by values tried
on the command line; an admin's to ask."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import httpx
from typer.testing import CliRunner, Result

from corral.cli import app
from corral.config import Config, RetentionConfig
from corral.store import Store
from tests.store.storekit import NOW, add_node, after_exit, claim, request, submit
from tests.support import served_app


def cli(url: str, token: str, *args: str) -> Result:
    env: Mapping[str, str] = {"CORRAL_URL": url, "CORRAL_TOKEN": token, "COLUMNS": "200"}
    return CliRunner().invoke(app, list(args), env=env)


def ended_long_ago(store: Store) -> list[int]:
    """Two jobs that ended in 2023 (storekit's NOW), one of them named by a queued job's dependency."""
    add_node(store, "n1")
    jobs = submit(store, 2)
    for job_id in jobs:
        attempt_id = claim(store, job_id, nodes=["n1"])
        assert store.attempt_started(attempt_id, "n1", 7, NOW)
        assert store.finish_attempt(attempt_id, "n1", 0, NOW + 1, after_exit(0, attempt_id))
    store.submit([request(dependency=f"afterany:{jobs[0]}")], NOW + 2)
    return jobs


def test_corral_retention_counts_what_a_sweep_would_delete_and_deletes_nothing(tmp_path: Path) -> None:
    config = Config(retention=RetentionConfig(events_after=30 * 86400))
    with served_app(tmp_path, config) as (url, store):
        jobs = ended_long_ago(store)
        events = len(store.list_events(limit=1000))

        shown = cli(url, "t", "retention")
        assert shown.exit_code == 0, shown.output
        assert "by [retention], the next sweep (every 60.0 min) would delete:" in shown.stdout
        assert "ended jobs" not in shown.stdout  # jobs_after unset: every job is kept
        counted = json.loads(cli(url, "t", "retention", "--json").stdout)
        assert (counted["events"], counted["jobs"], counted["outputs"]) == (events, None, None)

        tried = cli(url, "t", "retention", "--jobs-after", "1000d")
        assert "by the values given, and the running corral's [retention] for the others" in tried.stdout
        assert "1 (1 more ended, kept: an open job depends on them, or their array has not all ended)" in tried.stdout
        counted = json.loads(cli(url, "t", "retention", "--jobs-after", "1000d", "--json").stdout)
        assert (counted["jobs_ended"], counted["jobs"], counted["outputs"]) == (2, 1, 0)
        assert counted["jobs_after"] == 1000 * 86400

        # Nothing was deleted.
        assert all(store.job_row(j)["state"] == "complete" for j in jobs)
        assert len(store.list_events(limit=1000)) == events
        assert "--jobs-after" in cli(url, "t", "retention", "--jobs-after", "soon").output  # named, refused

        alice = httpx.post(f"{url}/api/users", json={"name": "alice"}, headers={"Authorization": "Bearer t"})
        refused = cli(url, alice.json()["token"], "retention")
        assert refused.exit_code != 0 and "Access/permission denied" in refused.output


def test_corral_retention_says_so_when_nothing_is_deleted(tmp_path: Path) -> None:
    with served_app(tmp_path) as (url, _):
        shown = cli(url, "t", "retention")
    assert shown.exit_code == 0
    assert shown.stdout.startswith("[retention] deletes nothing: every job, event and output is kept")
