"""Jobs that run in a container image (the brief: a job is "a command, or a container image and a
command"). The agent runs such a job through the command line of an OCI container engine, podman or
docker, whose `run` takes the same options (`[containers]` in the server's config, handed to the
agent at pairing), where it runs any other job as a plain process.

The container is removed when it ends (`--rm`) and named after the attempt, its node and its
agent (name_of), so that a kill the engine's client does not pass on (SIGKILL of the client leaves
the container running under the engine) can still reach it by name, and reach no other. It is
labelled with its node and its agent (`corral-node=NODE`, `corral-agent=KEY`: agent_key), so that
what a dead agent left running under the engine can be found (own_containers), and removed with its
node, without touching another corral's containers on the same engine. The job's working directory
(its chdir, else the attempt's own directory) is mounted at its own path and is the container's
working directory, as for a plain process: a job on a shared file system sees it at the path every
node sees. The container sees only the job's own environment and corral's CORRAL_* variables,
not the agent's: the image's PATH and HOME stay the image's. Values are passed by name (`--env
NAME`, the engine reading the value from its own environment), so no value shows in the process
list.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
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
# Whose the container is: the node id alone is no proof (see name_of), two corrals sharing an engine
# may draw the same one. The value is agent_key(the agent's work dir).
AGENT_LABEL = "corral-agent"

# Both engines take names of [a-zA-Z0-9][a-zA-Z0-9_.-]*; kept to a DNS label's 63 characters, since
# an engine may give the name out as the container's host name on its networks.
NAME_MAX = 63
NOT_IN_A_NAME = re.compile(r"[^a-zA-Z0-9_.-]")


def name_of(attempt_id: int, node_id: str | None, agent_dir: Path) -> str:
    """The container's name, `corral-attempt-ID-NODE-AGENT`: unique among all the containers its
    engine runs (a host's, or one user's under rootless podman), where the attempt's id alone is
    not: ids are per store, so two corrals whose agents share an engine, or a store started afresh,
    run attempt 1 at once. The node id says whose it is, but is no proof: it is 32 random bits,
    which two stores may draw alike (and a store restored from a backup holds the same ones). AGENT
    is: 8 hex digits of the SHA-256 of the agent's work dir (`agent_dir`), which no two agents that
    share an engine share (one agent per work dir, which it locks; the engine mounts the attempt's
    directory in it at its path, so the path is one on the engine's own machine)."""
    head = f"corral-attempt-{attempt_id}"
    agent = agent_key(agent_dir)[:8]
    room = NAME_MAX - len(head) - len(agent) - 2
    node = NOT_IN_A_NAME.sub("-", node_id or "")[: max(0, room)]
    return "-".join(part for part in (head, node, agent) if part)


def agent_key(agent_dir: Path) -> str:
    """The agent's identity on its engine, its AGENT_LABEL: the SHA-256 (hex) of its work dir, whose
    first 8 digits end the names of name_of. Not the node id, which two stores may draw alike, nor
    anything the server hands out (a cluster's name is often the default one): the work dir is one
    per agent on the engine's machine (the agent locks it), and it outlives the agent, since a
    restarted agent resumes from the credentials it saved there, and must find its containers again.
    `agent_dir` as the agent has it, resolved (corral.agent.cli)."""
    return hashlib.sha256(str(agent_dir).encode()).hexdigest()


def legacy_name_of(attempt_id: int) -> str:
    """The name agents older than name_of gave the attempt's container (and recorded as such): what
    a run record that names none falls back to."""
    return f"corral-attempt-{attempt_id}"


def run_argv(
    engine: Engine,
    name: str,
    image: str,
    command: Sequence[str],
    work_dir: Path,
    env_names: Iterable[str],
    node_id: str | None = None,
    agent_dir: Path | None = None,
    read_only: Sequence[Path] = (),
) -> list[str]:
    """`work_dir` is the container's working directory (the attempt's), `agent_dir` the agent's own;
    `read_only`: files mounted read-only at their own paths too (a batch script outside `work_dir`)."""
    argv = [*engine.program, "run", "--rm", "--name", name]
    if node_id:
        argv += ["--label", f"{NODE_LABEL}={node_id}"]
    if agent_dir is not None:
        argv += ["--label", f"{AGENT_LABEL}={agent_key(agent_dir)}"]
    argv += ["--volume", f"{work_dir}:{work_dir}", "--workdir", str(work_dir)]
    for path in read_only:
        argv += ["--volume", f"{path}:{path}:ro"]
    for name in sorted(env_names):
        argv += ["--env", name]
    return [*argv, *engine.run_args, image, *command]


def pid_argv(engine: Engine, name: str) -> list[str]:
    """Prints the host pid of the container's first process (0 once it has stopped)."""
    return [*engine.program, "inspect", "--format", "{{.State.Pid}}", name]


def kill_argv(engine: Engine, name: str) -> list[str]:
    """SIGKILL, both engines' default for `kill`; `--rm` then removes the container."""
    return [*engine.program, "kill", name]


def signal_argv(engine: Engine, name: str, number: int) -> list[str]:
    """Sends the container's main process (its PID 1) signal `number`: both engines' `kill --signal`."""
    return [*engine.program, "kill", "--signal", str(number), name]


def names_argv(engine: Engine, *labels: str) -> list[str]:
    """Prints the names of the containers, running or not, that carry every one of `labels`
    ("KEY=VALUE", or "KEY": with any value), one a line. Both engines AND label filters."""
    filters = [arg for label in labels for arg in ("--filter", f"label={label}")]
    return [*engine.program, "ps", "--all", "--format", "{{.Names}}", *filters]


def own_containers(engine: Engine, node_id: str, agent_dir: Path, timeout: float = 60.0) -> list[str]:
    """The names of the containers, running or not, that the agent of `node_id` working in
    `agent_dir` started (this one, or one before it in the same work dir): those labelled with both
    the node and the agent, and those an older agent labelled with the node alone under a name that
    is this agent's (name_of: the work dir's digits end it). An older agent's container named
    `corral-attempt-ID` (legacy_name_of) carries nothing that tells this corral's from another's
    with the same node id: never chosen here (a run record that names it is followed as before).
    Raises OSError or subprocess.TimeoutExpired when the engine cannot be run; an engine that
    fails lists nothing."""

    def names(*labels: str) -> list[str]:
        listed = subprocess.run(
            names_argv(engine, *labels),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        return listed.stdout.split() if listed.returncode == 0 else []

    node = f"{NODE_LABEL}={node_id}"
    labelled = names(node, f"{AGENT_LABEL}={agent_key(agent_dir)}")
    any_agent = set(names(node, AGENT_LABEL))
    older = [name for name in names(node) if name not in any_agent and is_own_name(name, node_id, agent_dir)]
    return list(dict.fromkeys([*labelled, *older]))


def is_own_name(name: str, node_id: str, agent_dir: Path) -> bool:
    """Whether `name` is one name_of gives an attempt of this node's agent in `agent_dir`."""
    found = re.fullmatch(r"corral-attempt-(\d+)-.+", name)
    return found is not None and name == name_of(int(found[1]), node_id, agent_dir)


def kill_ids_argv(engine: Engine, container_ids: Sequence[str]) -> list[str]:
    return [*engine.program, "kill", *container_ids]


def remove_ids_argv(engine: Engine, container_ids: Sequence[str]) -> list[str]:
    """Removes them, also one whose `--rm` never ran (its engine's monitor was killed with it)."""
    return [*engine.program, "rm", "--force", *container_ids]
