"""Helpers shared by the test suites."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypedDict

import pytest
import uvicorn

from corral.config import Config
from corral.core.dependency import Dependency
from corral.core.model import JobState, LocalityHints, NodeFailureAction, NodeState, Resources
from corral.server.app import Runtime, create_app
from corral.server.logstore import LogStore
from corral.store import Store


class JobFields(TypedDict, total=False):
    """The fields of a core Job a test may set besides its id, command and resources: test helpers
    that build a Job take them as keyword arguments (`**fields: Unpack[JobFields]`), so mypy checks
    each name and value against the Job they end up in."""

    name: str
    env: dict[str, str]
    node_count: int
    priority: int
    not_before: float | None
    time_limit: float | None
    max_retries: int
    tags: tuple[str, ...]
    locality: LocalityHints | None
    traits: dict[str, str | list[str]]
    user: str
    state: JobState
    submitted_at: float
    claimed_by: str | None
    retry_at: float | None
    temp_failures: int
    perm_failures: int
    attempt_count: int
    exit_code: int | None
    wait_reason: str
    unplaceable: bool
    cancel_requested: bool
    requeue_requested: bool
    started_at: float | None
    finished_at: float | None
    forbidden_traits: dict[str, str | list[str]]
    min_platform: str | None
    cpu_capped: bool
    exclusive: bool
    reservation: str
    on_node_failure: NodeFailureAction | None
    held: bool
    dependency: Dependency | None


class NodeFields(TypedDict, total=False):
    """The fields of a core Node a test may set besides its id, type, capacity and price (as
    JobFields for a Job)."""

    state: NodeState
    created_at: float
    paired_at: float | None
    last_ping_at: float | None
    state_changed_at: float
    used: Resources
    used_at: float | None
    attributes: dict[str, str | list[str]]
    rack: str
    reason: str
    billing_granularity: float
    billing_minimum: float


class AttemptFields(TypedDict, total=False):
    """The fields of a core Attempt a test may set besides its ids, nodes, resources, state and
    dispatcher (as JobFields for a Job)."""

    assigned_at: float
    started_at: float | None
    finished_at: float | None
    exit_code: int | None
    reason: str


@contextlib.contextmanager
def interrupts_at_default() -> Iterator[None]:
    """SIGINT and SIGQUIT at their defaults while the block starts processes, whatever this process
    has: a test run started in the background by a shell (`make test &`) ignores both, and so would
    every program it started (seen: SigIgn 0x...1006), where a terminal or slurmstepd gives them
    their defaults."""
    was = signal.signal(signal.SIGINT, signal.default_int_handler), signal.signal(signal.SIGQUIT, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, was[0])
        signal.signal(signal.SIGQUIT, was[1])


def alive(pid: int) -> bool:
    """Whether the process runs: it exists and is not a zombie (an exited child not reaped yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return not stat[stat.rfind(")") + 2 :].startswith("Z")


def children(pid: int) -> list[int]:
    """The live child processes of `pid` (a loopback instance's init has its agent as its one child)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and alive(int(entry.name)):
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rfind(")") + 2 :].split()[1]) == pid:
                out.append(int(entry.name))
    return out


def wait_until(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> Any:
    """Poll `predicate` until it is truthy and return its value; fail naming `what` after `timeout`
    seconds. Tests wait for real processes this way instead of sleeping a guessed time. A predicate
    that runs a `corral` command takes a second of CPU on a 2-CPU host: called back to back, the
    wait would take a CPU from the processes it waits for (and the other tests), so between two
    calls it sleeps at least as long as the last call took."""
    deadline = time.monotonic() + timeout
    while True:
        called = time.monotonic()
        value = predicate()
        if value:
            return value
        now = time.monotonic()
        if now > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(max(interval, now - called))


@contextlib.contextmanager
def served_app(
    data_dir: Path, config: Config | None = None, store_url: str | None = None
) -> Iterator[tuple[str, Store]]:
    """corral's server app (no control loop) on a real store (SQLite in `data_dir`, unless
    `store_url`), served over HTTP on 127.0.0.1 in a thread: its address, and the store to arrange
    and read."""
    store = Store(store_url or f"sqlite:///{data_dir / 'corral.db'}")
    store.migrate()
    try:
        with served_store(store, data_dir, config) as url:
            yield url, store
    finally:
        store.close()


def read_message(conn: socket.socket) -> bytes:
    """One HTTP/1.1 message read from `conn`, its head and its body by content-length."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")),
        0,
    )
    while len(body) < length:
        body += conn.recv(65536)
    return head + b"\r\n\r\n" + body


@contextlib.contextmanager
def http_proxy(backend: str, answer: Callable[[bytes, Callable[[bytes], bytes]], bytes | None]) -> Iterator[str]:
    """A TCP proxy on 127.0.0.1 to `backend` (http://HOST:PORT), a connection per request: its
    address. `answer(request, forward)` gives what to answer a request with (None: close the
    connection without an answer); `forward(request)` sends it to `backend` and returns its answer."""
    host, port = backend.removeprefix("http://").split(":")
    listening = socket.create_server(("127.0.0.1", 0))

    def forward(asked: bytes) -> bytes:
        with socket.create_connection((host, int(port))) as upstream:
            upstream.sendall(asked)
            return read_message(upstream)

    def serve() -> None:
        while True:
            try:
                conn, _ = listening.accept()
            except OSError:
                return
            with conn:
                answered = answer(read_message(conn), forward)
                if answered is not None:
                    conn.sendall(answered)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listening.getsockname()[1]}"
    finally:
        listening.close()


@contextlib.contextmanager
def served_store(store: Store, data_dir: Path, config: Config | None = None) -> Iterator[str]:
    """corral's server app (no control loop) on a migrated store of any backend, served as
    served_app serves it: its address. The store stays open."""
    config = config or Config()
    logs = LogStore(data_dir / "logs", config.server.max_output_bytes)
    runtime = Runtime(config=config, store=store, logs=logs, api_token="t")
    server = uvicorn.Server(uvicorn.Config(create_app(runtime), host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started or not thread.is_alive(), 10, "the server to start")
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def debian_packages_missing(packages: list[str], missing: Callable[[], list[str]]) -> str | None:
    """Why what `missing` names (programs, files) cannot be had here, installing Debian's `packages`
    first if need be (as root, with apt-get); None once nothing is missing."""
    if not missing():
        return None
    if os.geteuid() != 0:
        return f"{', '.join(missing())} missing, and the tests do not run as root to install {' '.join(packages)}"
    if shutil.which("apt-get") is None:
        return f"{', '.join(missing())} missing, and there is no apt-get"
    # The test workers install at once on a fresh machine (Slurm in one, podman in another), and
    # dpkg takes one at a time: each waits its turn here, then finds what the other put in.
    with open(Path(tempfile.gettempdir()) / "corral-tests-apt.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not missing():
            return None
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        # Waits for an apt run outside the tests (unattended upgrades) rather than failing at once.
        apt = ["apt-get", "-o", "DPkg::Lock::Timeout=600"]
        command = [*apt, "install", "-y", "--no-install-recommends", *packages]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900, check=False)
        if done.returncode != 0:
            # The package lists may be missing (a fresh container): update once and try again.
            subprocess.run([*apt, "update"], env=env, capture_output=True, timeout=900, check=False)
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0 or missing():
        return f"installing {' '.join(packages)} failed: {done.stderr.strip()[-500:]}"
    return None


def require(unavailable: str | None, what: str) -> None:
    """Skip with the reason why a real part is not here; under CI=true that is a failure instead:
    CI never goes green without them."""
    if unavailable is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true: {what} must run, but {unavailable}", pytrace=False)
    pytest.skip(unavailable)


@contextlib.contextmanager
def systemd_notify_socket() -> Iterator[tuple[str, socket.socket]]:
    """A datagram socket where systemd's NOTIFY_SOCKET would be, to hear what corral tells systemd
    (a short path: a socket's may have 107 bytes, which a test's tmp_path can pass)."""
    root = tempfile.mkdtemp(prefix="corral-sd-")
    path = f"{root}/notify"
    listening = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listening.bind(path)
    listening.settimeout(10)
    try:
        yield path, listening
    finally:
        listening.close()
        shutil.rmtree(root, ignore_errors=True)


def heard_by_systemd(listening: socket.socket, until: str) -> list[str]:
    """The messages sent to `listening`, up to the first that holds `until`."""
    said: list[str] = []
    while not said or until not in said[-1]:
        said.append(listening.recv(4096).decode())
    return said


def utc(epoch: float) -> str:
    """A time as corral's event messages write it (a back-off's end)."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch))
