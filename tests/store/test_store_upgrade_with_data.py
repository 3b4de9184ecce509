"""An upgrade walks a store full of work through every migration, one revision at a time.

At each revision the store gets rows in every table it has then, as a corral of that revision
wrote them (only the columns it had; a job's spec as short as an older corral's): jobs in every
state, held, in arrays and with dependencies, attempts in every state, nodes in every state,
events, a dispatcher, a back-off, the notifier's cursor. Each migration must keep every row and
value already there; at the head, the store (and `corral jobs`, `corral job ID`, `corral nodes`,
`corral events` through the server) reads all of it back, and a queued job is claimed and handed to
its node's agent: what the work of the month before an upgrade goes through.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, MetaData, Table, event, insert, select

from corral.core.model import AttemptState, JobState, NodeState, Resources
from corral.jobspec import JobRequest
from corral.store import Store
from corral.store.migrate import alembic_config, upgrade
from tests.server.cli import corral
from tests.support import served_store

from .storekit import NOW

DISPATCHER = "d-old"


def revisions_oldest_first(store: Store) -> list[str]:
    script = ScriptDirectory.from_config(alembic_config(store.engine))
    return [rev.revision for rev in reversed(list(script.walk_revisions()))]


# The fields of the first corral's JobRequest (the store's 0001): its specs have none of the later ones.
FIRST_SPEC_FIELDS = {
    *("command", "name", "env", "vcpus", "ram", "scratch", "gpus", "nodes", "priority", "not_before"),
    *("time_limit", "max_retries", "tags", "locality", "traits", "user"),
}


def spec(name: str, **fields: Any) -> dict[str, Any]:
    """A job's spec as an older corral stored it: the whole request of then, without the fields added since."""
    whole = JobRequest(command=["echo", name], name=name, **fields).model_dump(mode="json")
    return {k: v for k, v in whole.items() if k in FIRST_SPEC_FIELDS or k in fields}


def rows_of_step(step: int) -> dict[str, list[dict[str, Any]]]:
    """Every table's rows written at one revision, as full rows of the current schema (the columns
    an older schema lacks are dropped when inserted). Keys are offset by the step: each revision
    adds rows of its own to those already there."""
    base = 1000 * (step + 1)
    at = NOW + step * 3600
    node = f"n{step}"
    jobs: list[dict[str, Any]] = []
    attempts: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    dependencies: list[dict[str, Any]] = []

    def job(offset: int, state: JobState, **fields: Any) -> int:
        job_id = base + offset
        name = f"s{step}-{state.value}-{offset}"
        user = f"user{(step + offset) % 3}"
        row = {
            "id": job_id,
            "name": name,
            "state": state.value,
            "priority": 10 + offset,
            "spec": spec(name, user=user),
            "submitted_at": at + offset,
            "claimed_by": None,
            "retry_at": None,
            "temp_failures": 0,
            "perm_failures": 0,
            "attempt_count": 0,
            "exit_code": None,
            "exit_signal": None,
            "cancelled_by": None,
            "wait_reason": "waiting for a node" if state is JobState.QUEUED else "",
            "unplaceable": False,
            "cancel_requested": False,
            "held": False,
            "requeue_requested": False,
            "requeue_hold": False,
            "array_job_id": None,
            "array_task_id": None,
            "array_throttle": None,
            "spec_rev": 0,
            "explanation": None,
            "node_id": None,
            "started_at": None,
            "finished_at": None,
            "updated_at": at + offset,
        }
        whole: dict[str, Any] = row | fields
        jobs.append(whole | {"user_name": whole["spec"].get("user", "")})  # as a corral of 0019 on writes it
        events.append({"at": at + offset, "kind": "job.submitted", "job_id": job_id, "node_id": None, "message": ""})
        return job_id

    def attempt(offset: int, job_id: int, state: AttemptState, **fields: Any) -> None:
        row = {
            "id": base + offset,
            "job_id": job_id,
            "node_id": node,
            "node_ids": [node],
            "vcpus": 1.0,
            "ram_mib": 512,
            "scratch_mib": 0,
            "gpus": 0,
            "state": state.value,
            "dispatcher_id": DISPATCHER,
            "assigned_at": at + offset,
            "started_at": None,
            "finished_at": None,
            "exit_code": None,
            "exit_signal": None,
            "pid": None,
            "reason": "",
            "executor_ref": None,
            "cpu_seconds": None,
            "max_rss_mib": None,
        }
        attempts.append(row | fields)

    job(0, JobState.QUEUED)
    job(1, JobState.QUEUED, retry_at=at + 60, temp_failures=1, attempt_count=1, wait_reason="retry back-off")
    job(2, JobState.QUEUED, held=True, wait_reason="held")
    claimed = job(3, JobState.CLAIMED, claimed_by=DISPATCHER, node_id=node, attempt_count=1)
    attempt(0, claimed, AttemptState.ASSIGNED)
    running = job(4, JobState.RUNNING, claimed_by=DISPATCHER, node_id=node, attempt_count=1, started_at=at + 5)
    attempt(1, running, AttemptState.RUNNING, started_at=at + 5, pid=4242)
    done = job(5, JobState.COMPLETE, exit_code=0, node_id=node, attempt_count=2, started_at=at, finished_at=at + 9)
    attempt(2, done, AttemptState.TEMPFAIL, finished_at=at + 3, reason="node lost")
    # What the run used, as its agent measured it, since 0022.
    used = {"cpu_seconds": 4.25, "max_rss_mib": 300}
    attempt(3, done, AttemptState.EXITED, started_at=at + 4, finished_at=at + 9, exit_code=0, pid=7, **used)
    failed = job(6, JobState.FAILED, exit_code=3, perm_failures=1, attempt_count=1, finished_at=at + 9)
    attempt(4, failed, AttemptState.EXITED, started_at=at + 4, finished_at=at + 9, exit_code=3, pid=8)
    timed_out = job(7, JobState.FAILED, attempt_count=1, finished_at=at + 9)
    attempt(5, timed_out, AttemptState.TIMEOUT, started_at=at + 4, finished_at=at + 9, exit_code=143)
    # Killed by SIGKILL (an out-of-memory kill): 137 as ever, and the signal beside it since 0021.
    killed = job(21, JobState.FAILED, exit_code=137, exit_signal=9, attempt_count=1, finished_at=at + 9)
    attempt(7, killed, AttemptState.EXITED, started_at=at + 4, finished_at=at + 9, exit_code=137, exit_signal=9)
    cancelled = job(
        8, JobState.CANCELLED, cancel_requested=True, cancelled_by="user1", attempt_count=1, finished_at=at + 9
    )
    attempt(6, cancelled, AttemptState.CANCELLED, finished_at=at + 9, reason="cancelled")
    job(9, JobState.CANCELLED, priority=0, finished_at=at + 9)
    # An array of three tasks (its id: its first task's), one ended, two waiting, throttled to 1.
    first = base + 10
    for task in range(3):
        ended = {"exit_code": 0} if task == 0 else {}
        job_state = JobState.COMPLETE if task == 0 else JobState.QUEUED
        job(10 + task, job_state, array_job_id=first, array_task_id=task, array_throttle=1, **ended)
    # A job that waits for the failed one to end, whatever its end: Slurm's afterany.
    waiter = job(20, JobState.QUEUED, spec=spec(f"s{step}-queued-20", dependency=f"afterany:{failed}"))
    dependencies.append({"job_id": waiter, "kind": "afterany", "depends_on": failed})

    nodes = []
    for offset, node_state in enumerate(NodeState):
        node_id = node if node_state is NodeState.BUSY else f"{node}-{node_state.value}"
        paired = node_state not in (NodeState.BOOTING, NodeState.GONE)
        nodes.append(
            {
                "id": node_id,
                "instance_id": f"i-{step:04d}{offset:04d}",
                "instance_type": "c5.large",
                "state": node_state.value,
                "vcpus": 2.0,
                "ram_mib": 4096,
                "scratch_mib": 10240,
                "gpus": 0,
                "price_per_hour": 0.085,
                "billing_granularity": 1.0,
                "billing_minimum": 60.0,
                "created_at": at,
                "paired_at": at + 30 if paired else None,
                "last_ping_at": at + 40 if paired else None,
                "state_changed_at": at + 40,
                "used_vcpus": 1.0 if node_state is NodeState.BUSY else 0.0,
                "used_ram_mib": 300 if node_state is NodeState.BUSY else 0,
                "used_at": at + 40 if node_state is NodeState.BUSY else None,
                "attributes": {"arch": "x86_64", "capacity": "on-demand"},
                "rack": "r1",
                "reason": "stale ping" if node_state is NodeState.DOWN else "",
                "boot_token_hash": "b" * 64,
                "secret_hash": f"{step:02d}{offset:02d}".ljust(64, "s") if paired else None,
                "hostname": f"ip-10-0-{step}-{offset}" if paired else None,
                "gone_at": at + 50 if node_state is NodeState.GONE else None,
                "dispatcher_id": DISPATCHER,
                "zone": "us-east-1a",
                "market": "on-demand",
                "agent_version": "0.1.0" if paired else None,
            }
        )
        events.append({"at": at, "kind": "node.booted", "job_id": None, "node_id": node_id, "message": "c5.large"})
    return {
        "jobs": jobs,
        "job_dependencies": dependencies,
        "attempts": attempts,
        "nodes": nodes,
        "events": [{"id": base + i} | e for i, e in enumerate(events)],
        "dispatchers": [
            {
                "id": f"{DISPATCHER}-{step}",
                "started_at": at,
                "last_heartbeat": at + 50,
                "host": "old-host",
                "pid": 100 + step,
                "stopped_at": at + 60,
                "stale_at": None,
            }
        ],
        "unavailable_types": [
            {
                "instance_type": f"p{step}.xlarge",
                "until": at + 600,
                "reason": "InsufficientInstanceCapacity",
                "boot_failures": 0,
                "boot_failed_at": None,
            }
        ],
        "store_meta": [{"name": f"fact-{step}", "value": "kept"}],
        "notify_cursor": [{"name": f"notify-{step}", "last_event_id": base, "state": {}, "updated_at": at}],
    }


def insert_as_the_schema_allows(conn: Connection, rows: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict]]:
    """Inserts the rows into the tables the database has, with the columns it has; returns what was
    inserted."""
    present = MetaData()
    present.reflect(conn)
    written: dict[str, list[dict[str, Any]]] = {}
    for name, table_rows in rows.items():
        table = present.tables.get(name)
        if table is None or not table_rows:
            continue
        kept = [{k: v for k, v in row.items() if k in table.c} for row in table_rows]
        conn.execute(insert(table), kept)
        written[name] = kept
    return written


def rows_now(conn: Connection, name: str) -> tuple[list[str], dict[tuple[Any, ...], dict[str, Any]]]:
    """The table's primary key, and its rows by it."""
    table = Table(name, MetaData(), autoload_with=conn)
    key = [c.name for c in table.primary_key.columns]
    return key, {tuple(r._mapping[k] for k in key): dict(r._mapping) for r in conn.execute(select(table))}


def as_written(value: Any) -> Any:
    """A JSON column reads back decoded on one backend and as text on another: compare decoded."""
    if isinstance(value, str) and value.startswith(("[", "{")):
        return json.loads(value)
    return value


def assert_every_row_kept(conn: Connection, written: dict[str, list[dict[str, Any]]], revision: str) -> None:
    for name, table_rows in written.items():
        key, now = rows_now(conn, name)
        for row in table_rows:
            found = now.get(tuple(row[k] for k in key))
            assert found is not None, f"after {revision}: a row of {name} is gone: {row}"
            changed = {k: (v, found[k]) for k, v in row.items() if as_written(found[k]) != as_written(v)}
            assert changed == {}, f"after {revision}: {name} {row} changed (written, read): {changed}"


def test_a_store_full_of_work_upgrades_through_every_revision_and_reads_back(
    empty_store: Store, tmp_path: Path
) -> None:
    revisions = revisions_oldest_first(empty_store)
    assert revisions[0] == "0001" and len(revisions) >= 15
    written: dict[str, list[dict[str, Any]]] = {}
    for step, revision in enumerate(revisions):
        upgrade(empty_store.engine, revision)
        with empty_store.engine.begin() as conn:
            assert MigrationContext.configure(conn).get_current_revision() == revision
            assert_every_row_kept(conn, written, revision)
            for name, rows in insert_as_the_schema_allows(conn, rows_of_step(step)).items():
                written.setdefault(name, []).extend(rows)
    assert set(written) >= {"jobs", "job_dependencies", "attempts", "nodes", "events", "store_meta"}

    # As `corral run` opens it: a new Store, migrate (a no-op at the head), then serve it.
    store = Store(empty_store.url)
    try:
        store.migrate()
        job_rows = {row["id"]: row for row in store.list_job_rows(limit=10**6)}
        assert set(job_rows) == {row["id"] for row in written["jobs"]}
        for row in written["jobs"]:
            store.job(row["id"])  # the spec an older corral wrote builds the job
        snapshot = store.load_snapshot("d-new", [], NOW)
        assert {j.id for j in snapshot.jobs} == {r["id"] for r in written["jobs"] if not JobState(r["state"]).terminal}
        held = {r["id"] for r in written["jobs"] if r.get("held")}
        assert held and {j.id for j in snapshot.jobs if j.held} == held
        # Each user's open jobs, those of before 0019 by the user their spec names, as a
        # submission's policy.users.max_submitted_jobs counts them.
        open_by_user = Counter(r["spec"]["user"] for r in written["jobs"] if not JobState(r["state"]).terminal)
        assert {"user0", "user1", "user2"} <= set(open_by_user)
        assert store.open_jobs_of(sorted(open_by_user)) == dict(open_by_user)
        with served_store(store, tmp_path) as url:
            assert_the_cli_reads_it(url, written)
        assert_a_queued_job_runs(store, written)
    finally:
        store.close()


def assert_the_cli_reads_it(url: str, written: dict[str, list[dict[str, Any]]]) -> None:
    """`corral jobs` as the real command prints it; every job, node and event through the API that
    it and `corral job ID`, `corral nodes` and `corral events` read."""
    listed = corral(url, "jobs", "--limit", "10000").stdout
    assert all(f" {r['name']} " in listed for r in written["jobs"]), listed
    newest = max(written["jobs"], key=lambda r: r["id"])
    # The jobs of the oldest and the newest revision: every state, as each revision left it.
    oldest_and_newest = [r for r in written["jobs"] if r["id"] < 2000 or r["id"] >= newest["id"] // 1000 * 1000]
    with httpx.Client(base_url=url, headers={"Authorization": "Bearer t"}) as client:
        for row in oldest_and_newest:
            answer = client.get(f"/api/jobs/{row['id']}")
            assert answer.status_code == 200, f"job {row['id']} ({row['state']}): {answer.text}"
            assert answer.json()["state"] == row["state"]
            # What a store before 0021 could not say reads as not known: null.
            said = {k: answer.json()[k] for k in ("exit_code", "exit_signal", "cancelled_by")}
            assert said == {k: row.get(k) for k in said}, row
            # Nor one before 0022 what a run used.
            used = {(a["id"], a["cpu_seconds"], a["max_rss_mib"]) for a in answer.json()["attempt_list"]}
            kept = {(a["id"], a.get("cpu_seconds"), a.get("max_rss_mib")) for a in written["attempts"]}
            assert used <= kept, row
        nodes = client.get("/api/nodes", params={"all": True})
        assert {n["id"]: n["state"] for n in nodes.json()} == {r["id"]: r["state"] for r in written["nodes"]}
        events = client.get("/api/events", params={"limit": 100_000})
        assert len(events.json()) == len(written["events"])


def assert_a_queued_job_runs(store: Store, written: dict[str, list[dict[str, Any]]]) -> None:
    """The oldest revision's plain queued job, claimed on an idle node, goes to its agent."""
    queued = written["jobs"][0]
    assert queued["state"] == "queued"
    idle = next(r["id"] for r in written["nodes"] if r["state"] == "idle")
    attempt_id = store.claim(queued["id"], "d-new", [idle], Resources(1.0, 512, 0, 0), NOW + 10**6)
    assert attempt_id is not None
    [work] = store.work_for(idle)
    assert (work.attempt_id, work.job_id, work.command) == (attempt_id, queued["id"], ["echo", queued["name"]])


def whole_database(path: Path) -> list[str]:
    """Every table, index and row of a SQLite store, as the statements that would make it again."""
    with contextlib.closing(sqlite3.connect(path)) as raw:
        return list(raw.iterdump())


@pytest.mark.parametrize(
    ("at", "in_the_way", "reason"),
    [
        # 0015 (a rebuild of `nodes`) runs, then 0016 cannot create its table.
        ("0014", "CREATE TABLE users (login TEXT)", "table users already exists"),
        # 0008 rebuilds `jobs` (copy, DROP, rename), 0009 adds a table, 0010 rebuilds `jobs` again
        # and then cannot create its index.
        ("0007", "CREATE INDEX ix_jobs_array ON events (at)", "index ix_jobs_array already exists"),
    ],
    ids=["the third pending revision fails", "a revision fails inside a table rebuild"],
)
def test_a_sqlite_store_whose_migration_fails_is_left_exactly_as_it_was_then_migrates(
    tmp_path: Path, at: str, in_the_way: str, reason: str
) -> None:
    """On SQLite Alembic committed each revision as it ran: a migration that failed part way left the
    store at a revision between, some tables rebuilt, and the operator restoring a backup (losing
    the work queued since it). In the way here: an operator's own table or index, of a name a later
    revision creates."""
    path = tmp_path / "corral.db"
    url = f"sqlite:///{path}"
    store = Store(url)
    written: dict[str, list[dict[str, Any]]] = {}
    for step, revision in enumerate(["0001", at]):
        upgrade(store.engine, revision)
        with store.engine.begin() as conn:
            for name, rows in insert_as_the_schema_allows(conn, rows_of_step(step)).items():
                written.setdefault(name, []).extend(rows)
    head = revisions_oldest_first(store)[-1]
    store.close()
    with contextlib.closing(sqlite3.connect(path)) as raw:
        raw.execute(in_the_way)
        raw.commit()
    before = whole_database(path)

    # As `corral run` starts on it.
    command = [sys.executable, "-m", "corral", "run", "--port", "0"]
    env = {**os.environ, "CORRAL_HOME": str(tmp_path)}
    started = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert started.returncode != 0 and "Traceback" not in started.stderr, started.stderr
    assert started.stderr.strip().splitlines()[-1] == (
        f"error: the store {url} (store.url) was not migrated: migrating it to revision {head} failed: {reason};"
        f" nothing was migrated, the store is at revision {at} as before: remove the cause, then start again"
    )
    assert whole_database(path) == before

    with contextlib.closing(sqlite3.connect(path)) as raw:
        raw.execute(f"DROP {in_the_way.split()[1]} {in_the_way.split()[2]}")
        raw.commit()
    store = Store(url)
    try:
        store.migrate()
        assert store.schema_revision() == head
        with store.engine.connect() as conn:
            assert_every_row_kept(conn, written, head)
        assert_a_queued_job_runs(store, written)
    finally:
        store.close()


def test_ctrl_c_in_a_sqlite_table_rebuild_leaves_the_store_as_it_was(tmp_path: Path) -> None:
    """Ctrl-C while a revision copied `jobs` into its rebuilt table, a revision after another that
    had rebuilt it already: the operator sees the interrupt, not a failed migration's reason, and
    the store is at its old revision with every row."""
    path = tmp_path / "corral.db"
    store = Store(f"sqlite:///{path}")
    upgrade(store.engine, "0001")
    with store.engine.begin() as conn:
        insert_as_the_schema_allows(conn, rows_of_step(0))
    before = whole_database(path)
    copies = 0

    def interrupt_the_second_copy(conn: Connection, cursor: Any, statement: str, *_: Any) -> None:
        # Where SIGINT's KeyboardInterrupt would come out of the driver mid-statement.
        nonlocal copies
        if statement.startswith("INSERT INTO _alembic_tmp_jobs"):
            copies += 1
            if copies == 2:
                raise KeyboardInterrupt

    event.listen(store.engine, "before_cursor_execute", interrupt_the_second_copy)
    try:
        with pytest.raises(KeyboardInterrupt):
            store.migrate()
    finally:
        store.close()
    assert copies == 2
    assert whole_database(path) == before
