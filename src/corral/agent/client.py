"""The agent's side of the agent HTTP API (see docs/agent.md).

Three kinds of failure matter to the agent, and each maps to one exception: the server cannot be
reached or is failing (`Unreachable`: keep working, retry later), the server no longer knows this
node (`Unauthorized`: kill everything and exit), and the server refuses this particular request
(`Rejected`: give that request up).
"""

from __future__ import annotations

import ssl
import threading
from typing import Any

import httpx

from corral import AGENT_KNOWS


class Unreachable(Exception):
    """A connection error, a timeout or a 5xx: the server may be starting or restarting."""


class Unauthorized(Exception):
    """401: the server does not know this node (any more)."""


class Rejected(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail


class AgentClient:
    """One httpx client per thread (the work long-poll must never queue behind a log upload)."""

    def __init__(self, server: str, timeout: float = 10.0, ca_file: str | None = None) -> None:
        self.server = server.rstrip("/")
        self.timeout = timeout
        # An https server is verified with this CA bundle (None: the system's trusted CAs).
        self._verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=ca_file) if ca_file else True
        self.secret: str | None = None
        self._local = threading.local()

    def _client(self) -> httpx.Client:
        client: httpx.Client | None = getattr(self._local, "client", None)
        if client is None:
            # trust_env=False: a proxy setting in the environment must not reroute node traffic.
            client = httpx.Client(base_url=self.server, timeout=self.timeout, trust_env=False, verify=self._verify)
            self._local.client = client
        return client

    def close(self) -> None:
        client = getattr(self._local, "client", None)
        if client is not None:
            client.close()
            self._local.client = None

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        content: bytes | None = None,
        params: dict[str, Any] | None = None,
        timeout: float | None = None,
        auth: bool = True,
    ) -> Any:
        headers = {}
        if auth and self.secret:
            headers["Authorization"] = f"Bearer {self.secret}"
        if content is not None:
            headers["Content-Type"] = "application/octet-stream"
        try:
            response = self._client().request(
                method,
                path,
                json=json,
                content=content,
                params=params,
                headers=headers,
                timeout=self.timeout if timeout is None else timeout,
            )
        except httpx.HTTPError as exc:
            raise Unreachable(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        if response.status_code >= 500:
            raise Unreachable(f"{method} {path}: HTTP {response.status_code}")
        if response.status_code == 401:
            raise Unauthorized(f"{method} {path}: HTTP 401: {response.text[:200]}")
        if response.status_code >= 400:
            raise Rejected(response.status_code, response.text[:500])
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            return None

    def pair(self, body: dict[str, Any]) -> dict[str, Any]:
        data = self.request("POST", "/api/agent/pair", json=body, auth=False)
        if not isinstance(data, dict) or not isinstance(data.get("secret"), str):
            raise Unreachable(f"pair: unexpected answer {data!r}")
        self.secret = data["secret"]
        return data

    def resume(self, secret: str, body: dict[str, Any]) -> dict[str, Any]:
        """Come back as the node whose secret this is (saved at pairing by an earlier agent)."""
        self.secret = secret
        data = self.request("POST", "/api/agent/resume", json=body)
        if not isinstance(data, dict) or not isinstance(data.get("lost"), list):
            raise Unreachable(f"resume: unexpected answer {data!r}")
        return data

    def ping(self, body: dict[str, Any]) -> dict[str, Any]:
        data = self.request("POST", "/api/agent/ping", json=body)
        return data if isinstance(data, dict) else {}

    def work(self, wait: float) -> list[Any]:
        params = {"wait": wait, "knows": list(AGENT_KNOWS)}  # (an older server ignores `knows`)
        data = self.request("GET", "/api/agent/work", params=params, timeout=wait + self.timeout)
        attempts = data.get("attempts") if isinstance(data, dict) else None
        return attempts if isinstance(attempts, list) else []

    def started(self, attempt_id: int, pid: int, started_at: float) -> None:
        body = {"pid": pid, "started_at": started_at}
        self.request("POST", f"/api/agent/attempts/{attempt_id}/started", json=body)

    def log(self, attempt_id: int, offset: int, chunk: bytes, stream: str = "output") -> None:
        """A chunk of the attempt's output, or of its stderr kept apart (`stream="stderr"`; sent only
        for a job with separate_stderr, which a server before streams never gives out)."""
        params: dict[str, Any] = {"offset": offset}
        if stream != "output":
            params["stream"] = stream
        self.request("POST", f"/api/agent/attempts/{attempt_id}/log", params=params, content=chunk)

    def finished(
        self,
        attempt_id: int,
        exit_code: int,
        finished_at: float,
        timed_out: bool = False,
        timeout: float | None = None,
        reason: str = "",
        exit_signal: int | None = None,
        cpu_seconds: float | None = None,
        max_rss_mib: int | None = None,
    ) -> None:
        body: dict[str, Any] = {"exit_code": exit_code, "finished_at": finished_at}
        if exit_signal is not None:
            body["exit_signal"] = exit_signal  # the signal that killed it (an older server ignores it)
        # What the run used, where known (an older server ignores them).
        if cpu_seconds is not None:
            body["cpu_seconds"] = cpu_seconds
        if max_rss_mib is not None:
            body["max_rss_mib"] = max_rss_mib
        if timed_out:
            body["timed_out"] = True  # ended at its time limit by the agent itself
        if reason:
            body["reason"] = reason  # why the command never ran (an older server ignores it)
        self.request("POST", f"/api/agent/attempts/{attempt_id}/finished", json=body, timeout=timeout)
