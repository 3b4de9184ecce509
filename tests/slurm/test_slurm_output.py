"""Reading what Slurm's commands print (corral.executor.slurm), on output captured from Slurm 22.05.
No Slurm needed: tests/slurm/test_slurm_executor.py runs the same against a real one."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from corral.core.batch import ExitStatus
from corral.executor.slurm import (
    ShownJob,
    SlurmJob,
    job_name,
    killed_state,
    parse_exit_status,
    parse_show_job,
    parse_squeue,
    parse_time,
)

COMMENT = "corral cluster=c job=4 attempt=9 dispatcher=d-1"


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("2026-11-26T02:50:30", at("2026-11-26T02:50:30")),
        (" 2026-11-26T02:50:30 ", at("2026-11-26T02:50:30")),
        ("N/A", None),  # squeue: a pending job with no estimate
        ("NONE", None),  # squeue: the end of a job running with no time limit
        ("Unknown", None),  # scontrol: the same
        ("None", None),
        ("", None),
        ("02:50:30", None),  # SLURM_TIME_FORMAT=relative (corral's queries set "standard")
        ("2026-11-26 02:50:30", None),
    ],
)
def test_slurm_times_read_as_utc_or_unknown(text: str, seconds: float | None) -> None:
    assert parse_time(text) == seconds


def test_squeue_lines_give_each_jobs_start_and_end() -> None:
    text = "\n".join(
        [
            f"1|COMPLETED|None|c1|0|2026-11-26T02:50:30|2026-11-26T02:50:32|{COMMENT}",
            "3|RUNNING|None|c1|0|2026-11-26T02:50:30|NONE|(null)",
            "5|PENDING|Resources||-99|N/A|N/A|a user's | comment",
            # Cancelled while pending (held): Slurm sets its StartTime to its EndTime, the cancel.
            "2|CANCELLED|JobHeldUser||0|2026-11-26T02:50:29|2026-11-26T02:50:29|(null)",
            "7|BROKEN",  # not squeue's line: skipped
        ]
    )
    jobs = parse_squeue(text)
    cancelled = at("2026-11-26T02:50:29")
    assert jobs == [
        SlurmJob("1", "COMPLETED", "None", "c1", 0, COMMENT, at("2026-11-26T02:50:30"), at("2026-11-26T02:50:32")),
        SlurmJob("3", "RUNNING", "None", "c1", 0, "(null)", at("2026-11-26T02:50:30"), None),
        SlurmJob("5", "PENDING", "Resources", "", -99, "a user's | comment", None, None),
        SlurmJob("2", "CANCELLED", "JobHeldUser", "", 0, "(null)", cancelled, cancelled),
    ]
    assert jobs[0].corral_ids("c") == (4, 9, "d-1")


def test_scontrol_show_job_gives_each_ended_jobs_state_and_exit_code() -> None:
    text = (
        "JobId=1 JobName=corral-4 UserId=root(0) JobState=COMPLETED Reason=None ExitCode=0:0 RunTime=00:00:02 "
        "StartTime=2026-11-26T02:50:30 EndTime=2026-11-26T02:50:32 Command=(null)\n"
        "JobId=6 JobName=corral-5 UserId=root(0) JobState=FAILED Reason=NonZeroExitCode ExitCode=7:0 "
        "Command=/x JobState=COMPLETED ExitCode=0:0\n"  # the command line is the user's: the first match counts
        "JobId=8 JobName=corral-6 UserId=root(0) JobState=CANCELLED Reason=None ExitCode=0:15 StartTime=Unknown\n"
    )
    assert parse_show_job(text) == {
        "1": ShownJob("COMPLETED", 0),
        "6": ShownJob("FAILED", 7),
        # Killed by SIGTERM: 128+15 as corral's exit codes read, and the signal beside it.
        "8": ShownJob("CANCELLED", 143, exit_signal=15),
    }


def test_a_job_name_cannot_pass_for_scontrols_state_and_exit_code() -> None:
    """The name comes before JobState= and ExitCode= in `scontrol show job`'s line."""
    name = job_name(6, "x JobState=COMPLETED\tExitCode=0:0 ")
    assert name == "corral-6-x_JobState=COMPLETED_ExitCode=0:0" and job_name(7, " ") == "corral-7"
    line = f"JobId=9 JobName={name} UserId=root(0) JobState=FAILED Reason=NonZeroExitCode ExitCode=7:0 Command=/x\n"
    assert parse_show_job(line) == {"9": ShownJob("FAILED", 7)}


@pytest.mark.parametrize(
    ("text", "status"),
    [
        ("exit=3 slurm_job=17 started=1764125430 ended=1764125432\n", ExitStatus(3, "17", 1764125430, 1764125432)),
        ("exit=0 slurm_job=17 started= ended=\n", ExitStatus(0, "17")),  # a node whose date has no %s
        ("exit=143 slurm_job=17 started=1 ended=2 signal=TERM\n", ExitStatus(143, "17", 1, 2, signal="TERM")),
        ("exit=0 slurm_job=17 started=1 ended=2 signal=\n", ExitStatus(0, "17", 1, 2)),
        # The job's directory (chdir) could not be entered: the command never ran.
        ("exit=1 slurm_job=17 started=1 ended=1 signal= chdir=failed\n", ExitStatus(1, "17", 1, 1, chdir_failed=True)),
        ("exit=3 slurm_job=17 started=1 ended=2 signal= chdir=\n", ExitStatus(3, "17", 1, 2)),
        # The command's CPU time, last; empty: not measured (a command never run), as with no field.
        ("exit=0 slurm_job=17 started=1 ended=2 signal= chdir= cpu=1.5\n", ExitStatus(0, "17", 1, 2, cpu_seconds=1.5)),
        ("exit=0 slurm_job=17 started=1 ended=2 signal= chdir= cpu=0.000\n", ExitStatus(0, "17", 1, 2, cpu_seconds=0)),
        (
            "exit=143 slurm_job=17 started=1 ended=9 signal=TERM chdir= cpu=7504\n",
            ExitStatus(143, "17", 1, 9, signal="TERM", cpu_seconds=7504.0),
        ),
        (
            "exit=1 slurm_job=17 started=1 ended=1 signal= chdir=failed cpu=\n",
            ExitStatus(1, "17", 1, 1, chdir_failed=True),
        ),
        # A later corral's field after these is passed over; a known one that does not read is no status.
        (
            "exit=0 slurm_job=17 started=1 ended=2 signal= chdir= cpu=2.5 rss_mib=300 gpu_seconds=\n",
            ExitStatus(0, "17", 1, 2, cpu_seconds=2.5),
        ),
        ("exit=0 slurm_job=17 started=1 ended=2 signal= chdir= cpu=1.2 cpu=3\n", None),
        ("exit=0 slurm_job=17 started=1 ended=2 signal= chdir= cpu=1.2x\n", None),
        ("exit=0 slurm_job=17 started=1 ended=2 signal= chdir= cpu=-1\n", None),
        ("", None),
        ("exit=x slurm_job=17 started= ended=", None),
        ("3\n", None),
    ],
)
def test_the_batch_scripts_exit_status_file_reads_or_is_no_status(text: str, status: ExitStatus | None) -> None:
    assert parse_exit_status(text) == status


@pytest.mark.parametrize(
    ("tail", "state"),
    [
        # slurmstepd's own lines, as Slurm 22.05 wrote them to a job's output here
        (
            "x\nslurmstepd-c1: error: *** JOB 17 ON c1 CANCELLED AT 2026-11-26T21:56:05 DUE TO TIME LIMIT ***\n",
            "TIMEOUT",
        ),
        (
            "slurmstepd-c2: error: *** JOB 17 ON c2 CANCELLED AT 2026-11-26T21:55:05 DUE TO PREEMPTION ***\n",
            "PREEMPTED",
        ),
        ("slurmstepd-c1: error: *** JOB 17 ON c1 CANCELLED AT 2026-11-26T21:55:05 ***\nTerminated\n", "CANCELLED"),
        ("*** JOB 17 ON c1 CANCELLED AT 2026-11-26T21:55:05 DUE TO NODE FAILURE, SEE SLURMCTLD LOG ***", "NODE_FAIL"),
        ("*** JOB 17 ON c1 CANCELLED AT 2026-11-26T21:55:05 DUE TO SOMETHING NEW ***", ""),  # the core judges
        ("slurmstepd-c1: error: *** JOB 16 ON c1 CANCELLED AT 2026-11-26T21:55:05 DUE TO TIME LIMIT ***\n", ""),
        ("the command's own output\n", ""),
    ],
)
def test_why_slurm_killed_a_job_is_read_from_slurmstepds_line_in_its_output(tail: str, state: str) -> None:
    assert killed_state(tail, "17") == state


def test_a_listed_slurm_job_is_an_attempts_only_if_its_comment_names_that_attempt() -> None:
    """A slurmctld that lost its state gives ids out again: the id alone does not say whose job it is."""
    ours = SlurmJob("4", "RUNNING", "None", "c1", 0, COMMENT)
    assert ours.runs("c", 4, 9)
    assert not ours.runs("c", 4, 8) and not ours.runs("c", 5, 9) and not ours.runs("other", 4, 9)
    assert not SlurmJob("4", "PENDING", "JobHeldUser", "", 0, "").runs("c", 4, 9)  # another user's
