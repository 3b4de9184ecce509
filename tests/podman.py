"""A real container engine for the tests of jobs with an image: Debian's podman, installed when
missing as Slurm is for its tests (root and apt-get; otherwise the tests skip, and fail under
CI=true), and a small image made here from Debian's static busybox (`podman import` of a root file
system: no registry is reached).

This machine's kernel needs two settings, which the tests give through corral's own [containers]
options (as an operator would, or in containers.conf): runc, since crun refuses its mixed cgroup v1
and v2 mounts, and limits no higher than the sandbox's own (`--ulimit`), which it may not raise.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from tests.support import debian_packages_missing, require

PACKAGES = ["podman", "runc", "busybox-static"]
PROGRAM = ("podman", "--runtime", "runc")
RUN_ARGS = ("--network=none", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024")
IMAGE = "localhost/corral-test-busybox:1"
TOOLS = ("sh", "echo", "cat", "env", "pwd", "sleep", "trap", "test")


def _missing() -> list[str]:
    return [p for p in ("podman", "runc", "busybox") if shutil.which(p) is None]


@functools.cache
def podman_unavailable() -> str | None:
    return debian_packages_missing(PACKAGES, _missing)


@functools.cache
def _image() -> str:
    if subprocess.run([*PROGRAM, "image", "exists", IMAGE], check=False).returncode != 0:
        busybox = shutil.which("busybox")
        assert busybox is not None
        with tempfile.TemporaryDirectory() as scratch:
            root = Path(scratch) / "root"
            (root / "bin").mkdir(parents=True)
            shutil.copy(busybox, root / "bin" / "busybox")
            for tool in TOOLS:
                (root / "bin" / tool).symlink_to("busybox")
            tarball = Path(scratch) / "root.tar"
            subprocess.run(["tar", "-C", str(root), "-cf", str(tarball), "."], check=True)
            subprocess.run(
                [*PROGRAM, "import", "--change", "ENV PATH=/bin", str(tarball), IMAGE],
                check=True,
                capture_output=True,
                timeout=120,
            )
    return IMAGE


def busybox_image() -> str:
    """The test image's name, podman installed and the image made first if need be."""
    require(podman_unavailable(), "the container tests")
    return _image()


def containers(matching: str) -> list[str]:
    """The ids of the containers `podman ps --filter` `matching` finds, running or not."""
    listed = subprocess.run(
        [*PROGRAM, "ps", "--all", "--quiet", "--filter", matching],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return listed.stdout.split()


def containers_named(name: str) -> list[str]:
    return containers(f"name=^{name}$")


def run_detached(name: str, labels: Sequence[str], image: str) -> None:
    """A container named `name` with `labels` ("KEY=VALUE") that sleeps, as an agent (or another
    corral's) would have left it running under the engine."""
    label_args = [arg for label in labels for arg in ("--label", label)]
    started = subprocess.run(
        [*PROGRAM, "run", "--detach", "--rm", "--name", name, *label_args, *RUN_ARGS, image, "sleep", "300"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert started.returncode == 0, started.stderr


def start_leftovers(
    node_id: str, attempt_id: int, agent_dirs: dict[str, Path], image: str
) -> dict[tuple[str, str], str]:
    """What agents of two corrals with the same node id (their work dirs `agent_dirs`, by whose)
    left running, never recorded: for each, a container labelled as agents label them now and one
    an older agent labelled with the node alone (both under name_of's names); and one named as the
    oldest agents named theirs, whose it is nobody can tell. By (whose, kind); kinds "labelled",
    "older agent's", and ("either", "oldest")."""
    from corral.agent import container

    started: dict[tuple[str, str], str] = {}
    for whose, agent_dir in agent_dirs.items():
        agent_label = f"{container.AGENT_LABEL}={container.agent_key(agent_dir)}"
        for kind, attempt, labels in (
            ("labelled", attempt_id, [f"{container.NODE_LABEL}={node_id}", agent_label]),
            ("older agent's", attempt_id + 1, [f"{container.NODE_LABEL}={node_id}"]),
        ):
            started[(whose, kind)] = container.name_of(attempt, node_id, agent_dir)
            run_detached(started[(whose, kind)], labels, image)
    started[("either", "oldest")] = container.legacy_name_of(attempt_id + 2)
    run_detached(started[("either", "oldest")], [f"{container.NODE_LABEL}={node_id}"], image)
    return started


def remove_named(names: Iterable[str]) -> None:
    """Removes the containers a test started, by their names (never others': the host is shared)."""
    for name in names:
        subprocess.run([*PROGRAM, "rm", "--force", "--time", "0", name], capture_output=True, check=False, timeout=60)
