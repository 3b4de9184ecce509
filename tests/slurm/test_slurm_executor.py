"""The Slurm executor against a real Slurm (tests/slurm/conftest.py): corral claims, sbatches,
watches with squeue and scontrol, scancels, and re-adopts its Slurm jobs after a restart."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.config import Config, ServerConfig, load_config
from corral.core import accounting
from corral.core.model import JobState
from corral.core.snapshot import JobOutcome
from corral.executor.slurm import SlurmJob, _sbatch_signal_valid
from corral.executor.slurm_loop import SlurmLoop
from corral.jobspec import JobRequest
from corral.server.logstore import cut_note
from corral.store import Store
from tests.slurm.conftest import PREEMPTOR, SlurmCluster
from tests.slurm.test_batch_script import processes_marked
from tests.store.conftest import pg_schema, require_postgresql
from tests.support import wait_until


class Dispatcher:
    """A store and the Slurm control loop over it, driven pass by pass as `corral run` would."""

    def __init__(self, home: Path, config: Config, dispatcher_id: str = "d-test") -> None:
        self.home = home
        self.config = config
        self.store = Store(config.store_url)
        self.store.migrate()
        self.dispatcher_id = dispatcher_id
        self.loop = self.restart()

    def restart(self) -> SlurmLoop:
        """A new loop on the same store and dispatcher id: corral started again."""
        self.loop = SlurmLoop(self.store, self.config, self.dispatcher_id, self.home / "logs")
        return self.loop

    def submit(self, *argv: str, **fields: Any) -> int:
        return self.store.submit([JobRequest(command=list(argv), **fields)], time.time())[0]

    def job(self, job_id: int) -> dict[str, Any]:
        return self.store.job_row(job_id)

    def until(self, predicate: Callable[[], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            self.loop.run_pass()
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
            time.sleep(0.2)

    def until_state(self, job_id: int, *states: str, timeout: float = 30) -> dict[str, Any]:
        return self.until(
            lambda: (row := self.job(job_id))["state"] in states and row, timeout, f"job {job_id} to be {states}"
        )

    def attempts(self, job_id: int) -> list[dict[str, Any]]:
        return self.store.attempts_of(job_id)

    def output(self, job_id: int) -> str:
        attempt = self.attempts(job_id)[-1]
        path = self.home / "logs" / str(job_id) / f"{attempt['id']}.log"
        return path.read_text() if path.exists() else ""

    def events(self, job_id: int) -> list[str]:
        return [f"{e['kind']}: {e['message']}" for e in self.store.list_events(job_id=job_id)]


def make_config(home: Path, slurm: SlurmCluster, retry: dict[str, Any] | None = None, **slurm_keys: Any) -> Config:
    # Each test is a corral of its own on the shared Slurm: its own cluster tag, or its jobs (whose
    # ids start at 1 again) would be taken for another test's.
    return load_config(
        None,
        home=home,
        cloud={"cluster": f"t-{uuid.uuid4().hex[:8]}"},
        executor="slurm",
        slurm={"conf": str(slurm.conf), **slurm_keys},
        policy={"retry": {"backoff_initial": 0.5, **(retry or {})}},
    )


@pytest.fixture
def corral(tmp_path: Path, slurm: SlurmCluster) -> Iterator[Dispatcher]:
    dispatcher = Dispatcher(tmp_path, make_config(tmp_path, slurm))
    yield dispatcher
    dispatcher.store.close()


def test_jobs_run_through_slurm_with_their_exit_codes_output_and_resources(
    corral: Dispatcher, slurm: SlurmCluster
) -> None:
    ok = corral.submit("sh", "-c", 'echo "hello $GREETING"; echo "job $CORRAL_JOB_ID"', env={"GREETING": "a b"})
    failing = corral.submit("sh", "-c", "echo to stderr >&2; exit 7")
    missing = corral.submit("no-such-command-anywhere")
    sized = corral.submit("echo", "two words", "$HOME", vcpus=2, ram=256, time_limit=300)
    # Its batch script SIGKILLed (the command is the script's child): Slurm's ExitCode=0:9.
    killed = corral.submit("sh", "-c", "kill -KILL $PPID")
    for job_id in (ok, failing, missing, sized, killed):
        corral.until_state(job_id, "complete", "failed")

    assert corral.job(ok)["state"] == "complete" and corral.job(ok)["exit_code"] == 0
    assert corral.output(ok) == f"hello a b\njob {ok}\n"
    assert corral.job(failing)["state"] == "failed" and corral.job(failing)["exit_code"] == 7
    assert "to stderr" in corral.output(failing)
    assert corral.job(missing)["exit_code"] == 127
    # 128+9 as ever, and the signal beside it, where an exit 7 has none.
    assert (corral.job(killed)["exit_code"], corral.job(killed)["exit_signal"]) == (137, 9)
    assert corral.job(killed)["wait_reason"].startswith("exit 137: killed by signal 9 (SIGKILL)")
    assert corral.job(failing)["exit_signal"] is None
    assert "no-such-command-anywhere" in corral.output(missing)
    # The argv reaches the command as is: no shell ever read it.
    assert corral.output(sized) == "two words $HOME\n"

    attempt = corral.attempts(sized)[0]
    assert attempt["state"] == "exited" and attempt["exit_code"] == 0 and attempt["executor_ref"]
    shown = slurm.show_job(attempt["executor_ref"])
    assert "NumCPUs=2 " in shown and "MinMemoryNode=256M" in shown and "TimeLimit=00:05:00" in shown
    assert f"JobName=corral-{sized} " in shown
    assert (
        f"Comment=corral cluster={corral.config.cloud.cluster} job={sized} attempt={attempt['id']} dispatcher=d-test"
        in shown
    )
    assert any(f"submitted as slurm job {attempt['executor_ref']}" in e for e in corral.events(sized))


def test_a_relative_data_directory_still_gets_each_jobs_output(
    tmp_path: Path, slurm: SlurmCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`corral run --home data`: Slurm reads a relative --output from the job's working directory
    (slurm.work_dir), where no such directory is, so every job failed at launch
    (JobLaunchFailure, "exit 181") with no output."""
    monkeypatch.chdir(tmp_path)
    Path("data").mkdir()  # (as `corral run` makes it)
    corral = Dispatcher(Path("data"), make_config(Path("data"), slurm))
    job_id = corral.submit("echo", "hello")
    assert corral.until_state(job_id, "complete", "failed")["state"] == "complete"
    assert corral.output(job_id) == "hello\n"
    corral.store.close()


def test_a_slurm_job_that_ran_between_two_passes_is_recorded_with_slurms_start_and_end(
    corral: Dispatcher, slurm: SlurmCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As sacct would say it ran, not 0 s at the pass that saw it ended; whatever zone and time
    format corral's environment gives Slurm's commands, which print times in them."""
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    monkeypatch.setenv("SLURM_TIME_FORMAT", "relative")
    job_id = corral.submit("sleep", "2", ram=128)
    corral.loop.run_pass()  # claims and sbatches it
    ref = corral.attempts(job_id)[0]["executor_ref"]
    assert ref
    wait_until(lambda: slurm.state(ref) == "COMPLETED", 30, "the slurm job to complete")  # and no pass meanwhile
    corral.loop.run_pass()

    row = corral.job(job_id)
    (attempt,) = corral.attempts(job_id)
    assert row["state"] == "complete" and attempt["state"] == "exited"
    start, end = slurm.times(ref)
    # Slurm's times are whole seconds: the start is Slurm's second, or within it the submission.
    assert start <= attempt["started_at"] < start + 1 and attempt["started_at"] >= attempt["assigned_at"]
    assert attempt["finished_at"] == end
    assert (row["started_at"], row["finished_at"]) == (attempt["started_at"], end)  # corral job / jobs
    ran = end - attempt["started_at"]
    assert ran > 1  # `sleep 2`, give or take Slurm's second; not 0
    # The events say when, as the job's times do (and a start's wait in /metrics reads its event).
    events = {e["kind"]: e for e in corral.store.list_events(job_id=job_id)}
    assert events["job.running"]["at"] == attempt["started_at"] and events["job.complete"]["at"] == end
    assert f"slurm job {ref} on c" in events["job.running"]["message"]

    # `corral usage`, as GET /api/usage computes it: the job's vcpu-hours are its run.
    now = time.time()
    nodes, spans = corral.store.usage_spans(now - 3600, now)
    report = accounting.usage(nodes, spans, now - 3600, now, now, "job")
    assert report.jobs == 1
    (usage,) = report.rows
    assert usage.key == str(job_id) and usage.vcpu_hours == pytest.approx(ran / 3600) and usage.cost == 0
    # Measured by corral's batch script, its status file read as the job ended: the CPU time of a
    # `sleep` (next to none); no peak RAM.
    (attempt,) = corral.attempts(job_id)
    assert attempt["cpu_seconds"] is not None and attempt["cpu_seconds"] < 0.5 and attempt["max_rss_mib"] is None
    assert (usage.attempts, usage.measured, usage.ram_efficiency) == (1, 1, None)
    assert usage.cpu_efficiency is not None and usage.cpu_efficiency < 0.25


def test_a_failing_command_is_retried_when_the_job_asks(corral: Dispatcher, tmp_path: Path) -> None:
    marker = tmp_path / "tried-once"
    script = f"if [ -e {marker} ]; then echo second; else touch {marker}; echo first; exit 5; fi"
    retried = corral.submit("sh", "-c", script, max_retries=1)
    row = corral.until_state(retried, "complete", "failed")
    assert row["state"] == "complete" and row["perm_failures"] == 1
    attempts = corral.attempts(retried)
    assert [a["exit_code"] for a in attempts] == [5, 0], corral.events(retried)
    assert corral.output(retried) == "second\n"


def test_a_gang_gets_two_slurm_nodes(corral: Dispatcher) -> None:
    gang = corral.submit("sh", "-c", 'echo "$CORRAL_NODELIST $CORRAL_NNODES"', nodes=2, ram=128)
    row = corral.until_state(gang, "complete", "failed")
    assert row["state"] == "complete"
    assert corral.output(gang) == "c1,c2 2\n"


def test_cancel_scancels_the_running_slurm_job_and_waiting_jobs_say_why(
    corral: Dispatcher, slurm: SlurmCluster
) -> None:
    # Two jobs of 2 vCPUs fill both nodes; a third waits in Slurm's queue for resources.
    running = [corral.submit("sleep", "300", vcpus=2, ram=128) for _ in range(2)]
    waiting = corral.submit("sleep", "300", vcpus=2, ram=128)
    for job_id in running:
        corral.until_state(job_id, "running")
    # Slurm's own reason: Resources, or Priority when it has already planned the nodes for an older
    # pending job (seen once on the shared Slurm). Right after sbatch, until Slurm's scheduler has
    # looked at the job, its reason is None ("slurm: pending").
    row = corral.until(
        lambda: (r := corral.job(waiting))["wait_reason"] in ("slurm: Resources", "slurm: Priority") and r,
        20,
        "Slurm's pending reason",
    )
    assert row["state"] == "claimed"

    ref = corral.attempts(running[0])[0]["executor_ref"]
    assert slurm.state(ref) == "RUNNING"
    corral.store.request_cancel(running[0], time.time())
    corral.store.set_priority(waiting, 0, time.time())
    ended = corral.until_state(running[0], "cancelled")["wait_reason"]
    assert ended and not ended.startswith("slurm:")  # why it ended, not Slurm's pending reason
    assert corral.until_state(waiting, "cancelled")
    wait_until(lambda: slurm.state(ref) == "CANCELLED", 20, f"slurm job {ref} to be cancelled")
    [cancelled] = corral.attempts(running[0])
    assert cancelled["state"] == "cancelled"
    # Its batch script wrote its status as Slurm's kill ended the command: what the run used until
    # then is recorded (as an agent reports a killed run's), and the file goes, as at any end.
    status = corral.loop.status_path(running[0], cancelled["id"])
    measured = corral.until(
        lambda: (a := corral.attempts(running[0])[0])["cpu_seconds"] is not None and a, 20, "the run's CPU time"
    )
    assert measured["cpu_seconds"] < 0.5 and measured["state"] == "cancelled" and not status.exists()


def test_a_signal_asked_for_a_running_job_is_scancel_signal_full_and_the_job_runs_on_to_its_end(
    corral: Dispatcher, tmp_path: Path
) -> None:
    """corral cancel --signal USR1 in front of Slurm: the next pass runs `scancel --signal=USR1
    --full`, which reaches the command under corral's batch script (which outlives it); the job is
    not cancelled and ends as its command does."""
    got, stop = tmp_path / "got", tmp_path / "stop"
    body = f"trap 'echo usr1 >> {got}' USR1; while [ ! -e {stop} ]; do sleep 0.1; done; exit 3"
    job_id = corral.submit("sh", "-c", body, ram=128)
    corral.until_state(job_id, "running")
    ref = corral.attempts(job_id)[0]["executor_ref"]
    corral.store.request_signal(job_id, 10, False, time.time())
    corral.until(lambda: got.exists(), 20, "the command to get USR1")
    assert got.read_text() == "usr1\n"
    [sent] = corral.store.list_events(job_id=job_id, kind="job.signalled")
    assert sent["message"].endswith(
        f"sent to slurm job {ref} (scancel --full) of attempt {corral.attempts(job_id)[0]['id']}"
    )
    assert corral.job(job_id)["state"] == "running"
    stop.touch()
    ended = corral.until_state(job_id, "complete", "failed")
    assert (ended["exit_code"], ended["exit_signal"], ended["cancel_requested"]) == (3, None, False)


def test_a_job_pending_in_slurm_is_held_or_updated_by_taking_it_back_from_slurm(
    corral: Dispatcher, slurm: SlurmCluster
) -> None:
    """What `scontrol hold` and `scontrol update` do to a pending Slurm job: `corral hold` of a job
    waiting in Slurm's queue scancels its Slurm job and holds it in corral's queue until released;
    `corral update` of one gets it submitted again with the new request. Neither counts a failure."""
    for _ in range(2):  # both nodes full
        corral.until_state(corral.submit("sleep", "300", vcpus=2, ram=128), "running")
    held, updated = (corral.submit("sleep", "300", vcpus=2, ram=128) for _ in range(2))
    corral.loop.run_pass()
    refs = [corral.attempts(job_id)[0]["executor_ref"] for job_id in (held, updated)]
    assert all(refs) and [corral.job(job_id)["state"] for job_id in (held, updated)] == ["claimed"] * 2
    assert corral.store.hold(held, time.time(), take_back=True)["taken_back"]
    result = corral.store.update_job(updated, {"ram": 256, "time_limit": 600}, time.time(), take_back=True)
    assert result["taken_back"] and result["changes"] == {"ram": [128, 256], "time_limit": [None, 600.0]}
    corral.until(lambda: len(corral.attempts(updated)) == 2, 20, "the updated job to be submitted again")

    row = corral.job(held)
    assert row["state"] == "queued" and row["held"] and row["temp_failures"] == 0
    assert slurm.state(refs[0]) == "CANCELLED" and corral.attempts(held)[0]["state"] == "cancelled"
    assert corral.job(updated)["temp_failures"] == 0 and slurm.state(refs[1]) == "CANCELLED"
    new_ref = corral.attempts(updated)[1]["executor_ref"]
    shown = slurm.show_job(new_ref)
    assert "MinMemoryNode=256M" in shown and "TimeLimit=00:10:00" in shown, shown
    corral.loop.run_pass()
    assert len(corral.attempts(held)) == 1  # held: not submitted
    corral.store.release(held, time.time())
    corral.until(lambda: len(corral.attempts(held)) == 2, 20, "the released job to be submitted again")


def test_requeue_scancels_the_running_slurm_job_and_submits_the_job_again(
    corral: Dispatcher, slurm: SlurmCluster
) -> None:
    job_id = corral.submit("sleep", "300", ram=128)
    corral.until_state(job_id, "running")
    first = corral.attempts(job_id)[0]["executor_ref"]
    assert corral.store.request_requeue(job_id, time.time())["changed"]
    corral.until(lambda: len(corral.attempts(job_id)) == 2, 30, "a second attempt")
    wait_until(lambda: slurm.state(first) == "CANCELLED", 20, f"slurm job {first} to be cancelled")
    row = corral.until_state(job_id, "running")
    assert row["temp_failures"] == 0 and not row["requeue_requested"]
    old, new = corral.attempts(job_id)
    assert (old["state"], old["reason"]) == ("cancelled", "requeued by request")
    assert new["executor_ref"] not in (None, first) and slurm.state(new["executor_ref"]) == "RUNNING"
    corral.store.request_cancel(job_id, time.time())
    corral.until_state(job_id, "cancelled")


def test_a_clean_stop_records_the_slurm_jobs_that_ended_since_the_last_pass_instead_of_running_them_again(
    corral: Dispatcher, slurm: SlurmCluster
) -> None:
    """Ctrl-C requeued every attempt still active in corral, also those whose Slurm job had ended
    since the last pass (up to loop.interval earlier): a completed job was run a second time."""
    done = corral.submit("echo", "once", ram=128)
    failed = corral.submit("sh", "-c", "exit 3", ram=128)
    running = corral.submit("sleep", "300", ram=128)
    corral.until(
        lambda: all(corral.attempts(j) and corral.attempts(j)[0]["executor_ref"] for j in (done, failed, running)),
        10,
        "all submitted",
    )
    refs = {j: corral.attempts(j)[0]["executor_ref"] for j in (done, failed, running)}
    # No pass sees them end: corral stops first.
    wait_until(
        lambda: slurm.state(refs[done]) == "COMPLETED" and slurm.state(refs[failed]) == "FAILED",
        20,
        "two of the slurm jobs to end",
    )
    corral.loop.shutdown_fleet("corral stopped")

    assert (corral.job(done)["state"], corral.job(done)["exit_code"]) == ("complete", 0)
    assert (corral.job(failed)["state"], corral.job(failed)["exit_code"]) == ("failed", 3)
    assert [a["state"] for a in corral.attempts(done)] == ["exited"]
    assert corral.output(done) == "once\n"
    # What still ran is scancelled and requeued, as before.
    assert corral.job(running)["state"] == "queued" and corral.job(running)["temp_failures"] == 1
    wait_until(lambda: slurm.state(refs[running]) == "CANCELLED", 20, "the running slurm job to be cancelled")
    # The stop submitted nothing new.
    assert len(corral.attempts(running)) == 1


def test_a_clean_stop_while_slurmctld_is_away_leaves_its_slurm_jobs_to_the_next_corral_instead_of_running_them_twice(
    tmp_path: Path, slurm: SlurmCluster
) -> None:
    """Ctrl-C while slurmctld could not be reached (restarting, its host down): scancel failed, yet
    every job was requeued, and its Slurm job ran on (slurmd keeps running a job while slurmctld
    is away). The next corral submitted it again: a job that had completed ran twice."""
    corral = Dispatcher(tmp_path, make_config(tmp_path, slurm, command_timeout="3s"))
    try:
        job_id = corral.submit("sh", "-c", "sleep 4; echo once", ram=128)
        corral.until_state(job_id, "running")
        ref = corral.attempts(job_id)[0]["executor_ref"]
        with slurm.controller_down():
            corral.loop.shutdown_fleet("corral stopped")
            # Not requeued: its attempt still stands, and the event says why.
            assert corral.job(job_id)["state"] == "running"
            assert [a["state"] for a in corral.attempts(job_id)] == ["running"]
            said = [e["message"] for e in corral.store.list_events(kind="slurm.unreachable")]
            assert any(f"slurm jobs {ref} are left to Slurm" in message for message in said), said
        corral.restart()
        assert corral.until_state(job_id, "complete", "failed", timeout=60)["state"] == "complete"
        assert len(corral.attempts(job_id)) == 1
        assert corral.output(job_id) == "once\n"
        ours = [line for line in slurm.jobs() if f"cluster={corral.config.cloud.cluster} " in line]
        assert len(ours) == 1
    finally:
        corral.store.close()


def test_a_slurm_job_that_ended_while_corral_was_away_past_min_job_age_is_recorded_not_run_again(
    corral: Dispatcher, slurm: SlurmCluster, tmp_path: Path
) -> None:
    """Slurm forgets an ended job MinJobAge (300 s by default) after its end, and with accounting
    off nothing knows of it then. A corral stopped for longer found its jobs in neither squeue nor
    scontrol, took them for lost and requeued them: a job that had completed ran a second time.
    Its batch script's exit status file now says how it ended; one scancelled outside corral says
    that Slurm killed it, and it ends cancelled, as corral would have seen it."""
    runs = tmp_path / "runs"
    done = corral.submit("sh", "-c", f"sleep 3; echo run >> {runs}; echo once", ram=128)
    failed = corral.submit("sh", "-c", "sleep 3; exit 3", ram=128)
    killed = corral.submit("sleep", "300", ram=128)
    unrecorded = corral.submit("sh", "-c", f"sleep 3; echo unrecorded >> {runs}", ram=128)
    jobs = (done, failed, killed, unrecorded)
    corral.until(lambda: all(corral.job(j)["state"] == "running" for j in jobs), 30, "all four to run")
    refs = {j: corral.attempts(j)[0]["executor_ref"] for j in jobs}
    # The record of one submission was never written either (a stop between sbatch and it).
    with corral.store.write() as conn:
        from sqlalchemy import update

        from corral.store.schema import attempts

        conn.execute(update(attempts).where(attempts.c.job_id == unrecorded).values(executor_ref=None))
    # corral stops (no pass runs) while the jobs end and Slurm forgets them; one is scancelled
    # by someone else meanwhile, and its batch script dies with it.
    with slurm.forgetting_ended_jobs():
        slurm.run("scancel", refs[killed])
        wait_until(lambda: not any(slurm.listed(refs[j]) for j in jobs), 60, "Slurm to forget the four jobs")
    corral.restart()
    corral.loop.run_pass()

    assert (corral.job(done)["state"], corral.job(done)["exit_code"]) == ("complete", 0)
    assert corral.job(unrecorded)["state"] == "complete"
    assert any(
        f"re-adopted as slurm job {refs[unrecorded]} by its exit status file" in e for e in corral.events(unrecorded)
    )
    assert sorted(runs.read_text().split()) == ["run", "unrecorded"]  # each ran once
    assert corral.output(done) == "once\n"
    said = f"slurm job {refs[done]}: Slurm no longer lists it, as it forgets an ended job after MinJobAge"
    assert any(e.startswith("job.complete: exit 0") and said in e for e in corral.events(done)), corral.events(done)
    assert (corral.job(failed)["state"], corral.job(failed)["exit_code"]) == ("failed", 3)
    assert any("exit status read from its status file" in e for e in corral.events(failed))
    for job_id in (done, failed, unrecorded):
        assert [a["state"] for a in corral.attempts(job_id)] == ["exited"]
    # scancelled outside corral: cancelled, as a pass that saw Slurm's CANCELLED would have had it.
    assert corral.job(killed)["state"] == "cancelled" and len(corral.attempts(killed)) == 1
    (cancelled,) = [e for e in corral.events(killed) if e.startswith("job.cancelled:")]
    assert f"slurm job {refs[killed]} was cancelled outside corral (Slurm no longer lists it" in cancelled
    assert "its status file says Slurm killed it (SIGTERM), and its output says why" in cancelled
    # The status files are gone once corral has recorded the ends; the outputs stay.
    left = sorted(p.name for p in (corral.home / "logs").rglob("*") if p.is_file())
    assert not [name for name in left if not name.endswith(".log")], left


def test_a_slurm_job_that_slurm_killed_and_forgot_while_corral_was_away_ends_as_slurm_ended_it(
    corral: Dispatcher, slurm: SlurmCluster
) -> None:
    """A job that ran into its time limit, and one preempted, while corral was stopped for longer
    than MinJobAge: their batch scripts died with their commands and left no status file, so
    corral requeued both as lost, and the timed-out job ran again instead of ending TIMEOUT. The
    script now traps Slurm's SIGTERM and records it, and slurmstepd's line in the output says why:
    the first fails TIMEOUT (never retried), the second is requeued as a preemption (no failure).
    The first keeps its stderr apart (--error), where slurmstepd then writes its line."""
    timed_out = corral.submit("sleep", "300", ram=128, time_limit=60, separate_stderr=True)
    preempted = corral.submit("sleep", "300", vcpus=2, ram=128)
    corral.until(lambda: all(corral.job(j)["state"] == "running" for j in (timed_out, preempted)), 30, "both to run")
    refs = {j: corral.attempts(j)[0]["executor_ref"] for j in (timed_out, preempted)}
    (node,) = [
        w.removeprefix("NodeList=") for w in slurm.show_job(refs[preempted]).split() if w.startswith("NodeList=")
    ]
    # corral stops (no pass runs) while Slurm ends both and forgets them. Slurm's time limits are
    # whole minutes, enforced at its periodic check (every 30 s): the job would run 60-90 s. An
    # admin's TimeLimit=0 on the running job has Slurm kill it for its time limit at its next
    # check, as it would at the minute: the same SIGTERM, the same "DUE TO TIME LIMIT" line.
    with slurm.forgetting_ended_jobs():
        slurm.run("scontrol", "update", f"JobId={refs[timed_out]}", "TimeLimit=0")
        slurm.run(
            "sbatch",
            f"--partition={PREEMPTOR}",
            f"--nodelist={node}",
            "--cpus-per-task=2",
            "--mem=128M",
            "--output=/dev/null",
            "--wrap=sleep 1",
        )
        wait_until(lambda: not any(slurm.listed(ref) for ref in refs.values()), 180, "Slurm to end and forget both")
    corral.restart()
    corral.loop.run_pass()

    row = corral.job(timed_out)
    assert row["state"] == "failed" and len(corral.attempts(timed_out)) == 1, corral.events(timed_out)
    (ended,) = [e for e in corral.events(timed_out) if e.startswith("job.timeout:")]
    assert ended.startswith("job.timeout: TIMEOUT: ran past its time limit of 1m")
    assert f"slurm job {refs[timed_out]} TIMEOUT: Slurm no longer lists it" in ended
    assert [a["state"] for a in corral.attempts(timed_out)] == ["timeout"]
    stderr = corral.home / "logs" / str(timed_out) / f"{corral.attempts(timed_out)[0]['id']}.err"
    assert "DUE TO TIME LIMIT" in stderr.read_text() and "DUE TO" not in corral.output(timed_out)
    first = corral.attempts(preempted)[0]
    assert first["state"] == "preempted" and corral.job(preempted)["temp_failures"] == 0
    assert first["reason"].startswith(f"slurm job {refs[preempted]} PREEMPTED (Slurm no longer lists it")
    assert first["reason"].endswith("requeued (a preemption is not a failure)")


def test_a_slurm_job_whose_node_went_down_and_that_slurm_forgot_applies_the_node_failure_policy(
    corral: Dispatcher, slurm: SlurmCluster
) -> None:
    """A node set DOWN under a job while corral is stopped: slurmd (alive) kills the job with
    SIGTERM, and its script records it; slurmstepd's "DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR
    DETAILS" makes it a node failure (requeued by default), not a cancel outside corral."""
    job_id = corral.submit("sleep", "300", ram=128)
    corral.until_state(job_id, "running")
    ref = corral.attempts(job_id)[0]["executor_ref"]
    (node,) = [w.removeprefix("NodeList=") for w in slurm.show_job(ref).split() if w.startswith("NodeList=")]
    try:
        with slurm.forgetting_ended_jobs():
            slurm.run("scontrol", "update", f"NodeName={node}", "State=DOWN", "Reason=corral test: node failure")
            wait_until(lambda: not slurm.listed(ref), 90, f"Slurm to end and forget slurm job {ref}")
        corral.restart()
        corral.loop.run_pass()
        first = corral.attempts(job_id)[0]
        assert first["state"] == "tempfail" and corral.job(job_id)["temp_failures"] == 1
        assert first["reason"].startswith(f"slurm job {ref} NODE_FAIL (Slurm no longer lists it")
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            slurm.run("scontrol", "update", f"NodeName={node}", "State=RESUME")
        wait_until(lambda: slurm.node_state(node) in ("idle", "mixed", "allocated"), 30, f"{node} to come back")


def test_a_slurm_job_id_given_out_again_after_slurmctld_lost_its_state_is_not_taken_for_the_attempts(
    corral: Dispatcher, slurm: SlurmCluster, tmp_path: Path
) -> None:
    """slurmctld restarted with its state lost (`slurmctld -c`) hands out job ids from the first
    again. corral followed each attempt by the id it recorded, so another user's job given that id
    was taken for the attempt's: a corral job that had completed stayed claimed, "pending" behind
    someone else's held job (and a cancel would have scancelled that job). The comment of a listed
    job must name the attempt; a job that does not is said (slurm.id_reused) and the attempt is
    taken as no longer listed: here its exit status file says it completed."""
    runs = tmp_path / "runs"
    for _ in range(3):  # not Slurm's first job (the first id is not always given out again)
        slurm.run("sbatch", "--mem=100M", "--output=/dev/null", "--wrap=true")
    done = corral.submit("sh", "-c", f"echo run >> {runs}; echo once", ram=128)
    corral.until(lambda: corral.attempts(done)[0]["executor_ref"], 10, "the job to be submitted")
    ref = corral.attempts(done)[0]["executor_ref"]
    wait_until(lambda: slurm.state(ref) == "COMPLETED", 20, "the slurm job to complete")
    # corral is stopped (no pass runs) while slurmctld loses its state, and another user's
    # jobs are given the ids from the first again, the attempt's among them.
    slurm.restart_with_state_lost()
    given: list[str] = []
    while not given or int(given[-1]) < int(ref):
        held = ["sbatch", "--parsable", "--hold", "--mem=100M", "--output=/dev/null", "--wrap=sleep 1"]
        given.append(slurm.run(*held).strip())
    assert ref in given
    corral.restart()
    corral.loop.run_pass()

    assert (corral.job(done)["state"], corral.job(done)["exit_code"]) == ("complete", 0), corral.events(done)
    assert runs.read_text() == "run\n"
    (reused,) = [e for e in corral.events(done) if e.startswith("slurm.id_reused:")]
    assert f"slurm job {ref}, recorded for attempt {corral.attempts(done)[0]['id']}, is now a job of another" in reused
    assert slurm.state(ref) == "PENDING"  # the other user's job is left alone


def test_a_silent_dispatchers_slurm_jobs_are_adopted_by_its_peer_not_run_again(
    tmp_path: Path, slurm: SlurmCluster
) -> None:
    """Two dispatchers on one PostgreSQL store in front of one Slurm cluster; one stops
    heartbeating (SIGSTOPped, its host frozen). Its peer released every claim it held as a
    temporary failure, scancelled its still running Slurm jobs as orphans and submitted all of them
    again: a job whose Slurm job had completed ran twice, and a running one was killed and started
    over. The peer now adopts the attempts Slurm still knows (or whose exit status file says how
    they ended) and follows them to their end; only an attempt Slurm never had is released."""
    require_postgresql()
    with pg_schema() as url:
        shared = tmp_path / "outputs"  # the output directory the nodes and both dispatchers share

        def config(name: str) -> Config:
            return load_config(
                None,
                home=tmp_path / name,
                cloud={"cluster": cluster},
                executor="slurm",
                store={"url": url},
                slurm={"conf": str(slurm.conf), "output_dir": str(shared)},
                policy={"retry": {"backoff_initial": 0.5}, "dispatch": {"dispatcher_stale": "3s"}},
            )

        cluster = f"t-{uuid.uuid4().hex[:8]}"
        silent = Dispatcher(tmp_path / "a", config("a"), "d-silent")
        peer = Dispatcher(tmp_path / "b", config("b"), "d-peer")
        try:
            runs = tmp_path / "runs"
            done = silent.submit("sh", "-c", f"sleep 2; echo done >> {runs}", ram=128)
            running = silent.submit("sh", "-c", f"sleep 12; echo running >> {runs}", ram=128)
            jobs = (done, running)
            silent.until(lambda: all(silent.job(j)["state"] == "running" for j in jobs), 30, "both to run")
            # Claimed by the silent one, which froze before its sbatch: Slurm never had it.
            unsent = silent.submit("sh", "-c", f"echo unsent >> {runs}", ram=128)
            resources = silent.store.job(unsent).resources
            assert silent.store.claim(unsent, "d-silent", ("slurm",), resources, time.time()) is not None
            refs = {j: silent.attempts(j)[0]["executor_ref"] for j in jobs}
            # The silent dispatcher runs no pass from here; its peer judges it stale after 3 s.
            wait_until(lambda: slurm.state(refs[done]) == "COMPLETED", 20, "the short job to complete in Slurm")
            peer.until(lambda: peer.job(unsent)["state"] != "claimed", 20, "the silent dispatcher to be judged stale")
            for job_id in jobs:
                adopted = [e for e in peer.events(job_id) if e.startswith("slurm.adopted:")]
                assert len(adopted) == 1 and "d-silent" in adopted[0] and "d-peer" in adopted[0], peer.events(job_id)
            # The silent one comes back (SIGCONT) while the adopted job still runs: it leaves it alone.
            silent.loop.run_pass()
            assert slurm.state(refs[running]) == "RUNNING"
            for job_id in (*jobs, unsent):
                assert peer.until_state(job_id, "complete", "failed", timeout=60)["state"] == "complete"
            assert sorted(runs.read_text().split()) == ["done", "running", "unsent"]  # each ran once
            assert [len(peer.attempts(j)) for j in jobs] == [1, 1]
            assert [a["dispatcher_id"] for a in peer.attempts(running)] == ["d-peer"]
            (released,) = [e for e in peer.events(unsent) if e.startswith("job.requeued:")]
            assert "dispatcher d-silent stopped heartbeating" in released
            assert len(slurm_jobs_of(slurm, peer, running)) == 1
        finally:
            silent.store.close()
            peer.store.close()


def test_a_dispatcher_frozen_between_its_claim_and_sbatch_submits_nothing_once_its_claim_was_released(
    tmp_path: Path, slurm: SlurmCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two dispatchers on one store; one claims a job and freezes before its sbatch (SIGSTOP, a
    stalled host) past dispatcher_stale, and its peer releases the claim. On resuming it ran its
    sbatch all the same: a Slurm job for a released attempt beside the one the peer submitted once
    the back-off ended, and a short job ran twice. The claim is read again just before sbatch."""
    cluster = f"t-{uuid.uuid4().hex[:8]}"

    def config(name: str) -> Config:
        return load_config(
            None,
            home=tmp_path / name,
            cloud={"cluster": cluster},
            executor="slurm",
            store={"url": f"sqlite:///{tmp_path / 'shared.db'}"},
            slurm={"conf": str(slurm.conf)},
            policy={"retry": {"backoff_initial": 0.5}, "dispatch": {"dispatcher_stale": "3s"}},
        )

    frozen = Dispatcher(tmp_path / "a", config("a"), "d-frozen")
    peer = Dispatcher(tmp_path / "b", config("b"), "d-peer")
    try:
        # The peer's passes happen 10 s later than the frozen one's: it finds it silent.
        peer.loop.clock = lambda: time.time() + 10
        runs = tmp_path / "runs"
        job_id = frozen.submit("sh", "-c", f"echo ran >> {runs}", ram=128)
        claim = frozen.store.claim

        def frozen_after_its_claim(*args: Any) -> int | None:
            attempt = claim(*args)
            peer.loop.run_pass()  # while it is frozen here, past dispatcher_stale
            return attempt

        monkeypatch.setattr(frozen.store, "claim", frozen_after_its_claim)
        frozen.loop.run_pass()  # it resumes and goes on to its sbatch
        (released,) = frozen.attempts(job_id)
        assert released["state"] == "tempfail" and released["executor_ref"] is None
        assert not [line for line in slurm.jobs() if f"cluster={cluster} " in line]
        assert peer.until_state(job_id, "complete", "failed")["state"] == "complete"
        assert runs.read_text() == "ran\n"
        assert len([line for line in slurm.jobs() if f"cluster={cluster} " in line]) == 1
    finally:
        frozen.store.close()
        peer.store.close()


def nice_of(slurm: SlurmCluster, ref: str) -> int:
    (field,) = [word for word in slurm.show_job(ref).split() if word.startswith("Nice=")]
    return int(field.removeprefix("Nice="))


def test_a_jobs_priority_is_its_slurm_nice_at_sbatch_and_when_it_changes(
    corral: Dispatcher, slurm: SlurmCluster
) -> None:
    # Two jobs of 2 vCPUs fill both nodes; the next two wait in Slurm's queue.
    running = [corral.submit("sleep", "300", vcpus=2, ram=128) for _ in range(2)]
    for job_id in running:
        corral.until_state(job_id, "running")
    first = corral.submit("sleep", "300", vcpus=2, ram=128)
    second = corral.submit("sleep", "300", vcpus=2, ram=128)
    urgent = corral.submit("sleep", "300", vcpus=2, ram=128, priority=10)
    corral.until(lambda: all(corral.attempts(j) for j in (first, second, urgent)), 20, "all submitted")
    refs = {job_id: corral.attempts(job_id)[0]["executor_ref"] for job_id in (first, second, urgent)}
    assert nice_of(slurm, refs[first]) == 0 and nice_of(slurm, refs[second]) == 0  # the default priority
    assert nice_of(slurm, refs[urgent]) == -9

    # `corral priority` on a job already in Slurm: Slurm's Nice follows, and so does its order.
    corral.store.set_priority(second, 100, time.time())
    corral.until(lambda: nice_of(slurm, refs[second]) == -99, 20, "the renice")
    assert any(f"slurm job {refs[second]}: Nice=-99 (priority 100)" in e for e in corral.events(second))
    # An admin's Nice: reset to the priority's, and the event says it was set outside corral.
    slurm.run("scontrol", "update", f"JobId={refs[first]}", "Nice=7")
    corral.until(lambda: nice_of(slurm, refs[first]) == 0, 20, "the admin's Nice reset")
    said = (
        f"slurm.reniced: slurm job {refs[first]}: Nice=0 (priority 1); its Nice=7 was set outside corral,"
        f" and corral's priority decides (corral priority {first} N changes it)"
    )
    assert said in corral.events(first), corral.events(first)
    corral.store.request_cancel(running[0], time.time())
    corral.until_state(second, "running")
    assert corral.job(first)["state"] == "claimed" and corral.job(urgent)["state"] == "claimed"


def test_a_slurm_job_cancelled_outside_corral_is_reported(corral: Dispatcher, slurm: SlurmCluster) -> None:
    job_id = corral.submit("sleep", "300", ram=128)
    corral.until_state(job_id, "running")
    ref = corral.attempts(job_id)[0]["executor_ref"]
    slurm.run("scancel", ref)
    row = corral.until_state(job_id, "cancelled", "failed", "queued")
    assert row["state"] == "cancelled"
    assert any(f"slurm job {ref} was cancelled outside corral" in e for e in corral.events(job_id))


@pytest.mark.parametrize("on_node_failure", [None, "cancel"])
def test_a_node_failing_under_a_slurm_job_applies_the_node_failure_policy(
    corral: Dispatcher, slurm: SlurmCluster, on_node_failure: str | None
) -> None:
    """Seed 002 §5.4.6 against a real Slurm: the node of a running job goes DOWN, Slurm ends the
    job NODE_FAIL, and corral (not Slurm) decides: requeue by default (it runs again, as a new Slurm
    job), or what the job's on_node_failure says."""
    job_id = corral.submit("sleep", "300", ram=128, on_node_failure=on_node_failure)
    corral.until_state(job_id, "running")
    ref = corral.attempts(job_id)[0]["executor_ref"]
    (node,) = [word.removeprefix("NodeList=") for word in slurm.show_job(ref).split() if word.startswith("NodeList=")]
    slurm.run("scontrol", "update", f"NodeName={node}", "State=DOWN", "Reason=corral test: node failure")
    try:
        wait_until(lambda: slurm.state(ref) == "NODE_FAIL", 20, f"slurm job {ref} to end NODE_FAIL")
        if on_node_failure is None:
            corral.until(lambda: len(corral.attempts(job_id)) == 2, 20, "a second attempt")
            row = corral.until_state(job_id, "running")
            assert row["temp_failures"] == 1
            first, second = corral.attempts(job_id)
            assert first["state"] == "tempfail" and f"slurm job {ref} NODE_FAIL (NodeDown)" in first["reason"]
            assert second["executor_ref"] not in (None, ref)
        else:
            row = corral.until_state(job_id, "cancelled", "queued", "failed")
            assert row["state"] == "cancelled"
            said = f"slurm job {ref} NODE_FAIL (NodeDown); cancelled (on_node_failure=cancel"
            assert any(said in e for e in corral.events(job_id)), corral.events(job_id)
            assert len(corral.attempts(job_id)) == 1
    finally:
        # For the next tests. ReturnToService=2 brings the node back when its slurmd (alive all
        # along) registers again; RESUME if it has not yet (refused if it has: "Invalid node state").
        with contextlib.suppress(subprocess.CalledProcessError):
            slurm.run("scontrol", "update", f"NodeName={node}", "State=RESUME")
        wait_until(lambda: slurm.node_state(node) in ("idle", "mixed", "allocated"), 30, f"{node} to come back")


def test_a_preempted_slurm_job_is_requeued_without_spending_the_failure_budget(
    tmp_path: Path, slurm: SlurmCluster
) -> None:
    """A real preemption: a job of the higher-tier partition takes every CPU, Slurm ends corral's
    job PREEMPTED (--no-requeue), and corral queues it again at once, counting no temporary
    failure (max_temp_failures = 0 here: one would fail it), so it runs again once Slurm lets it."""
    corral = Dispatcher(tmp_path, make_config(tmp_path, slurm, retry={"max_temp_failures": 0}))
    job_id = corral.submit("sleep", "300", vcpus=2, ram=128)
    corral.until_state(job_id, "running")
    ref = corral.attempts(job_id)[0]["executor_ref"]
    slurm.run(
        "sbatch",
        f"--partition={PREEMPTOR}",
        "--nodes=2",
        "--cpus-per-task=2",
        "--mem=128M",
        "--output=/dev/null",
        "--wrap=sleep 1",
    )
    corral.until(lambda: len(corral.attempts(job_id)) == 2, 30, "the job to be submitted again")
    row = corral.until_state(job_id, "running")
    assert row["temp_failures"] == 0
    first, second = corral.attempts(job_id)
    assert first["state"] == "preempted"
    assert first["reason"] == f"slurm job {ref} PREEMPTED; requeued (a preemption is not a failure)"
    assert second["executor_ref"] not in (None, ref)
    assert f"job.requeued: slurm job {ref} PREEMPTED; requeued (a preemption is not a failure)" in corral.events(job_id)
    corral.store.close()


def test_sbatch_refusing_a_jobs_request_fails_it_at_once_and_the_next_job_is_submitted(corral: Dispatcher) -> None:
    """More memory than any node has: Slurm refuses the sbatch for good, and the job fails at once
    with Slurm's message, as sbatch fails for a Slurm user (not retried, max_retries or not); the
    job behind it goes to Slurm in the same pass."""
    too_big = corral.submit("true", ram=99_999, max_retries=2)
    fine = corral.submit("true", ram=128)
    corral.loop.run_pass()
    row = corral.job(too_big)
    assert row["state"] == "failed" and row["temp_failures"] == 0, row
    assert row["wait_reason"] == (
        "sbatch refused: Memory specification can not be satisfied;"
        " Batch job submission failed: Requested node configuration is not available"
    )
    assert [a["state"] for a in corral.attempts(too_big)] == ["exited"]
    assert any(e.startswith("job.failed: sbatch refused: ") for e in corral.events(too_big))
    assert corral.attempts(fine)[0]["executor_ref"] is not None
    corral.until_state(fine, "complete")


def test_slurm_refusing_corrals_own_settings_is_said_at_start_and_fails_no_job(
    tmp_path: Path, slurm: SlurmCluster
) -> None:
    """A partition that does not exist is the operator's setting, shared by every job: the check
    `corral run` makes at start names it; if Slurm refuses it later, the job is requeued as a
    temporary failure and the pass submits no more, instead of failing the whole queue."""
    corral = Dispatcher(tmp_path, make_config(tmp_path, slurm, partition="no-such-partition"))
    assert corral.loop.check_settings() == (
        "Slurm refuses corral's sbatch settings (slurm.partition='no-such-partition'):"
        " invalid partition specified: no-such-partition; allocation failure: Invalid partition name specified"
    )
    first, second = corral.submit("true"), corral.submit("true")
    corral.loop.run_pass()
    row = corral.job(first)
    assert row["state"] == "queued" and row["temp_failures"] == 1
    assert row["wait_reason"].startswith(
        "sbatch failed: invalid partition specified: no-such-partition;"
        " Batch job submission failed: Invalid partition name specified (corral's slurm settings:"
    )
    assert corral.attempts(first)[0]["state"] == "tempfail"
    assert corral.job(second)["state"] == "queued" and corral.attempts(second) == []  # not tried this pass
    corral.store.close()
    (tmp_path / "fine").mkdir()
    fine = Dispatcher(tmp_path / "fine", make_config(tmp_path / "fine", slurm))
    assert fine.loop.check_settings() is None
    fine.store.close()


def test_a_restarted_dispatcher_re_adopts_its_slurm_jobs_without_submitting_twice(
    corral: Dispatcher, slurm: SlurmCluster
) -> None:
    adopted = corral.submit("sh", "-c", "sleep 2; echo done", ram=128)
    lost_record = corral.submit("sh", "-c", "sleep 2; echo done too", ram=128)
    corral.until(
        lambda: all(corral.attempts(j) and corral.attempts(j)[0]["executor_ref"] for j in (adopted, lost_record)),
        10,
        "both submitted",
    )
    # corral stops; the record of one submission was never written (a stop between sbatch and it).
    with corral.store.write() as conn:
        from sqlalchemy import update

        from corral.store.schema import attempts

        conn.execute(update(attempts).where(attempts.c.job_id == lost_record).values(executor_ref=None))
    corral.restart()
    for job_id in (adopted, lost_record):
        assert corral.until_state(job_id, "complete", "failed")["state"] == "complete"
        assert len(corral.attempts(job_id)) == 1
    ours = [line for line in slurm.jobs() if f"cluster={corral.config.cloud.cluster} " in line]
    assert len(ours) == 2
    assert corral.output(lost_record) == "done too\n"
    assert any("re-adopted as slurm job" in e for e in corral.events(lost_record))


def test_a_slurm_job_whose_attempt_corral_ended_is_scancelled_as_an_orphan(
    corral: Dispatcher, slurm: SlurmCluster
) -> None:
    """A stale dispatcher's released claim, or a cancel whose scancel failed: the Slurm job of an
    attempt corral no longer runs is scancelled by the next pass."""
    job_id = corral.submit("sleep", "300", ram=128)
    corral.until_state(job_id, "running")
    attempt = corral.attempts(job_id)[0]
    outcome = JobOutcome(job_id, JobState.QUEUED, "claim released", (attempt["id"],), temp_failure=True)
    assert corral.store.apply_outcome(outcome, time.time())
    corral.store.request_cancel(job_id, time.time())  # so that it is not claimed and run again
    corral.loop.run_pass()
    wait_until(lambda: slurm.state(attempt["executor_ref"]) == "CANCELLED", 20, "the orphan to be scancelled")
    assert any("slurm.orphan" in e["kind"] for e in corral.store.list_events(kind="slurm."))


def test_a_slurm_job_corral_scancelled_is_no_orphan_while_slurm_completes_it(
    corral: Dispatcher, slurm: SlurmCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every `corral cancel` of a running job was followed by a slurm.orphan event ("slurm job N
    runs attempt A, which corral ended; scancelled") and a second scancel: the pass right after the
    scancel saw the job COMPLETING (Slurm's CANCELLED with the completing flag), which is no
    orphan. A real orphan's event names its corral job."""
    job_id = corral.submit("sleep", "300", ram=128)
    corral.until_state(job_id, "running")
    ref = corral.attempts(job_id)[0]["executor_ref"]
    corral.store.request_cancel(job_id, time.time())
    corral.loop.run_pass()
    assert corral.job(job_id)["state"] == "cancelled"
    # What squeue says in the milliseconds after the scancel, made to last.
    real = corral.loop.slurm.squeue

    def completing() -> list[SlurmJob]:
        return [dataclasses.replace(j, state="COMPLETING") if j.id == ref else j for j in real()]

    monkeypatch.setattr(corral.loop.slurm, "squeue", completing)
    corral.loop.run_pass()
    assert not corral.store.list_events(kind="slurm.orphan")

    # A job still running for an attempt corral ended is an orphan, named by its corral job.
    orphan = corral.submit("sleep", "300", ram=128)
    monkeypatch.setattr(corral.loop.slurm, "squeue", real)
    corral.until_state(orphan, "running")
    attempt = corral.attempts(orphan)[0]
    outcome = JobOutcome(orphan, JobState.QUEUED, "claim released", (attempt["id"],), temp_failure=True)
    assert corral.store.apply_outcome(outcome, time.time())
    corral.store.request_cancel(orphan, time.time())
    corral.loop.run_pass()
    (event,) = corral.store.list_events(kind="slurm.orphan")
    assert event["job_id"] == orphan and f"slurm job {attempt['executor_ref']} " in event["message"]


def slurm_jobs_of(slurm: SlurmCluster, corral: Dispatcher, job_id: int) -> list[str]:
    """The Slurm jobs (squeue lines, any state) that run a corral job of this test's cluster."""
    return [line for line in slurm.jobs() if f"cluster={corral.config.cloud.cluster} job={job_id} " in line]


def test_afterok_waits_in_corral_not_in_slurm_and_runs_once_its_job_completed(
    corral: Dispatcher, slurm: SlurmCluster, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    first = corral.submit("sh", "-c", f"while [ ! -e {go} ]; do sleep 0.1; done", ram=128)
    second = corral.submit("echo", "B", ram=128, dependency=f"afterok:{first}")
    corral.until_state(first, "running")
    corral.loop.run_pass()  # a pass that sees A running: B must still not reach Slurm
    row = corral.job(second)
    assert row["state"] == "queued" and row["wait_reason"] == f"Dependency: waits for afterok:{first} (running)"
    assert corral.attempts(second) == [] and slurm_jobs_of(slurm, corral, second) == []
    assert len(slurm_jobs_of(slurm, corral, first)) == 1

    go.touch()
    assert corral.until_state(second, "complete", "failed", "cancelled")["state"] == "complete"
    assert corral.output(second) == "B\n"
    (attempt,) = corral.attempts(second)
    assert attempt["executor_ref"] and attempt["started_at"] >= corral.job(first)["finished_at"]
    assert corral.job(first)["state"] == "complete"
    assert len(slurm_jobs_of(slurm, corral, second)) == 1


def test_a_dependency_on_a_failed_job_cancels_afterok_before_slurm_and_runs_afternotok(
    corral: Dispatcher, slurm: SlurmCluster
) -> None:
    failing = corral.submit("sh", "-c", "exit 3", ram=128)
    after_ok = corral.submit("echo", "C", ram=128, dependency=f"afterok:{failing}")
    after_not_ok = corral.submit("echo", "D", ram=128, dependency=f"afternotok:{failing}")
    assert corral.until_state(failing, "failed", "complete")["state"] == "failed"
    assert corral.until_state(after_ok, "cancelled", "complete", "failed")["state"] == "cancelled"
    never = f"DependencyNeverSatisfied: afterok:{failing} (job {failing} failed)"
    assert [e for e in corral.events(after_ok) if e.startswith("job.cancelled")] == [f"job.cancelled: {never}"]
    assert corral.attempts(after_ok) == [] and slurm_jobs_of(slurm, corral, after_ok) == []

    assert corral.until_state(after_not_ok, "complete", "failed", "cancelled")["state"] == "complete"
    assert corral.output(after_not_ok) == "D\n"
    assert len(slurm_jobs_of(slurm, corral, after_not_ok)) == 1


def test_a_stored_jobs_sbatch_account_and_partition_reach_the_job_but_not_sbatch(
    corral: Dispatcher, slurm: SlurmCluster
) -> None:
    """sbatch runs as corral's Slurm user, so a job's SBATCH_PARTITION and SBATCH_ACCOUNT chose the
    partition and account of corral's associations (another group's account). Submission refuses
    them now (tests/slurm/test_sbatch_environment.py); a job stored before runs where corral's
    settings say, charged as they say, sees its variables, and its job.submitted event says so."""
    env = {"SBATCH_PARTITION": PREEMPTOR, "SBATCH_ACCOUNT": "another-group", "SBATCH_OPEN_MODE": "append"}
    job_id = corral.submit("sh", "-c", 'echo "$SBATCH_PARTITION $SBATCH_ACCOUNT"', ram=128, env=env)
    corral.until_state(job_id, "complete")

    ref = corral.attempts(job_id)[0]["executor_ref"]
    shown = slurm.show_job(ref)
    assert " Partition=debug " in shown and " Account=another-group " not in shown, shown
    assert corral.output(job_id) == f"{PREEMPTOR} another-group\n"
    (submitted,) = [e for e in corral.events(job_id) if e.startswith("job.submitted:")]
    assert submitted.endswith(
        f"submitted as slurm job {ref}; its SBATCH_ACCOUNT, SBATCH_PARTITION reached the job only, not sbatch:"
        " corral's slurm settings choose its account, QOS, partition and resources"
    )


def test_a_jobs_output_is_cut_at_server_max_output_as_an_agents_is(
    tmp_path: Path, slurm: SlurmCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """Slurm writes a job's output file itself: a job printing without end filled the disk of
    corral's output directory, where the server keeps at most server.max_output of an agent's. The
    batch script keeps that much, ends it with the same line, and the job runs on to its own end."""
    config = make_config(tmp_path, slurm).model_copy(update={"server": ServerConfig(max_output=1)})
    corral = Dispatcher(tmp_path, config)
    limit = 1024 * 1024
    note = cut_note(limit)
    try:
        # About 1 MB/s without end (not faster: the shared disk of a run without the bound).
        endless = corral.submit("sh", "-c", "while :; do yes corral | head -c 100000; sleep 0.1; done", ram=128)
        ended = corral.submit("sh", "-c", "yes corral | head -c 3000000; echo done >&2; exit 3", ram=128)
        with caplog.at_level(logging.WARNING, logger="corral.slurm"):
            corral.until_state(ended, "failed")
        assert corral.job(ended)["exit_code"] == 3  # the command's own, through the limiter
        output = (tmp_path / "logs" / str(ended) / f"{corral.attempts(ended)[0]['id']}.log").read_bytes()
        assert output == (b"corral\n" * limit)[:limit] + note
        assert (
            f"job {ended}: attempt {corral.attempts(ended)[0]['id']}'s output reached server.max_output" in caplog.text
        )

        # The endless one is cut too, and runs on (its Slurm job still RUNNING) until cancelled.
        path = tmp_path / "logs" / str(endless) / f"{corral.attempts(endless)[0]['id']}.log"
        wait_until(lambda: path.stat().st_size >= limit + len(note), 60, "the endless job's output to be cut")
        cut = path.read_bytes()
        assert len(cut) == limit + len(note) and cut.endswith(note) and cut.startswith(b"corral\n")
        ref = corral.attempts(endless)[0]["executor_ref"]
        assert slurm.state(ref) == "RUNNING" and corral.job(endless)["state"] == "running"
        corral.store.request_cancel(endless, time.time())
        corral.until_state(endless, "cancelled")
        wait_until(lambda: slurm.state(ref) == "CANCELLED", 20, f"slurm job {ref} to be cancelled")
        # What follows the cut is slurmstepd's own line on the scancel, no more of the job's output.
        after = path.read_bytes()[limit + len(note) :]
        assert len(after) < 200 and b"corral" not in after, after
    finally:
        corral.store.close()


def test_a_job_that_keeps_its_stderr_apart_gets_slurms_error_file_bounded_as_its_output(
    tmp_path: Path, slurm: SlurmCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """Slurm's own model: both streams go to --output unless --error is given. A job could not ask
    for --error (Nextflow's .command.err, CWL's `stderr:`): its stderr was always in its output. A
    job with separate_stderr is submitted with --error, its stderr bounded by server.max_output on
    its own, and copied from slurm.output_dir into the log store beside its output."""
    shared = tmp_path / "slurm-output"
    config = make_config(tmp_path, slurm, output_dir=str(shared))
    config = config.model_copy(update={"server": ServerConfig(max_output=1)})
    corral = Dispatcher(tmp_path, config)
    limit = 1024 * 1024
    try:
        apart = corral.submit(
            "sh", "-c", "echo out; yes err | head -c 3000000 >&2; echo out2; exit 3", ram=128, separate_stderr=True
        )
        mixed = corral.submit("sh", "-c", "echo out; echo err >&2", ram=128)
        with caplog.at_level(logging.WARNING, logger="corral.slurm"):
            assert corral.until_state(apart, "failed")["exit_code"] == 3
        assert corral.until_state(mixed, "complete")
        attempt = corral.attempts(apart)[0]
        logs = tmp_path / "logs" / str(apart)
        assert (logs / f"{attempt['id']}.log").read_bytes() == b"out\nout2\n"
        assert (logs / f"{attempt['id']}.err").read_bytes() == (b"err\n" * limit)[:limit] + cut_note(limit)
        assert f"job {apart}: attempt {attempt['id']}'s stderr reached server.max_output" in caplog.text
        assert f"StdErr={shared / str(apart) / str(attempt['id'])}.err " in slurm.show_job(attempt["executor_ref"])
        # The default is unchanged: one output, no --error.
        [plain] = corral.attempts(mixed)
        assert corral.output(mixed) == "out\nerr\n"
        assert not (tmp_path / "logs" / str(mixed) / f"{plain['id']}.err").exists()
        assert f"StdErr={shared / str(mixed) / str(plain['id'])}.log " in slurm.show_job(plain["executor_ref"])
    finally:
        corral.store.close()


def test_the_output_limiter_leaves_no_process_or_directory_on_the_node_ended_or_sigkilled(
    tmp_path: Path, slurm: SlurmCluster
) -> None:
    """The batch script's limiter left its watchdog's `sleep 5` running after every job with
    server.max_output, and a SIGKILL of the job (scancel --signal=KILL, a command that outlives
    KillWait) left the FIFO's directory in the node's TMPDIR."""
    config = make_config(tmp_path, slurm).model_copy(update={"server": ServerConfig(max_output=1)})
    corral = Dispatcher(tmp_path, config)
    node_tmp = tmp_path / "node-tmp"
    node_tmp.mkdir()
    marker = f"t-{uuid.uuid4().hex}"
    env = {"TMPDIR": str(node_tmp), "CORRAL_TEST_MARK": marker}
    try:
        ended = corral.submit("sh", "-c", "echo done; exit 3", ram=128, env=env)
        assert corral.until_state(ended, "failed")["exit_code"] == 3
        assert corral.output(ended) == "done\n"
        assert processes_marked(f"CORRAL_TEST_MARK={marker}") == []

        started = tmp_path / "started"
        killed = corral.submit("sh", "-c", f"touch {started}; exec sleep 120", ram=128, env=env)
        corral.until(started.exists, 30, "the command to start")
        ref = corral.attempts(killed)[0]["executor_ref"]
        slurm.run("scancel", "--signal=KILL", ref)
        corral.until_state(killed, "failed", "cancelled")
        wait_until(lambda: processes_marked(f"CORRAL_TEST_MARK={marker}") == [], 20, "the job's processes to end")
        assert list(node_tmp.iterdir()) == []
    finally:
        corral.store.close()


def test_sbatch_refusing_a_jobs_own_sbatch_variable_fails_it_at_once_not_retried(corral: Dispatcher) -> None:
    """A job stored with SBATCH_SIGNAL=bogus (submission refuses it now: a job stored before, or
    one through the store) made every sbatch fail, and corral retried it with back-off as a
    temporary failure, though no retry could succeed. A value only slurmctld refuses
    (SBATCH_ACCTG_FREQ=task=0, which corral's check lets through) is the job's too. Both fail at
    once with sbatch's message, and the jobs behind them go to Slurm."""
    bad_signal = corral.submit("true", ram=128, max_retries=2, env={"SBATCH_SIGNAL": "bogus"})
    bad_freq = corral.submit("true", ram=128, env={"SBATCH_ACCTG_FREQ": "task=0"})
    fine = corral.submit("true", ram=128, env={"SBATCH_SIGNAL": "B:USR1@60"})
    corral.loop.run_pass()
    corral.loop.run_pass()

    row = corral.job(bad_signal)
    assert row["state"] == "failed" and row["temp_failures"] == 0, row
    assert row["wait_reason"] == "sbatch refused: Invalid --signal specification (the job's SBATCH_SIGNAL='bogus')"
    assert any(e.startswith("job.failed: sbatch refused: Invalid --signal") for e in corral.events(bad_signal))
    row = corral.job(bad_freq)
    assert row["state"] == "failed" and row["temp_failures"] == 0, row
    assert row["wait_reason"] == (
        "sbatch refused: Batch job submission failed: Invalid accounting frequency requested"
        " (the job's SBATCH_ACCTG_FREQ='task=0')"
    )
    corral.until_state(fine, "complete")


@pytest.mark.parametrize(
    ("signal", "env", "given", "told"),
    [
        ("B:USR1@120", {}, "B:60@120", "B:10"),
        ("sigterm", {}, "B:60@60", "15"),
        ("WINCH@5", {}, "B:60@5", "28"),
        ("40@0", {}, "B:60@0", "40"),
        (None, {}, None, None),
        # A job's SBATCH_SIGNAL, which sbatch reads as the option: the same, unless it has its own.
        (None, {"SBATCH_SIGNAL": "USR2@30"}, "B:60@30", "12"),
        ("B:USR1@120", {"SBATCH_SIGNAL": "USR2@30"}, "B:60@120", "B:10"),
        (None, {"SBATCH_SIGNAL": "R:USR1@30"}, None, None),  # not corral's: sbatch's own, as before
    ],
)
def test_a_jobs_signal_is_sent_the_batch_script_which_sends_the_command_the_jobs_own(
    tmp_path: Path, signal: str | None, env: dict[str, str], given: str | None, told: str | None
) -> None:
    """Slurm's own --signal (no Slurm needed: the options only), with B: and the carrier, always:
    Slurm sends one without B: to the job's steps (corral's jobs have none) and one with B: to the
    batch script, which sends the job's own signal as CORRAL_SIGNAL says (tests/slurm/
    test_batch_script.py runs it). Slurm sends it with up to a minute's slop (its time limits are
    looked at every 30 s), so no real-Slurm test waits for it here."""
    config = load_config(None, home=tmp_path, executor="slurm", slurm={"conf": str(tmp_path / "slurm.conf")})
    store = Store(f"sqlite:///{tmp_path / 'corral.db'}")
    try:
        loop = SlurmLoop(store, config, "d-test", tmp_path / "logs")
        job = JobRequest(command=["true"], time_limit=90, signal=signal, env=env).to_job(7, 0.0)
        options = loop.sbatch_options(job, 3)
        signals = [option.removeprefix("--signal=") for option in options if option.startswith("--signal")]
        assert signals == ([given] if given else [])
        assert "--time=0-00:01:30" in options
        # What sbatch 22.05 itself parses (corral.executor.slurm mirrors proc_args.c's parse).
        assert all(_sbatch_signal_valid(text) for text in signals)
        job_env = loop.job_env(job, 3)
        assert job_env.get("CORRAL_SIGNAL") == told
        assert job_env.get("SBATCH_SIGNAL") == env.get("SBATCH_SIGNAL")
    finally:
        store.close()


def test_sbatch_takes_a_jobs_signal_as_corral_gives_it(corral: Dispatcher) -> None:
    """The real sbatch takes the --signal corral gives it (a name sbatch knows, and one it does not
    by its number) and the job runs. Its delivery is Slurm's, with up to a minute's slop: not waited
    for here."""
    named = corral.submit("true", time_limit=120, signal="B:USR1@90")
    numbered = corral.submit("true", time_limit=120, signal="WINCH@5")
    for job_id in (named, numbered):
        assert corral.until_state(job_id, "complete", "failed")["state"] == "complete", corral.events(job_id)
