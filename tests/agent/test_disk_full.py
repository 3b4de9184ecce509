"""An attempt whose keeper cannot write the run's status (the node's disk full, as a job filling
it with output leaves it): its end is still the command's, not a lost run.

Seen: a job filled the loopback node's disk; its command died of ENOSPC, its keeper died writing
the status, and the agent took the run for lost (a keeper killed): the job was requeued under
on_node_failure and filled the disk again."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.agent.runner import STATUS_UNKEPT, Runner
from tests.agent.test_runner import run_to_end, spec


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[Runner]:
    r = Runner(tmp_path / "work", base_env={"PATH": os.environ["PATH"]}, kill_grace=0.3)
    yield r
    r.terminate_all(grace=0.1)


def unwritable_status(runner: Runner, attempt_id: int) -> None:
    """The keeper writes STATUS.tmp, then renames it: a directory in its place fails the write as
    a full disk does (a real OSError from the kernel, without filling one)."""
    status = runner._status_path(attempt_id)
    status.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{status}.tmp").mkdir()


def test_an_exit_whose_status_cannot_be_written_is_reported_as_the_commands_with_why(runner: Runner) -> None:
    unwritable_status(runner, 31)
    attempt = runner.start(spec(31, ["sh", "-c", "exit 3"]))
    assert attempt is not None
    assert run_to_end(runner, attempt) == 3
    assert not attempt.keeper_killed and not attempt.abandoned  # not a lost run
    assert attempt.status_unkept and attempt.failure == STATUS_UNKEPT
    # Kept by the agent once there is room (here, where only the keeper's file was in the way), for
    # an agent started again before the end is reported.
    assert runner._status_path(31).read_text() == "3\n"


def test_a_command_killed_by_a_signal_whose_status_cannot_be_written_ends_as_the_shells_128_plus_n(
    runner: Runner,
) -> None:
    """The keeper cannot die by the command's signal then: a keeper dying by a signal with no status
    is how its agent knows a keeper killed."""
    unwritable_status(runner, 32)
    attempt = runner.start(spec(32, ["sh", "-c", "kill -TERM $$"]))
    assert attempt is not None
    assert run_to_end(runner, attempt) == 128 + signal.SIGTERM
    assert attempt.exit_signal is None and not attempt.keeper_killed and attempt.status_unkept


def test_a_keeper_killed_is_still_a_lost_run(runner: Runner) -> None:
    attempt = runner.start(spec(33, ["sleep", "30"]))
    assert attempt is not None
    os.kill(attempt.pid, signal.SIGKILL)  # the keeper, not the command
    run_to_end(runner, attempt)
    assert attempt.keeper_killed and attempt.abandoned and not attempt.status_unkept
