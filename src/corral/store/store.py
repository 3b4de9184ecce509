"""Persistence: the one place where job, attempt and node state changes are written.

Every state change writes an event in the same transaction, so `corral events` is the complete
history. The store carries decisions out; it makes none (the core decides, the shells call here).

SQLite (the default) runs in WAL mode; writes open with BEGIN IMMEDIATE so that two writers never
deadlock on a lock upgrade. PostgreSQL is used by URL. The claim of a job is one conditional
UPDATE (state = 'queued'), so two dispatchers can never both claim it.

Lock order: a write that reads a job's or an attempt's state and then changes it first locks the
job row (SELECT ... FOR UPDATE on PostgreSQL; SQLite's write lock covers the whole database), then
reads and changes its attempts. Every writer of attempts follows this order, so under PostgreSQL's
READ COMMITTED a decision is never taken on a state another transaction has just changed, and two
writers never deadlock on a job and its attempt.

A write of many jobs takes their rows' locks in one order, job id ascending (`_locking`: SELECT
... ORDER BY id FOR NO KEY UPDATE, then the UPDATEs; or one single-row UPDATE per job, in id order).
Taken in any other order (a pass's in queue order, grouped by reason; `corral cancel --user`'s in
the order the database scans the table), two such writes each held a row the other wanted, and
PostgreSQL aborted one (deadlock detected): the CLI answered 500, or the pass failed. A write of one
job holds no other job's row, so it never closes such a cycle. FOR NO KEY UPDATE, the lock an UPDATE
takes, leaves alone the key-share locks of a submission whose dependency names the job.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import math
import secrets
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from json.encoder import encode_basestring_ascii
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from sqlalchemy import (
    JSON,
    ColumnElement,
    Connection,
    Engine,
    Row,
    Select,
    Text,
    and_,
    bindparam,
    case,
    cast,
    create_engine,
    delete,
    event,
    exists,
    func,
    insert,
    literal,
    null,
    or_,
    select,
    text,
    true,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, IntegrityError, InterfaceError, OperationalError

from corral.core import batch, job_array, retry, user_limits
from corral.core.accounting import AttemptSpan, NodeSpan
from corral.core.capacity import backoff_cleared_message
from corral.core.dependency import DEPENDENCY, Dependency, DependencyKind, reference_problems, resolve, whole_arrays
from corral.core.dependency import parse as parse_dependency
from corral.core.index import SnapshotIndex
from corral.core.model import (
    ZERO,
    Attempt,
    AttemptState,
    Dispatcher,
    InstanceType,
    Job,
    JobState,
    Node,
    NodeState,
    Resources,
    check_job_transition,
)
from corral.core.signals import signal_text
from corral.core.snapshot import Annotation, BootFailures, JobOutcome, Snapshot
from corral.core.units import utc_text
from corral.jobspec import (
    FIELDS_BEFORE_SCRIPT,
    JobRequest,
    dependency_text,
    describe_validation_errors,
    job_from_stored,
    spec_without_defaults,
)
from corral.placement.collector import collector_paused
from corral.store import schema
from corral.store.schema import attempts as A
from corral.store.schema import jobs as J
from corral.store.schema import nodes as N
from corral.store.schema import signal_requests as SR
from corral.store.schema import submissions as S

if TYPE_CHECKING:
    from corral.store.migrate import Starter

log = logging.getLogger("corral.store")

# PostgreSQL's SQLSTATE for a lock not granted within lock_timeout.
LOCK_NOT_AVAILABLE = "55P03"
ACTIVE_ATTEMPT_STATES = (AttemptState.ASSIGNED.value, AttemptState.RUNNING.value)
OPEN_JOB_STATES = (JobState.QUEUED.value, JobState.CLAIMED.value, JobState.RUNNING.value)
CLAIMED_JOB_STATES = (JobState.CLAIMED.value, JobState.RUNNING.value)
TERMINAL_JOB_STATES = tuple(s.value for s in JobState if s.terminal)

# A pass's job outcomes are committed this many to a transaction (Store.apply_outcomes): one each
# made a pass that ended a run of thousands (cancelled by its tag, a chain of dependencies never
# satisfied) commit thousands of times, minutes on SQLite, with nothing placed meanwhile; all in one
# would hold the store's write lock (SQLite) or that many rows' locks (PostgreSQL) for as long.
OUTCOMES_PER_TRANSACTION = 500

# What `update_job` changes: while the job runs too, and in all (the rest only while it is queued).
UPDATABLE_WHILE_RUNNING = frozenset({"time_limit", "max_retries", "name"})
UPDATABLE = UPDATABLE_WHILE_RUNNING | {"vcpus", "ram", "scratch", "gpus", "nodes", "not_before", "reservation"}
# The job's --signal too (queued only: a running job's agent has its signal already).
UPDATABLE |= {"signal"}
# A pass's claims to one write transaction (Store.claim_many): few enough that an agent's or a
# user's write waits for one briefly.
CLAIMS_PER_TRANSACTION = 200
USER_LAST_USED_EVERY = 60.0  # seconds: how stale `corral users list`'s "last used" may be
LIVE_NODE_STATES = tuple(s.value for s in NodeState if s is not NodeState.GONE)
# A job's latest attempt's executor id (the Slurm job id), beside the job's row: what an operator
# takes to `scontrol show job`.
_LATEST_REF = (
    select(A.c.executor_ref)
    .where(A.c.job_id == J.c.id)
    .order_by(A.c.id.desc())
    .limit(1)
    .correlate(J)
    .scalar_subquery()
    .label("executor_ref")
)
# What a listing of jobs reads of each (Store.list_job_rows).
_LISTED = tuple(column for column in J.c if column.name != "explanation")
# Its latest attempt's state and exit code: how an ended job ended (the API's end_cause).
_LATEST_END = tuple(
    select(column)
    .where(A.c.job_id == J.c.id)
    .order_by(A.c.id.desc())
    .limit(1)
    .correlate(J)
    .scalar_subquery()
    .label(f"last_attempt_{column.name}")
    for column in (A.c.state, A.c.exit_code)
)


@dataclass
class ArrayOutcome:
    """What a command given a job array's id did to its tasks, as Slurm's `scontrol hold 12` or
    `scancel 12` acts on every task of array 12 that is in a state it applies to: the tasks it
    changed and the others, each grouped by what was done or why not (job ids, ascending).
    `changes`: `update_array`'s, each changed task's fields' old and new values."""

    array_job_id: int
    tasks: int
    changed: dict[str, list[int]] = field(default_factory=dict)
    unchanged: dict[str, list[int]] = field(default_factory=dict)
    changes: dict[int, dict[str, list[Any]]] = field(default_factory=dict)

    def said(self) -> str:
        """'7 held, 3 already running', for an error that says why nothing changed."""
        return ", ".join(f"{len(ids)} {why}" for why, ids in (*self.changed.items(), *self.unchanged.items()))


@dataclass
class FleetCounts:
    by_state: dict[str, int] = field(default_factory=dict)  # live nodes per state
    by_type: dict[str, tuple[int, float]] = field(default_factory=dict)  # (nodes, summed price per hour)
    vcpus: float = 0.0  # what the live nodes hold (policy.boot.max_vcpus counts them)

    @property
    def cost_per_hour(self) -> float:
        return sum(cost for _, cost in self.by_type.values())


@dataclass(frozen=True, slots=True)
class AttemptUsage:
    """What a run used, as its node measured it (Slurm's TotalCPU and MaxRSS): CPU seconds, user and
    system, and peak RSS in MiB; None: not known."""

    cpu_seconds: float | None = None
    max_rss_mib: int | None = None


@dataclass(frozen=True, slots=True)
class NodeAttempts:
    """The attempts corral has on a node (Store.attempts_on_node)."""

    running: list[int]  # those started, in id order
    time_limits: dict[int, float | None]  # every one assigned or running: its job's time limit
    signals: list[SignalRequest]  # not yet sent to those started (`corral cancel --signal`)

    def wanted(self, listed: Sequence[int]) -> dict[int, float | None]:
        """Of the attempts an agent lists, those corral still wants run there, each with its job's
        time limit as it stands now (None: none), which the agent enforces itself while the server
        is away (a limit changed during the run reaches it this way)."""
        return {a: self.time_limits[a] for a in listed if a in self.time_limits}


class NotFound(LookupError):
    pass


# SQLSTATE classes of a store that is not there: 08, the connection failed or was lost; 57,
# operator intervention (the server shutting down, pg_terminate_backend, a crash's restart), but not
# 57014, a statement cancelled (_REFUSED_FOR_NOW).
_OUTAGE_SQLSTATE_CLASSES = ("08", "57")
# What PostgreSQL refuses for now though it answers, rolling the transaction back: a serialization
# failure, a deadlock (it ended one of the two transactions), a lock not granted within lock_timeout,
# a statement cancelled by statement_timeout (or pg_cancel_backend). A DBA sets the timeouts on
# corral's role or in store.url; the same work may be tried again.
_REFUSED_FOR_NOW = ("40001", "40P01", LOCK_NOT_AVAILABLE, "57014")
# PostgreSQL's disk_full: it could not extend a file (its data, its WAL).
DISK_FULL = "53100"
# SQLite's: the file locked by another writer past the busy timeout, or not there to open.
_SQLITE_OUTAGES = ("SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_CANTOPEN", "SQLITE_IOERR")


def store_unreachable(exc: BaseException) -> str | None:
    """What to tell of an error that says the store cannot be reached right now (PostgreSQL
    restarting or failing over, the network between, a session ended under a transaction, SQLite's
    file locked past its busy timeout), or cannot write for want of disk, one line without the SQL;
    None for any other error. Such a transaction was rolled back whole by the database; the same
    work may be tried again later.

    A full disk counts as an outage: nothing (a ping, a heartbeat, an agent's report) can be
    recorded until space is freed, so silence must be counted from its end, not judged as nodes
    and peers gone; and the loop backs off, one line per try, rather than a traceback a pass."""
    if not isinstance(exc, (OperationalError, InterfaceError)):
        return None
    sqlite_error = getattr(exc.orig, "sqlite_errorname", None)
    if sqlite_error == "SQLITE_FULL" or getattr(exc.orig, "sqlstate", None) == DISK_FULL:
        return f"out of disk space: {_first_line(exc)}"
    if sqlite_error is not None and not sqlite_error.startswith(_SQLITE_OUTAGES):
        return None  # no such table, a syntax error: the file answered
    sqlstate = getattr(exc.orig, "sqlstate", None)
    answered = sqlstate is not None and (
        sqlstate in _REFUSED_FOR_NOW or not sqlstate.startswith(_OUTAGE_SQLSTATE_CLASSES)
    )
    if answered and not exc.connection_invalidated:
        return None  # a deadlock, a timeout, a constraint: the store answered
    return _first_line(exc)


def store_refused(exc: BaseException) -> str | None:
    """What to tell of an error by which PostgreSQL, answering, refused a statement for now and
    rolled its transaction back (a deadlock, a serialization failure, lock_timeout,
    statement_timeout), one line without the SQL; None for any other error. The same work may be
    tried again: a pass at the next, a request by its client."""
    if not isinstance(exc, OperationalError) or exc.connection_invalidated:
        return None
    if getattr(exc.orig, "sqlstate", None) not in _REFUSED_FOR_NOW:
        return None
    return _first_line(exc)


def _first_line(exc: DBAPIError) -> str:
    said = str(exc.orig or exc).strip().splitlines()
    return said[0] if said else type(exc.orig or exc).__name__


class NotQueued(ValueError):
    """A change that only a queued job takes (a hold), asked of a job in another state."""


class NotRunning(ValueError):
    """A signal asked of a job whose command does not run (queued, held, claimed and not started,
    finished): Slurm's scancel --signal refuses such a job too ("Job is pending execution")."""

    def __init__(self, job_id: int, state: str) -> None:
        super().__init__(
            f"job {job_id} is {state}: only a running job's command can be signalled"
            + ("" if JobState(state).terminal else " (its command has not started)")
        )
        self.state = state


@dataclass(frozen=True, slots=True)
class SignalRequest:
    """A signal asked for a running attempt and not yet sent (schema.signal_requests)."""

    id: int
    attempt_id: int
    job_id: int
    number: int
    main_only: bool
    requested_by: str

    def said(self) -> str:
        """ "signal 10 (SIGUSR1) to its main process (asked by alice)"."""
        to = "its main process" if self.main_only else "its process group"
        return f"{signal_text(self.number)} to {to} (asked by {self.requested_by})"


@dataclass
class Purgeable:
    """What a retention sweep would delete (Store.purgeable): `jobs` of the `jobs_ended` that ended
    before its cut (the others are kept for an open dependent or their array), and `events`."""

    jobs_ended: int = 0
    jobs: int = 0
    events: int = 0


class LimitLengthened(ValueError):
    """A job's time limit made longer (or removed) by an update that may only shorten it."""


class NotBackedOff(ValueError):
    """Instance types an operator would end the back-off of (`Store.clear_backoffs`) that are not
    backed off: nothing is changed. `names`: those types; `in_force`: the types backed off now."""

    def __init__(self, names: list[str], in_force: list[str]) -> None:
        backed_off = f"backed off now: {', '.join(in_force)}" if in_force else "no instance type is backed off now"
        super().__init__(f"{', '.join(names)} {'is' if len(names) == 1 else 'are'} not backed off ({backed_off})")
        self.names = names
        self.in_force = in_force


@dataclass(frozen=True, slots=True)
class ClearedBackoff:
    """A back-off an operator ended: the type, when it would have ended, why, and its failed boots in a row."""

    instance_type: str
    until: float
    reason: str
    boot_failures: int


class UserExists(ValueError):
    """A user of that name exists already."""


class InvalidJobs(ValueError):
    """A submission that names what the store does not hold (a dependency on no job): nothing of it
    is stored. `problems` name the job by its place in the batch ("jobs.2.dependency: no job 99")."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def make_engines(
    url: str, application_name: str = "corral", idle_in_transaction: float | None = None
) -> tuple[Engine, Engine]:
    """(writer, reader). For SQLite the writer begins IMMEDIATE; the reader reads a WAL snapshot.
    PostgreSQL's sessions are named `application_name` (pg_stat_activity, the server's log's %a),
    unless the URL names them itself. `idle_in_transaction` (seconds): PostgreSQL ends a session
    whose transaction waits on it longer than that (idle_in_transaction_session_timeout), unless
    the role, the database or the URL sets a timeout of its own."""
    if not url.startswith("sqlite"):
        named = "application_name" in make_url(url).query
        connect_args = {} if named else {"application_name": application_name[:63]}  # (NAMEDATALEN)
        engine = create_engine(url, pool_pre_ping=True, future=True, connect_args=connect_args)
        if idle_in_transaction is not None:
            bound = str(max(1, int(idle_in_transaction * 1000)))

            @event.listens_for(engine, "connect")
            def _bound_idle_transactions(dbapi_conn: Any, _record: Any) -> None:
                with dbapi_conn.cursor() as cursor:
                    cursor.execute(
                        "SELECT set_config('idle_in_transaction_session_timeout', %s, false)"
                        " WHERE current_setting('idle_in_transaction_session_timeout') = '0'",
                        (bound,),
                    )
                dbapi_conn.commit()

        return engine, engine

    def sqlite_engine(immediate: bool) -> Engine:
        # Connections are kept (5; more while more threads want one, closed as they come back):
        # opening one and setting its pragmas took three quarters of a simple read's 2.3 ms.
        engine = create_engine(
            url, connect_args={"timeout": 30, "check_same_thread": False}, pool_size=5, max_overflow=-1
        )

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None  # let SQLAlchemy's begin event issue BEGIN itself
            cursor = dbapi_conn.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

        return engine

    return sqlite_engine(True), sqlite_engine(False)


_PENDING_EVENTS = "corral.pending_events"  # a write transaction's events, in Connection.info

# The user whose request the store's calls in this context serve: the events they record say "(by
# NAME)", so that a user whose job an admin cancelled can tell who did (slurmctld logs the uid of
# every scancel). "": the operator's token, or corral itself (a pass, an agent), as before.
_ACTING_USER: ContextVar[str] = ContextVar("corral_acting_user", default="")


@contextmanager
def acting_as(user: str) -> Iterator[None]:
    """Name `user` in the events the store records within."""
    token = _ACTING_USER.set(user)
    try:
        yield
    finally:
        _ACTING_USER.reset(token)


# How long a submission's key answers the jobs it queued (Store.submit): a client sends it again
# within seconds or minutes of the first time, never days later.
KEY_KEPT_FOR = 86400.0


class KeyReused(ValueError):
    """A submission key sent again with other jobs than the first time it was sent."""


def _hash_of(specs: Iterable[Mapping[str, Any]]) -> str:
    return hashlib.sha256(json.dumps(list(specs), sort_keys=True).encode()).hexdigest()


# Servers before this one hashed a submission whole (each request's every field, its defaults
# included): the fields they knew, those of the last of them, and of those the ones JobRequest took
# after submissions had keys (migration 0018), in the order they came, with their defaults. A key
# stored by a server from before one of them existed has its hash without it: a submission sent to
# it and sent again after the upgrade (a day at most) is the same submission if it leaves them at
# their defaults. Fields added since need no entry: the hash leaves out what is at its default.
_FIELDS_HASHED_WHOLE = FIELDS_BEFORE_SCRIPT
_ADDED_WHILE_HASHED_WHOLE: tuple[tuple[str, Any], ...] = (("chdir", None), ("separate_stderr", False))


class _SubmissionKey:
    """A submission's key, and the hash it is stored with: its specs without their defaults.
    Which stored hashes are the same submission's: that one, or one a server before this one
    stored for these requests (each with every field of its version)."""

    def __init__(self, key: str, requests: Sequence[JobRequest], specs: Sequence[dict[str, Any]]) -> None:
        """`specs`: the requests', as dumped (before a judged dependency is written into one)."""
        self.key = key
        self._requests = requests
        self.body_hash = _hash_of(spec_without_defaults(s, type(r)) for r, s in zip(requests, specs, strict=True))

    def is_of(self, stored: str) -> bool:
        return stored == self.body_hash or stored in self._as_hashed_whole

    @functools.cached_property
    def _as_hashed_whole(self) -> frozenset[str]:
        # Only for a key found with another hash (after an upgrade, or other jobs): dumped again,
        # as the submission's own specs may have been changed by then (a judged dependency).
        dumped = [(r.model_dump(mode="json"), type(r)) for r in self._requests]
        if any(set(spec_without_defaults(spec, model)) - _FIELDS_HASHED_WHOLE for spec, model in dumped):
            return frozenset()  # (a field set that no server hashing whole had: it refused it)
        whole = [{field: value for field, value in spec.items() if field in _FIELDS_HASHED_WHOLE} for spec, _ in dumped]
        hashes = {_hash_of(whole)}
        added = list(_ADDED_WHILE_HASHED_WHOLE)
        while added:
            name, default = added.pop()
            if any(spec[name] != default for spec in whole):
                break  # (an older server refused it: its hash is none of these jobs')
            whole = [{field: value for field, value in spec.items() if field != name} for spec in whole]
            hashes.add(_hash_of(whole))
        return frozenset(hashes)


def _submitted(conn: Connection, keyed: _SubmissionKey, now: float) -> list[int] | None:
    """The ids a submission with this key queued, if it was made within KEY_KEPT_FOR."""
    key = keyed.key
    row = conn.execute(select(S.c.body_hash, S.c.job_ids).where(S.c.key == key, S.c.at >= now - KEY_KEPT_FOR)).first()
    if row is None:
        return None
    if not keyed.is_of(row.body_hash):
        raise KeyReused(
            f"submission key {key!r} was sent before with other jobs (ids {_id_span(row.job_ids)}): a new"
            " submission takes a new key"
        )
    return [int(job_id) for job_id in row.job_ids]


def _id_span(ids: list[int]) -> str:
    return f"{ids[0]} to {ids[-1]}" if len(ids) > 1 else str(ids[0]) if ids else "none"


# A job submitted held (sbatch --hold), Slurm's JobHeldUser: its wait reason and its event.
HELD_AT_SUBMISSION = "held at submission: it runs once released (corral release)"


# Who asked for a cancel, as jobs.cancelled_by records it: the acting user, else the operator (the
# data directory's token, which names no user: a user's name has no parentheses). Only a request's
# routes ask for a cancel; corral's own cancels (a dependency never satisfied, a node failure under
# on_node_failure=cancel) record none, and end_cause says why.
CANCELLED_BY_OPERATOR = "(operator)"


def _canceller() -> str:
    return _ACTING_USER.get() or CANCELLED_BY_OPERATOR


def _by_acting_user(message: str) -> str:
    user = _ACTING_USER.get()
    if not user:
        return message
    # ("held by an operator": a user's own hold was no operator's.)
    return message.replace("by an operator", f"by {user}") if "by an operator" in message else f"{message} (by {user})"


def _insert_events(conn: Connection, rows: list[dict[str, Any]]) -> None:
    """Insert a transaction's events as its last statements, so that event ids follow commit order.

    The notifier and the metrics read events by "id above the last one seen". With ids taken
    mid-transaction, a transaction that took id 10 and committed after another's id 11 was read
    past and never seen on PostgreSQL (a failed job never paged anyone). Taken last, and on
    PostgreSQL under a transaction lock (per schema) that commit releases, each transaction's ids
    are above those of every transaction that committed before it. The lock is the last one taken
    and its holder only inserts and commits, so it cannot deadlock. SQLite has one writer at a time."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(hashtext('corral.events'), hashtext(current_schema()))"))
    conn.execute(insert(schema.events), rows)


@dataclass(slots=True)
class WorkItem:
    attempt_id: int
    job_id: int
    command: list[str]
    env: dict[str, str]
    node_ids: list[str]
    resources: Resources
    image: str | None = None
    time_limit: float | None = None  # the job's, in seconds (None: none)
    chdir: str | None = None  # the directory the command runs in (None: the attempt's own)
    separate_stderr: bool = False  # its stderr sent as a stream of its own, not in its output
    script: str | None = None  # a batch script's text: the command is its file's name and arguments
    signal: str | None = None  # sbatch's --signal as stored ("B:USR1@60"): sent before the time limit


@dataclass(frozen=True, slots=True)
class _JobSources:
    """What jobs are built from (Store._specs_to_build): the jobs kept from an earlier snapshot,
    as they were when `specs`, the specs of the others, were read."""

    kept: dict[int, tuple[int, tuple[Any, ...], Job]]
    specs: dict[int, Any]


class _MovedOn(Exception):
    """Raised inside a write transaction to roll it back: a row it changed had moved on."""


class Store:
    def __init__(self, url: str, application_name: str = "corral", idle_in_transaction: float | None = None) -> None:
        """`application_name`: what a DBA sees of this store's PostgreSQL sessions (`corral run`
        names its dispatcher), unless `url` names them itself. `idle_in_transaction`: how long
        PostgreSQL lets one of them hold a transaction open between two statements (make_engines).

        `corral run` bounds it by `dispatch.dispatcher_stale`: a dispatcher frozen in a
        transaction (SIGSTOP, a stopped VM, a hung call) kept its row locks, or the events' lock,
        for as long as it stayed frozen, and every peer's write that met them waited as long: the
        peers that were to take its claims over hung with it. Frozen that long, it is judged
        silent and its claims are released; its transaction is rolled back with its session."""
        self.url = url
        self.engine, self.reader = make_engines(url, application_name, idle_in_transaction)
        # The open jobs of the last snapshot, by id, with their spec_rev and the row they were refreshed from.
        self._jobs: dict[int, tuple[int, tuple[Any, ...], Job]] = {}
        # The index of the last snapshot, kept between snapshots and filed with only what changed
        # (`_file_index`), and the active attempts and live nodes it was filed from (by id: the row
        # and the object filed). None: no snapshot yet, or the last one failed while filing it.
        self._index: SnapshotIndex | None = None
        self._attempts: dict[int, tuple[tuple[Any, ...], Attempt]] = {}
        self._nodes: dict[str, tuple[tuple[Any, ...], Node]] = {}
        self._store_id: str | None = None
        self.migrated_to: str | None = None  # the schema revision migrate() left (None: not migrated here)

    def close(self) -> None:
        self.engine.dispose()
        if self.reader is not self.engine:
            self.reader.dispose()

    def migrate(self, starter: Starter | None = None) -> None:
        """Brings the schema to the head (corral.store.migrate.upgrade; `starter`: the dispatcher
        that starts, which is refused while older dispatchers run on the store)."""
        from corral.store.migrate import upgrade

        upgrade(self.engine, starter=starter)
        self.migrated_to = self.schema_revision()

    def schema_revision(self) -> str | None:
        """The schema revision the store is at now (Alembic's `alembic_version`)."""
        with self.read() as conn:
            return conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one_or_none()

    def schema_moved_on(self) -> str | None:
        """Why this corral must not act on the store: a newer corral migrated it after this one
        started (a rolling upgrade that did not stop it first); None while its schema is the one
        migrate() left."""
        if self.migrated_to is None:
            return None
        now = self.schema_revision()
        if now == self.migrated_to:
            return None
        return (
            f"the store was migrated to revision {now} by a newer corral while this one, of revision"
            f" {self.migrated_to}, ran: this dispatcher makes no more passes (it would read the newer schema"
            " as the old one); stop it, its peers take its claims over once it is silent"
        )

    @contextmanager
    def pass_lock(self, timeout: float) -> Iterator[bool]:
        """One reconcile pass at a time among the dispatchers sharing a PostgreSQL store.

        A pass decides on a snapshot and then claims and boots: the claim is atomic per job, but
        what the pass counted (a node's free room, `policy.boot.max_instances`, an array's
        throttle, a user's running jobs) is not re-checked. Two passes that overlap both place
        work in the same free room: each dispatcher put a 2-vCPU job on the same 2-vCPU node in
        the same millisecond, and both ran. A session advisory lock (per schema) serialises the
        passes; a dispatcher killed in its pass loses its session, and the lock with it.

        A dispatcher stuck in its pass (frozen, hung on a call) keeps its session and the lock:
        one whose pass has held the lock for `timeout` seconds is fenced off, its session ended
        (pg_terminate_backend), and the lock is taken. Else every other dispatcher waited
        `timeout` at each of its passes for as long as the stuck one lived, and then ran beside
        the others, unserialised. A fenced pass that goes on ends without its turn (a warning).

        Yields whether the lock is held: False when it could not be had within `timeout` even so
        (a holder this role may not end: the pass then runs unserialised, as before). SQLite:
        always True, nothing taken (several dispatchers share PostgreSQL)."""
        if self.engine.dialect.name != "postgresql":
            yield True
            return
        key = "hashtext('corral.pass'), hashtext(current_schema())"
        with self.engine.connect() as conn:
            held = self._take_pass_lock(conn, key, timeout) or (
                self._fence_pass_holder(conn, timeout) and self._take_pass_lock(conn, key, timeout)
            )
            try:
                yield held
            finally:
                if held:
                    try:
                        conn.execute(text(f"SELECT pg_advisory_unlock({key})"))
                        conn.commit()
                    except DBAPIError as exc:
                        # Its session was ended (fenced by another dispatcher after this pass held the
                        # lock too long, or the connection was lost): the lock went with it.
                        log.warning(
                            "this pass lost its turn (the store's pass lock) before it ended: %s", exc.orig or exc
                        )

    @staticmethod
    def _take_pass_lock(conn: Connection, key: str, timeout: float) -> bool:
        try:
            # SET LOCAL: the timeout ends with this transaction; the session lock outlives it. The
            # wait is bounded by lock_timeout alone: a DBA's shorter statement_timeout cancelled it
            # first, failing the pass, and a stuck holder was never fenced.
            conn.execute(text("SELECT set_config('lock_timeout', :ms, true)"), {"ms": f"{max(1, int(timeout * 1000))}"})
            conn.execute(text("SELECT set_config('statement_timeout', '0', true)"))
            conn.execute(text(f"SELECT pg_advisory_lock({key})"))
            conn.commit()
            return True
        except OperationalError as exc:
            if getattr(exc.orig, "sqlstate", None) != LOCK_NOT_AVAILABLE:
                raise
            conn.rollback()  # lock_timeout: another dispatcher's pass held it that long
            return False

    @staticmethod
    def _fence_pass_holder(conn: Connection, timeout: float) -> bool:
        """End the session of a dispatcher whose pass has held the pass lock for `timeout` seconds
        (a pass that took it since is left alone). False if there was none, or it may not be ended."""
        holders = text(
            "SELECT a.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2"
            " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            " AND l.classid = hashtext('corral.pass')::oid AND l.objid = hashtext(current_schema())::oid"
            " AND a.pid <> pg_backend_pid() AND a.state_change <= clock_timestamp() - make_interval(secs => :held)"
        )
        try:
            pids = list(conn.execute(holders, {"held": timeout}).scalars())
            fenced = [
                pid for pid in pids if conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid}).scalar()
            ]
            conn.commit()
        except DBAPIError as exc:
            conn.rollback()
            log.warning(
                "another dispatcher's pass held the store's pass lock too long and cannot be fenced: %s",
                exc.orig or exc,
            )
            return False
        if fenced:
            log.warning(
                "another dispatcher's pass held the store's pass lock for over %gs: its session (backend %s) was"
                " ended, and the lock taken over",
                timeout,
                ", ".join(map(str, fenced)),
            )
        return bool(fenced)

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """A write transaction. Its events are inserted as it commits (`_insert_events`)."""
        with self.engine.begin() as conn:
            try:
                yield conn
                events = conn.info.pop(_PENDING_EVENTS, None)
                if events:
                    _insert_events(conn, events)
            finally:
                # The connection goes back to the pool. One lost under the transaction (the server
                # restarted, the session ended) is discarded with its info, which it can no longer
                # give (SQLAlchemy's PendingRollbackError, which hid the error that said why).
                if not conn.invalidated:
                    conn.info.pop(_PENDING_EVENTS, None)

    @contextmanager
    def read(self) -> Iterator[Connection]:
        with self.reader.connect() as conn:
            yield conn

    @contextmanager
    def consistent_read(self) -> Iterator[Connection]:
        """Reads that see one moment: what had committed when the first began. SQLite's reader
        does (a WAL snapshot); PostgreSQL's default, READ COMMITTED, lets each statement see what
        committed since the one before."""
        with self.reader.connect() as conn:
            if conn.dialect.name == "postgresql":
                conn = conn.execution_options(isolation_level="REPEATABLE READ", postgresql_readonly=True)
            yield conn

    @staticmethod
    def _lock_jobs(conn: Connection, *where: Any) -> list[int]:
        """Lock the jobs that match `where` (`_locking`), and return their ids, ascending."""
        return [int(job_id) for job_id in conn.execute(_locking(select(J.c.id).where(*where))).scalars()]

    # ---- events -------------------------------------------------------------------------------

    @staticmethod
    def _event(
        conn: Connection,
        now: float,
        kind: str,
        message: str = "",
        job_id: int | None = None,
        node_id: str | None = None,
    ) -> None:
        row = {"at": now, "kind": kind, "job_id": job_id, "node_id": node_id, "message": _by_acting_user(message)}
        conn.info.setdefault(_PENDING_EVENTS, []).append(row)

    @staticmethod
    def _job_events(conn: Connection, now: float, kind: str, messages: Iterable[tuple[int, str]]) -> None:
        """One event of `kind` per (job id, message): a batch's jobs."""
        rows = [
            {"at": now, "kind": kind, "job_id": job_id, "node_id": None, "message": _by_acting_user(m)}
            for job_id, m in messages
        ]
        conn.info.setdefault(_PENDING_EVENTS, []).extend(rows)

    def add_event(
        self, now: float, kind: str, message: str = "", job_id: int | None = None, node_id: str | None = None
    ) -> None:
        with self.write() as conn:
            self._event(conn, now, kind, message, job_id, node_id)

    def add_node_events(self, now: float, kind: str, told: Iterable[tuple[str, str | None]]) -> None:
        """Events of one kind, each a (message, node id), in one transaction (an orphan sweep tells
        hundreds at once: a transaction each took it longer than its one cloud call)."""
        with self.write() as conn:
            for message, node_id in told:
                self._event(conn, now, kind, message, node_id=node_id)

    def list_events(
        self,
        job_id: int | None = None,
        node_id: str | None = None,
        kind: str | None = None,
        limit: int = 200,
        before: int | None = None,
        since: float | None = None,
        until: float | None = None,
        after: int | None = None,
    ) -> list[dict[str, Any]]:
        """The newest `limit` events that match, oldest first: of a job, a node, a kind (or its
        start), with an id below `before` (the next page back), at or after `since` and before
        `until` (epoch seconds). With `after`, the oldest `limit` with an id above it (a
        follower's next page: event ids follow commit order, `_insert_events`)."""
        query = select(schema.events)
        if before is not None:
            query = query.where(schema.events.c.id < before)
        if after is not None:
            query = query.where(schema.events.c.id > after)
        if since is not None:
            query = query.where(schema.events.c.at >= since)
        if until is not None:
            query = query.where(schema.events.c.at < until)
        if job_id is not None:
            query = query.where(schema.events.c.job_id == job_id)
        if node_id is not None:
            query = query.where(schema.events.c.node_id == node_id)
        newest_first = after is None
        with self.read() as conn:
            if kind:
                # A kind or its start: node., job.requeued, job.cancel (cancel_requested and cancelled).
                # Matched against the few kinds recorded, then listed by equality: the kind index
                # serves `kind IN (...)`, never `kind LIKE 'node.%'` under a collation other than "C".
                kinds = _event_kinds(conn, kind if "%" in kind else kind + "%")
                if not kinds:
                    return []
                query = query.where(schema.events.c.kind.in_(kinds))
            query = query.order_by(schema.events.c.id.desc() if newest_first else schema.events.c.id).limit(limit)
            rows = [dict(r._mapping) for r in conn.execute(query)]
        if newest_first:
            rows.reverse()
        return rows

    def event_kinds(self) -> list[str]:
        """The kinds of event recorded, sorted (from the kind index)."""
        with self.read() as conn:
            return _event_kinds(conn)

    def events_after(self, event_id: int, limit: int = 500) -> list[dict[str, Any]]:
        """The events with an id above `event_id`, oldest first, at most `limit`."""
        query = select(schema.events).where(schema.events.c.id > event_id).order_by(schema.events.c.id).limit(limit)
        with self.read() as conn:
            return [dict(r._mapping) for r in conn.execute(query)]

    def answers(self) -> None:
        """Raises as any read would when the store cannot be reached; the cheapest round trip, for
        the health check a load balancer polls."""
        with self.read() as conn:
            conn.execute(text("SELECT 1"))

    def last_event_id(self) -> int:
        with self.read() as conn:
            return int(conn.execute(select(func.max(schema.events.c.id))).scalar() or 0)

    # ---- the notifier's cursor ----------------------------------------------------------------

    def notify_cursor(self, name: str = "notify") -> tuple[int, dict[str, Any], float] | None:
        """The notifier's last handled event id, its state (rearm, retries) and when it was last
        moved; None before its first run."""
        table = schema.notify_cursor
        with self.read() as conn:
            row = conn.execute(
                select(table.c.last_event_id, table.c.state, table.c.updated_at).where(table.c.name == name)
            ).first()
        return None if row is None else (int(row[0]), dict(row[1]), float(row[2]))

    def notify_cursor_status(self, name: str = "notify") -> dict[str, Any] | None:
        """The cursor's row as `corral notify status` shows it (last_event_id, updated_at, state),
        and how many events come after it (`waiting`)."""
        table = schema.notify_cursor
        with self.read() as conn:
            row = conn.execute(select(table).where(table.c.name == name)).mappings().first()
            if row is None:
                return None
            events = schema.events
            waiting = conn.execute(select(func.count()).where(events.c.id > row["last_event_id"])).scalar()
        status = {k: row[k] for k in ("last_event_id", "updated_at", "state")}
        return {**status, "waiting": int(waiting or 0)}

    def advance_notify_cursor(
        self,
        old_id: int | None,
        new_id: int,
        state: dict[str, Any],
        now: float,
        name: str = "notify",
        moved_at: float | None = None,
    ) -> bool:
        """Move the cursor from `old_id` (None: it does not exist yet) to `new_id`, with the new
        state; False if another dispatcher moved it first (it notifies those events, not this one).
        With `moved_at` (the cursor's `updated_at` as read), also False if it was written since: a
        write that leaves the event id (retries taken) must not undo another's."""
        table = schema.notify_cursor
        values = {"last_event_id": new_id, "state": state, "updated_at": now}
        with self.write() as conn:
            if old_id is None:
                # (RETURNING: under PostgreSQL the rowcount of an INSERT ... ON CONFLICT DO NOTHING
                # did not say 1 for a row it inserted.)
                stmt = _upsert(conn, table).values(name=name, **values).on_conflict_do_nothing().returning(table.c.name)
                return conn.execute(stmt).first() is not None
            stmt2 = update(table).where(table.c.name == name, table.c.last_event_id == old_id)
            if moved_at is not None:
                stmt2 = stmt2.where(table.c.updated_at == moved_at)
            return conn.execute(stmt2.values(**values)).rowcount == 1

    def move_notify_cursor(self, to: int, now: float, name: str = "notify") -> int | None:
        """Put the cursor at event `to` (an operator's `corral notify skip`), with an event
        `notify.moved`; the id it was at (None: the notifier had not run). Forward, the events
        between are never notified; back, those after `to` are notified again, with the rearm and
        threshold state started over, for they may be what a failed webhook never delivered. A
        pass whose batch the move overtakes finds the cursor moved and sends nothing."""
        table = schema.notify_cursor
        with self.write() as conn:
            row = conn.execute(
                select(table.c.last_event_id, table.c.state).where(table.c.name == name).with_for_update()
            ).first()
            was = None if row is None else int(row[0])
            if row is None:
                conn.execute(insert(table).values(name=name, last_event_id=to, state={}, updated_at=now))
            else:
                state = dict(row[1]) if to >= int(row[0]) else {}
                conn.execute(
                    update(table).where(table.c.name == name).values(last_event_id=to, state=state, updated_at=now)
                )
            if was is None:
                what = f"the notifier, yet to run, starts after event {to}"
            elif to > was:
                what = f"events {was + 1}-{to} are not notified"
            elif to < was:
                what = f"events {to + 1}-{was} are notified again, rearm and thresholds started over"
            else:
                what = "it was there already"
            self._event(conn, now, "notify.moved", f"the notifier's cursor moved from {was} to {to}: {what}")
        return was

    # ---- jobs ---------------------------------------------------------------------------------

    def submit(self, requests: Sequence[JobRequest], now: float, key: str | None = None) -> list[int]:
        """Queue jobs in one transaction: all are stored, or (on any error) none. A request with an
        array is one job per task, in task order, each with the whole request as its spec; the
        array's id is its first task's job id. The ids of every job, tasks included, in order.

        `key`: the client's own for this submission (an idempotency key). Sent again within
        KEY_KEPT_FOR, as a client does whose answer was lost (a dropped connection, a 503 after
        the commit), it queues nothing and answers the ids of the first time; with other jobs than
        the first time, KeyReused."""
        # Each request's spec, dumped once: stored, and hashed for a key.
        specs = [r.model_dump(mode="json") for r in requests]
        keyed = _SubmissionKey(key, requests, specs) if key is not None else None
        try:
            return self._submit(requests, specs, now, keyed)
        except IntegrityError:
            # The same key sent twice at once (PostgreSQL): the second waited on the first's row,
            # then found it; what the first queued is the answer.
            if keyed is None:
                raise
            with self.read() as conn:
                known = _submitted(conn, keyed, now)
            if known is None:
                raise
            return known

    def _submit(
        self,
        requests: Sequence[JobRequest],
        specs: list[dict[str, Any]],
        now: float,
        keyed: _SubmissionKey | None,
    ) -> list[int]:
        """`specs`: each request's, dumped, which its rows share."""
        rows: list[dict[str, Any]] = []
        owners: list[int] = []  # the request each row comes from, by its place in `requests`
        shapes: list[tuple[int, ...] | None] = []  # each request's task ids (an array), by place
        for place, r in enumerate(requests):
            row = {
                "name": r.name,
                "state": JobState.QUEUED.value,
                "priority": r.priority,
                "spec": specs[place],
                "user_name": r.user,
                "submitted_at": now,
                "temp_failures": 0,
                "perm_failures": 0,
                "attempt_count": 0,
                "wait_reason": _by_acting_user(HELD_AT_SUBMISSION) if r.hold else "",
                "unplaceable": False,
                "cancel_requested": False,
                # Submitted with priority 0: cancelled by whoever submitted it (seed 001).
                "cancelled_by": _canceller() if r.priority == 0 else None,
                "requeue_requested": False,
                "requeue_hold": False,
                "held": r.hold,
                "array_task_id": None,
                "array_throttle": None,
                "updated_at": now,
            }
            array = r.to_array()
            shapes.append(tuple(array.task_ids) if array is not None else None)
            if array is None:
                rows.append(row)
                owners.append(place)
                continue
            for task_id in array.task_ids:
                rows.append({**row, "array_task_id": task_id, "array_throttle": array.throttle})
                owners.append(place)
        if not rows:
            return []
        dependencies = {i: d for i, r in enumerate(requests) if (d := r.to_dependency()) is not None}
        # The dependencies that name jobs of this submission (`@N`), whose ids are known only once
        # its rows are in: checked now, before anything is written, and made job ids below.
        referring = sorted(place for place, dependency in dependencies.items() if dependency.references)
        problems = [
            f"jobs.{place}.dependency: {problem}"
            for place in referring
            for problem in reference_problems(dependencies[place], place, shapes)
        ]
        if problems:
            raise InvalidJobs(problems)
        array_tasks: dict[int, dict[int, int]] = {}
        with self.write() as conn:
            if keyed is not None:
                conn.execute(delete(S).where(S.c.at < now - KEY_KEPT_FOR))
                known = _submitted(conn, keyed, now)
                if known is not None:
                    return known
            if dependencies:
                self._check_dependencies(conn, dependencies)
                array_tasks = self._arrays_named(conn, dependencies)
                by_id_only = {place: d for place, d in dependencies.items() if not d.references}
                for place, whole in self._whole_arrays(by_id_only, array_tasks).items():
                    # Stored as judged: tasks by their job ids, afternotok on an array as A_* (its
                    # rows share this spec).
                    dependencies[place] = whole
                    specs[place]["dependency"] = str(whole)
            result = conn.execute(insert(J).returning(J.c.id, sort_by_parameter_order=True), rows)
            ids = [row[0] for row in result]
            # Each array's id is its first task's job id, known only now.
            first_task: dict[int, int] = {}
            for job_id, place, row in zip(ids, owners, rows, strict=True):
                if row["array_task_id"] is not None:
                    first_task.setdefault(place, job_id)
            if first_task:
                conn.execute(
                    update(J).where(J.c.id == bindparam("job_id")).values(array_job_id=bindparam("array_id")),
                    [
                        {"job_id": job_id, "array_id": first_task[place]}
                        for job_id, place, row in zip(ids, owners, rows, strict=True)
                        if row["array_task_id"] is not None
                    ],
                )
            if referring:
                self._resolve_references(conn, dependencies, referring, specs, ids, owners, rows, array_tasks)
            tags = [
                {"job_id": job_id, "tag": tag}
                for job_id, place in zip(ids, owners, strict=True)
                for tag in dict.fromkeys(requests[place].tags)  # (a tag given twice is one row)
            ]
            if tags:
                conn.execute(insert(schema.job_tags), tags)
            if dependencies:
                conn.execute(
                    insert(schema.job_dependencies),
                    [
                        {"job_id": job_id, "kind": kind.value, "depends_on": named}
                        for job_id, place in zip(ids, owners, strict=True)
                        if (dependency := dependencies.get(place)) is not None
                        for kind, named in _named_jobs(dependency, array_tasks)
                    ],
                )
            self._job_events(
                conn,
                now,
                "job.queued",
                (
                    (job_id, _summary(requests[place], first_task.get(place), row["array_task_id"]))
                    for job_id, place, row in zip(ids, owners, rows, strict=True)
                ),
            )
            held = ((job_id, HELD_AT_SUBMISSION) for job_id, row in zip(ids, rows, strict=True) if row["held"])
            self._job_events(conn, now, "job.held", held)
            if keyed is not None:
                conn.execute(insert(S).values(key=keyed.key, body_hash=keyed.body_hash, job_ids=ids, at=now))
        return ids

    @classmethod
    def _resolve_references(
        cls,
        conn: Connection,
        dependencies: dict[int, Dependency],
        referring: Sequence[int],
        specs: list[dict[str, Any]],
        ids: Sequence[int],
        owners: Sequence[int],
        rows: Sequence[Mapping[str, Any]],
        array_tasks: dict[int, dict[int, int]],
    ) -> None:
        """The dependencies of the requests at `referring` (by place), which name jobs of this
        submission (`@N`), made the job ids those jobs got, now that its rows are in, and stored
        so in their rows' specs, as a dependency written with those ids would have been: from here
        on no one sees a reference. The submission's own arrays are added to `array_tasks`, so
        that a condition on one is made per task and its rows written as for any array."""
        first_ids: dict[int, int] = {}  # each request's job id: an array's, its first task's
        for job_id, place, row in zip(ids, owners, rows, strict=True):
            first_ids.setdefault(place, job_id)
            if row["array_task_id"] is not None:
                array_tasks.setdefault(first_ids[place], {})[row["array_task_id"]] = job_id
        by_place = [first_ids[place] for place in range(len(first_ids))]
        resolved = {place: resolve(dependencies[place], by_place) for place in referring}
        # (InvalidJobs here, for an id-named array without the task named, undoes the rows.)
        resolved.update(cls._whole_arrays(resolved, array_tasks))
        for place, dependency in resolved.items():
            dependencies[place] = dependency
            specs[place]["dependency"] = str(dependency)
        conn.execute(
            update(J).where(J.c.id == bindparam("job_id")).values(spec=bindparam("resolved_spec")),
            [
                {"job_id": job_id, "resolved_spec": specs[place]}
                for job_id, place in zip(ids, owners, strict=True)
                if place in resolved
            ],
        )

    @staticmethod
    def _check_dependencies(conn: Connection, dependencies: Mapping[int, Dependency]) -> None:
        """Every job a dependency names exists (Slurm refuses a dependency on an unknown job too),
        an array named whole or by its tasks (`A_*`, `A_T`) by its id."""

        def named_by(dependency: Dependency) -> tuple[int, ...]:
            return tuple(dict.fromkeys([*dependency.job_ids(), *dependency.array_ids()]))

        named = sorted({job_id for dependency in dependencies.values() for job_id in named_by(dependency)})
        known: set[int] = set()
        for chunk in _chunks(named):
            known.update(row.id for row in conn.execute(select(J.c.id).where(J.c.id.in_(chunk))))
        problems = [
            f"jobs.{i}.dependency: no job {job_id}"
            for i, dependency in dependencies.items()
            for job_id in named_by(dependency)
            if job_id not in known
        ]
        if problems:
            raise InvalidJobs(problems)

    @staticmethod
    def _arrays_named(conn: Connection, dependencies: Mapping[int, Dependency]) -> dict[int, dict[int, int]]:
        """The job arrays the dependencies may name (by a job id that is an array's, `A_*` or
        `A_T`): array id -> {task id: the task's job id}, in task order."""
        named = sorted({job_id for d in dependencies.values() for job_id in (*d.job_ids(), *d.array_ids())})
        arrays: dict[int, dict[int, int]] = {}
        for chunk in _chunks(named):
            query = (
                select(J.c.array_job_id, J.c.array_task_id, J.c.id)
                .where(J.c.array_job_id.in_(chunk))
                .order_by(J.c.array_job_id, J.c.array_task_id)
            )
            for array_id, task_id, job_id in conn.execute(query):
                arrays.setdefault(array_id, {})[task_id] = job_id
        return arrays

    @staticmethod
    def _whole_arrays(
        dependencies: Mapping[int, Dependency], arrays: Mapping[int, Mapping[int, int]]
    ) -> dict[int, Dependency]:
        """The dependencies that name a job array (by its id, `A_*` or `A_T`) as they are stored
        and judged (corral.core.dependency.whole_arrays), by their place in the submission.
        InvalidJobs for one that names no such array or task, or cannot name an array (with '?')."""
        whole: dict[int, Dependency] = {}
        problems: list[str] = []
        for place, dependency in dependencies.items():
            try:
                expanded = whole_arrays(dependency, arrays)
            except ValueError as exc:
                problems.append(f"jobs.{place}.dependency: {exc}")
                continue
            if expanded is not dependency:
                whole[place] = expanded
        if problems:
            raise InvalidJobs(problems)
        return whole

    def dependency_rows(self, job_id: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The conditions of the job's dependency, with the state of the job each names, and the
        conditions of other jobs that name it, with their jobs' states: (depends on, needed by)."""
        D = schema.job_dependencies
        with self.read() as conn:
            depends_on = conn.execute(
                select(D.c.kind, D.c.depends_on.label("job_id"), J.c.state)
                .join(J, J.c.id == D.c.depends_on)
                .where(D.c.job_id == job_id)
                .order_by(D.c.depends_on, D.c.kind)
            ).all()
            needed_by = conn.execute(
                select(D.c.kind, D.c.job_id, J.c.state)
                .join(J, J.c.id == D.c.job_id)
                .where(D.c.depends_on == job_id)
                .order_by(D.c.job_id, D.c.kind)
            ).all()
        return [dict(r._mapping) for r in depends_on], [dict(r._mapping) for r in needed_by]

    def job_row(self, job_id: int) -> dict[str, Any]:
        """The job's row, and `executor_ref`: its latest attempt's executor id (the Slurm job id);
        `last_attempt_state` and `last_attempt_exit_code`: that attempt's (None: none)."""
        with self.read() as conn:
            row = conn.execute(select(J, _LATEST_REF, *_LATEST_END).where(J.c.id == job_id)).first()
        if row is None:
            raise NotFound(f"no job {job_id}")
        return dict(row._mapping)

    def task_job_id(self, array_job_id: int, task_id: int) -> int:
        """The job id of task `task_id` of job array `array_job_id` (Slurm's `12_3`); NotFound
        naming which of the two is not there."""
        with self.read() as conn:
            found = conn.execute(
                select(J.c.id).where(J.c.array_job_id == array_job_id, J.c.array_task_id == task_id)
            ).scalar()
            if found is None:
                is_array = conn.execute(select(J.c.id).where(J.c.array_job_id == array_job_id).limit(1)).scalar()
        if found is None:
            if is_array is None:
                raise NotFound(f"no job array {array_job_id} (an array's id is its first task's job id)")
            raise NotFound(f"job array {array_job_id} has no task {task_id}")
        return int(found)

    def list_job_rows(
        self,
        states: Iterable[str] | None = None,
        limit: int = 1000,
        picked: JobFilter | None = None,
        before: int | None = None,
    ) -> list[dict[str, Any]]:
        """Job rows as `job_row` gives them but for their explanation (None: a listing shows none),
        the newest `limit`, oldest first; only those in `states`, those `picked` picks and those
        with an id below `before` (the next page back), where given."""
        picked = picked or JobFilter()
        if states:
            picked = dataclasses.replace(picked, states=tuple(states))
        # The page's ids first, off an index where the filters have one: with the rows' columns
        # asked at once, a state's jobs were read whole (their latest attempt looked up for each)
        # and then sorted, 1.6-4.2 s for `corral jobs -t queued` at 100,000 queued jobs.
        page = select(J.c.id).where(*picked.clauses())
        if before is not None:
            page = page.where(J.c.id < before)
        page = page.order_by(J.c.id.desc()).limit(limit)
        # No explanation: a waiting job's is a few KB of JSON, decoded for nothing.
        query = (
            select(*_LISTED, null().label("explanation"), _LATEST_REF, *_LATEST_END)
            .where(J.c.id.in_(page.scalar_subquery()))
            .order_by(J.c.id.desc())
        )
        with self.read() as conn:
            rows = [dict(r._mapping) for r in conn.execute(query)]
        rows.reverse()
        return rows

    def attempts_of(self, job_id: int) -> list[dict[str, Any]]:
        with self.read() as conn:
            return [dict(r._mapping) for r in conn.execute(select(A).where(A.c.job_id == job_id).order_by(A.c.id))]

    def job(self, job_id: int) -> Job:
        return job_from_row(self.job_row(job_id))

    def request_cancel(self, job_id: int, now: float) -> dict[str, Any]:
        """Mark a job for cancellation; the next pass carries it out (and kills a running attempt).
        A finished job is left as it is, also one that finishes while this runs; `state` is the
        job's state as this transaction leaves it."""
        with self.write() as conn:
            return self._cancel_in(conn, job_id, now)

    def _cancel_in(self, conn: Connection, job_id: int, now: float, said: str = "cancel requested") -> dict[str, Any]:
        # The state check is in the UPDATE itself: a read beforehand would not stop a job that
        # finishes between the read and the write (PostgreSQL's READ COMMITTED re-checks only
        # the UPDATE's own WHERE against the row it waited for).
        result = conn.execute(
            update(J)
            .where(J.c.id == job_id, J.c.state.not_in(TERMINAL_JOB_STATES))
            .values(cancel_requested=True, cancelled_by=_canceller(), updated_at=now)
        )
        changed = result.rowcount == 1
        # Read after the write, so the state is true: this transaction now holds the row, or the
        # job has finished, and a finished job's state never changes again.
        state = conn.execute(select(J.c.state).where(J.c.id == job_id)).scalar()
        if state is None:
            raise NotFound(f"no job {job_id}")
        if changed:
            self._event(conn, now, "job.cancel_requested", said, job_id=job_id)
        return {"id": job_id, "state": state, "changed": changed}

    def request_requeue(self, job_id: int, now: float, hold: bool = False) -> dict[str, Any]:
        """Slurm's `scontrol requeue` (`hold`: and held, `scontrol requeuehold`). A claimed or running
        job is marked: the next pass stops its run and queues it again, counting no failure. A
        finished job (complete, failed, cancelled) is queued again here and now, as a job submitted
        now, with a fresh failure budget and its submitted priority: nothing runs to stop, and its
        attempts stay its record. `changed` is False for a queued job (nothing to requeue) and for
        one already marked."""
        with self.write() as conn:
            return self._requeue_in(conn, job_id, now, hold)

    def _requeue_in(self, conn: Connection, job_id: int, now: float, hold: bool, by: str = "") -> dict[str, Any]:
        # The state check is in the UPDATE itself, as in request_cancel.
        result = conn.execute(
            update(J)
            .where(
                J.c.id == job_id,
                J.c.state.in_((JobState.CLAIMED.value, JobState.RUNNING.value)),
                J.c.requeue_requested.is_(False),
            )
            .values(requeue_requested=True, requeue_hold=hold, updated_at=now)
        )
        row = conn.execute(select(J.c.state, J.c.exit_code, J.c.spec).where(J.c.id == job_id)).first()
        if row is None:
            raise NotFound(f"no job {job_id}")
        state = row.state
        changed = result.rowcount == 1
        if changed:
            said = "requeue and hold requested" if hold else "requeue requested"
            self._event(conn, now, "job.requeue_requested", said + by, job_id=job_id)
        elif JobState(state).terminal:
            changed = self._requeue_finished(conn, job_id, row, now, hold)
            if changed:
                state = JobState.QUEUED.value
        return {"id": job_id, "state": state, "changed": changed}

    def _requeue_finished(self, conn: Connection, job_id: int, row: Any, now: float, hold: bool) -> bool:
        why = retry.REQUEUED_HELD if hold else ""
        result = conn.execute(
            update(J)
            .where(J.c.id == job_id, J.c.state == row.state)  # (not run again meanwhile by another call)
            .values(
                state=JobState.QUEUED.value,
                # A job cancelled by priority 0 would be cancelled again at once.
                priority=row.spec.get("priority") or 1,
                submitted_at=now,
                exit_code=None,
                exit_signal=None,
                started_at=None,
                finished_at=None,
                node_id=None,
                claimed_by=None,
                retry_at=None,
                temp_failures=0,
                perm_failures=0,
                cancel_requested=False,
                cancelled_by=None,
                requeue_requested=False,
                requeue_hold=False,
                unplaceable=False,
                held=hold,
                wait_reason=why,
                updated_at=now,
            )
        )
        if result.rowcount == 0:
            return False
        ended = f"{row.state}, exit {row.exit_code}" if row.exit_code is not None else row.state
        self._event(conn, now, "job.requeued", f"queued again by an operator after it ended ({ended})", job_id=job_id)
        if hold:
            self._event(conn, now, "job.held", why, job_id=job_id)
        return True

    def request_cancel_matching(self, now: float, picked: JobFilter) -> list[int]:
        """Mark every open job `picked` picks for cancellation, as Slurm's `scancel
        --state/-u/-n` does: one transaction, an event per job. The ids marked, in order (a job
        already marked, or finished, is not among them). NotFound for an array id that is no
        array's (Slurm's scancel says "Invalid job id"): a slip, say a task's job id, that would
        otherwise read as an array with nothing left open."""
        with self.write() as conn:
            if (
                picked.array is not None
                and conn.execute(select(J.c.id).where(J.c.array_job_id == picked.array).limit(1)).first() is None
            ):
                raise NotFound(f"no job array {picked.array} (an array's id is its first task's job id)")
            ids = self._lock_jobs(
                conn,
                J.c.state.not_in(TERMINAL_JOB_STATES),
                J.c.cancel_requested.is_(False),
                *picked.clauses(),
            )
            for chunk in _chunks(ids):
                conn.execute(
                    update(J)
                    .where(J.c.id.in_(chunk))
                    .values(cancel_requested=True, cancelled_by=_canceller(), updated_at=now)
                )
            message = f"cancel requested ({picked.describe()})"
            self._job_events(conn, now, "job.cancel_requested", ((job_id, message) for job_id in ids))
        return ids

    # ---- signals (scancel --signal) -----------------------------------------------------------

    def request_signal(self, job_id: int, number: int, main_only: bool, now: float) -> dict[str, Any]:
        """Ask for signal `number` to be sent to the running job's command (its process group, or
        `main_only` its main process), once, by its agent or the Slurm pass; the job is not
        cancelled. NotRunning for a job whose command does not run."""
        with self.write() as conn:
            return self._signal_in(conn, job_id, number, main_only, now)

    def _signal_in(
        self, conn: Connection, job_id: int, number: int, main_only: bool, now: float, by: str = ""
    ) -> dict[str, Any]:
        state = conn.execute(select(J.c.state).where(J.c.id == job_id)).scalar()
        if state is None:
            raise NotFound(f"no job {job_id}")
        attempt_id = conn.execute(
            select(A.c.id).where(A.c.job_id == job_id, A.c.state == AttemptState.RUNNING.value).order_by(A.c.id.desc())
        ).scalar()
        if state != JobState.RUNNING.value or attempt_id is None:
            # (A job that runs in name only: its attempt is placed, its agent has not started it.)
            raise NotRunning(job_id, state if state != JobState.RUNNING.value else JobState.CLAIMED.value)
        requested_by = _canceller()
        conn.execute(
            insert(SR).values(
                attempt_id=attempt_id,
                job_id=job_id,
                number=number,
                main_only=main_only,
                requested_at=now,
                requested_by=requested_by,
            )
        )
        to = "its main process" if main_only else "its process group"
        said = f"{signal_text(number)} requested for attempt {attempt_id}, to {to}{by}"
        self._event(conn, now, "job.signal_requested", said, job_id=job_id)
        return {"id": job_id, "state": state, "changed": True, "attempt_id": attempt_id}

    def signal_array(self, array_job_id: int, number: int, main_only: bool, now: float) -> ArrayOutcome:
        """`request_signal` on each running task of the array (scancel --signal ARRAY_ID); the
        others are told of by state. NotRunning-like refusal (NotQueued's kind: 409) when none runs."""
        by = f" (array {array_job_id})"

        def one(conn: Connection, task_id: int, _outcome: ArrayOutcome) -> tuple[bool, str]:
            try:
                self._signal_in(conn, task_id, number, main_only, now, by)
            except NotRunning as exc:
                return False, exc.state
            return True, "signal requested"

        def refuse(outcome: ArrayOutcome) -> str | None:
            if outcome.changed:
                return None
            return f"job array {array_job_id} has no running task to signal ({outcome.said()})"

        return self._each_task(array_job_id, one, refuse)

    def request_signal_matching(
        self, now: float, picked: JobFilter, number: int, main_only: bool
    ) -> tuple[list[int], dict[str, list[int]]]:
        """`request_signal` on every open job `picked` picks (scancel --signal with -t/-u/-n), in
        one transaction: the ids signalled, and the others (not running) by state."""
        with self.write() as conn:
            if (
                picked.array is not None
                and conn.execute(select(J.c.id).where(J.c.array_job_id == picked.array).limit(1)).first() is None
            ):
                raise NotFound(f"no job array {picked.array} (an array's id is its first task's job id)")
            ids = self._lock_jobs(conn, J.c.state.in_(OPEN_JOB_STATES), *picked.clauses())
            signalled: list[int] = []
            not_running: dict[str, list[int]] = {}
            by = f" ({picked.describe()})"
            for job_id in ids:
                try:
                    self._signal_in(conn, job_id, number, main_only, now, by)
                except NotRunning as exc:
                    not_running.setdefault(exc.state, []).append(job_id)
                else:
                    signalled.append(job_id)
        return signalled, not_running

    def drop_ended_signals(self, now: float) -> None:
        """Drop the signals whose attempt ended before they were sent (its command gone, its node
        lost or silent: nothing will ever send them), each with a job.signal_dropped event. Each
        pass asks: a lost node's agent never pings again to be told."""
        query = (
            select(SR)
            .join(A, A.c.id == SR.c.attempt_id)
            .where(A.c.state != AttemptState.RUNNING.value)
            .order_by(SR.c.id)
        )
        with self.read() as conn:
            ended = [_signal_request(r) for r in conn.execute(query).all()]
        if ended:
            self.drop_signals(ended, "its attempt ended before it was sent", now)

    def signals_pending(self) -> list[tuple[SignalRequest, str, str | None, str | None]]:
        """Every signal not yet sent, with its attempt's state, executor ref (the Slurm job id) and
        dispatcher: what a Slurm pass sends with scancel --signal."""
        query = select(SR, A.c.state.label("attempt_state"), A.c.executor_ref, A.c.dispatcher_id).join(
            A, A.c.id == SR.c.attempt_id
        )
        with self.read() as conn:
            rows = conn.execute(query.order_by(SR.c.id)).all()
        return [(_signal_request(r), r.attempt_state, r.executor_ref, r.dispatcher_id) for r in rows]

    def signals_sent(self, sent: Mapping[int, str | None], now: float, node_id: str | None = None) -> None:
        """Requests (by id) that were sent, each to what it reached (None: it found no process to go
        to): each row goes, with a job.signalled event (or job.signal_dropped). `node_id`: only
        that node's attempts' (an agent acknowledges its own); an id no longer stored was done."""
        if not sent:
            return
        with self.write() as conn:
            query = select(SR).where(SR.c.id.in_(list(sent)))
            if node_id is not None:
                query = query.where(SR.c.attempt_id.in_(select(A.c.id).where(A.c.node_id == node_id)))
            rows = [_signal_request(r) for r in conn.execute(query.order_by(SR.c.id)).all()]
            conn.execute(delete(SR).where(SR.c.id.in_([r.id for r in rows])))
            for request in rows:
                to = sent[request.id]
                where = f" on node {node_id}" if node_id is not None else ""
                if to is None:
                    said = f"{request.said()} not sent: attempt {request.attempt_id}{where} had no process to get it"
                    self._event(conn, now, "job.signal_dropped", said, job_id=request.job_id, node_id=node_id)
                    continue
                said = f"{request.said()} sent to {to} of attempt {request.attempt_id}{where}"
                self._event(conn, now, "job.signalled", said, job_id=request.job_id, node_id=node_id)

    def drop_signals(self, requests: Sequence[SignalRequest], why: str, now: float) -> None:
        """Requests that will never be sent, each with a job.signal_dropped event saying `why`."""
        with self.write() as conn:
            for request in requests:
                if conn.execute(delete(SR).where(SR.c.id == request.id)).rowcount == 0:
                    continue  # (sent or dropped by another meanwhile)
                said = f"{request.said()} not sent to attempt {request.attempt_id}: {why}"
                self._event(conn, now, "job.signal_dropped", said, job_id=request.job_id)

    def set_priority(self, job_id: int, priority: int, now: float) -> bool:
        """False, changing nothing, for a finished job (whose priority means nothing any more:
        a 0 would read as a cancel that never happened)."""
        with self.write() as conn:
            return self._priority_in(conn, job_id, priority, now)

    def _priority_in(self, conn: Connection, job_id: int, priority: int, now: float, by: str = "") -> bool:
        # Priority 0 is a cancel, whose asker is recorded as a cancel request's; a priority raised
        # from 0 before the pass cancelled the job takes that back (unless a cancel was asked too).
        cancelled_by = (
            _canceller() if priority == 0 else case((J.c.cancel_requested.is_(True), J.c.cancelled_by), else_=None)
        )
        result = conn.execute(
            update(J)
            .where(J.c.id == job_id, J.c.state.not_in(TERMINAL_JOB_STATES))
            .values(priority=priority, cancelled_by=cancelled_by, updated_at=now)
        )
        if result.rowcount == 0:
            if conn.execute(select(J.c.id).where(J.c.id == job_id)).first() is None:
                raise NotFound(f"no job {job_id}")
            return False
        self._event(conn, now, "job.priority", f"priority set to {priority}{by}", job_id=job_id)
        return True

    def update_job(
        self,
        job_id: int,
        changes: Mapping[str, Any],
        now: float,
        time_limit_add: float | None = None,
        while_running: frozenset[str] = UPDATABLE_WHILE_RUNNING,
        take_back: bool = False,
        may_lengthen: bool = True,
    ) -> dict[str, Any]:
        """Change what a job asked for (Slurm's `scontrol update JobId=`): `changes` are JobRequest
        fields, `time_limit_add` seconds added to its time limit (TimeLimit=+). Its resources, nodes,
        requested start and admin reservation (whether that is in force is the caller's to check,
        as at submission) only while it is queued (a run keeps what it was placed with); the
        fields in `while_running` (its time limit, retries and name; in front of Slurm, which
        enforces a running job's time limit, not that) also while it is claimed or running. The new spec is validated
        whole, as at submission (InvalidJobs naming the field); `spec_rev` goes up, so every
        dispatcher builds the job again, and a queued job is judged afresh (not unplaceable). The
        event job.updated names each change; `changes` in the result, each field's old and new
        value. NotQueued for a change the job's state does not take. `take_back` (in front of
        Slurm, where a claimed job only waits in Slurm's queue, as a pending job a Slurm user would
        `scontrol update`): a claimed job takes every change too, and is marked as
        `request_requeue` marks it, so that the next pass scancels its Slurm job and queues it
        again, counting nothing, to be submitted with the new request. Without `may_lengthen` (a
        user's update, as Slurm lets only an operator raise a TimeLimit), a longer time limit, or
        none, is refused: LimitLengthened, and nothing changes."""
        unknown = sorted(set(changes) - UPDATABLE)
        if unknown:
            raise InvalidJobs([f"{name}: cannot be changed (only {', '.join(sorted(UPDATABLE))})" for name in unknown])
        with self.write() as conn:
            return self._update_in(
                conn, job_id, changes, now, time_limit_add, while_running, take_back, may_lengthen=may_lengthen
            )

    def _update_in(
        self,
        conn: Connection,
        job_id: int,
        changes: Mapping[str, Any],
        now: float,
        time_limit_add: float | None,
        while_running: frozenset[str],
        take_back: bool,
        by: str = "",
        may_lengthen: bool = True,
    ) -> dict[str, Any]:
        row = conn.execute(select(J.c.state, J.c.spec, J.c.spec_rev).where(J.c.id == job_id)).first()
        if row is None:
            raise NotFound(f"no job {job_id}")
        state = JobState(row.state)
        if state.terminal:
            raise NotQueued(f"job {job_id} is {state.value}: a finished job cannot change (submit it again)")
        wanted = dict(changes)
        if time_limit_add is not None:
            limit = row.spec.get("time_limit")
            if not limit:  # (0 is no limit, as Slurm's --time=0)
                raise InvalidJobs([f"time_limit: job {job_id} has no time limit to add to (set one)"])
            wanted["time_limit"] = limit + time_limit_add
        if not may_lengthen and "time_limit" in wanted:
            # 0 and none are no limit, as Slurm's --time=0 and UNLIMITED.
            old, new = row.spec.get("time_limit") or math.inf, wanted["time_limit"] or math.inf
            if new > old:
                said = " to ".join("no limit" if limit == math.inf else f"{limit:g} s" for limit in (old, new))
                raise LimitLengthened(f"job {job_id}: only an admin lengthens a job's time limit ({said})")
        queued_only = sorted(set(wanted) - while_running)
        resubmit = bool(queued_only) and take_back and state is JobState.CLAIMED
        if queued_only and state is not JobState.QUEUED and not resubmit:
            raise NotQueued(
                f"job {job_id} is {state.value}: {', '.join(queued_only)} change only while it is queued"
                f" (its {', '.join(sorted(while_running))} also while it runs)"
            )
        try:
            request = JobRequest.stored({**row.spec, **wanted})
            if "name" in wanted:
                # What the job had is read as stored; a new name is checked as at submission.
                JobRequest.model_validate({"command": request.command, "name": request.name})
        except ValidationError as exc:
            raise InvalidJobs(describe_validation_errors(exc.errors())) from None
        spec = request.model_dump(mode="json")
        changed = {key: (row.spec.get(key), spec[key]) for key in wanted if row.spec.get(key) != spec[key]}
        if changed:
            values: dict[str, Any] = {"spec": spec, "name": request.name, "spec_rev": row.spec_rev + 1}
            if state is JobState.QUEUED:
                values.update(unplaceable=False)
            if resubmit:
                values.update(requeue_requested=True)
            # The state and revision read are in the UPDATE itself: a job claimed meanwhile
            # does not take a change of what it was placed with.
            result = conn.execute(
                update(J)
                .where(J.c.id == job_id, J.c.state == row.state, J.c.spec_rev == row.spec_rev)
                .values(**values, updated_at=now)
            )
            if result.rowcount == 0:
                raise NotQueued(f"job {job_id} changed meanwhile (claimed, started or updated): try again")
            said = "; ".join(f"{key} {_shown(old)} -> {_shown(new)}" for key, (old, new) in changed.items())
            if resubmit:
                said += " (it waited in Slurm: the next pass takes it back and submits it again)"
            self._event(conn, now, "job.updated", said + by, job_id=job_id)
        return {
            "id": job_id,
            "state": state.value,
            "changes": {key: list(pair) for key, pair in changed.items()},
            "taken_back": resubmit and bool(changed),
        }

    def set_array_throttle(self, array_job_id: int, throttle: int, now: float) -> dict[str, Any]:
        """Change a job array's throttle (Slurm's `scontrol update JobId=A ArrayTaskThrottle=N`; 0:
        no limit) on all its tasks, with an event on the array's id. Tasks already running go on
        running under a lower throttle; the next pass starts no more than it allows. NotFound for
        an id that is no array's. `open`: its tasks not finished yet."""
        with self.write() as conn:
            task_ids = self._lock_jobs(conn, J.c.array_job_id == array_job_id)
            if not task_ids:
                raise NotFound(f"no job array {array_job_id} (an array's id is its first task's job id)")
            for chunk in _chunks(task_ids):
                conn.execute(update(J).where(J.c.id.in_(chunk)).values(array_throttle=throttle or None, updated_at=now))
            open_tasks = conn.execute(
                select(func.count()).where(J.c.array_job_id == array_job_id, J.c.state.in_(OPEN_JOB_STATES))
            ).scalar_one()
            said = f"array throttle set to {throttle}" if throttle else "array throttle removed (no limit)"
            self._event(conn, now, "job.array_throttle", f"{said}, {len(task_ids)} tasks", job_id=array_job_id)
        tasks = len(task_ids)
        return {"array_job_id": array_job_id, "throttle": throttle or None, "tasks": tasks, "open": open_tasks}

    def hold(self, job_id: int, now: float, reason: str = "", take_back: bool = False) -> dict[str, Any]:
        """Hold a queued job (Slurm's `scontrol hold`): it stays queued, and no pass places it or
        boots for it until `release`. `changed` is False for a job already held; NotQueued for a
        job that is not queued (claimed or running: cancel it, or hold it once it is requeued).
        `take_back` (in front of Slurm, where a claimed job waits in Slurm's queue, for hours maybe,
        as a pending Slurm job a Slurm user would `scontrol hold`): a claimed job is marked as
        `request_requeue(hold=True)` marks it, and the next pass scancels its Slurm job and queues
        it held, counting nothing (`taken_back` in the result)."""
        with self.write() as conn:
            return self._hold_in(conn, job_id, now, reason, take_back)

    def _hold_in(
        self, conn: Connection, job_id: int, now: float, reason: str, take_back: bool, by: str = ""
    ) -> dict[str, Any]:
        why = f"held by an operator: {reason}" if reason else "held by an operator"
        if take_back:
            taken = conn.execute(
                update(J)
                .where(J.c.id == job_id, J.c.state == JobState.CLAIMED.value, J.c.requeue_requested.is_(False))
                .values(requeue_requested=True, requeue_hold=True, updated_at=now)
            )
            if taken.rowcount == 1:
                said = "hold requested while it waits in Slurm: the next pass takes it back (scancel) and holds it"
                self._event(conn, now, "job.requeue_requested", said + by, job_id=job_id)
                claimed = JobState.CLAIMED.value
                return {"id": job_id, "state": claimed, "held": False, "changed": True, "taken_back": True}
        # The state check is in the UPDATE itself, as in request_cancel.
        result = conn.execute(
            update(J)
            .where(J.c.id == job_id, J.c.state == JobState.QUEUED.value, J.c.held.is_(False))
            # A user's own hold says so in its wait reason, as in its event (Slurm's JobHeldUser).
            .values(held=True, wait_reason=_by_acting_user(why), unplaceable=False, updated_at=now)
        )
        row = conn.execute(
            select(J.c.state, J.c.held, J.c.requeue_hold, J.c.array_job_id, J.c.array_task_id).where(J.c.id == job_id)
        ).first()
        if row is None:
            raise NotFound(f"no job {job_id}")
        changed = result.rowcount == 1
        if changed:
            self._event(conn, now, "job.held", why + by, job_id=job_id)
        elif take_back and row.state == JobState.CLAIMED.value and row.requeue_hold:
            # Asked twice before the pass took it back: nothing more to do.
            return {"id": job_id, "state": row.state, "held": False, "changed": False, "taken_back": True}
        elif row.state != JobState.QUEUED.value:
            also = " or claimed" if take_back else ""
            # An array's first task has the array's id, which `corral requeue` takes for every task.
            this_one = f"{job_id}_{row.array_task_id}" if row.array_job_id == job_id else str(job_id)
            raise NotQueued(
                f"job {job_id} is {row.state}: only a queued{also} job can be held"
                f" (corral requeue --hold {this_one} stops its run and holds it)"
            )
        return {"id": job_id, "state": row.state, "held": True, "changed": changed}

    def release(self, job_id: int, now: float) -> dict[str, Any]:
        """Release a held job (Slurm's `scontrol release`): the next pass places it, or boots for
        it, as any queued job. `changed` is False for a job that is not held."""
        with self.write() as conn:
            return self._release_in(conn, job_id, now)

    def _release_in(self, conn: Connection, job_id: int, now: float, by: str = "") -> dict[str, Any]:
        result = conn.execute(
            update(J).where(J.c.id == job_id, J.c.held.is_(True)).values(held=False, wait_reason="", updated_at=now)
        )
        row = conn.execute(select(J.c.state).where(J.c.id == job_id)).first()
        if row is None:
            raise NotFound(f"no job {job_id}")
        changed = result.rowcount == 1
        if changed:
            self._event(conn, now, "job.released", "released by an operator" + by, job_id=job_id)
        return {"id": job_id, "state": row.state, "held": False, "changed": changed}

    # ---- a job array as a whole ------------------------------------------------------------------
    # Slurm's scontrol hold/release/requeue/update and scancel given an array's id act on each of
    # its tasks in a state the command applies to, and tell of the others. Here each does so in one
    # transaction, with the tasks' rows locked in id order: a change refused for one task (a bad
    # value) leaves every task as it was, and no pass claims a task halfway through.

    def _each_task(
        self,
        array_job_id: int,
        one: Callable[[Connection, int, ArrayOutcome], tuple[bool, str]],
        refuse: Callable[[ArrayOutcome], str | None] = lambda _outcome: None,
    ) -> ArrayOutcome:
        """`one(conn, task's job id, outcome)` on every task of the array: (changed, what was done
        or why not). `refuse(outcome)`: a reason to change nothing at all (NotQueued), as the
        command refuses a single job in no state it applies to."""
        with self.write() as conn:
            task_ids = self._lock_jobs(conn, J.c.array_job_id == array_job_id)
            if not task_ids:
                raise NotFound(f"no job array {array_job_id} (an array's id is its first task's job id)")
            outcome = ArrayOutcome(array_job_id, len(task_ids))
            for task_id in task_ids:
                changed, said = one(conn, task_id, outcome)
                (outcome.changed if changed else outcome.unchanged).setdefault(said, []).append(task_id)
            refused = refuse(outcome)
            if refused:
                raise NotQueued(refused)
        return outcome

    def is_array(self, job_id: int) -> bool:
        """Whether `job_id` is a job array's id (its first task's job id), which a Slurm user gives
        to act on every task."""
        with self.read() as conn:
            return conn.execute(select(J.c.id).where(J.c.array_job_id == job_id).limit(1)).first() is not None

    def hold_array(self, array_job_id: int, now: float, reason: str = "", take_back: bool = False) -> ArrayOutcome:
        """`hold` on each queued task of the array (and, with `take_back`, each claimed one); the
        others are told of by state. NotQueued when no task is queued (nor held already)."""
        by = f" (array {array_job_id})"

        def one(conn: Connection, task_id: int, _outcome: ArrayOutcome) -> tuple[bool, str]:
            try:
                result = self._hold_in(conn, task_id, now, reason, take_back, by)
            except NotQueued:
                return False, f"already {conn.execute(select(J.c.state).where(J.c.id == task_id)).scalar()}"
            changed = bool(result["changed"])
            if result.get("taken_back"):
                return changed, "taken back from Slurm to be held" if changed else "hold already requested"
            return changed, "held" if changed else "already held"

        def refuse(outcome: ArrayOutcome) -> str | None:
            if outcome.changed or {"already held", "hold already requested"} & set(outcome.unchanged):
                return None
            also = " or claimed" if take_back else ""
            return (
                f"job array {array_job_id} has no queued{also} task to hold ({outcome.said()}): only a queued"
                f" job can be held (corral requeue --hold {array_job_id}_TASK stops a task's run and holds it)"
            )

        return self._each_task(array_job_id, one, refuse)

    def release_array(self, array_job_id: int, now: float) -> ArrayOutcome:
        """`release` on each held task of the array."""
        by = f" (array {array_job_id})"

        def one(conn: Connection, task_id: int, _outcome: ArrayOutcome) -> tuple[bool, str]:
            changed = self._release_in(conn, task_id, now, by)["changed"]
            return changed, "released" if changed else "not held"

        return self._each_task(array_job_id, one)

    def cancel_array(self, array_job_id: int, now: float) -> ArrayOutcome:
        """`request_cancel` on each open task of the array (Slurm's `scancel 12`)."""
        said = f"cancel requested (array {array_job_id})"

        def one(conn: Connection, task_id: int, _outcome: ArrayOutcome) -> tuple[bool, str]:
            row = conn.execute(select(J.c.state, J.c.cancel_requested).where(J.c.id == task_id)).one()
            if JobState(row.state).terminal:
                return False, f"already {row.state}"
            if row.cancel_requested:
                return False, "cancel already requested"
            return self._cancel_in(conn, task_id, now, said)["changed"], "cancel requested"

        return self._each_task(array_job_id, one)

    def requeue_array(self, array_job_id: int, now: float, hold: bool = False) -> ArrayOutcome:
        """`request_requeue` on each task of the array (Slurm's `scontrol requeue 12`): a claimed or
        running task is stopped and queued again, a finished one queued again at once; a queued
        one has nothing to requeue."""
        by = f" (array {array_job_id})"

        def one(conn: Connection, task_id: int, _outcome: ArrayOutcome) -> tuple[bool, str]:
            before = conn.execute(select(J.c.state).where(J.c.id == task_id)).scalar()
            result = self._requeue_in(conn, task_id, now, hold, by)
            if result["changed"]:
                return True, "queued again" if result["state"] == JobState.QUEUED.value else "requeue requested"
            if before in (JobState.CLAIMED.value, JobState.RUNNING.value):
                return False, "requeue already requested"
            return False, f"{before}: nothing to requeue"

        return self._each_task(array_job_id, one)

    def set_array_priority(self, array_job_id: int, priority: int, now: float) -> ArrayOutcome:
        """`set_priority` on each task of the array not finished (0: they are cancelled)."""
        by = f" (array {array_job_id})"

        def one(conn: Connection, task_id: int, _outcome: ArrayOutcome) -> tuple[bool, str]:
            if self._priority_in(conn, task_id, priority, now, by):
                return True, f"priority {priority}"
            return False, f"already {conn.execute(select(J.c.state).where(J.c.id == task_id)).scalar()}"

        return self._each_task(array_job_id, one)

    def update_array(
        self,
        array_job_id: int,
        changes: Mapping[str, Any],
        now: float,
        time_limit_add: float | None = None,
        while_running: frozenset[str] = UPDATABLE_WHILE_RUNNING,
        take_back: bool = False,
        may_lengthen: bool = True,
    ) -> ArrayOutcome:
        """`update_job` on each task of the array (Slurm's `scontrol update JobId=12`): a task whose
        state does not take the change is told of; a value no task can take (InvalidJobs) changes
        none, and so does a time limit one task may not lengthen to (LimitLengthened). NotQueued
        when no task takes it nor has it already."""
        unknown = sorted(set(changes) - UPDATABLE)
        if unknown:
            raise InvalidJobs([f"{name}: cannot be changed (only {', '.join(sorted(UPDATABLE))})" for name in unknown])
        wanted = set(changes) | ({"time_limit"} if time_limit_add is not None else set())
        queued_only = sorted(wanted - while_running)
        by = f" (array {array_job_id})"

        def one(conn: Connection, task_id: int, outcome: ArrayOutcome) -> tuple[bool, str]:
            try:
                result = self._update_in(
                    conn, task_id, changes, now, time_limit_add, while_running, take_back, by, may_lengthen
                )
            except NotQueued:
                state = conn.execute(select(J.c.state).where(J.c.id == task_id)).scalar_one()
                if JobState(state).terminal:
                    return False, f"already {state}"
                return False, f"{state} ({', '.join(queued_only)} change only while it is queued)"
            if not result["changes"]:
                return False, "had those already"
            outcome.changes[task_id] = result["changes"]
            return True, "taken back from Slurm to be submitted again" if result["taken_back"] else "updated"

        def refuse(outcome: ArrayOutcome) -> str | None:
            if outcome.changed or "had those already" in outcome.unchanged:
                return None
            return f"job array {array_job_id}: no task can take this change ({outcome.said()})"

        return self._each_task(array_job_id, one, refuse)

    def annotate_many(self, notes: Sequence[Annotation], explanations: dict[int, dict[str, Any]], now: float) -> None:
        """Record why queued jobs wait, in one transaction: the first pass over a long queue
        annotates every job, and one transaction per job would stall the loop for seconds."""
        if not notes:
            return
        with self.write() as conn:
            # The jobs still queued are locked first, in id order (the notes come in queue order);
            # not a job claimed or held since the pass read it (a held one's reason says it is held).
            # By their ids: on `state` (`|| ''` keeps SQLite off its index), SQLite read each chunk
            # of ids off the state index, every queued job's entry each time: 3.6 s of the first
            # pass over 100,000 queued jobs (18 ms a chunk; by the ids, under 1 ms).
            queued = and_(J.c.state.concat("") == JobState.QUEUED.value, J.c.held.is_(False))
            was_unplaceable: dict[int, bool] = {}
            for chunk in _chunks(sorted({n.job_id for n in notes})):
                query = _locking(select(J.c.id, J.c.unplaceable).where(J.c.id.in_(chunk), queued))
                was_unplaceable.update((row.id, bool(row.unplaceable)) for row in conn.execute(query))
            notes = [n for n in notes if n.job_id in was_unplaceable]
            newly_unplaceable = {n.job_id for n in notes if n.unplaceable and not was_unplaceable[n.job_id]}
            groups: dict[tuple[str, bool], list[int]] = {}
            explained = []
            for note in notes:
                if note.job_id in explanations:
                    explained.append(note)
                else:
                    groups.setdefault((note.wait_reason, note.unplaceable), []).append(note.job_id)
            for (reason, unplaceable), ids in groups.items():
                for chunk in _chunks(ids):
                    conn.execute(
                        update(J)
                        .where(J.c.id.in_(chunk))
                        .values(wait_reason=reason, unplaceable=unplaceable, updated_at=now)
                    )
            if explained:
                # One statement run for every row: a statement built and compiled for each job was
                # 100 s of the first pass over 100,000 queued jobs on SQLite (bench/live_pass.py).
                # Each explanation as JSON text, the parts it shares with others (the same misfit's
                # filters, samples and figures, one object per demand) encoded once: json.dumps of
                # each whole was 4 s of the first pass over 100,000 queued jobs, 2 KB each
                # (bench/live_pass.py).
                text_of = _ExplanationText(now)
                conn.execute(
                    update(J)
                    .where(J.c.id == bindparam("job_id"))
                    .values(
                        wait_reason=bindparam("reason"),
                        unplaceable=bindparam("is_unplaceable"),
                        explanation=_json_text(conn, "dated"),
                        updated_at=now,
                    ),
                    [
                        {
                            "job_id": note.job_id,
                            "reason": note.wait_reason,
                            "is_unplaceable": note.unplaceable,
                            "dated": text_of(explanations[note.job_id]),
                        }
                        for note in explained
                    ],
                )
            reasons = {n.job_id: n.wait_reason for n in notes}
            self._job_events(
                conn, now, "job.unplaceable", ((job_id, reasons[job_id]) for job_id in sorted(newly_unplaceable))
            )

    def refresh_explanations(self, explanations: Mapping[int, dict[str, Any]], now: float) -> None:
        """Replace the stored explanations of queued jobs whose reason line did not change but
        whose explanation did (the fleet moved under them), in one transaction."""
        if not explanations:
            return
        # One row at a time, in id order (the lock order of a write of many jobs).
        rows = [{"job_id": job_id, "dated": _dated(e, now)} for job_id, e in sorted(explanations.items())]
        with self.write() as conn:
            conn.execute(
                update(J)
                .where(J.c.id == bindparam("job_id"), J.c.state == JobState.QUEUED.value, J.c.held.is_(False))
                .values(explanation=bindparam("dated")),
                rows,
            )

    # ---- the claim ----------------------------------------------------------------------------

    def claim(
        self, job_id: int, dispatcher_id: str, node_ids: Sequence[str], resources: Resources, now: float
    ) -> int | None:
        """Atomically take a queued job and create its attempt on `node_ids`.

        One conditional UPDATE: of two dispatchers racing for the same job, exactly one sees a row
        changed. Returns the attempt id, or None when the job was no longer queued (or was held
        since the pass that placed it read it)."""
        with self.write() as conn:
            return self._claim(conn, job_id, dispatcher_id, node_ids, resources, now)

    def claim_many(
        self,
        claims: Sequence[tuple[int, Sequence[str], Resources]],
        dispatcher_id: str,
        now: float,
        explanations: Mapping[int, dict[str, Any]],
    ) -> dict[int, int]:
        """`claim` of each (job id, node ids, resources), with the job's explanation when it has one
        in `explanations`, CLAIMS_PER_TRANSACTION to a transaction, in job id order (the lock order
        of a write of many jobs): the attempt ids of the jobs claimed. A pass's placements, which a
        transaction each (two with an explanation) made 40 ms a placement on SQLite
        (bench/live_pass.py)."""
        claimed: dict[int, int] = {}
        ordered = sorted(claims, key=lambda claim: claim[0])
        for start in range(0, len(ordered), CLAIMS_PER_TRANSACTION):
            with self.write() as conn:
                for job_id, node_ids, resources in ordered[start : start + CLAIMS_PER_TRANSACTION]:
                    attempt_id = self._claim(conn, job_id, dispatcher_id, node_ids, resources, now)
                    if attempt_id is None:
                        continue
                    claimed[job_id] = attempt_id
                    if job_id in explanations:
                        explanation = _dated(explanations[job_id], now)
                        conn.execute(update(J).where(J.c.id == job_id).values(explanation=explanation))
        return claimed

    def _claim(
        self,
        conn: Connection,
        job_id: int,
        dispatcher_id: str,
        node_ids: Sequence[str],
        resources: Resources,
        now: float,
    ) -> int | None:
        result = conn.execute(
            update(J)
            .where(
                J.c.id == job_id,
                J.c.state == JobState.QUEUED.value,
                J.c.cancel_requested.is_(False),
                J.c.held.is_(False),
            )
            .values(
                state=JobState.CLAIMED.value,
                claimed_by=dispatcher_id,
                attempt_count=J.c.attempt_count + 1,
                node_id=node_ids[0],
                wait_reason="",
                updated_at=now,
            )
        )
        if result.rowcount != 1:
            return None
        attempt_id = conn.execute(
            insert(A)
            .values(
                job_id=job_id,
                node_id=node_ids[0],
                node_ids=list(node_ids),
                vcpus=resources.vcpus,
                ram_mib=resources.ram_mib,
                scratch_mib=resources.scratch_mib,
                gpus=resources.gpus,
                state=AttemptState.ASSIGNED.value,
                dispatcher_id=dispatcher_id,
                assigned_at=now,
                reason="",
            )
            .returning(A.c.id)
        ).scalar_one()
        self._event(conn, now, "job.claimed", f"attempt {attempt_id} on {', '.join(node_ids)}", job_id, node_ids[0])
        return int(attempt_id)

    def apply_outcome(self, outcome: JobOutcome, now: float) -> bool:
        """Carry out a core JobOutcome: end its attempts and move the job. False if the job had
        already moved on (e.g. finished meanwhile): the outcome is then dropped, nothing lost."""
        with self.write() as conn:
            return self._apply_outcome(conn, outcome, now)

    def apply_outcomes(
        self, outcomes: Sequence[JobOutcome], now: float, times: Mapping[int, float] | None = None
    ) -> None:
        """Carry out a pass's JobOutcomes, each as `apply_outcome` does (one the job has moved on
        from is dropped), OUTCOMES_PER_TRANSACTION to a transaction, in job id order: the lock order
        of a write of many jobs (the module's docstring), which also records a job's end before
        those of the jobs whose dependency names it (they were submitted after it). `times`: a job's
        own time of its end, where not `now`."""
        ordered = sorted(outcomes, key=lambda outcome: outcome.job_id)
        for start in range(0, len(ordered), OUTCOMES_PER_TRANSACTION):
            with self.write() as conn:
                for outcome in ordered[start : start + OUTCOMES_PER_TRANSACTION]:
                    self._apply_outcome(conn, outcome, (times or {}).get(outcome.job_id, now))

    def _apply_outcome(self, conn: Connection, outcome: JobOutcome, now: float) -> bool:
        attempt_state = {
            JobState.QUEUED: AttemptState.TEMPFAIL if outcome.temp_failure else AttemptState.EXITED,
            JobState.FAILED: AttemptState.TEMPFAIL if outcome.temp_failure else AttemptState.EXITED,
            # A job the node-failure policy cancels lost its attempt with the node.
            JobState.CANCELLED: AttemptState.TEMPFAIL if outcome.temp_failure else AttemptState.CANCELLED,
            JobState.COMPLETE: AttemptState.EXITED,
        }[outcome.state]
        if outcome.timeout:
            attempt_state = AttemptState.TIMEOUT
        elif outcome.requeued:
            attempt_state = AttemptState.CANCELLED  # stopped by request
        elif outcome.preempted:
            attempt_state = AttemptState.PREEMPTED
        row = conn.execute(select(J.c.state).where(J.c.id == outcome.job_id).with_for_update()).first()
        if row is None:
            return False
        old = JobState(row.state)
        if old.terminal or (old is JobState.QUEUED and outcome.state is JobState.QUEUED):
            return False
        if old is not JobState.QUEUED:
            # The outcome is about the attempts its pass saw. A run the job started since (another
            # dispatcher released the claim and claimed the job again while this pass was planned)
            # is not this outcome's to end: the job would be requeued under a live attempt and run twice.
            newer = select(A.c.id).where(A.c.job_id == outcome.job_id, A.c.state.in_(ACTIVE_ATTEMPT_STATES))
            if outcome.attempt_ids:
                newer = newer.where(A.c.id.not_in(outcome.attempt_ids))
            if conn.execute(newer.limit(1)).first() is not None:
                return False
        check_job_transition(old, outcome.state)
        values: dict[str, Any] = {
            "state": outcome.state.value,
            "updated_at": now,
            "wait_reason": "",
            "held": bool(outcome.hold),
            "requeue_requested": False,  # done, or moot: the run it was for has ended
            "requeue_hold": False,
        }
        if outcome.temp_failure:
            values["temp_failures"] = J.c.temp_failures + 1
        if outcome.perm_failure:
            values["perm_failures"] = J.c.perm_failures + 1
        if outcome.exit_code is not None:
            # The signal with the code it goes with: a later run's plain exit clears an earlier kill.
            values["exit_code"] = outcome.exit_code
            values["exit_signal"] = outcome.exit_signal
        if outcome.state.terminal and outcome.state is not JobState.CANCELLED:
            # A cancel asked of a job that ended otherwise first (it completed, failed) cancelled nothing.
            values["cancelled_by"] = None
        if outcome.state is JobState.QUEUED:
            # Back in the queue: no node, no run under way (the last attempt keeps its own).
            values.update(
                claimed_by=None,
                retry_at=outcome.retry_at,
                wait_reason=outcome.hold or outcome.reason,
                node_id=None,
                started_at=None,
            )
        else:
            # Why it ended stays on the job, as Slurm's Reason does (DependencyNeverSatisfied, a
            # TIMEOUT, "exit 1"): a job that never ran has no attempt to say it.
            values.update(finished_at=now, wait_reason=outcome.reason, unplaceable=False)
        moved = conn.execute(update(J).where(J.c.id == outcome.job_id, J.c.state == old.value).values(**values))
        if moved.rowcount != 1:
            return False
        if outcome.attempt_ids:
            conn.execute(
                update(A)
                .where(A.c.id.in_(outcome.attempt_ids), A.c.state.in_(ACTIVE_ATTEMPT_STATES))
                .values(state=attempt_state.value, finished_at=now, reason=outcome.reason)
            )
        kind = "job.requeued" if outcome.state is JobState.QUEUED else f"job.{outcome.state.value}"
        if outcome.timeout:
            kind = "job.timeout"  # failed, as a Slurm user looks for it (TIMEOUT)
        # The node it ran on (or lost), as job.claimed and job.running name it: `corral events
        # --node N` lists what N's failure did to its jobs, and a notification says where a job failed.
        node_id = outcome.node_id
        if node_id is None and outcome.attempt_ids:
            node_id = conn.execute(
                select(A.c.node_id).where(A.c.id.in_(outcome.attempt_ids)).order_by(A.c.id.desc()).limit(1)
            ).scalar()
        self._event(conn, now, kind, outcome.reason, outcome.job_id, node_id)
        if outcome.hold:
            self._event(conn, now, "job.held", outcome.hold, outcome.job_id, node_id)
        return True

    # ---- attempts as the agent reports them --------------------------------------------------

    def work_for(self, node_id: str) -> list[WorkItem]:
        query = (
            select(A, J.c.spec, J.c.array_job_id, J.c.array_task_id)
            .join(J, J.c.id == A.c.job_id)
            .where(A.c.node_id == node_id, A.c.state == AttemptState.ASSIGNED.value)
            .order_by(A.c.id)
        )
        with self.read() as conn:
            rows = conn.execute(query).all()
        items = []
        for row in rows:
            spec = row.spec
            env = dict(spec.get("env") or {})
            if row.array_task_id is not None and spec.get("array"):
                env.update(job_array.stored_environment(spec["array"], row.array_job_id, row.array_task_id))
            items.append(
                WorkItem(
                    attempt_id=row.id,
                    job_id=row.job_id,
                    command=list(spec["command"]),
                    env=env,
                    node_ids=list(row.node_ids),
                    resources=Resources(row.vcpus, row.ram_mib, row.scratch_mib, row.gpus),
                    image=spec.get("image"),
                    time_limit=spec.get("time_limit"),
                    chdir=spec.get("chdir"),
                    separate_stderr=bool(spec.get("separate_stderr")),
                    script=spec.get("script"),
                    signal=spec.get("signal"),
                )
            )
        return items

    def job_script(self, job_id: int) -> str | None:
        """A job's batch script (its text), None for a job without one (or none of that id): read
        where it is run, as no snapshot's job holds it (Job.batch_script)."""
        with self.read() as conn:
            spec = conn.execute(select(J.c.spec).where(J.c.id == job_id)).scalar()
        script = spec.get("script") if isinstance(spec, dict) else None
        return script if isinstance(script, str) else None

    def end_unstartable(
        self, attempt_id: int, node_id: str, now: float, outcome_of: Callable[[Job], JobOutcome]
    ) -> bool:
        """An attempt placed on `node_id` that its agent cannot run as the job asks (an agent too
        old for a field of the job's) ends before it is given out, as `outcome_of` says, in one
        transaction. False if it is no longer waiting to be given out (it ended meanwhile)."""
        with self.write() as conn:
            attempt = self._lock_attempt(conn, attempt_id, node_id)
            if attempt is None or attempt.state != AttemptState.ASSIGNED.value:
                return False
            row = conn.execute(select(J).where(J.c.id == attempt.job_id)).one()
            return self._apply_outcome(conn, outcome_of(job_from_row(dict(row._mapping))), now)

    @staticmethod
    def _lock_attempt(conn: Connection, attempt_id: int, node_id: str) -> Row[Any] | None:
        """The attempt's row, read after locking its job (the lock order: job, then attempts), so
        that it is current and stays so until the transaction ends. None if there is no such attempt."""
        job_id = conn.execute(select(A.c.job_id).where(A.c.id == attempt_id, A.c.node_id == node_id)).scalar()
        if job_id is None:
            return None
        conn.execute(select(J.c.id).where(J.c.id == job_id).with_for_update())
        return conn.execute(select(A).where(A.c.id == attempt_id, A.c.node_id == node_id)).first()

    def attempt_started(
        self,
        attempt_id: int,
        node_id: str,
        pid: int | None,
        now: float,
        *,
        ran_on: str | None = None,
        message: str | None = None,
    ) -> bool:
        """The agent (or an executor: Slurm, with no pid) started the attempt, at `now` (an
        executor gives the time it reports, which may precede the call: Slurm's StartTime). False
        if it is no longer wanted (then the agent kills it). `ran_on`: where the job shows as
        running, when that is not `node_id` (Slurm's node list)."""
        with self.write() as conn:
            attempt = self._lock_attempt(conn, attempt_id, node_id)
            if attempt is None or attempt.state not in ACTIVE_ATTEMPT_STATES:
                return False
            if attempt.state == AttemptState.RUNNING.value:
                return True
            now = max(now, attempt.assigned_at)  # (a clock behind the server's: not before it was placed)
            job_values: dict[str, Any] = {"state": JobState.RUNNING.value, "started_at": now, "updated_at": now}
            if ran_on is not None:
                job_values.update(node_id=ran_on[:64], wait_reason="")
            job = conn.execute(
                update(J).where(J.c.id == attempt.job_id, J.c.state == JobState.CLAIMED.value).values(**job_values)
            )
            if job.rowcount != 1:
                return False
            conn.execute(
                update(A).where(A.c.id == attempt_id).values(state=AttemptState.RUNNING.value, started_at=now, pid=pid)
            )
            said = message or f"attempt {attempt_id} pid {pid}"
            self._event(conn, now, "job.running", said, attempt.job_id, None if ran_on is not None else node_id)
        return True

    def attempt_row(self, attempt_id: int) -> dict[str, Any] | None:
        with self.read() as conn:
            row = conn.execute(select(A).where(A.c.id == attempt_id)).first()
        return dict(row._mapping) if row else None

    def record_late_usage(self, attempt_id: int, used: AttemptUsage) -> bool:
        """What an attempt corral had ended (a cancel, a requeue) used until it was killed, as its
        node measured it once the kill ended the command: recorded once, on an ended attempt
        measured by nothing before. False if it was not recorded."""
        with self.write() as conn:
            done = conn.execute(
                update(A)
                .where(
                    A.c.id == attempt_id,
                    A.c.state.not_in(ACTIVE_ATTEMPT_STATES),
                    A.c.cpu_seconds.is_(None),
                    A.c.max_rss_mib.is_(None),
                )
                .values(cpu_seconds=used.cpu_seconds, max_rss_mib=used.max_rss_mib)
            )
            return done.rowcount == 1

    def finish_attempt(
        self,
        attempt_id: int,
        node_id: str,
        exit_code: int,
        now: float,
        outcome_of: Callable[[Job], JobOutcome],
        ended_at: float | None = None,
        exit_signal: int | None = None,
        *,
        used: AttemptUsage | None = None,
    ) -> bool:
        """Record an attempt's exit and carry out what the core says it means for the job
        (`outcome_of`, e.g. core.retry.after_exit), in one transaction: a crash between the two
        would leave the job running with no attempt, which nothing would ever end. `ended_at` is
        when the agent saw it end (an exit reported after a server outage ended earlier than it
        arrives; Slurm's EndTime), kept between the attempt's start and `now`. `exit_signal`: the
        signal that killed the command (`exit_code` 128+N), None for an exit or a node that did
        not say. `used`: what the run used, as its node measured it; recorded also when corral
        had ended the attempt before the report came (a cancel, a time limit: its exit is not
        recorded, but it ran until then), once. False for a repeated report."""
        with self.write() as conn:
            exited = self._record_exit(conn, attempt_id, node_id, exit_code, now, ended_at, exit_signal, used)
            if exited is None:
                return False
            job, at = exited
            outcome = outcome_of(job)
            if self._apply_outcome(conn, outcome, at) and outcome.timeout:
                # Ended at its time limit by its node (the agent's own enforcement while the server
                # was away): the attempt reads as one corral timed out, with its exit code kept.
                conn.execute(
                    update(A)
                    .where(A.c.id == attempt_id)
                    .values(state=AttemptState.TIMEOUT.value, reason=outcome.reason)
                )
        return True

    def _record_exit(
        self,
        conn: Connection,
        attempt_id: int,
        node_id: str,
        exit_code: int,
        now: float,
        ended_at: float | None,
        exit_signal: int | None = None,
        used: AttemptUsage | None = None,
    ) -> tuple[Job, float] | None:
        """The exit recorded: the job as it stands, and the time the exit was recorded at."""
        attempt = self._lock_attempt(conn, attempt_id, node_id)
        if attempt is None:
            return None
        used = used or AttemptUsage()
        if attempt.state not in ACTIVE_ATTEMPT_STATES:
            # Ended by corral before its node reported the end (cancelled, timed out, requeued,
            # preempted): what it used until it was killed is still its own, and is what a job
            # that runs into its time limit is to be sized by. Once: a repeated report changes nothing.
            known = used.cpu_seconds is not None or used.max_rss_mib is not None
            if known and attempt.cpu_seconds is None and attempt.max_rss_mib is None:
                conn.execute(
                    update(A)
                    .where(A.c.id == attempt_id)
                    .values(cpu_seconds=used.cpu_seconds, max_rss_mib=used.max_rss_mib)
                )
            return None
        at = now if ended_at is None else min(now, max(ended_at, attempt.started_at or attempt.assigned_at))
        ended = conn.execute(
            update(A)
            .where(A.c.id == attempt_id, A.c.state.in_(ACTIVE_ATTEMPT_STATES))
            .values(
                state=AttemptState.EXITED.value,
                exit_code=exit_code,
                exit_signal=exit_signal,
                finished_at=at,
                cpu_seconds=used.cpu_seconds,
                max_rss_mib=used.max_rss_mib,
            )
        )
        if ended.rowcount != 1:
            return None
        if attempt.state == AttemptState.ASSIGNED.value:
            # The start report was lost (e.g. a server restart): the job did run, and its history
            # says so (every state change is an event).
            started = conn.execute(
                update(J)
                .where(J.c.id == attempt.job_id, J.c.state == JobState.CLAIMED.value)
                .values(state=JobState.RUNNING.value, started_at=at)
            )
            if started.rowcount == 1:
                said = f"attempt {attempt_id} (its start was not reported: seen at its exit)"
                self._event(conn, at, "job.running", said, attempt.job_id, node_id)
        row = conn.execute(select(J).where(J.c.id == attempt.job_id)).one()
        return job_from_row(dict(row._mapping)), at

    def attempts_on_node(self, node_id: str) -> NodeAttempts:
        """The attempts corral has assigned or running on the node (a gang's on its first node,
        where its command runs), with their jobs' time limits as they stand now: what a ping is
        answered from, in one read."""
        with self.read() as conn:
            rows = conn.execute(
                select(A.c.id, A.c.state, J.c.spec)
                .join(J, J.c.id == A.c.job_id)
                .where(A.c.node_id == node_id, A.c.state.in_(ACTIVE_ATTEMPT_STATES))
                .order_by(A.c.id)
            ).all()
            running = [row.id for row in rows if row.state == AttemptState.RUNNING.value]
            # (Read only for a node that runs something: most pings are of idle nodes.)
            signals = (
                [
                    _signal_request(r)
                    for r in conn.execute(select(SR).where(SR.c.attempt_id.in_(running)).order_by(SR.c.id)).all()
                ]
                if running
                else []
            )
        return NodeAttempts(
            running=running, time_limits={row.id: row.spec.get("time_limit") for row in rows}, signals=signals
        )

    # ---- attempts run by an executor (Slurm) ------------------------------------------------

    def set_executor_ref(self, attempt_id: int, ref: str, message: str, now: float) -> None:
        """Record the executor's id of a submitted attempt (the Slurm job id)."""
        with self.write() as conn:
            job_id = conn.execute(select(A.c.job_id).where(A.c.id == attempt_id)).scalar()
            conn.execute(update(A).where(A.c.id == attempt_id).values(executor_ref=ref))
            self._event(conn, now, "job.submitted", message, job_id=job_id)

    def adopt_attempt(
        self, attempt_id: int, job_id: int, stale: str, dispatcher_id: str, message: str, now: float
    ) -> bool:
        """Make dispatcher `dispatcher_id` the owner of attempt `attempt_id` of job `job_id`, and of
        the job's claim, both held by the dispatcher `stale` (judged silent): from then on it is
        followed as this dispatcher's own (its executor job runs on, nothing is submitted again).
        In one transaction, only while `stale` still holds both and the attempt is active (the
        stale dispatcher may have ended it meanwhile, or another peer adopted it first); an event
        `slurm.adopted` with `message`. False if it had moved on."""
        try:
            with self.write() as conn:
                attempt_moved = conn.execute(
                    update(A)
                    .where(
                        A.c.id == attempt_id,
                        A.c.job_id == job_id,
                        A.c.dispatcher_id == stale,
                        A.c.state.in_(ACTIVE_ATTEMPT_STATES),
                    )
                    .values(dispatcher_id=dispatcher_id)
                )
                if attempt_moved.rowcount != 1:
                    return False
                job_moved = conn.execute(
                    update(J)
                    .where(J.c.id == job_id, J.c.claimed_by == stale, J.c.state.in_(CLAIMED_JOB_STATES))
                    .values(claimed_by=dispatcher_id)
                )
                if job_moved.rowcount != 1:
                    raise _MovedOn  # rolls the attempt's change back
                self._event(conn, now, "slurm.adopted", message, job_id=job_id)
        except _MovedOn:
            return False
        return True

    def holds_unsubmitted(self, attempt_id: int, dispatcher_id: str) -> bool:
        """Whether dispatcher `dispatcher_id` still holds attempt `attempt_id` and its job's claim,
        with the attempt not yet submitted (assigned, no executor id): read just before its
        `sbatch`. A dispatcher frozen after its claim (SIGSTOP, a stalled host) may have had the
        claim released by a peer meanwhile, the job queued again and claimed anew."""
        with self.read() as conn:
            row = conn.execute(
                select(A.c.id)
                .select_from(A.join(J, J.c.id == A.c.job_id))
                .where(
                    A.c.id == attempt_id,
                    A.c.dispatcher_id == dispatcher_id,
                    A.c.state == AttemptState.ASSIGNED.value,
                    A.c.executor_ref.is_(None),
                    J.c.claimed_by == dispatcher_id,
                    J.c.state.in_(CLAIMED_JOB_STATES),
                )
            ).first()
        return row is not None

    def executor_refs(self, dispatcher_id: str) -> dict[int, str]:
        """The executor ids of a dispatcher's active attempts that have one, by attempt id."""
        with self.read() as conn:
            rows = conn.execute(
                select(A.c.id, A.c.executor_ref).where(
                    A.c.dispatcher_id == dispatcher_id,
                    A.c.state.in_(ACTIVE_ATTEMPT_STATES),
                    A.c.executor_ref.is_not(None),
                )
            ).all()
        return {row.id: row.executor_ref for row in rows}

    def set_claimed_wait_reasons(self, reasons: Mapping[int, str], now: float) -> None:
        """Why claimed jobs wait in the executor's own queue ("slurm: Resources"), in one transaction."""
        if not reasons:
            return
        with self.write() as conn:
            conn.execute(
                update(J)
                .where(J.c.id == bindparam("job_id"), J.c.state == JobState.CLAIMED.value)
                .values(wait_reason=bindparam("reason"), updated_at=now),
                # One row at a time, in id order (the lock order of a write of many jobs).
                [{"job_id": job_id, "reason": reason} for job_id, reason in sorted(reasons.items())],
            )

    # ---- nodes --------------------------------------------------------------------------------

    def create_node(
        self,
        node_id: str,
        itype: InstanceType,
        boot_token: str,
        now: float,
        reason: str,
        dispatcher_id: str | None = None,
    ) -> None:
        """A node about to be booted by `dispatcher_id` (whose cloud holds its instance)."""
        with self.write() as conn:
            conn.execute(
                insert(N).values(
                    id=node_id,
                    instance_type=itype.name,
                    state=NodeState.BOOTING.value,
                    vcpus=itype.vcpus,
                    ram_mib=itype.ram_mib,
                    scratch_mib=itype.scratch_mib,
                    gpus=itype.gpus,
                    price_per_hour=itype.price_per_hour,
                    billing_granularity=itype.billing_granularity,
                    billing_minimum=itype.billing_minimum,
                    created_at=now,
                    state_changed_at=now,
                    attributes=dict(itype.attributes),
                    rack="",
                    reason=reason,
                    boot_token_hash=token_hash(boot_token),
                    dispatcher_id=dispatcher_id,
                )
            )
            self._event(conn, now, "node.booting", f"{itype.name}: {reason}", node_id=node_id)

    def set_instance_id(self, node_id: str, instance_id: str, zone: str = "", market: str = "") -> None:
        """The node's instance, and its zone and market when the cloud says them (empty: unknown)."""
        values: dict[str, Any] = {"instance_id": instance_id}
        if zone:
            values["zone"] = zone
        if market:
            values["market"] = market
        with self.write() as conn:
            conn.execute(update(N).where(N.c.id == node_id).values(**values))

    def set_node_attributes(
        self,
        node_id: str,
        attributes: dict[str, str | list[str]],
        unset: list[str],
        rack: str | None,
        now: float,
    ) -> dict[str, Any]:
        """An operator's memo on a live node (seeds 002 and 003: a hold, a category, an admin
        reservation, a planned reboot, a hardware class, its rack): set `attributes`, remove the
        keys in `unset`, and set the rack unless `rack` is None. The next pass places by them.
        Returns the node's row; NotFound for a node that is unknown or gone."""
        with self.write() as conn:
            row = conn.execute(select(N.c.state, N.c.attributes, N.c.rack).where(N.c.id == node_id)).first()
            if row is None or row.state == NodeState.GONE.value:
                raise NotFound(f"no live node {node_id}")
            merged = {k: v for k, v in dict(row.attributes or {}).items() if k not in unset}
            merged.update(attributes)
            values: dict[str, Any] = {"attributes": merged}
            changes = [f"{k}={v if isinstance(v, str) else ','.join(v)}" for k, v in attributes.items()]
            changes += [f"-{k}" for k in unset if k in (row.attributes or {})]
            if rack is not None and rack != row.rack:
                values["rack"] = rack
                changes.append(f"rack={rack}")
            conn.execute(update(N).where(N.c.id == node_id).values(**values))
            if changes:
                self._event(conn, now, "node.attributes", " ".join(changes), node_id=node_id)
            updated = conn.execute(select(N).where(N.c.id == node_id)).first()
        assert updated is not None
        return dict(updated._mapping)

    def mark_node(self, node_id: str, state: NodeState, reason: str, now: float) -> bool:
        with self.write() as conn:
            return self._mark_node(conn, node_id, state, reason, now)

    def mark_nodes(self, reasons: Mapping[str, str], state: NodeState, now: float) -> set[str]:
        """`mark_node` of each node (id -> its reason) in one transaction: the nodes it changed. A
        clean stop marks its whole fleet twice (shutting down, then gone): with a transaction each,
        that was 8 s of a 500-node stop on SQLite, most of it once the cloud's terminates went in
        one call (bench/fleet_stop.py)."""
        with self.write() as conn:
            return {node_id for node_id, why in reasons.items() if self._mark_node(conn, node_id, state, why, now)}

    def _mark_node(self, conn: Connection, node_id: str, state: NodeState, reason: str, now: float) -> bool:
        row = conn.execute(select(N.c.state).where(N.c.id == node_id)).first()
        if row is None or row.state == state.value or row.state == NodeState.GONE.value:
            return False
        values: dict[str, Any] = {"state": state.value, "state_changed_at": now}
        if reason or state in (NodeState.IDLE, NodeState.BUSY):
            values["reason"] = reason
        if state is NodeState.GONE:
            values.update(gone_at=now, secret_hash=None, boot_token_hash=None)
        conn.execute(update(N).where(N.c.id == node_id).values(**values))
        self._event(conn, now, f"node.{state.value}", reason, node_id=node_id)
        return True

    def pair_node(
        self,
        node_id: str,
        boot_token: str,
        capacity: Resources,
        hostname: str,
        now: float,
        agent_version: str | None = None,
    ) -> str | None:
        """One-time boot token -> a node secret. None when the token is wrong or already used.
        `agent_version`: the corral version the agent told (None: it told none)."""
        secret = secrets.token_urlsafe(32)
        with self.write() as conn:
            result = conn.execute(
                update(N)
                .where(
                    N.c.id == node_id,
                    N.c.state == NodeState.BOOTING.value,
                    N.c.boot_token_hash == token_hash(boot_token),
                )
                .values(
                    state=NodeState.IDLE.value,
                    boot_token_hash=None,
                    secret_hash=token_hash(secret),
                    paired_at=now,
                    last_ping_at=now,
                    state_changed_at=now,
                    hostname=hostname,
                    vcpus=capacity.vcpus,
                    ram_mib=capacity.ram_mib,
                    scratch_mib=capacity.scratch_mib,
                    gpus=capacity.gpus,
                    reason="",
                    agent_version=agent_version,
                )
            )
            if result.rowcount != 1:
                return None
            agent = f"agent (corral {agent_version or 'unknown'}) on {hostname}"
            self._event(conn, now, "node.paired", f"{agent}: {capacity.describe()}", node_id=node_id)
        return secret

    def resume_node(
        self,
        node_id: str,
        kept: Sequence[int],
        message: str,
        now: float,
        outcome_of: Callable[[Job, int], JobOutcome],
        agent_version: str | None = None,
    ) -> list[int]:
        """A paired node's agent started again (it died, or was restarted) and resumed with its
        saved secret: an event `node.agent_restarted`, and each attempt the node was running that
        the new agent does not run on (`kept`) ends as `outcome_of` says (its process died with the
        old agent, or the new one stopped it). The attempts lost, in id order. `agent_version`: the
        corral version the new agent told (None: it told none), which may differ from the old one's
        (an upgrade of the node's corral)."""
        with self.write() as conn:
            conn.execute(update(N).where(N.c.id == node_id).values(agent_version=agent_version))
            self._event(conn, now, "node.agent_restarted", message, node_id=node_id)
            query = select(A.c.id).where(A.c.node_id == node_id, A.c.state == AttemptState.RUNNING.value)
            if kept:
                query = query.where(A.c.id.not_in(list(kept)))
            lost = conn.execute(query.order_by(A.c.id)).scalars().all()
            return self._end_running(conn, node_id, lost, now, outcome_of)

    def end_unlisted_attempts(
        self,
        node_id: str,
        attempt_ids: Sequence[int],
        now: float,
        outcome_of: Callable[[Job, int], JobOutcome],
        message_of: Callable[[int], str],
    ) -> list[int]:
        """Attempts running on `node_id` that its agent no longer lists (corral.core.listing) end as
        `outcome_of` says, each with an event `node.attempt_lost` (`message_of`), in one
        transaction; one that ended meanwhile (its exit came after all) is left alone. The
        attempts ended, in id order."""
        with self.write() as conn:
            ended = self._end_running(conn, node_id, sorted(attempt_ids), now, outcome_of)
            for attempt_id in ended:
                job_id = conn.execute(select(A.c.job_id).where(A.c.id == attempt_id)).scalar()
                self._event(conn, now, "node.attempt_lost", message_of(attempt_id), job_id, node_id)
        return ended

    def _end_running(
        self,
        conn: Connection,
        node_id: str,
        attempt_ids: Sequence[int],
        now: float,
        outcome_of: Callable[[Job, int], JobOutcome],
    ) -> list[int]:
        """Each of the attempts still running on the node, ended as `outcome_of` says (its job
        locked first); the attempts ended."""
        lost = []
        for attempt_id in attempt_ids:
            attempt = self._lock_attempt(conn, attempt_id, node_id)
            if attempt is None or attempt.state != AttemptState.RUNNING.value:
                continue
            row = conn.execute(select(J).where(J.c.id == attempt.job_id)).one()
            if self._apply_outcome(conn, outcome_of(job_from_row(dict(row._mapping)), attempt_id), now):
                lost.append(attempt_id)
        return lost

    def node_for_secret(self, secret: str) -> dict[str, Any] | None:
        with self.read() as conn:
            row = conn.execute(select(N).where(N.c.secret_hash == token_hash(secret))).first()
        return dict(row._mapping) if row else None

    def record_ping(self, node_id: str, used: Resources, now: float) -> None:
        with self.write() as conn:
            conn.execute(
                update(N)
                .where(N.c.id == node_id)
                .values(last_ping_at=now, used_vcpus=used.vcpus, used_ram_mib=used.ram_mib, used_at=now)
            )

    def node_rows(self, include_gone: bool = False, limit: int | None = 1000) -> list[dict[str, Any]]:
        """The nodes, oldest first: the newest `limit` of them (None: all, as the loop reads them)."""
        query = select(N)
        if not include_gone:
            query = query.where(N.c.state != NodeState.GONE.value)
        query = query.order_by(N.c.created_at.desc())
        if limit is not None:
            query = query.limit(limit)
        with self.read() as conn:
            rows = [dict(r._mapping) for r in conn.execute(query)]
        rows.reverse()
        return rows

    def live_node_attributes(self) -> list[dict[str, str | list[str]]]:
        """The attributes of every node not gone that has any: where the admin reservations in
        force are read from at submission (corral.core.reservations)."""
        query = select(N.c.attributes).where(N.c.state != NodeState.GONE.value, N.c.attributes.is_not(None))
        with self.read() as conn:
            return [dict(row.attributes) for row in conn.execute(query) if row.attributes]

    def paired_node_attributes(self) -> list[dict[str, str | list[str]]]:
        """The attributes of each paired node that has not begun to leave (idle, busy, draining,
        down): the nodes a health check runs on (corral.core.health)."""
        paired = (NodeState.IDLE.value, NodeState.BUSY.value, NodeState.DRAINING.value, NodeState.DOWN.value)
        with self.read() as conn:
            rows = conn.execute(select(N.c.attributes).where(N.c.state.in_(paired))).all()
        return [dict(attributes or {}) for (attributes,) in rows]

    def node_row(self, node_id: str) -> dict[str, Any] | None:
        with self.read() as conn:
            row = conn.execute(select(N).where(N.c.id == node_id)).first()
        return dict(row._mapping) if row else None

    def running_counts(self) -> dict[str, int]:
        """Active attempts per node, a gang's counted on each of its nodes."""
        with self.read() as conn:
            rows = conn.execute(select(A.c.node_ids).where(A.c.state.in_(ACTIVE_ATTEMPT_STATES))).all()
        counts: dict[str, int] = {}
        for (node_ids,) in rows:
            for node_id in node_ids:
                counts[node_id] = counts.get(node_id, 0) + 1
        return counts

    # ---- users and their tokens ------------------------------------------------------------------

    def add_user(self, name: str, admin: bool, now: float) -> str:
        """Add user `name` with a new token, which is returned (only its hash is kept: it cannot be
        shown again); an event `user.added`. UserExists if the name is taken."""
        token = secrets.token_urlsafe(32)
        table = schema.users
        with self.write() as conn:
            added = conn.execute(
                _upsert(conn, table)
                .values(name=name, token_hash=token_hash(token), admin=admin, created_at=now)
                .on_conflict_do_nothing(index_elements=[table.c.name])
                .returning(table.c.name)
            ).first()
            if added is None:
                raise UserExists(f"user {name!r} exists already (remove it first to give it a new token)")
            self._event(conn, now, "user.added", f"user {name} added{' (admin)' if admin else ''}")
        return token

    def remove_user(self, name: str, now: float) -> None:
        """Remove user `name`: its token is refused from the next request on (every dispatcher reads
        the same table); its jobs stay, and run. An event `user.removed`; NotFound for no such user."""
        table = schema.users
        with self.write() as conn:
            if conn.execute(delete(table).where(table.c.name == name)).rowcount == 0:
                raise NotFound(f"no user {name!r}")
            self._event(conn, now, "user.removed", f"user {name} removed: its token is refused")

    def user_rows(self) -> list[dict[str, Any]]:
        table = schema.users
        query = select(table.c.name, table.c.admin, table.c.created_at, table.c.last_used_at).order_by(table.c.name)
        with self.read() as conn:
            return [dict(r._mapping) for r in conn.execute(query)]

    def user_for_token(self, token: str, now: float) -> dict[str, Any] | None:
        """The user whose token `token` is (name, admin), None for none. Its last use is written at
        most once a minute: a write per request would queue every read behind SQLite's one writer."""
        table = schema.users
        with self.read() as conn:
            row = conn.execute(select(table).where(table.c.token_hash == token_hash(token))).first()
        if row is None:
            return None
        if row.last_used_at is None or now - row.last_used_at >= USER_LAST_USED_EVERY:
            with self.write() as conn:
                conn.execute(update(table).where(table.c.name == row.name).values(last_used_at=now))
        return {"name": row.name, "admin": bool(row.admin)}

    # ---- the store's own identity --------------------------------------------------------------

    def store_id(self) -> str:
        """This store's id, made (random) when first asked for; the dispatchers sharing the store
        read the same one. One upsert that keeps a row already there, so two dispatchers asking
        at once agree; kept once read (it never changes)."""
        if self._store_id is not None:
            return self._store_id
        table = schema.store_meta
        with self.write() as conn:
            conn.execute(
                _upsert(conn, table)
                .values(name="store_id", value=secrets.token_hex(8))
                .on_conflict_do_nothing(index_elements=[table.c.name])
            )
            self._store_id = str(conn.execute(select(table.c.value).where(table.c.name == "store_id")).scalar_one())
        return self._store_id

    # ---- dispatchers and capacity -------------------------------------------------------------

    def heartbeat(self, dispatcher_id: str, now: float, host: str = "", pid: int | None = None) -> None:
        """The dispatcher is alive. The first heartbeat registers it; one from another process (a
        restart: the dispatcher id stays with the data directory) records where it runs now."""
        table = schema.dispatchers
        with self.write() as conn:
            same_process = (table.c.id == dispatcher_id, table.c.host == host, table.c.pid.is_not_distinct_from(pid))
            result = conn.execute(
                update(table).where(*same_process, table.c.stale_at.is_(None)).values(last_heartbeat=now)
            )
            if result.rowcount == 1:
                return
            judged_at = conn.execute(select(table.c.stale_at).where(*same_process)).scalar_one_or_none()
            if judged_at is not None:
                # Paused (a stopped VM, a partition from the database) past dispatcher_stale: a peer
                # released its claims meanwhile; what it ran then is stopped by its agents.
                conn.execute(update(table).where(*same_process).values(last_heartbeat=now, stale_at=None))
                self._event(
                    conn,
                    now,
                    "dispatcher.resumed",
                    f"{dispatcher_id} on {host} pid {pid} heartbeats again; judged silent at {judged_at:.0f},"
                    " its claims were released",
                )
                return
            moved = conn.execute(
                update(table)
                .where(table.c.id == dispatcher_id)
                .values(last_heartbeat=now, started_at=now, host=host, pid=pid, stopped_at=None, stale_at=None)
            )
            if moved.rowcount == 1:
                self._event(conn, now, "dispatcher.restarted", f"{dispatcher_id} on {host} pid {pid}")
                return
            conn.execute(insert(table).values(id=dispatcher_id, started_at=now, last_heartbeat=now, host=host, pid=pid))
            self._event(conn, now, "dispatcher.registered", f"{dispatcher_id} on {host} pid {pid}")

    def dispatcher_stopped(self, dispatcher_id: str, now: float, what: str) -> None:
        """The dispatcher stopped cleanly (`what` it left behind): `corral status` shows it stopped,
        not as one that went silent, with an event `dispatcher.stopped`. Its next heartbeat (a
        restart) clears the mark."""
        table = schema.dispatchers
        with self.write() as conn:
            row = conn.execute(select(table.c.host, table.c.pid).where(table.c.id == dispatcher_id)).first()
            if row is None:
                return  # stopped before its first pass registered it
            conn.execute(update(table).where(table.c.id == dispatcher_id).values(stopped_at=now))
            self._event(conn, now, "dispatcher.stopped", f"{dispatcher_id} on {row.host} pid {row.pid}: {what}")

    def dispatchers_silent(self, dispatcher_ids: Sequence[str], now: float) -> None:
        """Dispatchers a peer judged silent (corral.core.dispatchers.newly_silent): each recorded
        once, with an event `dispatcher.stale` (a [[notify]] rule can page on it). Of peers judging
        the same one at once, one records it. Its next heartbeat clears the mark."""
        if not dispatcher_ids:
            return
        table = schema.dispatchers
        with self.write() as conn:
            marked = conn.execute(
                update(table)
                .where(table.c.id.in_(dispatcher_ids), table.c.stale_at.is_(None), table.c.stopped_at.is_(None))
                .values(stale_at=now)
                .returning(table.c.id, table.c.host, table.c.pid, table.c.last_heartbeat)
            ).all()
            for row in sorted(marked, key=lambda r: str(r.id)):
                self._event(
                    conn,
                    now,
                    "dispatcher.stale",
                    f"{row.id} on {row.host} pid {row.pid}: no heartbeat for {now - row.last_heartbeat:.0f}s;"
                    " its claims are released",
                )

    def set_unavailable(
        self,
        instance_type: str,
        until: float,
        reason: str,
        now: float,
        event_kind: str = "capacity.unavailable",
        boot_failures: BootFailures | None = None,
        node_id: str | None = None,
    ) -> None:
        """Do not try `instance_type` before `until`. A back-off already recorded that lasts longer
        is kept, with its reason: a second insufficient-capacity error never shortens a back-off.
        The error is recorded as an event (`event_kind`, about `node_id` if given) either way.
        `boot_failures`: the type's row of failed boots as it stands now (a boot that did not
        pair), recorded whatever back-off stays.

        One upsert, so dispatchers recording the same type at the same time never collide on the
        primary key."""
        table = schema.unavailable_types
        with self.write() as conn:
            stmt = _upsert(conn, table).values(instance_type=instance_type, until=until, reason=reason)
            written = conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=[table.c.instance_type],
                    set_={"until": stmt.excluded.until, "reason": stmt.excluded.reason},
                    where=table.c.until <= stmt.excluded.until,
                ).returning(table.c.until)
            ).first()
            message = f"{instance_type} until {utc_text(until)}: {reason}"
            if written is None:
                # The row stays locked until the commit (PostgreSQL: by the upsert; SQLite: by its
                # write lock), so this is the back-off in force.
                longer = conn.execute(select(table.c.until).where(table.c.instance_type == instance_type)).scalar_one()
                message += f" (the back-off until {utc_text(longer)} stays)"
            if boot_failures is not None:
                conn.execute(
                    update(table)
                    .where(table.c.instance_type == instance_type)
                    .values(boot_failures=boot_failures.count, boot_failed_at=boot_failures.last_at)
                )
            self._event(conn, now, event_kind, message, node_id=node_id)

    def end_boot_failures(self, instance_type: str) -> None:
        """An instance of the type paired: its row of failed boots ends (its back-off in force, if
        any, runs its course)."""
        table = schema.unavailable_types
        with self.write() as conn:
            conn.execute(
                update(table).where(table.c.instance_type == instance_type).values(boot_failures=0, boot_failed_at=None)
            )

    def clear_backoffs(self, instance_types: Sequence[str] | None, now: float) -> list[ClearedBackoff]:
        """An operator's "try again now" (Slurm's `scontrol update nodename=... state=resume`): end
        the back-offs in force of `instance_types` (None: of every type backed off), and their rows of
        failed boots, so that the next failure of the type is a first one again. One event
        `type.backoff_cleared` per type. A type named that is not backed off (its back-off ended, or
        it never had one) raises NotBackedOff, and nothing is changed.

        The rows are locked as they are read (PostgreSQL): a back-off another dispatcher records at
        the same time is either ended here (recorded first) or recorded after (a new failure), and of
        two operators clearing the same type, the second is told it is not backed off."""
        table = schema.unavailable_types
        with self.write() as conn:
            query = select(table).where(table.c.until > now).order_by(table.c.instance_type).with_for_update()
            in_force = {row.instance_type: row for row in conn.execute(query)}
            if instance_types is None:
                picked = list(in_force.values())
            else:
                names = list(dict.fromkeys(instance_types))
                missing = [name for name in names if name not in in_force]
                if missing:
                    raise NotBackedOff(missing, list(in_force))
                picked = [in_force[name] for name in names]
            if picked:
                conn.execute(delete(table).where(table.c.instance_type.in_([row.instance_type for row in picked])))
            cleared = [ClearedBackoff(r.instance_type, r.until, r.reason, r.boot_failures) for r in picked]
            for backoff in cleared:
                message = backoff_cleared_message(backoff.instance_type, backoff.until, backoff.boot_failures, now)
                self._event(conn, now, "type.backoff_cleared", message)
        return cleared

    # ---- the snapshot -------------------------------------------------------------------------

    # The rows and specs read, and the jobs built from them, live on: each job is a few new
    # containers, and the cyclic collector walked the whole heap at every quarter's growth of it,
    # finding nothing to free (a quarter of building a long queue's 100,000 jobs,
    # bench/live_pass.py), as in a placement pass (corral.placement.collector).
    @collector_paused
    def load_snapshot(self, dispatcher_id: str, instance_types: list[InstanceType], observing_since: float) -> Snapshot:
        # The spec is read only for jobs not seen before, and the explanation never: both are
        # JSON that would cost more to decode than the rest of the snapshot.
        job_columns = [c for c in J.c if c.name not in ("spec", "explanation")]
        # One moment's view: an exit committed between the jobs and the attempts would show the
        # core a running job with no attempt behind it.
        # Only reads within it: the jobs are built from their specs after it ends. Built within, a
        # long queue's kept the transaction open and idle for seconds (24 s for 100,000 new jobs on
        # PostgreSQL), holding VACUUM back and meeting a DBA's idle_in_transaction_session_timeout.
        with self.consistent_read() as conn:
            job_rows = conn.execute(select(*job_columns).where(J.c.state.in_(OPEN_JOB_STATES))).all()
            sources = self._specs_to_build(conn, job_rows)
            attempt_rows = conn.execute(select(A).where(A.c.state.in_(ACTIVE_ATTEMPT_STATES))).all()
            node_rows = conn.execute(select(N).where(N.c.state.in_(LIVE_NODE_STATES))).all()
            dispatcher_rows = conn.execute(select(schema.dispatchers)).all()
            unavailable_rows = conn.execute(select(schema.unavailable_types)).all()
            # By position, as in _jobs_from_rows: a Row's attribute costs ten times its index.
            at_id, at_state = _columns_at(job_rows, "id", "state")
            queued = JobState.QUEUED.value
            waiting = [self._dependency_of(row[at_id], sources) for row in job_rows if row[at_state] == queued]
            open_ids = {row[at_id] for row in job_rows}
            finished, array_tasks = self._finished_named(conn, [d for d in waiting if d is not None], open_ids)
        # The kept index is taken out while it is filed: a load that raises midway (here, or in the
        # read above) leaves none, and the next one files everything afresh, never a half-filed one.
        index, self._index = self._index, None
        changed: list[Job] = []
        jobs = self._jobs_from_rows(job_rows, sources, changed=changed)
        index = self._file_index(index, jobs, changed, attempt_rows, node_rows)
        self._index = index
        # The lists in the index's order (that of the rows for what is new), so that an index built
        # from them (SnapshotIndex.of) is this one: the same groups, in the same order.
        return Snapshot(
            jobs=list(index.jobs.values()),
            attempts=list(index.attempts.values()),
            nodes=list(index.nodes.values()),
            instance_types=instance_types,
            dispatcher_id=dispatcher_id,
            dispatchers=[
                Dispatcher(r.id, r.last_heartbeat, r.stopped_at is not None, r.stale_at is not None)
                for r in dispatcher_rows
            ],
            unavailable_types={r.instance_type: r.until for r in unavailable_rows},
            boot_failures={
                r.instance_type: BootFailures(r.boot_failures, r.boot_failed_at or 0.0)
                for r in unavailable_rows
                if r.boot_failures > 0
            },
            observing_since=observing_since,
            finished=finished,
            array_tasks=array_tasks,
            index=index,
        )

    def _file_index(
        self,
        index: SnapshotIndex | None,
        jobs: list[Job],
        changed: list[Job],
        attempt_rows: Sequence[Any],
        node_rows: Sequence[Any],
    ) -> SnapshotIndex:
        """The last snapshot's index (None: a new one) filed with what changed since: the jobs of
        `changed` (new, or whose row changed: `_jobs_from_rows`) and those no longer open, and the
        attempts and nodes whose rows changed, came or went (the simulator files its changes so,
        corral.sim.engine). `jobs`: every open job. A steady pass over a long queue files the few
        jobs that moved, instead of building the index of every job afresh (SnapshotIndex.of).

        A changed node is refreshed in place, as a job is (the index's lists hold it: its
        schedulable list is kept while no node comes, goes or is reshaped), and filed again, as
        `reshaped` if its capacity, price, rack or attributes changed; a ping changes its row too
        (its measurement, its last ping: a pass reads those off the node). A changed attempt is a
        new object. The attempts of a job filed again are filed again (its time limit may have
        moved, or its job left)."""
        if index is None:
            index = SnapshotIndex()
            changed = jobs
            kept_attempts: dict[int, tuple[tuple[Any, ...], Attempt]] = {}
            kept_nodes: dict[str, tuple[tuple[Any, ...], Node]] = {}
        else:
            kept_attempts, kept_nodes = self._attempts, self._nodes
        filed_jobs = index.jobs
        touched: set[int] = set()
        # Jobs no longer open: any only if the open jobs are not the filed ones plus the new ones.
        new = sum(1 for job in changed if job.id not in filed_jobs)
        if len(filed_jobs) + new != len(jobs):
            open_ids = {job.id for job in jobs}
            for job_id in [job_id for job_id in filed_jobs if job_id not in open_ids]:
                index.drop_job(job_id)
                touched.add(job_id)
        for job in changed:
            index.put_job(job)
            touched.add(job.id)

        attempts: dict[int, tuple[tuple[Any, ...], Attempt]] = {}
        (at_id,) = _columns_at(attempt_rows, "id")
        active = {row[at_id] for row in attempt_rows}
        for attempt_id in [attempt_id for attempt_id in kept_attempts if attempt_id not in active]:
            index.drop_attempt(attempt_id)
        for row in attempt_rows:
            columns = tuple(row)
            attempt_id = columns[at_id]
            kept_attempt = kept_attempts.get(attempt_id)
            if kept_attempt is not None and kept_attempt[0] == columns:
                attempt = kept_attempt[1]
                if attempt.job_id in touched:
                    index.put_attempt(attempt)
            else:
                attempt = attempt_from_row(dict(row._mapping))
                if kept_attempt is not None and kept_attempt[1].node_ids != attempt.node_ids:
                    index.drop_attempt(attempt_id)  # counted on other nodes: counted again
                index.put_attempt(attempt)
            attempts[attempt_id] = (columns, attempt)

        nodes: dict[str, tuple[tuple[Any, ...], Node]] = {}
        (at_id,) = _columns_at(node_rows, "id")
        live = {row[at_id] for row in node_rows}
        for node_id in [node_id for node_id in kept_nodes if node_id not in live]:
            index.drop_node(node_id)
        for row in node_rows:
            columns = tuple(row)
            node_id = columns[at_id]
            kept_node = kept_nodes.get(node_id)
            if kept_node is None:
                node = node_from_row(dict(row._mapping))
                index.put_node(node)
            elif kept_node[0] != columns:
                node, read = kept_node[1], node_from_row(dict(row._mapping))
                reshaped = _reshaped(node, read)
                for name in _NODE_FIELDS:
                    setattr(node, name, getattr(read, name))
                index.put_node(node, reshaped=reshaped)
            else:
                node = kept_node[1]
            nodes[node_id] = (columns, node)
        self._attempts, self._nodes = attempts, nodes
        return index

    @staticmethod
    def _dependency_of(job_id: int, sources: _JobSources) -> Dependency | None:
        """A job's dependency, from its spec as read, or from the job kept since an earlier
        snapshot; without building the job."""
        spec = sources.specs.get(job_id)
        if spec is None:
            return sources.kept[job_id][2].dependency
        stored = dependency_text(spec.get("dependency"))
        return parse_dependency(stored) if stored else None

    @staticmethod
    def _finished_named(
        conn: Connection, waiting: Sequence[Dependency], open_ids: set[int]
    ) -> tuple[dict[int, JobState], dict[int, list[int]]]:
        """The end states of the finished jobs that queued jobs' dependencies (`waiting`) name,
        and the tasks of each job array one names as a whole (afternotok on an array), by job id,
        the finished ones' end states among the first (the core judges those dependencies on
        them); no query at all while no queued job has a dependency. `open_ids`: the open jobs."""
        if not waiting:
            return {}, {}
        named = {job_id for dependency in waiting for job_id in dependency.job_ids()}
        arrays = sorted({array_id for dependency in waiting for _, array_id in dependency.arrays})
        array_tasks: dict[int, list[int]] = {}
        finished: dict[int, JobState] = {}
        for chunk in _chunks(arrays):
            query = (
                select(J.c.array_job_id, J.c.id, J.c.state)
                .where(J.c.array_job_id.in_(chunk))
                .order_by(J.c.array_job_id, J.c.array_task_id)
            )
            for row in conn.execute(query):
                array_tasks.setdefault(row.array_job_id, []).append(row.id)
                if row.id not in open_ids and row.state in TERMINAL_JOB_STATES:
                    finished[row.id] = JobState(row.state)
        named.difference_update(open_ids, finished)
        for chunk in _chunks(sorted(named)):
            query = select(J.c.id, J.c.state).where(J.c.id.in_(chunk), J.c.state.in_(TERMINAL_JOB_STATES))
            finished.update((row.id, JobState(row.state)) for row in conn.execute(query))
        return finished, array_tasks

    def _specs_to_build(self, conn: Connection, rows: Sequence[Any]) -> _JobSources:
        """What `_jobs_from_rows` builds the jobs of `rows` from: the jobs kept from an earlier
        snapshot, and the specs of the others (new, or changed by `corral update`: their spec_rev
        moved), by job id."""
        cache = self._jobs  # (replaced whole by the loop's next snapshot, never changed in place)
        at_id, at_rev = _columns_at(rows, "id", "spec_rev")
        missing = [r[at_id] for r in rows if (kept := cache.get(r[at_id])) is None or kept[0] != r[at_rev]]
        specs: dict[int, Any] = {}
        for chunk in _chunks(missing):
            specs.update((row.id, row.spec) for row in conn.execute(select(J.c.id, J.c.spec).where(J.c.id.in_(chunk))))
        return _JobSources(cache, specs)

    @collector_paused
    def _jobs_from_rows(
        self, rows: Sequence[Any], sources: _JobSources, keep: bool = True, changed: list[Job] | None = None
    ) -> list[Job]:
        """Jobs for a snapshot. What a job asked for changes only by `corral update` (its spec_rev
        moves), so each job is built from its spec once and kept between passes; a pass only
        refreshes the columns that move (state, priority, failures...), and only of a job whose
        row changed since (most of a long queue's rows do not: refreshing each was seconds of a
        pass over 100,000 queued jobs, bench/live_pass.py). The core never mutates a snapshot.
        `sources`: what `_specs_to_build` read for these rows (no store is read here). `keep`:
        False for a reader beside the loop, which gets copies and keeps nothing. (With the
        collector paused, as load_snapshot: `queued_jobs` builds them too.) `changed`: where the
        jobs built or refreshed are listed (those the kept index files again)."""
        fresh: dict[int, tuple[int, tuple[Any, ...], Job]] = {}
        jobs = []
        at_id, at_rev = _columns_at(rows, "id", "spec_rev")
        for row in rows:
            # The row as a tuple, its id and spec_rev by position: a Row's attribute costs ten times
            # its index, which was a second of a pass over 100,000 queued jobs (bench/live_pass.py).
            columns = tuple(row)
            job_id, spec_rev = columns[at_id], columns[at_rev]
            if job_id in sources.specs:  # new, or its spec changed (corral update)
                job = job_from_stored(
                    sources.specs[job_id], job_id, row.submitted_at, row.array_job_id, row.array_task_id
                )
                refresh_job(job, row._mapping)
                if changed is not None:
                    changed.append(job)
            elif keep:
                kept = sources.kept[job_id]
                job = kept[2]
                if kept[1] != columns:
                    refresh_job(job, row._mapping)
                    if changed is not None:
                        changed.append(job)
            else:
                # A reader's copy, refreshed from its own row whatever the loop's says: the loop
                # may be refreshing its job from a newer row meanwhile.
                job = dataclasses.replace(sources.kept[job_id][2])
                refresh_job(job, row._mapping)
            fresh[job_id] = (spec_rev, columns, job)
            jobs.append(job)
        if keep:
            self._jobs = fresh  # replaced whole, never changed in place: a reader may hold the old one
        return jobs

    def queued_jobs(self) -> list[Job]:
        """The queued jobs that are not held: those a pass orders (`corral queue`, the dashboard).
        A job the control loop's last snapshot built (in this process) is copied, not built again
        from its spec: a long queue is read in a fraction of the time."""
        columns = [c for c in J.c if c.name not in ("spec", "explanation")]
        query = select(*columns).where(J.c.state == JobState.QUEUED.value, J.c.held.is_(False))
        with self.read() as conn:
            rows = conn.execute(query).all()
            sources = self._specs_to_build(conn, rows)
        return self._jobs_from_rows(rows, sources, keep=False)

    def open_jobs_by_user(self) -> dict[str, dict[str, int]]:
        """Each user's open jobs, counted by state (queued, claimed, running)."""
        user = J.c.user_name
        query = select(user, J.c.state, func.count()).where(J.c.state.in_(OPEN_JOB_STATES)).group_by(user, J.c.state)
        found: dict[str, dict[str, int]] = {}
        with self.read() as conn:
            for name, state, count in conn.execute(query).all():
                found.setdefault(name or "", {})[state] = int(count)
        return found

    def open_jobs_of(self, users: Sequence[str]) -> dict[str, int]:
        """Each of these users' open jobs (queued, claimed, running), counted (0 for none), off the
        index of users and states: every submission to a user with a limit asks."""
        user = J.c.user_name
        query = select(user, func.count()).where(J.c.state.in_(OPEN_JOB_STATES), user.in_(list(users))).group_by(user)
        with self.read() as conn:
            found = {str(r[0]): int(r[1]) for r in conn.execute(query).all()}
        return {name: found.get(name, 0) for name in users}

    def counts(self) -> dict[str, int]:
        with self.read() as conn:
            rows = conn.execute(select(J.c.state, func.count()).group_by(J.c.state)).all()
        return {r[0]: int(r[1]) for r in rows}

    # ---- retention ----------------------------------------------------------------------------

    def purge_jobs(self, ended_before: float, limit: int, now: float, after_id: int = 0) -> tuple[list[int], int]:
        """Of the first `limit` jobs after id `after_id` that ended (complete, failed, cancelled)
        before `ended_before`, delete those that may go, with their attempts and dependency rows,
        in one transaction (slurmdbd's PurgeJobAfter): the ids deleted, ascending, and the last id
        looked at (0: none was; the next batch goes on after it). Which may go is `_may_go`'s rule,
        by which `corral retention` counts (purgeable): a job that an open job's dependency names
        is kept, and so is every task of a job array until all of them may go."""
        D = schema.job_dependencies
        with self.write() as conn:
            # Locked (FOR UPDATE): a submission naming one of them in a dependency waits, then finds
            # it gone and is refused ("no job N"), as it would be after the purge.
            # In id order from `after_id`, by the primary key: with the state index (`state || ''`
            # keeps SQLite off it) every batch sorted all the ended jobs: 272 ms a batch against 76
            # in a sweep of 200,000 (bench/retention_sweep.py).
            rows = conn.execute(
                select(J.c.id, J.c.array_job_id)
                .where(J.c.id > after_id, _ended_before(ended_before, J.c.state.concat("")))
                .order_by(J.c.id)
                .limit(limit)
                .with_for_update()
            ).all()
            if not rows:
                return [], 0
            last_seen = int(rows[-1].id)
            # Read after the locks are held: a dependency committed before them is seen.
            # (By their ids, off the state index, as above.)
            arrays = sorted({int(r.array_job_id) for r in rows if r.array_job_id is not None})
            may_go = _may_go(ended_before, arrays, J.c.state.concat(""))
            going = select(J.c.id).where(J.c.id.in_([int(r.id) for r in rows]), may_go)
            ids = sorted(int(job_id) for job_id in conn.execute(going).scalars())
            if not ids:
                return [], last_seen
            conn.execute(delete(D).where(or_(D.c.job_id.in_(ids), D.c.depends_on.in_(ids))))
            conn.execute(delete(SR).where(SR.c.job_id.in_(ids)))  # (an ended job's requests were dropped)
            conn.execute(delete(A).where(A.c.job_id.in_(ids)))
            conn.execute(delete(schema.job_tags).where(schema.job_tags.c.job_id.in_(ids)))
            conn.execute(delete(J).where(J.c.id.in_(ids)))
            self._event(
                conn,
                now,
                "store.purged",
                f"{len(ids)} ended jobs ({ids[0]} to {ids[-1]}), ended before"
                f" {utc_text(ended_before, seconds=False)}, deleted with their attempts and output"
                " (retention.jobs_after)",
            )
        return ids, last_seen

    def purgeable(self, jobs_ended_before: float | None, events_before: float | None) -> Purgeable:
        """What a retention sweep with these cuts would delete now (None: that kind is kept), counted
        without deleting anything, by the rules purge_jobs and purge_events choose by: ended jobs
        not named by an open job's dependency, in no array with a task that must stay (`_may_go`);
        events the notifier has handled (`_events_due`)."""
        counts = Purgeable()
        with self.read() as conn:
            if jobs_ended_before is not None:
                ended = select(func.count()).where(_ended_before(jobs_ended_before))
                counts.jobs_ended = int(conn.execute(ended).scalar_one())
                going = select(func.count()).where(_may_go(jobs_ended_before))
                counts.jobs = int(conn.execute(going).scalar_one())
            if events_before is not None:
                due = _events_due(conn, events_before)
                counts.events = int(conn.execute(select(func.count()).where(due)).scalar_one())
        return counts

    def purge_events(self, before: float, limit: int) -> int:
        """Delete up to `limit` of the oldest events from before `before`; how many. Never one the
        notifier has not handled yet (its cursor), which would go unnotified."""
        events = schema.events
        with self.write() as conn:
            due = _events_due(conn, before)
            # The batch as the due events up to its last id, a range of the key: as `id IN (the
            # batch's ids)` PostgreSQL hashed the batch and scanned every event for it (589 ms a
            # batch over 700,000 events against 65, growing with the table).
            batch = select(events.c.id).where(due).order_by(events.c.id).limit(limit).subquery()
            last = select(func.max(batch.c.id)).scalar_subquery()
            going = delete(events).where(events.c.id <= last, due)
            return int(conn.execute(going).rowcount or 0)

    def output_to_remove(self, job_ids: Sequence[int], ended_before: float) -> list[int]:
        """Of `job_ids` (those whose output the log store holds), the ones whose output may go:
        jobs no longer in the store (purged), and jobs that ended before `ended_before`."""
        found: dict[int, bool] = {}
        with self.read() as conn:
            for start in range(0, len(job_ids), 1000):
                chunk = list(job_ids[start : start + 1000])
                query = select(J.c.id, _ended_before(ended_before).label("due")).where(J.c.id.in_(chunk))
                found.update({int(row.id): bool(row.due) for row in conn.execute(query)})
        return [job_id for job_id in job_ids if found.get(job_id, True)]

    # ---- figures for /metrics ------------------------------------------------------------------

    def fleet_counts(self) -> FleetCounts:
        """The live nodes (every dispatcher's), counted by state and by instance type."""
        query = (
            select(N.c.state, N.c.instance_type, func.count(), func.sum(N.c.price_per_hour), func.sum(N.c.vcpus))
            .where(N.c.state.in_(LIVE_NODE_STATES))
            .group_by(N.c.state, N.c.instance_type)
        )
        fleet = FleetCounts()
        with self.read() as conn:
            for node_state, instance_type, count, price, vcpus in conn.execute(query):
                fleet.by_state[node_state] = fleet.by_state.get(node_state, 0) + count
                fleet.vcpus += float(vcpus or 0.0)
                nodes, cost = fleet.by_type.get(instance_type, (0, 0.0))
                fleet.by_type[instance_type] = (nodes + count, cost + float(price or 0.0))
        return fleet

    def fleet_cost_so_far(self, now: float) -> dict[str, float]:
        """What every node the store has known has cost up to `now`, by instance type: its hourly
        price over its life (to its end, or to now while it lives), without the billing rounding
        that `corral usage` adds at a node's end. It only grows, so /metrics exports it as a
        counter whose rate is the spend."""
        end = case(
            (N.c.gone_at.is_not(None), N.c.gone_at),
            (N.c.state == NodeState.GONE.value, N.c.created_at),  # gone with no end recorded: no bill
            else_=literal(now),
        )
        query = (
            select(N.c.instance_type, func.sum(N.c.price_per_hour * (end - N.c.created_at) / 3600.0))
            .where(N.c.created_at < now)
            .group_by(N.c.instance_type)
        )
        with self.read() as conn:
            return {str(name): max(0.0, float(dollars or 0.0)) for name, dollars in conn.execute(query)}

    def oldest_wait(self, now: float) -> float | None:
        """How long the longest-waiting job that could run now (queued, not held, not waiting for a
        dependency, its array's throttle or its user's limits, past its retry back-off and its
        `not_before`) has waited since its submission. None when no job could. A dependency's, a
        throttle's or a user limit's wait is the one the last pass gave as the reason: a user kept
        to their own limits (or a job larger than they may ever hold) starves nobody, as a throttle
        does not. In front of Slurm, a claimed job pending in Slurm's queue waits too (most waits
        are there, up to slurm.max_pending), unless it is held there."""
        queued = and_(
            J.c.state == JobState.QUEUED.value,
            J.c.held.is_(False),
            or_(J.c.retry_at.is_(None), J.c.retry_at <= now),
            J.c.wait_reason.not_like(f"{DEPENDENCY}%"),
            J.c.wait_reason.not_like(f"{job_array.THROTTLE_REASON}%"),
            J.c.wait_reason.not_like(f"{user_limits.JOBS_REASON}%"),
            J.c.wait_reason.not_like(f"{user_limits.CPU_REASON}%"),
        )
        # Only the Slurm pass gives a claimed job a reason (the claim clears any other), and only
        # while Slurm says it pends.
        in_slurm = and_(
            J.c.state == JobState.CLAIMED.value,
            J.c.wait_reason.like(f"{batch.SLURM_REASON}%"),
            J.c.wait_reason.not_like(f"{batch.SLURM_REASON}{batch.HELD_REASON}%"),
        )
        # One state at a time, each read in its index's order up to its first job that could run:
        # the two states at once were sorted whole first (every queued job's row read: 380-740 ms
        # at 100,000 queued jobs with the explanations a pass leaves on them, bench/status_queries.py).
        firsts = []
        with self.read() as conn:
            for waiting in (queued, in_slurm):
                query = (
                    select(J.c.submitted_at, J.c.spec)
                    .where(waiting)
                    .order_by(J.c.submitted_at, J.c.id)
                    .execution_options(yield_per=100)
                )
                with conn.execute(query) as rows:  # (closed before the next: PostgreSQL's is a server-side cursor)
                    for submitted_at, spec in rows:
                        not_before = spec.get("not_before")
                        if not_before is None or not_before <= now:
                            firsts.append(float(submitted_at))
                            break
        return max(0.0, now - min(firsts)) if firsts else None

    def first_starts(self, job_ids: Iterable[int]) -> dict[int, tuple[float, float]]:
        """For each of the jobs that has started: (submitted at, its first attempt's start)."""
        out: dict[int, tuple[float, float]] = {}
        with self.read() as conn:
            for chunk in _chunks(list(job_ids)):
                query = (
                    select(J.c.id, J.c.submitted_at, func.min(A.c.started_at))
                    .join(A, A.c.job_id == J.c.id)
                    .where(J.c.id.in_(chunk), A.c.started_at.is_not(None))
                    .group_by(J.c.id, J.c.submitted_at)
                )
                out.update((int(r[0]), (float(r[1]), float(r[2]))) for r in conn.execute(query))
        return out

    def dispatcher_rows(self) -> list[dict[str, Any]]:
        with self.read() as conn:
            rows = conn.execute(select(schema.dispatchers).order_by(schema.dispatchers.c.started_at)).all()
        return [dict(r._mapping) for r in rows]

    def backoffs_in_force(self, now: float) -> list[dict[str, Any]]:
        """The instance types not tried before `until` (capacity or quota errors, instances that did
        not pair), soonest first, with their failed boots in a row."""
        table = schema.unavailable_types
        with self.read() as conn:
            columns = (table.c.instance_type, table.c.until, table.c.reason, table.c.boot_failures)
            rows = conn.execute(select(*columns).where(table.c.until > now).order_by(table.c.until)).all()
        return [dict(r._mapping) for r in rows]

    def usage_spans(self, since: float, until: float) -> tuple[list[NodeSpan], list[AttemptSpan]]:
        """The nodes up, and the attempts running, at some time in [since, until): what
        `corral.core.accounting.usage` reads."""
        with self.read() as conn:
            node_rows = conn.execute(
                select(
                    N.c.id, N.c.instance_type, N.c.price_per_hour, N.c.billing_granularity, N.c.billing_minimum,
                    N.c.vcpus, N.c.ram_mib, N.c.scratch_mib, N.c.gpus, N.c.created_at, N.c.gone_at,
                ).where(N.c.created_at < until, or_(N.c.gone_at.is_(None), N.c.gone_at > since))
            ).all()  # fmt: skip
            attempts = self._attempt_spans(conn, since, until)
        nodes = [
            NodeSpan(r[0], r[1], r[2], r[3], r[4], Resources(r[5], r[6], r[7], r[8]), r[9], r[10]) for r in node_rows
        ]
        return nodes, attempts

    def attempt_spans(self, since: float, until: float) -> list[AttemptSpan]:
        """The attempts running at some time in [since, until): what fair share charges
        (`corral.core.fairshare.advance`)."""
        with self.read() as conn:
            return self._attempt_spans(conn, since, until)

    @staticmethod
    def _attempt_spans(conn: Connection, since: float, until: float) -> list[AttemptSpan]:
        # The tags and the gang's node ids come as the JSON text they are stored as, each text
        # decoded once (`_decoded`): the driver's decoding of both in every row (a week's 300,000
        # attempts share few distinct values of either) was most of a week's `corral usage`.
        # (Fetching the spec whole to decode it once in Python costs more than both: its every field.)
        rows = conn.execute(
            select(
                A.c.job_id, J.c.user_name, J.c.spec["tags"].as_string(), cast(A.c.node_ids, Text),
                A.c.vcpus, A.c.ram_mib, A.c.scratch_mib, A.c.gpus, A.c.started_at, A.c.finished_at,
                J.c.spec["nodes"].as_integer(), A.c.cpu_seconds, A.c.max_rss_mib,
            )
            .join(J, J.c.id == A.c.job_id)
            .where(
                A.c.started_at.is_not(None),
                A.c.started_at < until,
                or_(A.c.finished_at.is_(None), A.c.finished_at > since),
            )
        ).all()  # fmt: skip
        decoded = _decoded_once()
        return [
            AttemptSpan(
                r[0],
                r[1] or "",
                decoded(r[2]),
                decoded(r[3]),
                Resources(r[4], r[5], r[6], r[7]),
                r[8],
                r[9],
                r[10] or 1,  # a spec stored without `nodes`: one node
                r[11],
                r[12],
            )
            for r in rows
        ]

    def held_count(self) -> int:
        with self.read() as conn:
            query = select(func.count()).where(J.c.state == JobState.QUEUED.value, J.c.held.is_(True))
            return int(conn.execute(query).scalar() or 0)

    def open_job_ids_claimed_by(self, dispatcher_id: str) -> list[int]:
        with self.read() as conn:
            rows = conn.execute(
                select(J.c.id).where(
                    and_(J.c.claimed_by == dispatcher_id, or_(J.c.state == "claimed", J.c.state == "running"))
                )
            ).all()
        return [r[0] for r in rows]


def _decoded_once() -> Callable[[str | None], tuple[str, ...]]:
    """A decoder of JSON lists of strings (None: none) that decodes each distinct text once."""

    @functools.cache
    def decoded(text: str | None) -> tuple[str, ...]:
        return () if text is None else tuple(json.loads(text))

    return decoded


def _json_text(conn: Connection, name: str) -> ColumnElement[Any]:
    """A bound parameter of JSON text (already encoded) for a JSON column: as it is on SQLite,
    which stores JSON as that text (a CAST to JSON there would read it as a number); cast to json
    on PostgreSQL, which takes no text for a json column without one."""
    text_param = bindparam(name, type_=Text())
    return text_param if conn.dialect.name != "postgresql" else cast(text_param, JSON)


class _ExplanationText:
    """Explanations as stored (`_dated(explanation, now)`), as the JSON text json.dumps writes of
    each, which the store would have written, with every list or mapping the explanations share
    (a waiting job's explanation is a copy of its demand's, with its own id) encoded once. The
    explanations must live while this does: the shared ones are known by their id()."""

    def __init__(self, now: float) -> None:
        self._now = now
        self._at = json.dumps(now)
        self._encoded: dict[int, str] = {}
        self._keys: dict[str, str] = {}

    def __call__(self, explanation: dict[str, Any]) -> str:
        if "at" in explanation:
            return json.dumps(_dated(explanation, self._now))
        parts = []
        for key, value in explanation.items():
            encoded_key = self._keys.get(key)
            if encoded_key is None:
                if type(key) is not str:  # (json.dumps writes other keys as texts of its own)
                    return json.dumps(_dated(explanation, self._now))
                encoded_key = self._keys[key] = encode_basestring_ascii(key)
            kind = type(value)
            if kind is dict or kind is list:
                encoded = self._encoded.get(id(value))
                if encoded is None:
                    encoded = self._encoded[id(value)] = json.dumps(value)
            elif kind is str:
                encoded = encode_basestring_ascii(value)  # (what json.dumps does with a text)
            elif kind is int:
                encoded = int.__repr__(value)
            else:
                encoded = json.dumps(value)
            parts.append(f"{encoded_key}: {encoded}")
        parts.append(f'"at": {self._at}')
        return "{" + ", ".join(parts) + "}"


def _dated(explanation: dict[str, Any], now: float) -> dict[str, Any]:
    """An explanation as stored: with the time of the pass that made it (`at`)."""
    return {**explanation, "at": now}


@dataclass(frozen=True, slots=True)
class JobFilter:
    """Which jobs a listing or a filtered cancel picks: each field given narrows it (Slurm's
    squeue/scancel --state, --user, --name, a job array's id; corral's tags)."""

    states: tuple[str, ...] = ()
    user: str | None = None  # JobRequest.user
    name: str | None = None
    tag: str | None = None  # one of JobRequest.tags
    array: int | None = None  # the tasks of this job array (its id)

    def describe(self) -> str:
        parts = [f"state {'/'.join(self.states)}"] if self.states else []
        named = (("user", self.user), ("name", self.name), ("tag", self.tag))
        parts += [f"{what} {value!r}" for what, value in named if value is not None]
        if self.array is not None:
            parts.append(f"array {self.array}")
        return ", ".join(parts)

    def clauses(self) -> list[Any]:
        """The WHERE clauses."""
        clauses: list[Any] = []
        if self.states:
            clauses.append(J.c.state.in_(self.states))
        if self.user is not None:
            clauses.append(J.c.user_name == self.user)
        if self.name is not None:
            clauses.append(J.c.name == self.name)
        if self.array is not None:
            clauses.append(J.c.array_job_id == self.array)
        if self.tag is not None:
            T = schema.job_tags
            clauses.append(J.c.id.in_(select(T.c.job_id).where(T.c.tag == self.tag)))
        return clauses


def _locking(query: Select[Any]) -> Select[Any]:
    """`query`, a read of job rows, locking each row it reads, in id order: the lock order of a
    write of many jobs (see the module's docstring). On PostgreSQL a row another transaction holds
    is waited for, and then judged again by the query's WHERE as it now stands (FOR NO KEY UPDATE:
    the lock an UPDATE takes). SQLite's write lock already covers every row."""
    return query.order_by(J.c.id).with_for_update(key_share=True)


def _upsert(conn: Connection, table: Any) -> Any:
    """An INSERT into `table` in the connection's dialect, which has ON CONFLICT (PostgreSQL's or
    SQLite's)."""
    return (pg_insert if conn.dialect.name == "postgresql" else sqlite_insert)(table)


def _named_jobs(
    dependency: Dependency, arrays: Mapping[int, Mapping[int, int]]
) -> dict[tuple[DependencyKind, int], None]:
    """The job_dependencies rows of a dependency as stored: its conditions on one job, and one row
    per task for a condition on a whole array (`corral job` lists the tasks' states under it)."""
    rows = dict.fromkeys(dependency.conditions)
    for kind, array_id in dependency.arrays:
        rows.update(((kind, task_job_id), None) for task_job_id in arrays[array_id].values())
    return rows


def _chunks(ids: Sequence[int], size: int = 500) -> Iterator[list[int]]:
    for start in range(0, len(ids), size):
        yield list(ids[start : start + size])


def _summary(request: JobRequest, array_job_id: int | None = None, task_id: int | None = None) -> str:
    argv = " ".join(request.command)
    if len(argv) > 80:
        argv = argv[:77] + "..."
    task = f"task {array_job_id}_{task_id} of array {request.array}: " if task_id is not None else ""
    return f"{task}{request.name + ': ' if request.name else ''}{argv}"


def _shown(value: Any) -> str:
    # An empty text (a reservation removed) reads as none, not as nothing after the arrow.
    return "none" if value is None or value == "" else f"{value:g}" if isinstance(value, float) else str(value)


_JOB_STATES = {state.value: state for state in JobState}


def _signal_request(row: Any) -> SignalRequest:
    return SignalRequest(
        int(row.id), int(row.attempt_id), int(row.job_id), int(row.number), bool(row.main_only), row.requested_by
    )


def job_from_row(row: Mapping[str, Any]) -> Job:
    job = job_from_stored(row["spec"], row["id"], row["submitted_at"], row["array_job_id"], row["array_task_id"])
    refresh_job(job, row)
    return job


def refresh_job(job: Job, row: Mapping[str, Any]) -> None:
    """Copy the columns that change after submission onto `job`."""
    # (A finished job requeued is submitted again: between two passes, a kept job's time moved.)
    job.submitted_at = row["submitted_at"]
    job.priority = row["priority"]
    job.state = _JOB_STATES[row["state"]]  # (a dict: JobState(...) was a second of a pass over 100,000 jobs)
    job.claimed_by = row["claimed_by"]
    job.retry_at = row["retry_at"]
    job.temp_failures = row["temp_failures"]
    job.perm_failures = row["perm_failures"]
    job.attempt_count = row["attempt_count"]
    job.exit_code = row["exit_code"]
    job.exit_signal = row["exit_signal"]
    job.wait_reason = row["wait_reason"]
    job.unplaceable = bool(row["unplaceable"])
    job.cancel_requested = bool(row["cancel_requested"])
    job.requeue_requested = bool(row["requeue_requested"])
    job.requeue_hold = bool(row["requeue_hold"])
    job.held = bool(row["held"])
    job.started_at = row["started_at"]
    job.finished_at = row["finished_at"]
    job.array_throttle = row["array_throttle"] or None  # 0: no limit


def attempt_from_row(row: dict[str, Any]) -> Attempt:
    return Attempt(
        id=row["id"],
        job_id=row["job_id"],
        node_ids=list(row["node_ids"]),
        resources=Resources(row["vcpus"], row["ram_mib"], row["scratch_mib"], row["gpus"]),
        state=AttemptState(row["state"]),
        dispatcher_id=row["dispatcher_id"],
        assigned_at=row["assigned_at"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        exit_code=row["exit_code"],
        exit_signal=row["exit_signal"],
        reason=row["reason"],
    )


_NODE_FIELDS = tuple(f.name for f in dataclasses.fields(Node))


def _reshaped(filed: Node, read: Node) -> bool:
    """Whether a node's row changed what the placer's fleet facts are made of (the index's
    `put_node(reshaped=True)`: corral.placement.arrays.fleet_signature), not only its state, its
    pings or its measurements."""
    return (
        filed.capacity != read.capacity
        or filed.price_per_hour != read.price_per_hour
        or filed.rack != read.rack
        or filed.attributes != read.attributes
        or filed.instance_type != read.instance_type
    )


def node_from_row(row: dict[str, Any]) -> Node:
    return Node(
        id=row["id"],
        instance_type=row["instance_type"],
        capacity=Resources(row["vcpus"], row["ram_mib"], row["scratch_mib"], row["gpus"]),
        price_per_hour=row["price_per_hour"],
        state=NodeState(row["state"]),
        created_at=row["created_at"],
        paired_at=row["paired_at"],
        last_ping_at=row["last_ping_at"],
        state_changed_at=row["state_changed_at"],
        used=Resources(row["used_vcpus"], row["used_ram_mib"], 0, 0) if row["used_at"] is not None else ZERO,
        used_at=row["used_at"],
        attributes=dict(row["attributes"] or {}),
        rack=row["rack"] or "",
        reason=row["reason"] or "",
        billing_granularity=row["billing_granularity"],
        billing_minimum=row["billing_minimum"],
    )


def _ended_before(before: float, state: Any = None, jobs: Any = J) -> Any:
    """A job that ended (complete, failed, cancelled) before `before`: at its finish, or, with none
    recorded, at its last change. `state`: the state column, or an expression of it that keeps
    SQLite off the state index; `jobs`: the jobs table or an alias of it."""
    state = jobs.c.state if state is None else state
    return and_(state.in_(TERMINAL_JOB_STATES), func.coalesce(jobs.c.finished_at, jobs.c.updated_at) < before)


def _event_kinds(conn: Connection, like: str | None = None) -> list[str]:
    """The kinds of event recorded (those LIKE `like`, if given), sorted: one probe of the kind
    index per kind, each for the least kind above the last (a skip scan). SELECT DISTINCT read
    every event: 456 ms over 700,000 events on PostgreSQL against 4.5."""
    events = schema.events
    kinds = select(func.min(events.c.kind).label("kind")).cte("kinds", recursive=True)
    following = select(func.min(events.c.kind)).where(events.c.kind > kinds.c.kind).scalar_subquery()
    kinds = kinds.union_all(select(following).where(kinds.c.kind.is_not(None)))
    query = select(kinds.c.kind).where(kinds.c.kind.is_not(None))
    if like is not None:
        query = query.where(kinds.c.kind.like(like))
    return [str(kind) for kind in conn.execute(query.order_by(kinds.c.kind)).scalars()]


def _columns_at(rows: Sequence[Any], *names: str) -> tuple[int, ...]:
    """Where rows hold these columns (a Row's index costs a tenth of its attribute)."""
    return tuple(rows[0]._fields.index(name) for name in names) if rows else (0,) * len(names)


def _named_by_open(jobs: Any) -> Any:
    """A job (of `jobs`, the jobs table or an alias of it) that an open job's dependency names."""
    D = schema.job_dependencies
    dependent = J.alias()
    return exists(
        select(literal(1))
        .select_from(D.join(dependent, dependent.c.id == D.c.job_id))
        .where(D.c.depends_on == jobs.c.id, dependent.c.state.in_(OPEN_JOB_STATES))
    )


def _may_go(before: float, among_arrays: Sequence[int] | None = None, state: Any = None) -> Any:
    """The retention keep rule, the one place it is written: a job that a sweep with jobs ended
    before `before` deletes (Store.purge_jobs), and `corral retention` counts (Store.purgeable). It
    ended before `before`; no open job's dependency names it (its dependent would wait for ever:
    DependencyNeverSatisfied); and, a task of a job array, every task of its array may go too, so
    that an array is never left in part. `among_arrays`: the only arrays the rows asked about can
    be tasks of (a sweep's batch), so that only their tasks are read, not every array's. `state`:
    as `_ended_before`'s.

    A dependency is looked up by the job it names (its index), row by row: a batch reads its own
    jobs' dependencies, not all of them."""
    task = J.alias("task")
    in_arrays = task.c.array_job_id.is_not(None) if among_arrays is None else task.c.array_job_id.in_(among_arrays)
    arrays_kept = select(task.c.array_job_id).where(
        in_arrays, or_(~_ended_before(before, jobs=task), _named_by_open(task))
    )
    return and_(
        _ended_before(before, state),
        ~_named_by_open(J),
        or_(J.c.array_job_id.is_(None), J.c.array_job_id.not_in(arrays_kept)),
    )


def _events_due(conn: Connection, before: float) -> ColumnElement[bool]:
    """Which events from before `before` may be deleted: never one the notifier has not handled
    yet (its cursor), which would go unnotified."""
    events = schema.events
    handled = conn.execute(select(func.min(schema.notify_cursor.c.last_event_id))).scalar()
    return and_(events.c.at < before, true() if handled is None else events.c.id <= handled)
