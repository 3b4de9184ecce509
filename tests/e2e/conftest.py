"""A real `corral run` process in a temporary data directory, driven through the real CLI."""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from corral.cloud.loopback import LoopbackCloud
from tests.support import wait_until

CORRAL = str(Path(sys.executable).parent / "corral")

CONFIG = """
[cloud]
ping_interval = "0.5s"

[loop]
interval = "0.5s"

[[instance_types]]
name = "small"
vcpus = 2
ram = "2GiB"
price_per_hour = 0.085

[[instance_types]]
name = "medium"
vcpus = 4
ram = "8GiB"
price_per_hour = 0.192

[policy.lifecycle]
idle_grace = "2s"
boot_grace = "60s"

[policy.boot]
max_instances = 4

[policy.retry]
backoff_initial = "1s"
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Corral:
    home: Path
    port: int
    config: Path
    process: subprocess.Popen[bytes] | None = None
    log_files: list[Path] = field(default_factory=list)
    ca: Path | None = None  # with server.tls_cert in the config: the CA bundle that verifies it

    @property
    def base(self) -> str:
        return f"{'https' if self.ca else 'http'}://127.0.0.1:{self.port}"

    @property
    def verify(self) -> ssl.SSLContext | bool:
        return ssl.create_default_context(cafile=self.ca) if self.ca else True

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["CORRAL_HOME"] = str(self.home)
        env.pop("CORRAL_URL", None)
        env.pop("CORRAL_TOKEN", None)
        return env

    def start(self, *options: str) -> None:
        log = self.home / f"server-{len(self.log_files)}.log"
        self.log_files.append(log)
        self.process = subprocess.Popen(
            [CORRAL, "run", "--config", str(self.config), "--port", str(self.port), *options],
            env=self.env,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        wait_until(self._healthy, 30, "corral to start")

    def _healthy(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise AssertionError(f"corral exited with {self.process.returncode}:\n{self.server_log()}")
        try:
            return httpx.get(f"{self.base}/api/health", timeout=2, verify=self.verify).status_code == 200
        except httpx.TransportError:
            return False

    def stop(self, sig: int = signal.SIGINT, timeout: float = 30) -> int:
        assert self.process is not None
        self.process.send_signal(sig)
        code = self.process.wait(timeout=timeout)
        self.process = None
        return code

    def server_log(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-5000:] for p in self.log_files if p.exists())

    def cli(self, *args: str, check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([CORRAL, *args], env=self.env, capture_output=True, text=True, input=stdin, timeout=60)
        if check and result.returncode != 0:
            raise AssertionError(f"corral {' '.join(args)} exited {result.returncode}:\n{result.stderr}")
        return result

    def cli_json(self, *args: str) -> Any:
        return json.loads(self.cli(*args, "--json").stdout)

    def api(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        token = (self.home / "token").read_text().strip()
        return httpx.request(
            method,
            f"{self.base}{path}",
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
            verify=self.verify,
            **kwargs,
        )

    def jobs(self) -> dict[int, dict[str, Any]]:
        return {j["id"]: j for j in self.api("GET", "/api/jobs").json()}

    def live_nodes(self) -> list[dict[str, Any]]:
        return self.api("GET", "/api/nodes").json()


def new_corral(root: Path) -> Iterator[Corral]:
    """A corral in `root`, not started; afterwards stopped, with none of its instances left running
    (and no one else's touched), whatever was done with it."""
    home = root / "home"
    home.mkdir()
    config = root / "corral.toml"
    config.write_text(CONFIG)
    instance = Corral(home=home, port=free_port(), config=config)
    yield instance
    if instance.process is not None:
        instance.stop()
    cloud = LoopbackCloud(home, "", "corral", 0.5)
    for leftover in cloud.list():
        cloud.destroy(leftover.id)


@pytest.fixture
def corral(tmp_path: Path) -> Iterator[Corral]:
    yield from new_corral(tmp_path)


@pytest.fixture
def running(corral: Corral) -> Corral:
    """A corral started, for the tests that need nothing of it before its start."""
    corral.start()
    return corral


def ended(corral: Corral, job: int) -> dict[str, object]:
    """The job once it has ended (complete, failed or cancelled)."""
    return wait_until(
        lambda: (j := corral.jobs()[job])["state"] in ("complete", "failed", "cancelled") and j, 120, "the job to end"
    )


@dataclass
class Dispatchers:
    """`corral run` processes, each with a data directory of its own, sharing one PostgreSQL store
    (a schema of their own, dropped afterwards): what an operator runs for several dispatchers."""

    root: Path
    store_url: str
    started: list[Corral] = field(default_factory=list)

    def new(self, extra_config: str = "") -> Corral:
        """A corral on the shared store, not started yet."""
        name = f"d{len(self.started) + 1}"
        home = self.root / name
        home.mkdir()
        config = self.root / f"{name}.toml"
        # [store] last: the extra config may add keys to the sections CONFIG opens.
        config.write_text(f'{CONFIG}\n{extra_config}\n[store]\nurl = "{self.store_url}"\n')
        instance = Corral(home=home, port=free_port(), config=config)
        self.started.append(instance)
        return instance


@pytest.fixture
def dispatchers(tmp_path: Path) -> Iterator[Dispatchers]:
    from tests.store.conftest import pg_schema, require_postgresql

    require_postgresql()
    with pg_schema() as url:
        group = Dispatchers(tmp_path, url)
        try:
            yield group
        finally:
            for instance in group.started:
                if instance.process is not None:
                    if instance.process.poll() is None:
                        instance.stop()
                    instance.process = None
                cloud = LoopbackCloud(instance.home, "", "corral", 0.5)
                for leftover in cloud.list():
                    cloud.destroy(leftover.id)
