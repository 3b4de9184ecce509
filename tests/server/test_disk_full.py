"""corral's server with its disk full: the store (SQLite's file, PostgreSQL's disk_full) and the
job output it keeps. Seen: every pass logged a traceback every 2 s, every chunk of output each
agent sent another, and after space was freed the nodes whose pings had been refused meanwhile
stood to be judged silent. A full store is now an outage (one line a try, 503s, silence counted
from its end) and output refused for want of disk a 507 the agent sends again."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import httpx
import psycopg.errors
import pytest
from sqlalchemy import event
from sqlalchemy.exc import OperationalError

from corral.core.model import GiB, InstanceType, Resources
from corral.jobspec import JobRequest
from corral.store import Store, store_unreachable
from tests.support import served_app

TOKEN = {"Authorization": "Bearer t"}


def fill_up(store: Store) -> None:
    """SQLite's own limit on its file's pages, at the pages it has: the next write that needs a page
    more fails with SQLITE_FULL, "database or disk is full", as on a full disk."""

    def limit(connection: Any, _record: Any) -> None:
        pages = connection.execute("PRAGMA page_count").fetchone()[0]
        connection.execute(f"PRAGMA max_page_count = {pages}")

    event.listen(store.engine, "connect", limit)
    store.engine.dispose()


def big_job() -> dict[str, Any]:
    # Pages more than the file has free (each value under exec's limit on one NAME=value).
    return {"command": ["true"], "env": {name: "x" * 100_000 for name in ("A", "B", "C")}}


def test_a_full_sqlite_store_answers_503_naming_the_full_disk_and_keeps_what_it_had(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with served_app(tmp_path) as (url, store):
        kept = httpx.post(f"{url}/api/jobs", json={"jobs": [{"command": ["echo", "kept"]}]}, headers=TOKEN)
        assert kept.status_code == 201, kept.text
        fill_up(store)
        with caplog.at_level(logging.WARNING, logger="corral.server"):
            refused = httpx.post(f"{url}/api/jobs", json={"jobs": [big_job()]}, headers=TOKEN)
        assert refused.status_code == 503, refused.text
        detail = refused.json()["detail"]
        assert detail == "the store is unreachable (out of disk space: database or disk is full): try again shortly"
        said = [r for r in caplog.records if "out of disk space" in r.getMessage()]
        assert said and all(r.exc_info is None for r in said)  # one line, no traceback

        listing = httpx.get(f"{url}/api/jobs", headers=TOKEN)  # reads go on
        assert listing.status_code == 200 and [j["command"] for j in listing.json()] == [["echo", "kept"]]


def test_store_unreachable_names_a_full_disk_of_either_store(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'corral.db'}")
    store.migrate()
    try:
        fill_up(store)
        with pytest.raises(OperationalError) as full:
            store.submit([JobRequest.model_validate(big_job())], 1000.0)
        assert store_unreachable(full.value) == "out of disk space: database or disk is full"
        assert store.counts() == {}  # nothing of the refused submission
    finally:
        store.close()
    # PostgreSQL's disk_full (53100), as psycopg raises it: not caused here (it would take filling
    # the shared server's disk), so built as the driver builds it.
    said = 'could not extend file "base/16384/16385": No space left on device'
    pg_full = OperationalError("INSERT INTO jobs ...", {}, psycopg.errors.DiskFull(said))
    assert store_unreachable(pg_full) == f"out of disk space: {said}"


def test_job_output_refused_for_want_of_disk_is_a_507_and_is_stored_when_sent_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with served_app(tmp_path) as (url, store):
        store.create_node("n-1", InstanceType("small", 2, 4 * GiB, 0.10), "boot", 1000.0, "test")
        secret = store.pair_node("n-1", "boot", Resources(2, 4 * GiB), "host-1", 1000.0)
        (job_id,) = store.submit([JobRequest(command=["true"])], 1000.0)
        attempt_id = store.claim(job_id, "d-test", ["n-1"], Resources(1, GiB), 1000.0)
        node = {"Authorization": f"Bearer {secret}"}
        log = f"{url}/api/agent/attempts/{attempt_id}/log"
        stored = tmp_path / "logs" / str(job_id) / f"{attempt_id}.log"
        stored.parent.mkdir(parents=True)
        os.symlink("/dev/full", stored)  # every write to it fails with ENOSPC, from the kernel

        with caplog.at_level(logging.WARNING, logger="corral.server"):
            first = httpx.post(log, params={"offset": 0}, content=b"line 1\n", headers=node)
            second = httpx.post(log, params={"offset": 0}, content=b"line 1\n", headers=node)
        for answer in (first, second):
            assert answer.status_code == 507, answer.text  # a 5xx: the agent sends it again
            assert answer.json()["detail"].startswith("job output cannot be stored: No space left on device (")
        said = [r for r in caplog.records if "job output cannot be stored" in r.getMessage()]
        assert len(said) == 1 and said[0].exc_info is None  # once a minute, not a traceback a chunk

        stored.unlink()  # room again
        again = httpx.post(log, params={"offset": 0}, content=b"line 1\n", headers=node)
        assert again.status_code == 200, again.text
        assert httpx.get(f"{url}/api/jobs/{job_id}/logs", headers=TOKEN).content == b"line 1\n"
