"""Runs attempts as real processes: one new session (and process group) per attempt.

Output goes straight from the child to a file (stdout and stderr combined, or for a job that keeps
its stderr apart, separate_stderr, stderr to a second file), not through a pipe the agent must
drain: the child never blocks on a slow agent, and the file is the source the log shipper reads
from by offset, which makes resending a chunk after a failure trivial.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corral.agent import container, sysinfo
from corral.batch_script import write_script

# Variables that carry the agent's own credentials; a job must never see them.
AGENT_SECRET_VARS = frozenset({"CORRAL_BOOT_TOKEN", "CORRAL_AGENT_SECRET"})

EXIT_NOT_FOUND = 127
EXIT_CANNOT_EXECUTE = 126
# The directory a job asks to run in (chdir) cannot be entered: exit 1, as a shell's failed `cd`,
# and as corral's Slurm batch script ends then.
EXIT_CHDIR_FAILED = 1

# WORK_DIR/running/<attempt id>.json: an attempt while it runs (its spec, its keeper's pid, its
# container), and <attempt id>.status, how its command ended (corral.agent.keeper), so that an agent
# started again after this one died re-adopts the run or learns its end (Runner.adopt).
RUN_RECORDS = "running"
KEEPER = str(Path(__file__).with_name("keeper.py"))
KEEPER_READY_TIMEOUT = 30.0  # seconds the keeper has to say whether the command started
# The job's reason for an end whose status the node could not keep (corral.agent.keeper).
STATUS_UNKEPT = "the node could not keep the run's status (no disk left in the agent's work dir?)"
# <attempt id>.signalled beside its record: its job's --signal was sent (Runner.send_signal).
SIGNALLED = ".signalled"


class BadAttempt(ValueError):
    """An attempt description from the server that cannot be used; the message names the field."""


@dataclass(frozen=True, slots=True)
class AttemptSignal:
    """A job's --signal as the server gives it: `number`, sent once when the run has `before`
    seconds left of its time limit (at the start if fewer), to the run's process group, or with
    `main_only` (sbatch's B:) to its main process alone; a container's main process either way."""

    number: int
    before: float
    main_only: bool = False

    @classmethod
    def from_json(cls, data: Any) -> AttemptSignal | None:
        if data is None:
            return None
        number = data.get("number") if isinstance(data, dict) else None
        if isinstance(number, bool) or not isinstance(number, int) or number not in signal.valid_signals():
            raise BadAttempt(f"attempt.signal: must be {{number, before, main_only}}, a signal's number (got {data!r})")
        before = run_limit(data.get("before"), "attempt.signal.before")
        main_only = data.get("main_only", False)
        if before is None or not isinstance(main_only, bool):
            raise BadAttempt(f"attempt.signal: before must be seconds, main_only true or false (got {data!r})")
        return cls(number, before, main_only)

    def json(self) -> dict[str, Any]:
        return {"number": self.number, "before": self.before, "main_only": self.main_only}

    def due_at(self, time_limit: float) -> float:
        """Seconds of run after which it is sent."""
        return max(0.0, time_limit - self.before)


@dataclass(frozen=True, slots=True)
class AttemptSpec:
    attempt_id: int
    job_id: int
    command: list[str]
    env: dict[str, str]
    node_ids: list[str]
    resources: dict[str, Any]
    image: str | None = None  # run the command in this container image (corral.agent.container)
    # Seconds of run after which corral ends it (None: never); the agent ends it itself if the
    # server has not, a little later (see Agent.limit_slack).
    time_limit: float | None = None
    # The directory the command runs in (None: the attempt's own, WORK_DIR/attempts/<id>).
    chdir: str | None = None
    # Its stderr goes to a file of its own (WORK_DIR/logs/<id>.err), sent as the stream "stderr".
    separate_stderr: bool = False
    # A batch script's text: written to the attempt's directory as command[0] and run with the
    # command's other words (Runner.command_of).
    script: str | None = None
    # A signal sent once before its time limit (sbatch's --signal), to checkpoint.
    signal: AttemptSignal | None = None

    @classmethod
    def from_json(cls, data: Any) -> AttemptSpec:
        if not isinstance(data, dict):
            raise BadAttempt("attempt: not an object")

        def need(key: str, kind: type | tuple[type, ...]) -> Any:
            value = data.get(key)
            if not isinstance(value, kind) or isinstance(value, bool) and kind is int:
                raise BadAttempt(f"attempt.{key}: missing or of the wrong type (got {value!r})")
            return value

        command = need("command", list)
        if not all(isinstance(a, str) for a in command):
            raise BadAttempt("attempt.command: every argument must be a string")
        env = data.get("env") or {}
        if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            raise BadAttempt("attempt.env: must map strings to strings")
        node_ids = data.get("node_ids") or []
        if not isinstance(node_ids, list) or not all(isinstance(n, str) for n in node_ids):
            raise BadAttempt("attempt.node_ids: must be a list of strings")
        resources = data.get("resources") or {}
        if not isinstance(resources, dict):
            raise BadAttempt("attempt.resources: must be an object")
        image = data.get("image")
        if image is not None and (not isinstance(image, str) or not image):
            raise BadAttempt(f"attempt.image: must be an image name (got {image!r})")
        time_limit = run_limit(data.get("time_limit"), "attempt.time_limit")
        chdir = data.get("chdir")
        if chdir is not None and (not isinstance(chdir, str) or not chdir.startswith("/")):
            raise BadAttempt(f"attempt.chdir: must be an absolute path (got {chdir!r})")
        separate_stderr = data.get("separate_stderr", False)
        if not isinstance(separate_stderr, bool):
            raise BadAttempt(f"attempt.separate_stderr: must be true or false (got {separate_stderr!r})")
        script = data.get("script")
        if script is not None and not isinstance(script, str):
            raise BadAttempt(f"attempt.script: must be a script's text (got {type(script).__name__})")
        if script is not None and (not command or not is_file_name(command[0])):
            raise BadAttempt(f"attempt.command: a script's first word names its file, without '/' (got {command!r})")
        job_signal = AttemptSignal.from_json(data.get("signal"))
        return cls(
            need("attempt_id", int),
            need("job_id", int),
            list(command),
            dict(env),
            list(node_ids),
            resources,
            image,
            time_limit,
            chdir,
            separate_stderr,
            script,
            job_signal,
        )


def is_file_name(name: str) -> bool:
    """A name for a file in the attempt's directory: no path, nothing that leaves it."""
    return bool(name) and name not in (".", "..") and "/" not in name and "\0" not in name


def spec_json(spec: AttemptSpec) -> dict[str, Any]:
    """The spec as the server lists it (AttemptSpec.from_json reads it back)."""
    return {
        "attempt_id": spec.attempt_id,
        "job_id": spec.job_id,
        "command": spec.command,
        "env": spec.env,
        "node_ids": spec.node_ids,
        "resources": spec.resources,
        "image": spec.image,
        "time_limit": spec.time_limit,
        "chdir": spec.chdir,
        "separate_stderr": spec.separate_stderr,
        "script": spec.script,
        "signal": spec.signal.json() if spec.signal is not None else None,
    }


@dataclass(slots=True)
class Adopted:
    """The keeper of a run that an earlier agent started (not this process's child): alive while
    its pid is that process's (its start time tells a reused pid apart), then ended as its status
    file says, or as killed (SIGKILL) when there is none (the keeper was killed with its command)."""

    pid: int
    start_ticks: int | None
    status_path: Path
    returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        stat = sysinfo.read_stat(self.pid)
        if stat is not None and stat.state != "Z" and stat.start_ticks == self.start_ticks:
            return None
        self.returncode = read_status(self.status_path)
        return self.returncode

    def session_is_ours(self) -> bool:
        """Whether the keeper's session id is still the run's: no other process has taken the pid
        (while a process of the session lives, the kernel does not hand its id out again)."""
        stat = sysinfo.read_stat(self.pid)
        return stat is None or stat.start_ticks == self.start_ticks


@dataclass(frozen=True, slots=True)
class KeptUsage:
    """What a keeper counted of its command at its end (corral.agent.keeper.write_usage)."""

    cpu_seconds: float
    max_rss_kib: int
    forked_rss_kib: int

    @property
    def rss_bytes(self) -> int | None:
        """The largest RSS of one of the command's processes; None when it may be the keeper's (the
        command's process had the keeper's pages from its fork until its exec, and the few it
        touched in between, FORK_SLACK_KIB): the command's own peak is then below that."""
        if self.max_rss_kib > self.forked_rss_kib + FORK_SLACK_KIB:
            return self.max_rss_kib * 1024
        return None


FORK_SLACK_KIB = 1024


def read_usage(path: Path) -> KeptUsage | None:
    """A keeper's usage file; None if there is none (a keeper of an older corral, a full disk)."""
    try:
        said = json.loads(path.read_text())
        return KeptUsage(float(said["cpu_seconds"]), int(said["max_rss_kib"]), int(said["forked_rss_kib"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def settle_usage(attempt: Attempt, kept: KeptUsage | None) -> None:
    """An ended attempt's cpu_seconds and max_rss_mib: the higher of what usage() sampled and what
    its keeper counted. Each misses something the other has: the samples, what ran between two of
    them (a short peak, a process started and reaped in between, a run shorter than a ping); the
    keeper, what it did not wait for (a process reaped by init, a container's processes, which the
    engine runs) and what its processes had together (its RSS is the largest single one's)."""
    cpu = [attempt.cpu_seconds_max] if attempt.usage_sampled else []
    rss = [attempt.rss_bytes_max] if attempt.usage_sampled else []
    if kept is not None:
        cpu.append(kept.cpu_seconds)
        if kept.rss_bytes is not None:
            rss.append(kept.rss_bytes)
    attempt.cpu_seconds = round(max(cpu), 3) if cpu else None
    attempt.max_rss_mib = math.ceil(max(rss) / (1024 * 1024)) if rss else None


def read_status(path: Path) -> int:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return -signal.SIGKILL


def run_limit(value: Any, field: str) -> float | None:
    """A time limit as the server sends it: seconds, or None for none. BadAttempt names `field` otherwise."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < float("inf"):
        raise BadAttempt(f"{field}: must be a number of seconds, at least 0, or null (got {value!r})")
    return float(value)


@dataclass(slots=True)
class Attempt:
    spec: AttemptSpec
    log_path: Path
    proc: subprocess.Popen[bytes] | Adopted | None
    started_at: float
    exit_code: int | None = None
    # The signal that killed the command (exit_code is then 128+N, the shell's way); None: it exited.
    exit_signal: int | None = None
    finished_at: float | None = None
    # Reporting state, owned by the agent's reporter; kept here so one lock covers everything.
    start_reported: bool = False
    unwanted: bool = False  # the server answered 409 to "started": kill, report nothing more
    # Killed because the agent itself is stopping: the node is going away, which is the server's to
    # judge (a temporary failure), so the exit is not reported as if the command had ended.
    abandoned: bool = False
    keeper_killed: bool = False  # its keeper ended without the command's status: the run is lost
    # Its keeper could not write the status (no disk left) and exited with the command's code:
    # reported, but a later agent could not have (nothing kept).
    status_unkept: bool = False
    log_offset: int = 0  # bytes of the log the server has accepted
    log_done: bool = False  # nothing more will be shipped of either stream (all sent, or the server refused them)
    # A job's stderr kept apart (separate_stderr): its own file, shipped as the stream "stderr" beside the log.
    stderr_path: Path | None = None
    stderr_offset: int = 0  # bytes of it the server has accepted
    stderr_refused: bool = False  # the server refused it: none of it is sent any more
    log_failing_since: float | None = None
    kill_requested_at: float | None = None
    killed_hard: bool = False
    # Seconds of run after which corral ends it (None: never): the spec's, then the latest a ping gave.
    time_limit: float | None = None
    timed_out: bool = False  # the agent ended it at its time limit, the server not having done so
    # Its job's --signal was sent. Kept in a file beside its run record (Runner.send_signal), so
    # that an agent that re-adopts the run neither sends it again nor loses one not sent yet.
    signal_sent: bool = False
    started_monotonic: float = 0.0
    cpu_seconds_seen: float = 0.0
    cpu_sampled_at: float = 0.0
    # The highest CPU total and RSS sum usage() sampled of its sessions (with usage_sampled: at least
    # once), for its accounting: see settle_usage, which makes its cpu_seconds and max_rss_mib of them.
    usage_sampled: bool = False
    cpu_seconds_max: float = 0.0
    rss_bytes_max: int = 0
    # What it used, once it has ended (Slurm's TotalCPU and MaxRSS); None: not known.
    cpu_seconds: float | None = None
    max_rss_mib: int | None = None
    # A container's processes run in a session of the engine's (container_session), not the client's.
    container_session: int | None = None
    # The name its container was started under (container.name_of), by which it is inspected and
    # killed: the one its run record gives, for a run an earlier agent started.
    container_name: str | None = None
    adopted: bool = False  # started by an earlier agent in this work dir, re-adopted by this one
    # Why the command never ran, where the exit code alone does not say it (a directory it could not
    # enter), or what else its end should say (STATUS_UNKEPT): reported with the exit, for the job's reason.
    failure: str = ""

    @property
    def attempt_id(self) -> int:
        return self.spec.attempt_id

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None else 0

    @property
    def exited(self) -> bool:
        return self.exit_code is not None

    def log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def stderr_size(self) -> int:
        try:
            return self.stderr_path.stat().st_size if self.stderr_path is not None else 0
        except OSError:
            return 0


def exit_code_of(returncode: int) -> int:
    """Popen's -N for "killed by signal N" becomes the shell's 128+N."""
    return 128 - returncode if returncode < 0 else returncode


def exit_signal_of(returncode: int) -> int | None:
    """Popen's -N: signal N killed it (reported beside the 128+N of exit_code_of, which reads the same
    as an exit with that code); None for an exit. A container job's command killed inside its
    container shows as the engine's exit 128+N, not as a signal: the engine does not say which."""
    return -returncode if returncode < 0 else None


def signal_run(session: int, sig: int) -> str:
    """Send a run's whole process group (and its session's stragglers) a signal meant for its
    command, its keeper (the session's leader) spared if the keeper would die of it: a keeper of an
    older corral, re-adopted after an upgrade, ignores only the signals it knew of, and killed it
    would lose the run's end. What it went to."""
    if sysinfo.ignores(session, sig) is not False:
        signal_session(session, sig)
        return f"process group {session}"
    for pid in sysinfo.session_members(session):
        if pid != session:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
    return f"process group {session} (its keeper spared)"


def signal_session(session: int, sig: int) -> None:
    """Signal an attempt's process group, then any stragglers of its session that moved to another group."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(session, sig)
    # (Not the group's own members again: a second SIGTERM would cut short the cleanup the first began.)
    for pid in sysinfo.session_members(session, outside_group=session):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


class Runner:
    """Starts, watches and kills attempts. Thread-safe: the work poller starts attempts while the
    reporter polls them and the ping loop kills them."""

    def __init__(self, work_dir: Path, base_env: Mapping[str, str] | None = None, kill_grace: float = 3.0) -> None:
        self.work_dir = work_dir
        self.kill_grace = kill_grace
        env = dict(os.environ if base_env is None else base_env)
        self.base_env = {k: v for k, v in env.items() if k not in AGENT_SECRET_VARS}
        self.lock = threading.RLock()
        self.attempts: dict[int, Attempt] = {}
        self.closed = False
        # The container engine that runs attempts with an image; the server names it at pairing.
        self.engine: container.Engine | None = None
        (work_dir / "attempts").mkdir(parents=True, exist_ok=True)
        (work_dir / "logs").mkdir(parents=True, exist_ok=True)
        (work_dir / RUN_RECORDS).mkdir(parents=True, exist_ok=True)

    def job_environment(self, spec: AttemptSpec) -> dict[str, str]:
        """The variables the job itself sets, and corral's."""
        env = {k: v for k, v in spec.env.items() if k not in AGENT_SECRET_VARS}
        env.update(
            CORRAL_JOB_ID=str(spec.job_id),
            CORRAL_ATTEMPT_ID=str(spec.attempt_id),
            CORRAL_NODELIST=",".join(spec.node_ids),
            CORRAL_NNODES=str(max(1, len(spec.node_ids))),
        )
        return env

    def environment(self, spec: AttemptSpec) -> dict[str, str]:
        return {**self.base_env, **self.job_environment(spec)}

    def argv(self, spec: AttemptSpec, cwd: Path, own_dir: Path) -> list[str]:
        """The attempt's command (command_of), or for a job with an image the engine's `run` of it.
        An image and no engine (a server that names none): the job cannot run here, as a missing
        program cannot."""
        if spec.image is not None and self.engine is None:
            raise FileNotFoundError(2, "no container engine given to this agent ([containers] in the config)")
        command = self.command_of(spec, own_dir)
        if spec.image is None or self.engine is None:
            return command
        names = self.job_environment(spec)
        node_id = self.node_of(spec)
        name = self.container_name(spec)
        # A script runs from the attempt's directory, which the container has as its working
        # directory unless the job names another (chdir): then the script's file is mounted alone.
        mounts = [Path(command[0])] if spec.script is not None and cwd != own_dir else []
        return container.run_argv(
            self.engine, name, spec.image, command, cwd, names, node_id, self.work_dir, read_only=mounts
        )

    @staticmethod
    def command_of(spec: AttemptSpec, own_dir: Path) -> list[str]:
        """The argv the attempt runs: its command, or for a batch script the script's file, written
        to the attempt's own directory (mode 0700: the job's user's alone, as slurmd keeps a job's
        script), and its arguments. Written afresh at each start: an attempt started over after an
        agent restart runs the script it was given."""
        if spec.script is None:
            return spec.command
        path = own_dir / spec.command[0]
        write_script(path, spec.script)
        return [str(path), *spec.command[1:]]

    @staticmethod
    def node_of(spec: AttemptSpec) -> str | None:
        # The agent starts only the attempts whose first node is its own (a gang's command runs there).
        return spec.node_ids[0] if spec.node_ids else None

    def container_name(self, spec: AttemptSpec) -> str:
        return container.name_of(spec.attempt_id, self.node_of(spec), self.work_dir)

    def start(self, spec: AttemptSpec, now: float | None = None) -> Attempt | None:
        """Start the attempt's command; None once the runner is closed (the agent is exiting). A
        command that cannot be started yields an attempt that has already exited with 127 or 126,
        and one whose directory (chdir) cannot be entered one that has exited with 1."""
        own_dir = self.work_dir / "attempts" / str(spec.attempt_id)
        own_dir.mkdir(parents=True, exist_ok=True)
        cwd = Path(spec.chdir) if spec.chdir is not None else own_dir
        log_path = self.work_dir / "logs" / f"{spec.attempt_id}.log"
        stderr_path = self.stderr_path_of(spec)
        with self.lock:
            if self.closed:
                return None
            if spec.attempt_id in self.attempts:
                return self.attempts[spec.attempt_id]
            started_at = time.time() if now is None else now
            # "wb": an attempt listed again after an agent restart (its start was never reported,
            # so none of its output went out) starts over, without the dead agent's run's output.
            with contextlib.ExitStack() as files:
                out = files.enter_context(open(log_path, "wb"))
                err = files.enter_context(open(stderr_path, "wb")) if stderr_path is not None else None
                said = err or out  # where the agent's own word on a start that failed goes: the stderr
                try:
                    if not spec.command:
                        raise FileNotFoundError(2, "empty command")
                    argv = self.argv(spec, cwd, own_dir)
                    proc = self._start_kept(
                        argv,
                        cwd,
                        self.environment(spec),
                        out,
                        spec.attempt_id,
                        lambda keeper: self._record(spec, keeper.pid, started_at),
                        err,
                    )
                except (OSError, ValueError) as exc:
                    self._record_path(spec.attempt_id).unlink(missing_ok=True)  # it never ran
                    if spec.chdir is not None and str(getattr(exc, "filename", None)) == str(cwd):
                        # The keeper could not enter the job's directory (missing on this node, not a
                        # directory, no permission): the job's own request failed, as a missing
                        # program does, and it fails, where Slurm would run it in /tmp instead.
                        why = getattr(exc, "strerror", None) or exc
                        said.write(f"corral-agent: chdir to {spec.chdir} failed: {why}\n".encode(errors="replace"))
                        attempt = Attempt(
                            spec,
                            log_path,
                            None,
                            started_at,
                            exit_code=EXIT_CHDIR_FAILED,
                            finished_at=time.time(),
                            failure=f"chdir to {spec.chdir} failed: {why}",
                            stderr_path=stderr_path,
                        )
                        self.attempts[spec.attempt_id] = attempt
                        return attempt
                    # ValueError: what no exec takes (an '=' in a variable's name, a NUL byte), which
                    # a job stored before submission refused them may still hold: this attempt
                    # fails, not the agent's work loop (and with it the node).
                    missing = isinstance(exc, FileNotFoundError | NotADirectoryError)
                    code = EXIT_NOT_FOUND if missing else EXIT_CANNOT_EXECUTE
                    if spec.image is not None and spec.command and self.engine is not None:
                        # What failed to start is the engine's program (podman missing from the
                        # node), which never got to the image: naming the image alone sent the
                        # operator to look for a file of that name.
                        name = f"image {spec.image!r} with {self.engine.program[0]!r}"
                    else:
                        name = repr(spec.command[0] if spec.command and spec.image is None else (spec.image or ""))
                    if spec.script is not None and spec.image is None:
                        # exec says ENOENT for a script whose interpreter is missing: the file is there.
                        interpreter_line = spec.script.partition("\n")[0]
                        name += f" (its interpreter line {interpreter_line!r})"
                    why = getattr(exc, "strerror", None) or exc
                    said.write(f"corral-agent: cannot run {name}: {why}\n".encode(errors="replace"))
                    attempt = Attempt(
                        spec,
                        log_path,
                        None,
                        started_at,
                        exit_code=code,
                        finished_at=time.time(),
                        stderr_path=stderr_path,
                    )
                    self.attempts[spec.attempt_id] = attempt
                    return attempt
            attempt = Attempt(
                spec,
                log_path,
                proc,
                started_at,
                time_limit=spec.time_limit,
                started_monotonic=time.monotonic(),
                container_name=self.container_name(spec) if spec.image is not None else None,
                stderr_path=stderr_path,
            )
            self.attempts[spec.attempt_id] = attempt
            return attempt

    def stderr_path_of(self, spec: AttemptSpec) -> Path | None:
        """Where the attempt's stderr goes when its job keeps it apart (None: into its log)."""
        return self.work_dir / "logs" / f"{spec.attempt_id}.err" if spec.separate_stderr else None

    def _start_kept(
        self,
        argv: list[str],
        cwd: Path,
        env: dict[str, str],
        out: Any,
        attempt_id: int,
        record: Callable[[subprocess.Popen[bytes]], None],
        err: Any = None,
    ) -> subprocess.Popen[bytes]:
        """The command under its keeper (corral.agent.keeper), which outlives this agent. Raises as
        Popen of the command itself would (OSError with its errno) when the keeper cannot start it.
        The keeper starts the command only once `record` has written the run's record: an agent
        killed before that leaves a keeper that starts nothing, where it left a command that ran on
        unknown to the next agent, which was given the attempt again (its start never reported)
        and ran it a second time beside it."""
        status = self._status_path(attempt_id)
        status.unlink(missing_ok=True)
        self._usage_path(attempt_id).unlink(missing_ok=True)
        ready_read, ready_write = os.pipe()
        go_read, go_write = os.pipe()
        keeper = [sys.executable, "-I", "-S", KEEPER, str(status), str(ready_write), str(go_read)]
        try:
            try:
                proc = subprocess.Popen(
                    [*keeper, "--", *argv],
                    cwd=cwd,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    # (A container's stderr too: the engine's client passes the two on apart.)
                    stderr=subprocess.STDOUT if err is None else err,
                    start_new_session=True,
                    close_fds=True,
                    pass_fds=(ready_write, go_read),
                )
            finally:
                os.close(ready_write)
                os.close(go_read)
            record(proc)
            with contextlib.suppress(BrokenPipeError):  # (the keeper died: no "ok" will come)
                os.write(go_write, b"go")
            said = b""
            deadline = time.monotonic() + KEEPER_READY_TIMEOUT
            while time.monotonic() < deadline:
                readable, _, _ = select.select([ready_read], [], [], max(0.0, deadline - time.monotonic()))
                chunk = os.read(ready_read, 4096) if readable else b""
                if not chunk:
                    break
                said += chunk
        finally:
            os.close(ready_read)
            os.close(go_write)
        if said == b"ok":
            return proc
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait()
        if said.startswith(b"err "):
            errno, _, why = said[4:].decode(errors="replace").partition(" ")
            raise OSError(int(errno) if errno.isdigit() else 0, why)
        raise OSError(0, "the attempt's keeper did not start it")

    def _record_path(self, attempt_id: int) -> Path:
        return self.work_dir / RUN_RECORDS / f"{attempt_id}.json"

    def _usage_path(self, attempt_id: int) -> Path:
        # (The keeper writes it where keeper.usage_path says, from the status file's name.)
        return self.work_dir / RUN_RECORDS / f"{attempt_id}.usage"

    def _status_path(self, attempt_id: int) -> Path:
        return self.work_dir / RUN_RECORDS / f"{attempt_id}.status"

    def _signalled_path(self, attempt_id: int) -> Path:
        return self.work_dir / RUN_RECORDS / f"{attempt_id}{SIGNALLED}"

    def _record(self, spec: AttemptSpec, pid: int, started_at: float) -> None:
        """What an agent started again after this one's death needs to stop the attempt: its session
        (the keeper's pid, with its start time against the pid's reuse) and its container."""
        stat = sysinfo.read_stat(pid)
        record: dict[str, Any] = {
            "attempt_id": spec.attempt_id,
            "pid": pid,
            "start_ticks": stat.start_ticks if stat is not None else None,
            "started_at": started_at,
            "spec": spec_json(spec),
        }
        if spec.image is not None and self.engine is not None:
            record["container"] = {"program": list(self.engine.program), "name": self.container_name(spec)}
        path = self._record_path(spec.attempt_id)
        tmp = path.with_suffix(".tmp")
        try:
            # The job's environment is in it: the agent's user only.
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(json.dumps(record))
            tmp.replace(path)
        except OSError:
            pass  # a full disk must not fail the attempt; only a restart's clean-up would miss it

    def kill(self, attempt_id: int, hard: bool = False) -> bool:
        """SIGTERM the attempt's process group now (SIGKILL if `hard`); `poll` escalates to SIGKILL
        after `kill_grace`. False if there is no such running attempt, or if it is being killed
        already and `hard` is not asked for: one SIGTERM, as Slurm sends, for the grace is the
        command's time to clean up, which another SIGTERM (the server repeats its kill at every
        ping) would interrupt."""
        with self.lock:
            attempt = self.attempts.get(attempt_id)
            if attempt is None or attempt.proc is None or attempt.exited:
                return False
            if attempt.kill_requested_at is None:
                attempt.kill_requested_at = time.monotonic()
            elif not hard:
                return False
            sig = signal.SIGKILL if hard else signal.SIGTERM
            attempt.killed_hard = attempt.killed_hard or hard
            if not isinstance(attempt.proc, Adopted) or attempt.proc.session_is_ours():
                signal_session(attempt.proc.pid, sig)
            if hard:
                self._kill_container(attempt)
            return True

    def _kill_container(self, attempt: Attempt) -> None:
        """A SIGKILL reaches the engine's client, not the container it started (the engine runs
        that): kill it by name as well. Not waited for: the lock is held."""
        if attempt.container_name is None or self.engine is None:
            return
        with contextlib.suppress(OSError):
            subprocess.Popen(
                container.kill_argv(self.engine, attempt.container_name),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )

    def poll(self) -> list[Attempt]:
        """Reap attempts whose command ended and escalate overdue kills; returns the newly exited."""
        done = []
        with self.lock:
            for attempt in self.attempts.values():
                if attempt.exited or attempt.proc is None:
                    continue
                code = attempt.proc.poll()
                if code is not None:
                    unkept = not self._status_path(attempt.attempt_id).exists()
                    if attempt.kill_requested_at is None and unkept and code < 0:
                        # The keeper was killed, not by corral, before the command ended (it writes the
                        # status first): the command's own end is unknown, so it is not reported as
                        # one, and no later agent is to (no status is kept). The server takes the run
                        # for lost, the job's on_node_failure deciding, as when this happens with no
                        # agent running (adopt).
                        attempt.abandoned = True
                        attempt.keeper_killed = True
                    elif unkept and code >= 0 and not isinstance(attempt.proc, Adopted):
                        # The keeper could not write the status (its disk full) and exited with the
                        # command's code instead: that is the end to report.
                        attempt.status_unkept = True
                        attempt.failure = attempt.failure or STATUS_UNKEPT
                    attempt.exit_code = exit_code_of(code)
                    attempt.exit_signal = exit_signal_of(code)
                    attempt.finished_at = time.time()
                    settle_usage(attempt, read_usage(self._usage_path(attempt.attempt_id)))
                    # Whatever the command left behind in its session goes with it, as at the end of a
                    # Slurm step: the server is about to count these resources as free.
                    if not isinstance(attempt.proc, Adopted) or attempt.proc.session_is_ours():
                        signal_session(attempt.proc.pid, signal.SIGKILL)
                    # The record stays until the end is reported (forget): an agent that dies before
                    # then leaves it, with the status, to the next, which reports the end.
                    if not attempt.keeper_killed:
                        self._keep_status(attempt.attempt_id, code)
                    done.append(attempt)
                elif (
                    attempt.kill_requested_at is not None
                    and not attempt.killed_hard
                    and time.monotonic() - attempt.kill_requested_at >= self.kill_grace
                ):
                    attempt.killed_hard = True
                    if not isinstance(attempt.proc, Adopted) or attempt.proc.session_is_ours():
                        signal_session(attempt.proc.pid, signal.SIGKILL)
                    self._kill_container(attempt)
        return done

    def signals_due(self) -> list[Attempt]:
        """Running attempts whose job's --signal is due and not sent yet: their run has reached
        its time limit less the signal's time (the start, if that is more than the limit), on the
        monotonic clock, as past_time_limit measures it. Not one being killed (that signal is
        the end), nor a container the engine does not run yet (its main process is not there to
        get it; usage() finds it out at each ping)."""
        now = time.monotonic()
        with self.lock:
            return [
                a
                for a in self.attempts.values()
                if a.spec.signal is not None
                and not a.signal_sent
                and not a.exited
                and a.proc is not None
                and a.kill_requested_at is None
                and a.time_limit is not None
                and (a.spec.image is None or a.container_session is not None)
                and now - a.started_monotonic >= a.spec.signal.due_at(a.time_limit)
            ]

    def send_signal(self, attempt_id: int) -> str | None:
        """Send the attempt its job's --signal, once: to its process group (and its session's
        stragglers, as a kill), or to its main process alone (B:, the keeper's child), or for a
        container to the container's main process through the engine (its processes run in the
        engine's session, not the client's). Returns what it was sent to, None if it was not sent
        (sent already, the attempt gone, its main process ended). That it was sent is kept in a
        file before it is: an agent that dies in between loses that signal rather than have its
        successor send it a second time."""
        with self.lock:
            attempt = self.attempts.get(attempt_id)
            if attempt is None or attempt.spec.signal is None or attempt.signal_sent:
                return None
            if attempt.exited or attempt.proc is None:
                return None
            attempt.signal_sent = True
            with contextlib.suppress(OSError):  # (a full disk: sent once all the same in this agent's life)
                self._signalled_path(attempt_id).write_text(f"{time.time()}\n")
            return self._deliver(attempt, attempt.spec.signal.number, attempt.spec.signal.main_only)

    def signal(self, attempt_id: int, number: int, main_only: bool) -> str | None:
        """Send a running attempt a signal now (`corral cancel --signal`), as its job's --signal
        goes: to its process group, its main process alone (`main_only`), or its container's main
        process. The keeper ignores every signal it can (corral.agent.keeper), so the run's group
        getting one leaves it there to record the end. Returns what it was sent to; None if there
        was no process to send it to (the attempt unknown or ended)."""
        with self.lock:
            attempt = self.attempts.get(attempt_id)
            if attempt is None or attempt.exited or attempt.proc is None:
                return None
            return self._deliver(attempt, number, main_only)

    def _deliver(self, attempt: Attempt, number: int, main_only: bool) -> str | None:
        """Signal `number` to the attempt's group or main process (the lock held): what it went to."""
        keeper = attempt.proc
        assert keeper is not None
        if isinstance(keeper, Adopted) and not keeper.session_is_ours():
            return None
        if attempt.container_name is not None and self.engine is not None:
            with contextlib.suppress(OSError):
                subprocess.Popen(
                    container.signal_argv(self.engine, attempt.container_name, number),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            return f"container {attempt.container_name}"
        if not main_only:
            return signal_run(keeper.pid, number)
        # The keeper's child is the job's command: the batch script's shell, or its program.
        for pid in sysinfo.children_of(keeper.pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, number)
                return f"main process {pid}"
        return None

    def past_time_limit(self, slack: float) -> list[Attempt]:
        """Running attempts that have run `slack` seconds past their time limit and that nothing is
        killing yet. Measured on the monotonic clock from the start: a clock step does not end a run."""
        now = time.monotonic()
        with self.lock:
            return [
                a
                for a in self.attempts.values()
                if not a.exited
                and a.proc is not None
                and a.kill_requested_at is None
                and a.time_limit is not None
                and now - a.started_monotonic >= a.time_limit + slack
            ]

    def running(self) -> list[Attempt]:
        with self.lock:
            return [a for a in self.attempts.values() if not a.exited]

    def get(self, attempt_id: int) -> Attempt | None:
        with self.lock:
            return self.attempts.get(attempt_id)

    def all(self) -> list[Attempt]:
        with self.lock:
            return list(self.attempts.values())

    def adopt(self) -> tuple[list[Attempt], list[int]]:
        """Take over what an earlier agent in this work dir started and that its run records name
        (it died, or was killed, and its keepers ran on): the attempts whose keeper still runs, and
        those whose command ended meanwhile with its status written (exited, to be reported). What
        cannot be followed (no keeper and no status: killed with it; a record of an older agent,
        with no spec) is stopped, session and container, and named in the second list: lost."""
        directory = self.work_dir / RUN_RECORDS
        adopted: list[Attempt] = []
        lost: list[int] = []
        for path in sorted(directory.glob("*.json")):
            try:
                record = json.loads(path.read_text())
                attempt_id, pid = int(record["attempt_id"]), int(record["pid"])
                spec = AttemptSpec.from_json(record.get("spec"))
                started_at = float(record["started_at"])
            except (OSError, ValueError, KeyError, TypeError):
                lost += stop_recorded(path)
                continue
            status = self._status_path(attempt_id)
            keeper = Adopted(pid, record.get("start_ticks"), status)
            running = keeper.poll() is None
            if not running and not status.exists():
                lost += stop_recorded(path)
                continue
            attempt = Attempt(
                spec,
                self.work_dir / "logs" / f"{attempt_id}.log",
                keeper,
                started_at,
                time_limit=spec.time_limit,
                started_monotonic=time.monotonic() - max(0.0, time.time() - started_at),
                container_name=recorded_container_name(record, spec),
                adopted=True,
                stderr_path=self.stderr_path_of(spec),
                # Sent by the agent before: not again; not sent yet: sent when due, by this one.
                signal_sent=self._signalled_path(attempt_id).exists(),
            )
            if not running:
                code = read_status(status)
                attempt.exit_code, attempt.exit_signal = exit_code_of(code), exit_signal_of(code)
                settle_usage(attempt, read_usage(self._usage_path(attempt_id)))
                with contextlib.suppress(OSError):
                    attempt.finished_at = status.stat().st_mtime
                attempt.finished_at = attempt.finished_at or time.time()
                if keeper.session_is_ours():
                    signal_session(pid, signal.SIGKILL)  # what it left in its session, as at any end
            with self.lock:
                self.attempts[attempt_id] = attempt
            adopted.append(attempt)
        return adopted, lost

    def abandon(self, attempt_id: int) -> None:
        """SIGKILL an adopted attempt and forget it (its node is not this agent's any more)."""
        self.kill(attempt_id, hard=True)
        path = self._record_path(attempt_id)
        if path.exists():
            stop_recorded(path)
        self.forget(attempt_id)

    def _keep_status(self, attempt_id: int, code: int) -> None:
        """The end as its keeper wrote it; written here when the keeper could not (SIGKILLed with
        its command), so that the end survives this agent until it is reported."""
        status = self._status_path(attempt_id)
        if status.exists() or not self._record_path(attempt_id).exists():
            return
        tmp = status.with_suffix(".status-tmp")
        with contextlib.suppress(OSError):
            tmp.write_text(f"{code}\n")
            tmp.replace(status)

    def forget(self, attempt_id: int) -> None:
        """Done with the attempt: its end reported (or not to be: unwanted, abandoned), its record
        and status removed, so that no later agent takes it up again."""
        with self.lock:
            self.attempts.pop(attempt_id, None)
        self._usage_path(attempt_id).unlink(missing_ok=True)
        self._record_path(attempt_id).unlink(missing_ok=True)
        self._status_path(attempt_id).unlink(missing_ok=True)
        self._signalled_path(attempt_id).unlink(missing_ok=True)

    def close(self) -> None:
        """Refuse new attempts from now on."""
        with self.lock:
            self.closed = True

    def terminate_all(self, grace: float | None = None) -> None:
        """SIGTERM every running attempt, SIGKILL what is left after `grace`, and reap them all."""
        grace = self.kill_grace if grace is None else grace
        self.close()
        for attempt in self.running():
            self.kill(attempt.attempt_id)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            self.poll()
            if not self.running():
                break
            time.sleep(0.05)
        for attempt in self.running():
            self.kill(attempt.attempt_id, hard=True)
        deadline = time.monotonic() + 5.0
        while self.running() and time.monotonic() < deadline:
            self.poll()
            time.sleep(0.02)

    def usage(self) -> tuple[float, int]:
        """(vCPUs in use, RSS MiB) of the running attempts. An attempt's vCPUs are the CPU seconds its
        session (and its container's) consumed since the previous call (or its start) over the wall
        time in between. Each attempt keeps the highest CPU total and RSS it is seen with, what its
        end reports it used (settle_usage)."""
        now = time.time()
        with self.lock:
            running = {a.proc.pid: a for a in self.attempts.values() if not a.exited and a.proc is not None}
        for attempt in running.values():
            if attempt.spec.image is not None and attempt.container_session is None:
                attempt.container_session = self._container_session(attempt)
        containers = {a.container_session for a in running.values() if a.container_session is not None}
        # An attempt's session leader is its keeper: corral's overhead, as the agent's own is.
        usage = sysinfo.usage_by_session(set(running) | containers, without_leaders=running.keys())
        vcpus = 0.0
        rss = 0
        for session, attempt in running.items():
            measured = [usage[s] for s in (session, attempt.container_session) if s in usage]
            if not measured:
                continue
            cpu_seconds = sum(sample.cpu_seconds for sample in measured)
            since = max(attempt.cpu_sampled_at, attempt.started_at)
            # A process reaped by init takes its CPU time with it, so the total can drop: never go negative.
            delta = max(0.0, cpu_seconds - attempt.cpu_seconds_seen)
            if now - since > 0.05:
                vcpus += delta / (now - since)
                attempt.cpu_seconds_seen = max(attempt.cpu_seconds_seen, cpu_seconds)
                attempt.cpu_sampled_at = now
            sampled_rss = sum(sample.rss_bytes for sample in measured)
            rss += sampled_rss
            # For its accounting: the highest of each seen (the CPU total can drop, as above).
            attempt.usage_sampled = True
            attempt.cpu_seconds_max = max(attempt.cpu_seconds_max, cpu_seconds)
            attempt.rss_bytes_max = max(attempt.rss_bytes_max, sampled_rss)
        return round(vcpus, 3), rss // (1024 * 1024)

    def _container_session(self, attempt: Attempt) -> int | None:
        """The session of the container's first process, which the engine (not the client) runs:
        None until the engine says it runs."""
        if self.engine is None or attempt.container_name is None:
            return None
        try:
            inspected = subprocess.run(
                container.pid_argv(self.engine, attempt.container_name),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        pid = inspected.stdout.strip()
        stat = sysinfo.read_stat(int(pid)) if pid.isdigit() and int(pid) > 0 else None
        return stat.session if stat is not None else None


def recorded_container_name(record: dict[str, Any], spec: AttemptSpec) -> str | None:
    """The name the run's container was started under, as its record gives it. A record without
    one is an older agent's, whose container had the attempt's id alone for a name: the agent
    upgraded under it must still inspect and kill that one, and not leave it as a leftover."""
    if spec.image is None:
        return None
    engine = record.get("container")
    name = engine.get("name") if isinstance(engine, dict) else None
    return name if isinstance(name, str) and name else container.legacy_name_of(spec.attempt_id)


def stop_recorded(path: Path, kill_timeout: float = 60.0) -> list[int]:
    """SIGKILL the session and remove the container a run record names, then the record; the
    attempt's id if anything of it still ran. A record's pid that now belongs to another process
    (its start time differs) is not touched: while any process of the old session lives, its id
    cannot be reused."""
    stopped: list[int] = []
    try:
        record = json.loads(path.read_text())
        attempt_id, pid = int(record["attempt_id"]), int(record["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        path.unlink(missing_ok=True)
        return stopped
    leader = sysinfo.read_stat(pid) if pid > 0 else None
    ours = leader is None or leader.start_ticks == record.get("start_ticks")
    if pid > 0 and ours and sysinfo.session_members(pid):
        signal_session(pid, signal.SIGKILL)
        stopped.append(attempt_id)
    engine = record.get("container")
    if isinstance(engine, dict) and isinstance(engine.get("program"), list) and engine.get("name"):
        # The engine, not the session, runs the container: stop it by the name the agent gave it.
        argv = [*map(str, engine["program"]), "rm", "--force", str(engine["name"])]
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            removed = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=kill_timeout)
            if removed.returncode == 0 and removed.stdout.strip() and attempt_id not in stopped:
                stopped.append(attempt_id)
    path.with_suffix(SIGNALLED).unlink(missing_ok=True)
    path.unlink(missing_ok=True)
    return stopped
