"""The FastAPI application and the runtime it serves: store, log store, control loop task.

The control loop runs as a task of the server's event loop; each pass runs in a worker thread.
A submission or a finished attempt wakes it at once, so a job on an idle node starts in well
under a second; otherwise it runs every `loop.interval`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hmac
import logging
import math
import secrets
import threading
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST
from sqlalchemy.exc import InterfaceError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from corral.config import Config
from corral.core import health
from corral.core.listing import Unlisted
from corral.core.model import JobState
from corral.jobspec import describe_validation_errors
from corral.loop import LiveLoop
from corral.server.logstore import LogStore
from corral.server.metrics import Metrics
from corral.server.models import MAX_BODY, MAX_LOG_CHUNK_BODY, MAX_SUBMIT_BODY
from corral.store import InvalidJobs, NotFound, Store, store_refused, store_unreachable

log = logging.getLogger("corral.server")

# What a 503 for an unreachable store asks the client to wait (every route's, and the health check's).
RETRY_AFTER = {"Retry-After": "5"}
ATTEMPT_CACHE_MAX = 100_000  # attempts whose job and nodes the server keeps at hand (Runtime.attempt_jobs)
HISTORY_EVERY = 5.0  # seconds between two samples of the dashboard's charts
HISTORY_SAMPLES = 1440  # two hours of them
# While the store cannot be reached, the wait between passes doubles from loop.interval up to this
# (or loop.interval, if longer): a restart or failover is caught within seconds of its end, and an
# outage of minutes logs a line every few seconds, not one per interval.
STORE_RETRY_MAX = 8.0
# The API's requests refused while the store is unreachable are logged at most once per this long.
STORE_REFUSALS_LOGGED_EVERY = 10.0
# Job output refused for want of disk (every agent's every chunk) is logged at most once per this long.
OUTPUT_REFUSALS_LOGGED_EVERY = 60.0


@dataclass
class NowAndThen:
    """A refusal repeated by every client until its cause is gone, logged once per `every` seconds."""

    every: float
    logged_at: float = -math.inf

    def due(self) -> bool:
        """Whether to log it now (and so it is taken as logged)."""
        now = time.monotonic()
        if now - self.logged_at < self.every:
            return False
        self.logged_at = now
        return True


@dataclass
class HealthTally:
    """The nodes whose latest health check failed, and the paired nodes, for the budget of
    corral.core.health: counted in the store at most once per `fresh_for` seconds (every ping of a
    failing node asks), and kept current in between by the failures and recoveries this server
    records, so that failures reported at once are not each weighed against the same count."""

    fresh_for: float
    lock: threading.Lock = field(default_factory=threading.Lock)
    counted_at: float = -math.inf
    failing: int = 0
    paired: int = 0

    def count(self, store: Store, now: float) -> tuple[int, int]:
        with self.lock:
            if now - self.counted_at >= self.fresh_for:
                paired = store.paired_node_attributes()
                self.failing, self.paired = sum(1 for a in paired if health.HEALTH in a), len(paired)
                self.counted_at = now
            return self.failing, self.paired

    def changed(self, failing: int) -> None:
        with self.lock:
            self.failing = max(0, self.failing + failing)


@dataclass
class Runtime:
    config: Config
    store: Store
    logs: LogStore
    api_token: str
    loop: LiveLoop | None = None
    stop_fleet_on_exit: bool = True
    metrics: Metrics = field(default_factory=Metrics)
    node_events: dict[str, asyncio.Event] = field(default_factory=dict)
    aio: asyncio.AbstractEventLoop | None = None
    wake_event: asyncio.Event | None = None
    # attempt id -> its job id and nodes, for log chunks (which only those nodes may send): a cache
    # of the store, kept to the attempts that run (remember_attempt, forget_attempt).
    attempt_jobs: dict[int, tuple[int, frozenset[str]]] = field(default_factory=dict)
    attempt_jobs_lock: threading.Lock = field(default_factory=threading.Lock)  # (exits are recorded in threads)
    # Run as the server stops, after the fleet's shutdown: before uvicorn re-raises a SIGTERM,
    # which ends the process before any code after the server's run.
    on_stop: list[Callable[[], None]] = field(default_factory=list)
    stopping: bool = False
    # The dashboard's charts: (time, jobs queued, jobs claimed or running, live nodes, $/hour), one
    # sample every HISTORY_EVERY seconds of passes, the last HISTORY_SAMPLES of them.
    history: collections.deque[tuple[float, int, int, int, float]] = field(
        default_factory=lambda: collections.deque(maxlen=HISTORY_SAMPLES)
    )

    health_tally: HealthTally = field(init=False)
    # node id -> its running attempts that its agent's latest pings did not list (corral.core.listing).
    # Kept here, not stored: a restarted server only counts again, which delays no more than a grace.
    unlisted: dict[str, dict[int, Unlisted]] = field(default_factory=dict)
    unlisted_lock: threading.Lock = field(default_factory=threading.Lock)
    # The API's requests answered 503 because the store was unreachable, and the job output the agent
    # API answered 507 for want of disk: each logged now and then.
    store_refusals: NowAndThen = field(default_factory=lambda: NowAndThen(STORE_REFUSALS_LOGGED_EVERY))
    output_refusals: NowAndThen = field(default_factory=lambda: NowAndThen(OUTPUT_REFUSALS_LOGGED_EVERY))

    def __post_init__(self) -> None:
        self.metrics.event_cursor = self.store.last_event_id()
        self.health_tally = HealthTally(fresh_for=self.config.cloud.ping_interval)

    def remember_attempt(self, attempt_id: int, job_id: int, node_ids: frozenset[str]) -> None:
        """An attempt's job and nodes, for its log chunks. At most ATTEMPT_CACHE_MAX are kept, the
        oldest dropped first: an attempt whose end no agent reports (its node lost) would otherwise
        stay for the server's life, some 450 bytes each (a million attempts: 450 MB)."""
        with self.attempt_jobs_lock:
            while len(self.attempt_jobs) >= ATTEMPT_CACHE_MAX:
                del self.attempt_jobs[next(iter(self.attempt_jobs))]
            self.attempt_jobs[attempt_id] = (job_id, node_ids)

    def forget_attempt(self, attempt_id: int) -> None:
        """Its agent reported its end: its output has been sent (a late chunk reads the store)."""
        with self.attempt_jobs_lock:
            self.attempt_jobs.pop(attempt_id, None)

    def wake(self) -> None:
        """Ask for a pass now; safe from any thread."""
        if self.aio is not None and self.wake_event is not None:
            self.aio.call_soon_threadsafe(self.wake_event.set)

    def node_event(self, node_id: str) -> asyncio.Event:
        event = self.node_events.get(node_id)
        if event is None:
            event = self.node_events[node_id] = asyncio.Event()
        return event

    def _sample(self) -> tuple[float, int, int, int, float]:
        counts, fleet = self.store.counts(), self.store.fleet_counts()
        running = counts.get(JobState.CLAIMED.value, 0) + counts.get(JobState.RUNNING.value, 0)
        queued, nodes = counts.get(JobState.QUEUED.value, 0), sum(fleet.by_state.values())
        return time.time(), queued, running, nodes, fleet.cost_per_hour

    def release_waiters(self) -> None:
        """Stopping: answer every agent long-poll now (safe from a signal handler's thread)."""
        self.stopping = True
        if self.aio is not None:
            self.aio.call_soon_threadsafe(self._set_all_node_events)

    def _set_all_node_events(self) -> None:
        for event in self.node_events.values():
            event.set()

    def notify_node(self, node_id: str) -> None:
        if self.aio is not None:
            self.aio.call_soon_threadsafe(lambda: self.node_event(node_id).set())

    async def run_loop(self) -> None:
        assert self.loop is not None and self.wake_event is not None
        interval = self.config.loop.interval
        lost_at: float | None = None  # when the store was first found unreachable, in this outage
        retry_in = interval
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake_event.wait(), timeout=interval)
            self.wake_event.clear()
            try:
                report = await asyncio.to_thread(self.loop.run_pass)
            except Exception as exc:
                self.metrics.pass_errors.inc()
                reason = store_unreachable(exc)
                if reason is None:
                    refused = store_refused(exc)
                    if refused is None:
                        log.exception("reconcile pass failed")
                    else:
                        # A timeout its DBA set, a deadlock: the store rolled the pass back; the traceback
                        # would say nothing more.
                        log.warning(
                            "reconcile pass refused by the store: %s (rolled back; the next pass runs)", refused
                        )
                    await asyncio.sleep(interval)
                    continue
                # The database rolled back whatever the pass had begun to write; one line per try
                # says so, without the traceback, which says nothing more.
                if lost_at is None:
                    lost_at, retry_in = time.time(), interval
                    said = "no pass runs until it answers; the API answers 503"
                else:
                    retry_in = min(retry_in * 2, max(interval, STORE_RETRY_MAX))
                    said = f"unreachable for {time.time() - lost_at:.0f}s"
                log.warning("store unreachable: %s (%s; trying again in %gs)", reason, said, retry_in)
                await asyncio.sleep(retry_in)
                continue
            if lost_at is not None:
                log.warning(
                    "store reachable again after %.0fs: passes run again; nodes and dispatchers that could not"
                    " be heard meanwhile are given their full grace from now",
                    time.time() - lost_at,
                )
                lost_at = None
            self.metrics.passes.inc()
            self.metrics.pass_seconds.observe(report.duration)
            self.metrics.last_pass.set(time.time())
            if not self.history or time.time() - self.history[-1][0] >= HISTORY_EVERY:
                # Guarded as the pass is: a store lost just after a pass ended the loop's task for good.
                try:
                    self.history.append(await asyncio.to_thread(self._sample))
                except Exception as exc:
                    reason = store_unreachable(exc)
                    if reason is None:
                        log.exception("the dashboard's sample of the store failed")
                    else:
                        log.warning("store unreachable: %s (the dashboard's charts miss a sample)", reason)
            for node_id in report.started_nodes:
                self.node_event(node_id).set()
            if report.decisions.job_outcomes or report.decisions.node_marks:
                # What this pass freed may let the next pass place more.
                self.wake_event.set()


def create_app(runtime: Runtime) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        runtime.aio = asyncio.get_running_loop()
        runtime.wake_event = asyncio.Event()
        task = asyncio.create_task(runtime.run_loop()) if runtime.loop is not None else None
        try:
            yield
        finally:
            if task is not None and runtime.loop is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                if runtime.stop_fleet_on_exit:
                    log.info("stopping: requeueing running work and shutting the fleet down")
                    try:
                        await asyncio.to_thread(runtime.loop.shutdown_fleet, "corral stopped")
                    except Exception as exc:
                        reason = store_unreachable(exc)
                        if reason is None:
                            raise
                        # The work cannot be requeued without the store, nor the fleet's end recorded:
                        # both are left as a --keep-fleet stop leaves them, for the next start to take
                        # back, rather than the stop failing half-way with a traceback.
                        log.error(
                            "store unreachable: %s: the fleet and its work are left running, as with --keep-fleet;"
                            " the next corral run on this data directory takes them back (or stop it again then"
                            " to shut them down)",
                            reason,
                        )
                        left = "its fleet and work kept for its next start (the store was unreachable)"
                    else:
                        left = "its work requeued, its fleet shut down"
                else:
                    log.info("stopping: the fleet and its work keep running for the next corral (--keep-fleet)")
                    left = "its fleet and work kept for its next start (--keep-fleet)"
                try:
                    await asyncio.to_thread(
                        runtime.store.dispatcher_stopped, runtime.loop.dispatcher_id, time.time(), left
                    )
                except Exception as exc:  # the store gone too: the others see it fall silent, as after a crash
                    reason = store_unreachable(exc)
                    if reason is None:
                        log.exception("cannot record this dispatcher's stop in the store")
                    else:
                        log.warning("cannot record this dispatcher's stop in the store: unreachable: %s", reason)
            for stop in runtime.on_stop:
                stop()

    app = FastAPI(title="corral", version="0.1.0", lifespan=lifespan)
    app.state.runtime = runtime
    app.add_middleware(GuardBodies, runtime=runtime)
    app.add_middleware(RefuseNul)

    @app.exception_handler(NotFound)
    async def _not_found(_request: Request, exc: NotFound) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=404)

    @app.exception_handler(InvalidJobs)
    async def _invalid_jobs(_request: Request, exc: InvalidJobs) -> JSONResponse:
        # As a request that fails validation: one line per problem, naming the job and field.
        return JSONResponse({"detail": exc.problems}, status_code=422)

    async def _store_unreachable(request: Request, exc: Exception) -> JSONResponse:
        reason = store_unreachable(exc)
        if reason is None:
            refused = store_refused(exc)
            if refused is None:
                raise exc  # a fault of corral's or of the store's data: the 500 and its traceback
            # The store answered, and rolled the request's transaction back: a lock_timeout or
            # statement_timeout its DBA set, a deadlock with another writer. The CLI's submit sends
            # a 503 again by itself (its key queues it once); a person is told to.
            log.warning("store refused %s %s: %s (answered 503)", request.method, request.url.path, refused)
            detail = f"the store refused it for now ({refused}); its transaction was rolled back: try again shortly"
            return JSONResponse({"detail": detail}, status_code=503, headers=RETRY_AFTER)
        if runtime.store_refusals.due():
            log.warning(
                "store unreachable: %s (%s %s answered 503; such answers are logged once per %gs)",
                reason,
                request.method,
                request.url.path,
                STORE_REFUSALS_LOGGED_EVERY,
            )
        # The transaction it was in was rolled back by the database. Agents send theirs again by
        # themselves (any 5xx is an unreachable server to them); a person is told to.
        detail = f"the store is unreachable ({reason}): try again shortly"
        return JSONResponse({"detail": detail}, status_code=503, headers=RETRY_AFTER)

    app.add_exception_handler(OperationalError, _store_unreachable)
    app.add_exception_handler(InterfaceError, _store_unreachable)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        for item in errors:
            if item.get("type") == "json_invalid":
                # Not a bad value but no JSON at all (error_responses: a 400, with a detail).
                at = item.get("loc", ("body", 0))[-1]
                why = (item.get("ctx") or {}).get("error", "invalid")
                return JSONResponse({"detail": f"the body is not JSON: {why} (at character {at})"}, status_code=400)
        return JSONResponse({"detail": describe_validation_errors(_naming_input(errors))}, status_code=422)

    @app.get("/metrics", include_in_schema=False)
    def metrics() -> PlainTextResponse:
        config = runtime.config
        names = [instance_type.name for instance_type in config.instance_types] if config.executor == "agent" else []
        exposition = runtime.metrics.exposition(runtime.store, time.time(), config.policy, names)
        return PlainTextResponse(exposition, media_type=CONTENT_TYPE_LATEST)

    @app.get("/api/live")
    async def live() -> dict[str, Any]:
        # Liveness: the process answers. It reads no store, so that a watchdog or a Kubernetes
        # liveness probe does not restart corral in a loop through a database outage, which a
        # restart cannot end (and a start with the store unreachable fails). On the event loop,
        # not in the worker threads: health checks hung on a store that does not answer at all
        # (a dropped network) can take every worker thread, and liveness must not wait for one.
        return {"ok": True, "dispatcher": runtime.loop.dispatcher_id if runtime.loop else None}

    @app.get("/api/health")
    def health() -> JSONResponse:
        # Readiness: this dispatcher can serve. With the store unreachable every other call answers
        # 503, and a load balancer that went on sending them here would only have them refused.
        dispatcher = runtime.loop.dispatcher_id if runtime.loop else None
        try:
            runtime.store.answers()
        except (OperationalError, InterfaceError) as exc:
            reason = store_unreachable(exc)
            if reason is None:
                raise  # the store answered, with an error of corral's: the 500, as for any route
            return JSONResponse(
                {"ok": False, "dispatcher": dispatcher, "store": f"unreachable: {reason}"},
                status_code=503,
                headers=RETRY_AFTER,
            )
        return JSONResponse({"ok": True, "dispatcher": dispatcher, "store": "reachable"})

    from corral.server import agent_api, api, dashboard

    app.include_router(api.router)
    app.include_router(agent_api.router)
    app.include_router(dashboard.router)
    return app


@dataclass(frozen=True)
class Caller:
    """Who sent a request: the operator (the data directory's `token`, named OPERATOR) or a user of
    `corral users add`. An admin may do anything; a user changes only their own jobs."""

    name: str
    admin: bool


OPERATOR = Caller("", admin=True)
WRONG_TOKEN = (
    "wrong API token: neither CORRAL_HOME/token nor a user's token (corral users add); a removed user's is refused"
)


def caller_for(authorization: str | None, runtime: Runtime) -> Caller | str:
    """The caller a request's Authorization header names, or why it names none. The API token is
    compared in constant time, as bytes: compare_digest raises TypeError (a 500) on a str that is
    not ASCII, and a header may be any latin-1. A user's token is looked up by its hash, in the store
    each time, so that a removed user's is refused at once, by every dispatcher."""
    token = bearer_token(authorization)
    if token is None:
        return "missing bearer token"
    if hmac.compare_digest(token.encode(), runtime.api_token.encode()):
        return OPERATOR
    user = runtime.store.user_for_token(token, time.time())
    if user is None:
        return WRONG_TOKEN
    return Caller(user["name"], user["admin"])


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer TOKEN` header; None without one."""
    if not authorization or not authorization.lower().startswith("bearer "):
        return None
    return authorization.split(" ", 1)[1].strip()


class RefuseNul:
    """A NUL character in a request's path or query is refused (422, naming the parameter) before
    any route reads it: no name, tag, kind or id holds one (submissions refuse it), and PostgreSQL
    takes none in a text, so a listing filtered by one was a 500 with a traceback."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            query = scope.get("query_string", b"")
            where = ["path"] if "\x00" in scope["path"] else []
            if b"%00" in query or b"\x00" in query:
                pairs = urllib.parse.parse_qsl(query.decode("latin-1"), keep_blank_values=True)
                where += [f"query.{key}" for key, value in pairs if "\x00" in key + value]
            if where:
                detail = [f"{name}: a NUL character is not allowed" for name in dict.fromkeys(where)]
                await JSONResponse({"detail": detail}, status_code=422)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class GuardBodies:
    """What the server reads of a request's body, before FastAPI reads it (whole, into memory) and
    parses it (into some ten times its size), which it does before a route's dependencies, the
    token check among them, run:
    - a user route's request with a body is refused (401) unread when it carries neither the API
      token nor a user's (the routes' own check, corral.server.deps.require_user, stays);
    - a body longer than its route takes (body_limit) is refused (413): at once when its
      Content-Length says so, else as soon as the bytes received pass the limit."""

    def __init__(self, app: ASGIApp, runtime: Runtime) -> None:
        self.app = app
        self.runtime = runtime

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        method, path = scope["method"], scope["path"]
        headers = dict(scope["headers"])
        if _user_route(path):
            header = headers.get(b"authorization")
            authorization = None if header is None else header.decode("latin-1")
            caller = await asyncio.to_thread(caller_for, authorization, self.runtime)
            if isinstance(caller, str):
                await JSONResponse({"detail": caller}, status_code=401)(scope, receive, send)
                return
            # Kept for the route's own check (deps.get_caller): a user's token is looked up once.
            scope.setdefault("state", {})["caller"] = caller
        limit = body_limit(method, path)
        too_large = StarletteHTTPException(
            413, f"the request's body has more than {limit:,} bytes, the most {method} {path} takes"
        )
        declared = headers.get(b"content-length", b"")
        if declared.isdigit() and int(declared) > limit:
            await JSONResponse({"detail": too_large.detail}, status_code=413)(scope, receive, send)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    # Raised where the body is read: an HTTPException, which FastAPI lets through
                    # its body parsing and answers as any other (a JSON detail).
                    raise too_large
            return message

        await self.app(scope, counted, send)


def body_limit(method: str, path: str) -> int:
    """The most bytes of body a request to `path` may have."""
    if method == "POST" and path == "/api/jobs":
        return MAX_SUBMIT_BODY
    if method == "POST" and path.startswith("/api/agent/attempts/") and path.endswith("/log"):
        return MAX_LOG_CHUNK_BODY
    return MAX_BODY


def _user_route(path: str) -> bool:
    return path.startswith("/api/") and not path.startswith("/api/agent/") and path not in ("/api/health", "/api/live")


def _naming_input(errors: Any) -> list[dict[str, Any]]:
    """A bad query or path parameter's error with the value given ("query.state.0: Input should
    be 'queued', ... (got 'bogus')"): of several values, or a value the user's shell made, which
    one is refused is not otherwise said. (A body's values are the caller's own document, and may
    be large: named by their field alone.)"""
    out = []
    for item in errors:
        given = item.get("input")
        where = item.get("loc", ())
        if where and where[0] in ("query", "path") and isinstance(given, str | int | float) and len(str(given)) <= 80:
            item = {**item, "msg": f"{item.get('msg', 'invalid')} (got {given!r})"}
        out.append(item)
    return out


def new_api_token() -> str:
    return secrets.token_urlsafe(32)
