"""Jobs that run in a container image (the brief: a job is "a command, or a container image and a
command"). The agent runs such a job through the command line of an OCI container engine, podman or
docker, whose `run` takes the same options (`[containers]` in the server's config, handed to the
agent at pairing), where it runs any other job as a plain process.

The container is removed when it ends (`--rm`) and named after the attempt, so that a kill the
engine's client does not pass on (SIGKILL of the client leaves the container running under the
engine) can still reach it by name. It is labelled with its node (`corral-node=NODE`), so that
what a dead agent left running under the engine can be found, and removed with its node. The
attempt's directory is mounted at its own path and is the working directory, as for a plain
process. The container sees only the job's own environment and corral's CORRAL_* variables, not
the agent's: the image's PATH and HOME stay the image's. Values are passed by name (`--env NAME`,
the engine reading the value from its own environment), so no value shows in the process list.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Engine:
    """The engine's program with its global options (["podman", "--runtime", "runc"]), and more
    options for its `run`, given before the image (["--network=none"])."""

    program: tuple[str, ...]
    run_args: tuple[str, ...] = ()


NODE_LABEL = "corral-node"


def name_of(attempt_id: int) -> str:
    return f"corral-attempt-{attempt_id}"


def run_argv(
    engine: Engine,
    attempt_id: int,
    image: str,
    command: Sequence[str],
    work_dir: Path,
    env_names: Iterable[str],
    node_id: str | None = None,
) -> list[str]:
    argv = [*engine.program, "run", "--rm", "--name", name_of(attempt_id)]
    if node_id:
        argv += ["--label", f"{NODE_LABEL}={node_id}"]
    argv += ["--volume", f"{work_dir}:{work_dir}", "--workdir", str(work_dir)]
    for name in sorted(env_names):
        argv += ["--env", name]
    return [*argv, *engine.run_args, image, *command]


def pid_argv(engine: Engine, attempt_id: int) -> list[str]:
    """Prints the host pid of the container's first process (0 once it has stopped)."""
    return [*engine.program, "inspect", "--format", "{{.State.Pid}}", name_of(attempt_id)]


def kill_argv(engine: Engine, attempt_id: int) -> list[str]:
    """SIGKILL, both engines' default for `kill`; `--rm` then removes the container."""
    return [*engine.program, "kill", name_of(attempt_id)]


def on_node_argv(engine: Engine, node_id: str) -> list[str]:
    """Prints the ids of the node's containers, running or not, one a line."""
    return [*engine.program, "ps", "--all", "--quiet", "--filter", f"label={NODE_LABEL}={node_id}"]


def names_on_node_argv(engine: Engine, node_id: str) -> list[str]:
    """Prints the names of the node's containers, running or not, one a line."""
    return [*engine.program, "ps", "--all", "--format", "{{.Names}}", "--filter", f"label={NODE_LABEL}={node_id}"]


def kill_ids_argv(engine: Engine, container_ids: Sequence[str]) -> list[str]:
    return [*engine.program, "kill", *container_ids]


def remove_ids_argv(engine: Engine, container_ids: Sequence[str]) -> list[str]:
    """Removes them, also one whose `--rm` never ran (its engine's monitor was killed with it)."""
    return [*engine.program, "rm", "--force", *container_ids]
