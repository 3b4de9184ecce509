"""A small real HTTP peer for agent tests: the agent API of docs/agent.md, served by uvicorn on
127.0.0.1 in a thread, with its state open to the test (queue work, ask for kills, go away and come
back on the same port)."""

from __future__ import annotations

import asyncio
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.support import wait_until


@dataclass
class PeerState:
    tokens: dict[str, str] = field(default_factory=dict)  # boot token -> node id, until used
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)  # node id -> pair body
    secrets: dict[str, str] = field(default_factory=dict)  # secret -> node id
    queue: dict[int, dict[str, Any]] = field(default_factory=dict)  # attempts not yet reported started
    started: dict[int, int] = field(default_factory=dict)  # attempt -> pid
    started_at: dict[int, float] = field(default_factory=dict)  # attempt -> the start time reported
    starts_down: bool = False  # "started" answers 503, as a server that is down
    unwanted: set[int] = field(default_factory=set)  # "started" answers 409
    logs: dict[int, bytearray] = field(default_factory=dict)
    log_offsets: list[tuple[int, int]] = field(default_factory=list)  # (attempt, offset) of every chunk taken
    stderr_logs: dict[int, bytearray] = field(default_factory=dict)  # the stream "stderr" (separate_stderr)
    stderr_offsets: list[tuple[int, int]] = field(default_factory=list)  # as log_offsets, of its chunks
    # The start of each chunk of either stream, in the order taken, and of each finish: (what, attempt).
    arrivals: list[tuple[str, int]] = field(default_factory=list)
    finished: dict[int, tuple[int, float]] = field(default_factory=dict)
    reports: dict[int, dict[str, Any]] = field(default_factory=dict)  # attempt -> its first finish report, whole
    kill: set[int] = field(default_factory=set)
    pings: list[dict[str, Any]] = field(default_factory=list)
    resumes: list[dict[str, Any]] = field(default_factory=list)  # bodies of restarted agents' resumes
    lost: set[int] = field(default_factory=set)  # attempts started, not finished, not run on after a resume
    shutdown: bool = False
    forget: bool = False  # answer 401 to everything
    closing: bool = False  # the server is stopping: end long-polls now
    ping_interval: float = 0.2
    log_delay: float = 0.0  # seconds each log chunk takes to be taken (a slow server or link)
    # The container engine pairing and resuming name ([containers]); no program: none.
    containers: dict[str, list[str]] = field(default_factory=lambda: {"program": [], "run_args": []})
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add_token(self, node_id: str) -> str:
        token = secrets.token_hex(8)
        with self.lock:
            self.tokens[token] = node_id
        return token

    def assign(self, attempt_id: int, node_id: str, command: list[str], **extra: Any) -> None:
        with self.lock:
            self.queue[attempt_id] = {
                "attempt_id": attempt_id,
                "job_id": extra.pop("job_id", attempt_id * 10),
                "command": command,
                "env": extra.pop("env", {}),
                "node_ids": extra.pop("node_ids", [node_id]),
                "resources": {"vcpus": 1.0, "ram_mib": 64, "scratch_mib": 0, "gpus": 0},
                "_node": node_id,
                **extra,  # (a work item's other fields: separate_stderr, ...)
            }

    def log_text(self, attempt_id: int) -> str:
        with self.lock:
            return bytes(self.logs.get(attempt_id, b"")).decode(errors="replace")

    def stderr_text(self, attempt_id: int) -> str:
        with self.lock:
            return bytes(self.stderr_logs.get(attempt_id, b"")).decode(errors="replace")


def build_app(state: PeerState) -> Starlette:
    def node_of(request: Request) -> str | None:
        header = request.headers.get("authorization", "")
        if state.forget or not header.startswith("Bearer "):
            return None
        return state.secrets.get(header.removeprefix("Bearer "))

    def unauthorized() -> Response:
        return JSONResponse({"detail": "unknown node"}, status_code=401)

    async def pair(request: Request) -> Response:
        body = await request.json()
        with state.lock:
            node = state.tokens.pop(body.get("boot_token"), None)
            if node is None or node != body.get("node_id"):
                return JSONResponse({"detail": "bad boot token"}, status_code=403)
            secret = secrets.token_hex(16)
            state.secrets[secret] = node
            state.nodes[node] = body
        return JSONResponse(
            {"node_id": node, "secret": secret, "ping_interval": state.ping_interval, "containers": state.containers}
        )

    async def resume(request: Request) -> Response:
        node = node_of(request)
        if node is None:
            return unauthorized()
        body = await request.json()
        if body.get("node_id") != node:
            return JSONResponse({"detail": "another node's secret"}, status_code=403)
        with state.lock:
            state.resumes.append(body)
            lost = sorted(a for a in state.started if a not in state.finished and a not in body["running"])
            state.lost.update(lost)
            stored = {a: len(state.logs.get(a, b"")) for a in body["running"]}
            stderr_stored = {a: len(state.stderr_logs.get(a, b"")) for a in body["running"]}
        return JSONResponse(
            {
                "node_id": node,
                "ping_interval": state.ping_interval,
                "containers": state.containers,
                "lost": lost,
                "output_stored": stored,
                "stderr_stored": stderr_stored,
            }
        )

    async def ping(request: Request) -> Response:
        if node_of(request) is None:
            return unauthorized()
        body = await request.json()
        with state.lock:
            state.pings.append(body)
            ack = []
            for item in body["finished"]:
                state.finished.setdefault(item["attempt_id"], (item["exit_code"], item["finished_at"]))
                state.reports.setdefault(item["attempt_id"], item)
                state.arrivals.append(("finished", item["attempt_id"]))
                ack.append(item["attempt_id"])
            kill = sorted(a for a in state.kill if a not in state.finished)
            return JSONResponse({"kill": kill, "ack": ack, "shutdown": state.shutdown})

    async def work(request: Request) -> Response:
        node = node_of(request)
        if node is None:
            return unauthorized()
        deadline = time.monotonic() + float(request.query_params.get("wait", "0"))
        while True:
            with state.lock:
                items = [
                    {k: v for k, v in a.items() if k != "_node"} for a in state.queue.values() if a["_node"] == node
                ]
            if items or time.monotonic() >= deadline or state.forget or state.closing:
                return JSONResponse({"attempts": items})
            await asyncio.sleep(0.02)

    async def started(request: Request) -> Response:
        if node_of(request) is None:
            return unauthorized()
        aid = int(request.path_params["aid"])
        body = await request.json()
        with state.lock:
            if state.starts_down:
                return JSONResponse({"detail": "down"}, status_code=503)
            state.queue.pop(aid, None)
            state.started[aid] = body["pid"]
            state.started_at[aid] = body["started_at"]
            if aid in state.unwanted:
                return JSONResponse({"detail": "cancelled"}, status_code=409)
        return JSONResponse({})

    async def log(request: Request) -> Response:
        if node_of(request) is None:
            return unauthorized()
        aid = int(request.path_params["aid"])
        offset = int(request.query_params["offset"])
        stream = request.query_params.get("stream", "output")
        data = await request.body()
        await asyncio.sleep(state.log_delay)
        with state.lock:
            kept, offsets = (
                (state.logs, state.log_offsets) if stream == "output" else (state.stderr_logs, state.stderr_offsets)
            )
            buf = kept.setdefault(aid, bytearray())
            if offset > len(buf):
                return JSONResponse({"detail": "gap"}, status_code=409)
            buf[offset : offset + len(data)] = data
            offsets.append((aid, offset))
            state.arrivals.append((stream, aid))
        return JSONResponse({})

    async def finished(request: Request) -> Response:
        if node_of(request) is None:
            return unauthorized()
        aid = int(request.path_params["aid"])
        body = await request.json()
        with state.lock:
            state.finished.setdefault(aid, (body["exit_code"], body["finished_at"]))
            state.reports.setdefault(aid, body)
            state.arrivals.append(("finished", aid))
        return JSONResponse({})

    return Starlette(
        routes=[
            Route("/api/agent/pair", pair, methods=["POST"]),
            Route("/api/agent/resume", resume, methods=["POST"]),
            Route("/api/agent/ping", ping, methods=["POST"]),
            Route("/api/agent/work", work, methods=["GET"]),
            Route("/api/agent/attempts/{aid:int}/started", started, methods=["POST"]),
            Route("/api/agent/attempts/{aid:int}/log", log, methods=["POST"]),
            Route("/api/agent/attempts/{aid:int}/finished", finished, methods=["POST"]),
        ]
    )


class Peer:
    """Serves `state` on 127.0.0.1; `stop()` and `start()` again keep the port and the state."""

    def __init__(self, state: PeerState | None = None, port: int = 0) -> None:
        self.state = state or PeerState()
        self.port = port
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Peer:
        config = uvicorn.Config(
            build_app(self.state), host="127.0.0.1", port=self.port, log_level="warning", timeout_graceful_shutdown=2
        )
        self.state.closing = False
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        wait_until(lambda: server.started or not thread.is_alive(), 10, "peer server start")
        assert server.started, "peer server did not start"
        self.port = server.servers[0].sockets[0].getsockname()[1]
        self._server, self._thread = server, thread
        return self

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self.state.closing = True
            self._server.should_exit = True
            self._thread.join(10)
        self._server = self._thread = None
