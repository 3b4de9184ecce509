"""corral's batch script (corral.executor.slurm.BATCH_SCRIPT) run by sh as slurmd runs it, without
Slurm: how it bounds the output it keeps (server.max_output) on nodes of every kind.
tests/slurm/test_slurm_executor.py runs it under a real Slurm."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from corral.executor.slurm import BATCH_SCRIPT, parse_exit_status

NOTE = "[corral: this attempt's output was cut here, at 10 bytes (server.max_output); the rest was not kept]"
COMMAND = ["sh", "-c", "echo 0123456789abcdef; echo to stderr >&2; exit 3"]


def run_script(tmp_path: Path, max_output: int, path: str = os.environ["PATH"]) -> tuple[bytes, str]:
    """The output the script wrote (its stdout and stderr, as Slurm's one --output file) and its
    exit status file."""
    script = tmp_path / "corral-batch.sh"
    script.write_text(BATCH_SCRIPT)
    status = tmp_path / "status"
    output = tmp_path / "output"
    with output.open("wb") as file:
        subprocess.run(
            ["sh", str(script), str(status), str(max_output), NOTE, *COMMAND],
            env={"PATH": path, "CORRAL_WITHHELD": "", "SLURM_JOB_ID": "17"},
            stdin=subprocess.DEVNULL,
            stdout=file,
            stderr=subprocess.STDOUT,
            timeout=30,
            check=False,
        )
    return output.read_bytes(), status.read_text()


def test_the_output_is_cut_at_max_output_with_the_line_and_the_exit_code_kept(tmp_path: Path) -> None:
    output, status = run_script(tmp_path, 10)
    assert output == f"0123456789\n{NOTE}\n".encode()
    exit_status = parse_exit_status(status)
    assert exit_status is not None and exit_status.exit_code == 3


def test_max_output_zero_keeps_it_all(tmp_path: Path) -> None:
    output, _ = run_script(tmp_path, 0)
    assert output == b"0123456789abcdef\nto stderr\n"


@pytest.mark.parametrize("kind", ["broken stdbuf", "no stdbuf"])
def test_a_node_whose_stdbuf_cannot_run_or_that_has_none_still_keeps_the_output(tmp_path: Path, kind: str) -> None:
    """coreutils' stdbuf makes the limiter's head unbuffered; one that cannot preload its library
    (a node without libstdbuf.so) fails before it runs head, and the whole output was dropped."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    needed = ["sh", "head", "wc", "cat", "mktemp", "mkfifo", "rm", "rmdir", "date", "mv", "sleep", "paste"]
    for name in needed:
        found = next(Path(d) / name for d in os.environ["PATH"].split(os.pathsep) if (Path(d) / name).exists())
        (bin_dir / name).symlink_to(found)
    if kind == "broken stdbuf":
        stdbuf = bin_dir / "stdbuf"
        stdbuf.write_text("#!/bin/sh\necho \"stdbuf: failed to find 'libstdbuf.so'\" >&2\nexit 125\n")
        stdbuf.chmod(stdbuf.stat().st_mode | stat.S_IXUSR)
    output, _ = run_script(tmp_path, 10, path=str(bin_dir))
    assert output == f"0123456789\n{NOTE}\n".encode()
