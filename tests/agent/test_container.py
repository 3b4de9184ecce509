"""Jobs with a container image, as the agent's runner starts them through a real podman
(corral.agent.container): the command runs in the image, in the attempt's directory (mounted at its
own path), with the job's environment and corral's variables but not the agent's, and its exit code
is the command's; a kill the command ignores ends with the container killed and removed, not left
running under the engine."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

from corral.agent.container import Engine, name_of
from corral.agent.runner import Attempt, AttemptSpec, Runner
from tests.podman import PROGRAM, RUN_ARGS, busybox_image, containers_named
from tests.support import wait_until

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
    assert containers_named(name_of(901)) == []  # removed once ended


@contextlib.contextmanager
def started(tmp_path: Path, attempt_id: int, script: str, kill_grace: float = 3.0) -> Iterator[tuple[Runner, Attempt]]:
    """A container running `script` (which prints "up" first) through a runner, removed at the end."""
    image = busybox_image()
    runner = Runner(tmp_path, kill_grace=kill_grace)
    runner.engine = ENGINE
    try:
        attempt = runner.start(spec(attempt_id, image, ["sh", "-c", f"echo up; {script}"]))
        assert attempt is not None
        wait_until(lambda: attempt.log_path.read_text() == "up\n", 120, "the container to start")
        yield runner, attempt
    finally:
        subprocess.run(
            [*PROGRAM, "rm", "--force", "--time", "0", name_of(attempt_id)],
            capture_output=True,
            check=False,
            timeout=60,
        )


def test_a_container_that_ignores_sigterm_is_removed_after_the_grace(tmp_path: Path) -> None:
    with started(tmp_path, 902, "trap '' TERM; while true; do sleep 1; done", kill_grace=1.0) as (runner, attempt):
        assert runner.kill(902)
        wait_until(lambda: runner.poll() or attempt.exited, 60, "the attempt to end")
        assert attempt.killed_hard
        # The engine's client is killed after the grace, and the container by the engine's `kill`.
        wait_until(lambda: containers_named(name_of(902)) == [], 60, "the container to be removed")


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
