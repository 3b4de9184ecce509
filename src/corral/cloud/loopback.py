"""The `loopback` cloud: every instance is a real agent process on this machine.

An instance is its init (corral.cloud.loopback_init, which runs the agent and starts it again when
it dies, as the ec2 driver's systemd unit does), the agent, and everything it starts. The init runs
in its own session so that it outlives the corral server (a SIGKILLed server finds its instances
again through `list()` on restart), and carries `CORRAL_LOOPBACK_INSTANCE=<instance id>` in its
environment, which the agent and every attempt it runs inherit: `destroy` uses that mark to power
off the whole "machine", including attempt processes that an agent killed with SIGKILL had no
chance to stop. The instance lives as long as its init: SIGKILL it, and the instance is gone.

Records live in `<home>/loopback/<instance id>/instance.json`; the agent's own log is `agent.log`
beside it and its work dir is `work/`. The record is written before the agent starts (its pid
added once it runs), so that a corral killed in between leaves an instance its next start lists,
not an agent nobody knows of. The containers of jobs with an image run under the container engine,
outside the mark's reach: power-off removes them by the labels the agent gives them, its node's and
its work dir's (corral.agent.container.own_containers), so that another corral sharing the engine
whose node drew the same id keeps its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from corral.agent import container
from corral.cloud.base import (
    TAG_CLUSTER,
    TAG_INSTANCE_TYPE,
    TAG_NODE_ID,
    CloudError,
    CloudInstance,
    Ended,
    agent_options,
)
from corral.core.model import InstanceType

INSTANCE_MARK = "CORRAL_LOOPBACK_INSTANCE"
RECORD = "instance.json"
INIT_MODULE = "corral.cloud.loopback_init"


class LoopbackCloud:
    listing_lag = 0.0  # its record is written before its agent starts

    def __init__(
        self,
        home: Path,
        server_url: str,
        cluster: str,
        ping_interval: float = 2.0,
        ca_file: Path | None = None,
        container_program: Sequence[str] | None = None,
    ) -> None:
        self.home = Path(home)
        # The engine the agents run jobs with an image through ([containers] program): powering an
        # instance off removes its containers, which the engine, not the agent's session, runs.
        self.container_program = tuple(container_program) if container_program else None
        self.ca_file = ca_file  # what the agents verify an https server with
        self.root = self.home / "loopback"
        # Settable later: a server bound to port 0 learns its URL after the driver exists.
        self.server_url = server_url
        self.cluster = cluster
        self.ping_interval = ping_interval
        self.destroy_grace = 5.0
        # How long an instance's init waits to start its agent again after it died (systemd's
        # RestartSec in the ec2 driver's unit).
        self.agent_restart_delay = 1.0
        # Children of this process must be reaped, or an exited agent lingers as a zombie whose /proc
        # entry makes it look alive.
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        # Instances whose record is written and whose agent is being started by this driver: no pid yet.
        self._creating: set[str] = set()
        self._lock = threading.Lock()

    def _dir(self, instance_id: str) -> Path:
        return self.root / instance_id

    def _agent_dir(self, instance_id: str) -> Path:
        """The instance's agent's work dir, resolved as the agent resolves it (corral.agent.cli):
        its containers' agent label is derived from it, so power-off must find the same path."""
        return (self._dir(instance_id) / "work").resolve()

    def create(self, instance_type: InstanceType, node_id: str, boot_token: str, tags: dict[str, str]) -> CloudInstance:
        if not self.server_url:
            raise CloudError("loopback: server_url is not set; the agent would not know where to pair")
        instance_id = f"lb-{secrets.token_hex(4)}"
        directory = self._dir(instance_id)
        directory.mkdir(parents=True, exist_ok=False)
        all_tags = dict(tags)
        all_tags.update({TAG_CLUSTER: self.cluster, TAG_NODE_ID: node_id, TAG_INSTANCE_TYPE: instance_type.name})
        argv = [
            sys.executable,
            "-m",
            INIT_MODULE,
            "--restart-delay",
            f"{self.agent_restart_delay:g}",
            "--",
            sys.executable,
            "-m",
            "corral.agent",
            *agent_options(
                self.server_url,
                node_id,
                instance_type,
                # Absolute: the agent runs in `directory`, where a relative home would not be found.
                str(self._agent_dir(instance_id)),
                str(self.ca_file) if self.ca_file else None,
            ),
            "--ping-interval",
            f"{self.ping_interval:g}",
        ]
        env = dict(os.environ)
        # The token goes in the environment, not argv: /proc/<pid>/cmdline is world-readable.
        env["CORRAL_BOOT_TOKEN"] = boot_token
        env[INSTANCE_MARK] = instance_id
        # The user's API credentials are not the fleet's business (every attempt inherits this environment).
        for name in ("CORRAL_AGENT_SECRET", "CORRAL_TOKEN"):
            env.pop(name, None)
        created_at = time.time()
        record: dict[str, Any] = {
            "id": instance_id,
            "instance_type": instance_type.name,
            "tags": all_tags,
            "created_at": created_at,
            "pid": None,
        }
        with self._lock:
            self._creating.add(instance_id)
        try:
            # Recorded before the agent starts: a corral killed right after the start must find the
            # instance at its next start (to adopt or destroy it), or the agent would run unknown.
            _write_record(directory, record)
            try:
                with open(directory / "agent.log", "ab") as log:
                    proc = subprocess.Popen(
                        argv,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        env=env,
                        cwd=directory,
                        start_new_session=True,
                        close_fds=True,
                    )
            except OSError as exc:
                (directory / RECORD).unlink(missing_ok=True)
                raise CloudError(f"loopback: cannot start the agent for {node_id}: {exc}") from exc
            with self._lock:
                self._children[proc.pid] = proc
            record["pid"] = proc.pid
            _write_record(directory, record)
        finally:
            with self._lock:
                self._creating.discard(instance_id)
        return CloudInstance(id=instance_id, instance_type=instance_type.name, tags=all_tags, created_at=created_at)

    def _read(self, directory: Path) -> dict[str, Any] | None:
        try:
            data = json.loads((directory / RECORD).read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def _alive(self, record: dict[str, Any]) -> bool:
        """Whether the instance's agent runs. A record with no pid (its creator was killed as the
        agent started) takes the pid of the agent that carries its mark, if one does."""
        instance_id = str(record.get("id", ""))
        node_id = str(record.get("tags", {}).get(TAG_NODE_ID, ""))
        pid = record.get("pid")
        if pid is None:
            with self._lock:
                if instance_id in self._creating:
                    return True
            found = _marked_agent(instance_id)
            if found is None:
                return False
            record["pid"] = pid = found
            with contextlib.suppress(OSError):
                _write_record(self._dir(instance_id), record)
        if not isinstance(pid, int) or pid <= 0:
            return False
        with self._lock:
            child = self._children.get(pid)
        if child is not None:
            # Our own unreaped child: its pid cannot have been reused, so no need to look further.
            if child.poll() is None:
                return True
            with self._lock:
                self._children.pop(pid, None)
            return False
        return _is_agent(pid, instance_id, node_id)

    def list(self) -> list[CloudInstance]:
        out: list[CloudInstance] = []
        if not self.root.is_dir():
            return out
        for directory in sorted(self.root.iterdir()):
            record = self._read(directory)
            if record is None:
                continue
            tags = record.get("tags") or {}
            if tags.get(TAG_CLUSTER) != self.cluster:
                continue
            if not self._alive(record):
                # The "instance" has terminated on its own (agent exited or crashed): forget it as a
                # cloud would, with whatever its agent left running.
                self._power_off(str(record.get("id")), str(tags.get(TAG_NODE_ID, "")))
                (directory / RECORD).unlink(missing_ok=True)
                continue
            out.append(
                CloudInstance(
                    id=str(record["id"]),
                    instance_type=str(record.get("instance_type", "")),
                    tags={str(k): str(v) for k, v in tags.items()},
                    created_at=float(record.get("created_at", 0.0)),
                )
            )
        return out

    def check(self) -> str | None:
        return None  # nothing outside this machine to be refused by

    def why_gone(self, instance_ids: Sequence[str]) -> dict[str, Ended]:
        return {}  # an agent process that ended leaves no word of why

    def destroy_many(self, instance_ids: Sequence[str]) -> dict[str, CloudError]:
        """Every instance's init is SIGTERMed at once and given the one `destroy_grace`, as EC2 stops
        a fleet in one call: a stop of a large loopback fleet takes a grace, not one per instance."""
        records = {instance_id: self._read(self._dir(instance_id)) for instance_id in dict.fromkeys(instance_ids)}
        # An agent that ends on the SIGTERM has stopped its jobs, containers included; one dead
        # already, or killed, may have left containers running under the engine.
        alive = {i: r for i, r in records.items() if r is not None and self._alive(r)}
        for record in alive.values():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(record["pid"]), signal.SIGTERM)
        left = self._wait_gone(alive, self.destroy_grace)
        for record in left.values():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(record["pid"]), signal.SIGKILL)
        self._wait_gone(left, 2.0)
        for instance_id, entry in records.items():
            stopped_cleanly = instance_id in alive and instance_id not in left
            node_id = str((entry or {}).get("tags", {}).get(TAG_NODE_ID, ""))
            self._power_off(instance_id, "" if stopped_cleanly else node_id)
            (self._dir(instance_id) / RECORD).unlink(missing_ok=True)
        return {}

    def _wait_gone(self, records: dict[str, dict[str, Any]], grace: float) -> dict[str, dict[str, Any]]:
        """Those of `records` whose init still runs after up to `grace` seconds."""
        deadline = time.monotonic() + grace
        left = dict(records)
        while left:
            left = {i: r for i, r in left.items() if self._alive(r)}
            if not left or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        return left

    def destroy(self, instance_id: str) -> None:
        self.destroy_many([instance_id])

    def _power_off(self, instance_id: str, node_id: str) -> None:
        """Nothing that ran on the instance survives it: its processes (the mark), and the containers
        its agent started (the engine runs those, and goes on running them when the agent dies);
        `node_id` "": its agent stopped them itself. Only this instance's agent's containers: the
        node label alone would take those of another corral's node with the same id."""
        _kill_marked(instance_id, signal.SIGKILL)
        if not node_id or self.container_program is None or shutil.which(self.container_program[0]) is None:
            return
        engine = container.Engine(self.container_program)
        try:
            names = container.own_containers(engine, node_id, self._agent_dir(instance_id))
            for argv in (
                (container.kill_ids_argv(engine, names), container.remove_ids_argv(engine, names)) if names else ()
            ):
                # Each may find some already gone (`--rm` at their end): what it says does not matter.
                subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return


def _write_record(directory: Path, record: dict[str, Any]) -> None:
    tmp = directory / (RECORD + ".tmp")
    tmp.write_text(json.dumps(record, indent=2))
    tmp.replace(directory / RECORD)


def _marked_agent(instance_id: str) -> int | None:
    """The pid of the instance's init (else, for an instance an older corral started, of its agent)
    that carries the instance's mark, if one runs."""
    if not instance_id:
        return None
    found = [
        int(entry.name)
        for entry in Path("/proc").iterdir()
        if entry.name.isdigit()
        and _has_mark(int(entry.name), instance_id)
        and _is_agent(int(entry.name), instance_id, "")
    ]
    inits = [pid for pid in found if _is_init(pid)]
    candidates = inits or found
    return candidates[0] if candidates else None


def _is_init(pid: int) -> bool:
    try:
        return INIT_MODULE.encode() in (Path("/proc") / str(pid) / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return False


def _is_agent(pid: int, instance_id: str, node_id: str) -> bool:
    """Guards against pid reuse: the process must still be this instance's agent, not a zombie."""
    proc = Path("/proc") / str(pid)
    for _ in range(20):
        try:
            stat = (proc / "stat").read_text()
            raw = (proc / "cmdline").read_bytes()
        except OSError:
            return False
        if stat[stat.rfind(")") + 2 :].startswith("Z"):
            return False
        # A live process's cmdline can read empty for an instant (seen while it is busy mapping memory).
        if raw:
            break
        time.sleep(0.01)
    cmdline = raw.split(b"\0")
    if b"corral.agent" not in cmdline:
        return False
    if node_id and node_id.encode() in cmdline:
        return True
    return _has_mark(pid, instance_id)


def _has_mark(pid: int, instance_id: str) -> bool:
    try:
        environ = (Path("/proc") / str(pid) / "environ").read_bytes()
    except OSError:
        return False
    return f"{INSTANCE_MARK}={instance_id}".encode() in environ.split(b"\0")


def _kill_marked(instance_id: str, sig: int) -> None:
    if not instance_id:
        return
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != me and _has_mark(int(entry.name), instance_id):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), sig)
