"""Jobs with a container image, as the agent's runner starts them through a real podman
(corral.agent.container): the command runs in the image, in the attempt's directory (mounted at its
own path), with the job's environment and corral's variables but not the agent's, and its exit code
is the command's; a kill the command ignores ends with the container killed and removed, not left
running under the engine, and no other corral's container of the same attempt id with it; an agent
upgraded under a container an older one started finds, follows and kills it by its old name."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.agent import credentials, sysinfo
from corral.agent.container import Engine
from corral.agent.runner import Attempt, AttemptSignal, AttemptSpec, Runner, spec_json
from tests.agent.peer import Peer
from tests.agent.test_agent import Agents
from tests.podman import (
    PROGRAM,
    RUN_ARGS,
    busybox_image,
    containers,
    containers_named,
    remove_named,
    start_leftovers,
)
from tests.support import alive, wait_until

ENGINE = Engine(PROGRAM, RUN_ARGS)


def spec(attempt_id: int, image: str, command: list[str], env: dict[str, str] | None = None) -> AttemptSpec:
    return AttemptSpec(attempt_id, 7, command, env or {}, ["n1"], {}, image)


def test_a_job_runs_in_its_image_with_its_environment_and_exit_code(tmp_path: Path) -> None:
    image = busybox_image()
    runner = Runner(tmp_path, base_env={"PATH": "/usr/bin:/bin", "AGENT_ONLY": "secretish"})
    runner.engine = ENGINE
    script = 'echo "$GREETING job $CORRAL_JOB_ID [$AGENT_ONLY] $PATH"; pwd; echo kept > out.txt; exit 3'
    attempt = runner.start(spec(901, image, ["sh", "-c", script], {"GREETING": "hello"}))
    assert attempt is not None
    wait_until(lambda: runner.poll() or attempt.exited, 120, "the container to end")
    cwd = tmp_path / "attempts" / "901"
    assert attempt.exit_code == 3
    assert attempt.log_path.read_text() == f"hello job 7 [] /bin\n{cwd}\n"  # the image's PATH, not the agent's
    assert (cwd / "out.txt").read_text() == "kept\n"  # written in the attempt's directory on the node
    assert attempt.container_name is not None and containers_named(attempt.container_name) == []  # removed once ended


def test_a_container_job_that_keeps_its_stderr_apart_writes_it_to_its_own_file(tmp_path: Path) -> None:
    """The engine's client passes the container's stderr on apart from its stdout (no terminal)."""
    runner = Runner(tmp_path, base_env={"PATH": "/usr/bin:/bin"})
    runner.engine = ENGINE
    script = "echo out; echo err >&2; echo out2; exit 4"
    attempt = runner.start(
        AttemptSpec(902, 7, ["sh", "-c", script], {}, ["n1"], {}, busybox_image(), separate_stderr=True)
    )
    assert attempt is not None and attempt.stderr_path is not None
    wait_until(lambda: runner.poll() or attempt.exited, 120, "the container to end")
    assert attempt.exit_code == 4
    assert attempt.log_path.read_text() == "out\nout2\n"
    assert attempt.stderr_path.read_text() == "err\n"


def remove_container(name: str) -> None:
    subprocess.run([*PROGRAM, "rm", "--force", "--time", "0", name], capture_output=True, check=False, timeout=60)


@contextlib.contextmanager
def started(tmp_path: Path, attempt_id: int, script: str, kill_grace: float = 3.0) -> Iterator[tuple[Runner, Attempt]]:
    """A container running `script` (which prints "up" first) through a runner, removed at the end."""
    image = busybox_image()
    runner = Runner(tmp_path, kill_grace=kill_grace)
    runner.engine = ENGINE
    attempt_spec = spec(attempt_id, image, ["sh", "-c", f"echo up; {script}"])
    try:
        attempt = runner.start(attempt_spec)
        assert attempt is not None
        wait_until(lambda: attempt.log_path.read_text() == "up\n", 120, "the container to start")
        yield runner, attempt
    finally:
        remove_container(runner.container_name(attempt_spec))


def test_a_container_that_ignores_sigterm_is_removed_after_the_grace(tmp_path: Path) -> None:
    with started(tmp_path, 902, "trap '' TERM; while true; do sleep 1; done", kill_grace=1.0) as (runner, attempt):
        assert runner.kill(902)
        wait_until(lambda: runner.poll() or attempt.exited, 60, "the attempt to end")
        assert attempt.killed_hard
        # The engine's client is killed after the grace, and the container by the engine's `kill`.
        name = attempt.container_name
        assert name is not None
        wait_until(lambda: containers_named(name) == [], 60, "the container to be removed")


@pytest.mark.parametrize("same_node_id", [False, True], ids=["two-nodes", "one-node-id-drawn-twice"])
def test_two_corrals_running_the_same_attempt_id_each_run_and_kill_their_own_container(
    tmp_path: Path, same_node_id: bool
) -> None:
    """Seen: attempt ids are per store, so two corrals whose agents share a host's engine (two
    loopback setups on a workstation, a store started afresh) both named a container
    'corral-attempt-N': the second's `podman run --name` failed while the first ran ("the
    container name is already in use"), and a kill of one by that name killed the other's. Node
    ids are random, so two stores may draw the same: the agents' work dirs still tell them apart."""
    image = busybox_image()
    attempt_id = 9071  # the same in both corrals (an id no other test here uses)
    script = "echo up; trap '' TERM; while [ ! -e go ]; do sleep 0.1; done; echo end"
    drawn = f"n-{secrets.token_hex(4)}"
    nodes = {name: drawn if same_node_id else f"n-{secrets.token_hex(4)}" for name in ("one", "other")}
    runners = {name: Runner(tmp_path / name, kill_grace=1.0) for name in nodes}
    attempts: dict[str, Attempt] = {}
    try:
        for name, runner in runners.items():
            runner.engine = ENGINE
            attempt = runner.start(AttemptSpec(attempt_id, 7, ["sh", "-c", script], {}, [nodes[name]], {}, image))
            assert attempt is not None
            attempts[name] = attempt
        wait_until(lambda: all(up(runners[n], attempts[n]) for n in nodes), 120, "both containers to start")
        for attempt in attempts.values():
            assert not attempt.exited, attempt.log_path.read_text()  # neither refused its name

        one, other = attempts["one"], attempts["other"]
        assert one.container_name is not None
        assert runners["one"].kill(attempt_id)  # it ignores SIGTERM: killed hard, by name, after the grace
        wait_until(lambda: runners["one"].poll() or one.exited, 60, "the killed attempt to end")
        wait_until(lambda: containers_named(str(one.container_name)) == [], 60, "its container to be removed")

        (tmp_path / "other" / "attempts" / str(attempt_id) / "go").touch()
        wait_until(lambda: runners["other"].poll() or other.exited, 60, "the other attempt to end")
        assert other.exit_code == 0  # not killed with the first: it ran to its end
        assert other.log_path.read_text() == "up\nend\n"
    finally:
        for node_id in set(nodes.values()):
            for container_id in on_node(node_id):
                remove_container(container_id)


def up(runner: Runner, attempt: Attempt) -> bool:
    """Whether the attempt's command has said "up" (or ended: the caller says whether it should)."""
    runner.poll()
    return attempt.exited or attempt.log_path.read_text() == "up\n"


def on_node(node_id: str) -> list[str]:
    return containers(f"label=corral-node={node_id}")


def test_a_containers_load_is_measured(tmp_path: Path) -> None:
    """The engine runs the container, outside the client's session: its processes' CPU time is
    the attempt's load all the same (corral nodes, the utilised placement policies)."""
    with started(tmp_path, 904, "while :; do :; done") as (runner, _):
        runner.usage()  # the first look finds the container and starts the count
        wait_until(lambda: runner.usage()[0] > 0.3, 30, "the container's busy loop to show as load", interval=1.0)


def test_an_image_without_an_engine_cannot_run(tmp_path: Path) -> None:
    runner = Runner(tmp_path)  # a server that named no engine
    attempt = runner.start(spec(903, "localhost/anything:1", ["true"]))
    assert attempt is not None and attempt.exit_code == 127
    assert "no container engine" in attempt.log_path.read_text()


def test_an_engine_missing_from_the_node_is_named_with_the_image(tmp_path: Path) -> None:
    """Seen: with podman not installed on a node, the job's output said "cannot run
    'docker.io/library/python:3.12': No such file or directory", as if the image were a file."""
    runner = Runner(tmp_path)
    runner.engine = Engine(("no-such-podman", "--runtime", "runc"), ())
    attempt = runner.start(spec(904, "docker.io/library/python:3.12", ["python", "-V"]))
    assert attempt is not None and attempt.exit_code == 127
    said = attempt.log_path.read_text()
    assert "cannot run image 'docker.io/library/python:3.12' with 'no-such-podman': No such file" in said, said


@pytest.fixture
def agents(tmp_path: Path) -> Iterator[Agents]:
    started = Agents(tmp_path)
    yield started
    started.cleanup()


@pytest.fixture
def peer() -> Iterator[Any]:
    served = Peer().start()
    yield served
    served.stop()


def start_as_an_older_agent(
    work_dir: Path, node_id: str, attempt_id: int, image: str, script: str, name_recorded: bool
) -> subprocess.Popen[bytes]:
    """The attempt as an agent older than the names of name_of started it (the keeper and the
    records' places are unchanged): in a container named `corral-attempt-ID` alone, labelled with
    its node, and a run record that gives that name, or (name_recorded False) none."""
    runner = Runner(work_dir)
    attempt_spec = AttemptSpec(attempt_id, 7, ["sh", "-c", script], {}, [node_id], {}, image)
    cwd = work_dir / "attempts" / str(attempt_id)
    cwd.mkdir(parents=True)
    name = f"corral-attempt-{attempt_id}"
    argv = [*PROGRAM, "run", "--rm", "--name", name, "--label", f"corral-node={node_id}"]
    argv += ["--volume", f"{cwd}:{cwd}", "--workdir", str(cwd), *RUN_ARGS, image, "sh", "-c", script]

    def record(keeper: subprocess.Popen[bytes]) -> None:
        stat = sysinfo.read_stat(keeper.pid)
        assert stat is not None
        written: dict[str, Any] = {
            "attempt_id": attempt_id,
            "pid": keeper.pid,
            "start_ticks": stat.start_ticks,
            "started_at": time.time(),
            "spec": spec_json(attempt_spec),
        }
        if name_recorded:
            written["container"] = {"program": list(PROGRAM), "name": name}
        (work_dir / "running" / f"{attempt_id}.json").write_text(json.dumps(written))

    with open(work_dir / "logs" / f"{attempt_id}.log", "wb") as out:
        return runner._start_kept(argv, cwd, dict(os.environ), out, attempt_id, record)


@pytest.mark.parametrize("name_recorded", [True, False], ids=["name-recorded", "no-name-recorded"])
def test_an_agent_upgraded_under_a_running_container_follows_and_kills_it_by_its_old_name(
    agents: Agents, peer: Any, name_recorded: bool
) -> None:
    """An agent started (SIGUSR1's hand-over, or a crash) in the work dir of one older than the
    names that tell corrals apart finds the container the old one started as `corral-attempt-ID`:
    keeps it (not removed as a leftover of its node), follows it to its end, and kills it by that
    name, which is the only way to end a container that ignores SIGTERM."""
    image = busybox_image()
    state = peer.state
    state.containers = {"program": list(PROGRAM), "run_args": list(RUN_ARGS)}
    node_id, attempt_id = f"n-{secrets.token_hex(4)}", 9072
    work_dir = agents.tmp_path / node_id
    old_name = f"corral-attempt-{attempt_id}"
    script = "echo up; while [ ! -e go ]; do sleep 0.1; done; echo more; trap '' TERM; while :; do sleep 0.1; done"
    keeper = start_as_an_older_agent(work_dir, node_id, attempt_id, image, script, name_recorded)
    try:
        wait_until(lambda: (work_dir / "logs" / f"{attempt_id}.log").read_text() == "up\n", 120, "the container")
        [running] = containers_named(old_name)
        secret = secrets.token_hex(16)
        state.secrets[secret] = node_id
        state.started[attempt_id] = keeper.pid
        credentials.save(work_dir, credentials.Credentials(node_id, peer.url, secret))

        agents.start(peer.url, node_id, "")
        wait_until(lambda: state.resumes and state.pings, 30, "the upgraded agent to resume and ping")
        assert state.resumes[0]["running"] == [attempt_id] and state.lost == set()
        assert containers_named(old_name) == [running]  # kept: the run's, not a leftover

        (work_dir / "attempts" / str(attempt_id) / "go").touch()
        wait_until(lambda: state.log_text(attempt_id) == "up\nmore\n", 30, "the run's output to be followed")
        state.kill.add(attempt_id)
        wait_until(lambda: attempt_id in state.finished, 60, "the killed run's end to be reported")
        assert state.finished[attempt_id][0] == 128 + signal.SIGKILL
        wait_until(lambda: containers_named(old_name) == [], 60, "the old container to be killed by its name")
    finally:
        if alive(keeper.pid):
            with contextlib.suppress(OSError):
                os.killpg(keeper.pid, signal.SIGKILL)
        keeper.wait()
        for container_id in on_node(node_id):
            remove_container(container_id)


def test_a_resumed_agent_removes_its_leftover_containers_and_not_those_of_another_corral_with_its_node_id(
    agents: Agents, peer: Any
) -> None:
    """Seen (review): an agent that resumed removed every container labelled with its node id, and
    node ids are random: another corral sharing the engine whose store drew the same id lost its
    running containers. Now the leftovers are those labelled with this agent's work dir too, or
    (an older agent's, labelled with the node alone) named with its digits (container.name_of);
    an older agent's `corral-attempt-ID`, which nothing tells apart from another corral's, is left."""
    image = busybox_image()
    state = peer.state
    state.containers = {"program": list(PROGRAM), "run_args": list(RUN_ARGS)}
    node_id = f"n-{secrets.token_hex(4)}"
    work_dirs = {
        "this": (agents.tmp_path / node_id).resolve(),
        "other": (agents.tmp_path / "other" / node_id).resolve(),
    }
    attempt_id = 9170 + secrets.randbelow(800)  # attempt ids are per store: both corrals run these
    started: dict[tuple[str, str], str] = {}
    try:
        # Started by the agent (this one's dead predecessor, or the other corral's live agent), and
        # never recorded: the agent was killed in between.
        started = start_leftovers(node_id, attempt_id, work_dirs, image)
        secret = secrets.token_hex(16)
        state.secrets[secret] = node_id
        work_dirs["this"].mkdir(parents=True, exist_ok=True)
        credentials.save(work_dirs["this"], credentials.Credentials(node_id, peer.url, secret))
        agents.start(peer.url, node_id, "")
        wait_until(lambda: state.resumes and state.pings, 30, "the agent to resume and ping")
        mine = {("this", "labelled"), ("this", "older agent's")}
        wait_until(lambda: all(containers_named(started[key]) == [] for key in mine), 60, "its leftovers' removal")
        kept = {key for key, name in started.items() if containers_named(name) != []}
        assert kept == set(started) - mine
    finally:
        remove_named(started.values())


def test_a_jobs_signal_reaches_the_containers_main_process_once(tmp_path: Path) -> None:
    """sbatch's --signal for a job in an image: the engine's client is not the job, so the signal
    goes to the container's main process through the engine (`kill --signal`), once it runs, and
    only there (the client, which passes signals on, would make it twice)."""
    script = "trap 'echo got USR1' USR1; echo up; while [ ! -e go ]; do sleep 0.05; done; echo done"
    runner = Runner(tmp_path, base_env={"PATH": "/usr/bin:/bin"})
    runner.engine = ENGINE
    attempt_spec = AttemptSpec(
        903, 7, ["sh", "-c", script], {}, ["n1"], {}, busybox_image(), time_limit=60.0, signal=AttemptSignal(10, 60.0)
    )
    try:
        attempt = runner.start(attempt_spec)
        assert attempt is not None
        wait_until(lambda: "up\n" in attempt.log_path.read_text(), 120, "the container to start")

        def sent() -> bool:
            runner.usage()  # (as each ping does: finds the container's session once it runs)
            for due in runner.signals_due():
                assert runner.send_signal(due.attempt_id) == f"container {attempt.container_name}"
            return "got USR1" in attempt.log_path.read_text()

        wait_until(sent, 60, "the container's main process to get the signal")
        time.sleep(1.0)
        assert runner.signals_due() == []
        (tmp_path / "attempts" / "903" / "go").touch()
        wait_until(lambda: runner.poll() or attempt.exited, 60, "the container to end")
        assert attempt.exit_code == 0 and attempt.log_path.read_text() == "up\ngot USR1\ndone\n"
    finally:
        remove_container(runner.container_name(attempt_spec))
