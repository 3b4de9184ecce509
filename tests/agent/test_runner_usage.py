"""What an attempt used (seff's figures: Slurm's TotalCPU and MaxRSS), with real processes: the
agent's samples of its session, its keeper's count at its end, and both after an agent restart."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.agent import sysinfo
from corral.agent.runner import Attempt, KeptUsage, Runner, read_usage, settle_usage
from tests.agent.test_runner import run_to_end, spec
from tests.support import wait_until as wait_for

MIB = 1024 * 1024


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[Runner]:
    r = Runner(tmp_path / "work", base_env={"PATH": os.environ["PATH"]}, kill_grace=0.3)
    yield r
    r.terminate_all(grace=0.1)


# Touches 100 MiB (bytearray's pages are not resident until written), then burns CPU_SECONDS of CPU.
BURN = """
import sys, time
memory = bytearray(100 * 1024 * 1024)
for page in range(0, len(memory), 4096):
    memory[page] = 1
start = time.process_time()
while time.process_time() - start < float(sys.argv[1]):
    pass
"""


def test_an_ended_attempt_says_the_cpu_time_and_peak_memory_it_used(runner: Runner) -> None:
    """What seff reads of a Slurm job (TotalCPU, MaxRSS), so that a job asking 16 GiB that peaks at
    2 GiB can be told: the agent samples the attempt at each ping, and the keeper adds its count."""
    attempt = runner.start(spec(31, [sys.executable, "-c", BURN, "1.0"]))
    assert attempt is not None

    def ended() -> bool:
        runner.usage()  # (the agent's pings, as often as the test likes)
        runner.poll()
        return attempt.exited

    wait_for(ended, 60, "the attempt to burn its CPU and end")
    assert attempt.exit_code == 0 and attempt.usage_sampled
    assert attempt.cpu_seconds is not None and 0.8 <= attempt.cpu_seconds < 30, attempt.cpu_seconds
    assert attempt.max_rss_mib is not None and 90 <= attempt.max_rss_mib < 1000, attempt.max_rss_mib


def test_an_attempt_that_ends_before_any_sample_still_says_what_it_used(runner: Runner) -> None:
    """A command shorter than a ping is never sampled: its keeper's count of what it waited for is
    all there is, and is exact for CPU time; its peak is its largest process's."""
    short = runner.start(spec(32, [sys.executable, "-c", BURN, "0.3"]))
    at_once = runner.start(spec(33, ["true"]))
    assert short is not None and at_once is not None
    assert run_to_end(runner, short, timeout=60) == 0 and run_to_end(runner, at_once) == 0
    assert not short.usage_sampled and not at_once.usage_sampled
    assert short.cpu_seconds is not None and 0.25 <= short.cpu_seconds < 30, short.cpu_seconds
    assert short.max_rss_mib is not None and 90 <= short.max_rss_mib < 1000, short.max_rss_mib
    assert at_once.cpu_seconds is not None and at_once.cpu_seconds < 5
    # (Its peak is below what its keeper's fork gave it, ~10 MiB: unknown, not the keeper's figure.)
    assert at_once.max_rss_mib is None or at_once.max_rss_mib < 20
    # A command that never started used nothing that is known.
    missing = runner.start(spec(34, ["/no/such/program"]))
    assert missing is not None and missing.exit_code == 127
    assert (missing.cpu_seconds, missing.max_rss_mib) == (None, None)


def test_a_run_that_ended_while_no_agent_ran_says_what_it_used_to_the_next(tmp_path: Path) -> None:
    """The keeper writes the run's usage beside its status: an agent that re-adopts the run after a
    restart reports it as the agent that started it would have."""
    work = tmp_path / "work"
    first = Runner(work)
    try:
        attempt = first.start(spec(35, [sys.executable, "-c", BURN, "0.3"]))
        assert attempt is not None

        def keeper_ended() -> bool:
            stat = sysinfo.read_stat(attempt.pid)
            return stat is None or stat.state == "Z"  # (this runner has not reaped it)

        wait_for(keeper_ended, 60, "the keeper to write the run's end and exit")
        assert (work / "running" / "35.usage").exists()  # (beside its status)

        adopted, lost = Runner(work).adopt()
        assert lost == [] and [a.attempt_id for a in adopted] == [35]
        assert adopted[0].exit_code == 0
        assert adopted[0].cpu_seconds is not None and adopted[0].cpu_seconds >= 0.25, adopted[0].cpu_seconds
        assert adopted[0].max_rss_mib is not None and adopted[0].max_rss_mib >= 90, adopted[0].max_rss_mib
    finally:
        first.terminate_all(grace=0.1)


def test_usage_settles_on_the_higher_of_the_samples_and_the_keepers_count(tmp_path: Path) -> None:
    attempt = Attempt(spec(36, ["x"]), tmp_path / "log", None, 0.0)
    settle_usage(attempt, None)
    assert (attempt.cpu_seconds, attempt.max_rss_mib) == (None, None)  # no sample, no keeper's word
    attempt.usage_sampled, attempt.cpu_seconds_max, attempt.rss_bytes_max = True, 2.5, 300 * MIB
    settle_usage(attempt, KeptUsage(cpu_seconds=4.0, max_rss_kib=200 * 1024, forked_rss_kib=11 * 1024))
    # The keeper counted more CPU (a process sampled never); the samples saw more RSS (the processes
    # together: the keeper's is the largest single one's).
    assert (attempt.cpu_seconds, attempt.max_rss_mib) == (4.0, 300)
    settle_usage(attempt, KeptUsage(cpu_seconds=1.0, max_rss_kib=500 * 1024, forked_rss_kib=11 * 1024))
    assert (attempt.cpu_seconds, attempt.max_rss_mib) == (2.5, 500)
    # A peak no higher than the keeper's own may be the keeper's, from before the command's exec.
    unsampled = Attempt(spec(37, ["x"]), tmp_path / "log", None, 0.0)
    settle_usage(unsampled, KeptUsage(cpu_seconds=0.001, max_rss_kib=7 * 1024, forked_rss_kib=11 * 1024))
    assert (unsampled.cpu_seconds, unsampled.max_rss_mib) == (0.001, None)


def test_a_keepers_usage_file_that_is_missing_or_garbled_is_not_known(tmp_path: Path) -> None:
    assert read_usage(tmp_path / "missing.usage") is None  # a keeper of an older corral
    (tmp_path / "bad.usage").write_text("{")
    assert read_usage(tmp_path / "bad.usage") is None
