"""The signals an operator's tools send a running `corral run`."""

from __future__ import annotations

import json
import signal

import httpx
import pytest

from tests.e2e.conftest import Corral
from tests.support import heard_by_systemd, systemd_notify_socket, wait_until


def test_sighup_is_logged_and_ignored_and_a_sigterm_after_it_still_stops_cleanly(
    corral: Corral, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen: a logrotate postrotate's `kill -HUP` ended corral at once, as a crash does: no clean
    stop, server.json left behind, and under systemd no restart (Restart=on-failure takes a
    SIGHUP for a clean end). Run with --log-format json, as a shipper to Elasticsearch wants it:
    every line it writes, from start to stop, must parse. Under a unit of Type=notify, systemd
    hears that it serves, and that it stops."""
    with systemd_notify_socket() as (path, listening):
        monkeypatch.setenv("NOTIFY_SOCKET", path)
        corral.start("--log-format", "json")
        assert corral.process is not None
        assert heard_by_systemd(listening, "READY=1")[-1].startswith("READY=1")
        corral.process.send_signal(signal.SIGHUP)
        wait_until(lambda: "SIGHUP received and ignored" in corral.server_log(), 30, "corral to log the SIGHUP")
        assert corral.process.poll() is None, corral.server_log()
        assert httpx.get(f"{corral.base}/api/health", timeout=10).status_code == 200
        corral.stop(signal.SIGTERM)
        assert heard_by_systemd(listening, "STOPPING=1")[-1].startswith("STOPPING=1")
        assert not (corral.home / "server.json").exists()
        # Every line the process wrote, from start to stop, is one JSON object (--log-format json).
        lines = [json.loads(line) for line in corral.log_files[0].read_text().splitlines()]
        assert {"ts", "level", "logger", "msg"} <= set(lines[0])
        said = [line["msg"] for line in lines]
        assert "stopping: requeueing running work and shutting the fleet down" in said
