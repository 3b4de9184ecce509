"""corral run under a systemd unit of Type=notify with WatchdogSec=: what systemd hears from it,
read off a socket of the test's own that stands for systemd's."""

from __future__ import annotations

import os
import signal
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn

from corral.config import Config
from corral.serve import CorralServer, SystemdNotifier
from corral.server.app import Runtime, create_app
from corral.server.logstore import LogStore
from corral.store import Store
from tests.support import heard_by_systemd, systemd_notify_socket


@pytest.fixture
def systemd() -> Iterator[tuple[str, socket.socket]]:
    with systemd_notify_socket() as (path, listening):
        yield path, listening


def test_systemd_hears_ready_once_corral_serves_then_the_watchdog_then_stopping(
    systemd: tuple[str, socket.socket], tmp_path: Path
) -> None:
    """Seen: corral said nothing to systemd, so a unit could only be Type=simple (started the moment
    the process was, before the store's migration or a failed bind) and had no watchdog for a hung
    process."""
    path, listening = systemd
    environ = {"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "200000", "WATCHDOG_PID": str(os.getpid()), "HOME": "/x"}
    notifier = SystemdNotifier(environ)
    assert environ == {"HOME": "/x"}  # the agents corral starts do not speak for it
    store = Store(f"sqlite:///{tmp_path / 'corral.db'}")
    store.migrate()
    runtime = Runtime(config=Config(), store=store, logs=LogStore(tmp_path / "logs"), api_token="t")
    server = CorralServer(uvicorn.Config(create_app(runtime), host="127.0.0.1", port=0, log_level="warning"))
    server.notifier = notifier
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        [ready] = heard_by_systemd(listening, "READY=1")
        assert server.started
        assert ready.splitlines() == ["READY=1", "STATUS=serving"]
        # Fed every half of WatchdogSec (0.2 s here) for as long as the event loop runs.
        assert heard_by_systemd(listening, "WATCHDOG=1")[-1] == "WATCHDOG=1"
        assert heard_by_systemd(listening, "WATCHDOG=1")[-1] == "WATCHDOG=1"
        server.handle_exit(signal.SIGTERM, None)
        assert heard_by_systemd(listening, "STOPPING=1")[-1].startswith("STOPPING=1\n")
    finally:
        server.should_exit = True
        thread.join(10)
        store.close()
    assert not thread.is_alive()


def test_without_systemd_or_its_watchdog_nothing_is_sent() -> None:
    quiet = SystemdNotifier({})
    quiet.send("READY=1")  # no socket to send to: nothing, and no error
    quiet.watchdog(1000.0)
    another = SystemdNotifier({"NOTIFY_SOCKET": "/nonexistent", "WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "1"})
    assert another.watchdog_every is None  # the watchdog is another process's (WATCHDOG_PID)
