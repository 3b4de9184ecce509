"""Slurm's commands, as corral calls them: `sbatch` (and `sbatch --test-only`), `squeue`, `scontrol show job`, `scontrol
update` (a job's Nice), `scancel`.

Argument lists, never a shell string; every call has a timeout. A command that fails, times out
or cannot be found raises SlurmError with Slurm's own message. No decisions here: what a state or
an exit means is `corral.core.batch`'s.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from corral.core.batch import ExitStatus
from corral.core.signals import SLURM_SIGNALLABLE, JobSignal, parse_job_signal, scancel_signal_text

# squeue's fields, '|'-separated: id, state, reason, nodes, Nice, StartTime, EndTime; the comment
# last (it is corral's, but a user's may hold a '|').
SQUEUE_FORMAT = "%i|%T|%r|%N|%y|%S|%e|%k"
SQUEUE_FIELDS = 8
# Slurm's commands print times in their own process's zone (TZ), with no zone said, in the format
# SLURM_TIME_FORMAT names. corral's own queries run with these, so that a time reads the same
# whatever the zone of corral's or slurmctld's host and whatever DST does: "2024-05-01T10:00:03",
# UTC. (Slurm sends the times as seconds since the epoch; the command only formats them.)
# They are read from squeue, not from `scontrol show job`'s StartTime/EndTime (the same values),
# whose line has the job's name, a user's text, before them.
TIME_ENV = {"TZ": "UTC0", "SLURM_TIME_FORMAT": "standard"}
TIME_FORMAT = "%Y-%m-%dT%H:%M:%S"
COMMENT = re.compile(
    r"^corral cluster=(?P<cluster>\S+) job=(?P<job>\d+) attempt=(?P<attempt>\d+) dispatcher=(?P<dispatcher>\S+)$"
)
JOB_ID = re.compile(r"(?:^|\s)JobId=(\d+)\s")
JOB_STATE = re.compile(r"\sJobState=(\S+)")
EXIT_CODE = re.compile(r"\sExitCode=(\d+):(\d+)")

# The signal Slurm's --signal sends the batch script in the job's stead (SIGRTMIN+26: nothing else
# sends a Slurm job a real-time signal, and `corral cancel --signal` sends named ones only).
FORWARD_CARRIER = 60
SIGNAL_VARIABLE = "CORRAL_SIGNAL"  # the job's --signal, for the batch script to send its command

# The batch script: it runs the job's argv, passed as the script's arguments after the path of its
# exit status file, as is (no shell string is ever built from it; `exec` in a subshell, so a name
# such as `echo` or `exit` is the program, never the shell's builtin), on the first node of the
# allocation, as the corral agent runs a gang's command; CORRAL_NODELIST and CORRAL_NNODES say what
# the gang holds. When the command ends, the script records its exit status in that file, beside
# the job's output, written whole or not at all (a rename in the same directory): once slurmctld
# forgets the ended job (MinJobAge), the file still says how it ended. Slurm ends a job at its time
# limit, at a scancel or a preemption by SIGTERM to all its processes (SIGKILL after KillWait): the
# script traps TERM, and once its command has ended (killed by the same TERM, as a rule) records
# `signal=TERM`, so that a job Slurm killed is not taken for one that was never run. Why Slurm
# killed it is what slurmstepd wrote to the job's output ("*** JOB 17 ON c1 CANCELLED AT ... DUE
# TO TIME LIMIT ***", `killed_state`): squeue, asked from the trap, says only COMPLETING. A command
# that outlives KillWait, or a node that fails, leaves no file. A job with a directory of its own
# (chdir, sbatch's --chdir) names it in CORRAL_CHDIR too: slurmstepd runs a job whose directory it
# cannot enter in /tmp instead, and the script then ends it with exit 1 and a line that names the
# directory, as the corral agent does, rather than run it elsewhere.
# Slurm writes a job's output file as it comes, without end: the script's second argument is the
# most of it to keep (server.max_output, as the server keeps of an agent's; 0: all), its third the
# line that ends an output cut there (without its newlines: `scontrol show job` prints the
# arguments, and its --oneliner would be lines). The command then writes to a pipe (a FIFO, so that the
# command stays the script's own child, under its trap): a limiter copies that many bytes to the
# output file, then the line, and reads the rest into /dev/null, so that the command runs on as
# with the agent. The limiter ignores Slurm's SIGTERM, to keep what a command writes as it dies; it
# ends when the pipe does, or is killed 5 s after the command ended (a process the command left
# running may hold the pipe open: Slurm kills it as the script ends). The FIFO's temporary directory
# is removed once both ends are open, before the command starts, and the script polls for the
# limiter's end itself: nothing of the script's outlives the job, SIGKILLed or not. slurmstepd's own
# lines go to the file directly, past the limit. No FIFO (no temporary directory on the node): not
# bounded. A job that keeps its stderr apart (separate_stderr) is submitted with --error as well,
# and says so in CORRAL_SEPARATE_STDERR: its stderr then goes through a limiter of its own, to the
# script's stderr (the --error file), bounded and ended the same way, each stream on its own.
# A job's --signal (sbatch's, to checkpoint before its time limit) is the script's to send: Slurm
# sends one without B: to the job's steps only (corral's jobs run none), and one with B: to the
# batch shell only, this script. So the job is submitted with --signal=B:FORWARD_CARRIER@TIME and
# CORRAL_SIGNAL says what to send the command as the carrier comes, as the agent sends it: "B:N",
# signal N to the command's main process; "N", to the job's whole process group (the script's:
# slurmstepd makes the script a group's leader, and a command's processes stay in it unless they
# leave it). The carrier, which nothing else sends, keeps it apart from Slurm's own TERM and from
# an operator's `scancel --signal --full`, which reaches every process already. Such a job's
# command runs in the background and the script waits for it (a trap runs only once a foreground
# command has ended, and one ends a `wait`); a shell starts a background command with SIGINT and
# SIGQUIT ignored, and env --default-signal gives them back (coreutils 8.31 or later: without it,
# the command keeps them ignored). A job without a signal runs in the foreground, as before.
# What the command used: corral reads no accounting (sacct is off on many clusters), so the script
# reads its shell's `times` just before the command starts and just after it ends (before the
# limiters are reaped), and records the difference of their second lines, the CPU time (user and
# system) of the command and of everything it waited for, as `cpu=SECONDS`, last on the status line
# (empty: not measured, for a command never run). `times` counts the children of the shell it runs
# in, so it runs in the script's own (in a subshell, `$(times)` or a pipe, it reads 0): its output
# goes to a file beside the status file, read back with `read` and removed at once. Its format is
# each shell's ("0m1.250000s" from dash, "0m1.250s" from bash, with the locale's decimal point;
# minutes go past 59), read by awk. A shell cannot read the command's peak RSS: not known.
BATCH_SCRIPT = """#!/bin/sh
# corral's Slurm batch script: runs "$@" after its first three arguments (the job's argv) as is, in
# the directory CORRAL_CHDIR names if it is set, writes the exit status to the file its first
# argument names, and keeps at most as many bytes of the command's output as its second says (0:
# all), ended by its third when cut; as many of its stderr too, apart, when CORRAL_SEPARATE_STDERR
# is set (the job was submitted with --error); and sends it the job's --signal, CORRAL_SIGNAL.
corral_chdir="${CORRAL_CHDIR:-}"
corral_separate_stderr="${CORRAL_SEPARATE_STDERR:-}"
# The job's --signal: "B:N" (signal N to the command's main process) or "N" (to every process of
# the job). Slurm sends the script %(carrier)s in its stead, which only Slurm's --signal sends.
corral_forward="${CORRAL_SIGNAL:-}"
unset CORRAL_CHDIR CORRAL_SEPARATE_STDERR CORRAL_SIGNAL
corral_forward_to=all
case $corral_forward in B:*) corral_forward_to=main corral_forward="${corral_forward#B:}" ;; esac
case $corral_forward in *[!0-9]*) corral_forward= ;; esac
# Sends the job's signal, once Slurm sent the script %(carrier)s: to the command's main process, or
# to the job's whole process group (the script's, as slurmstepd makes it, where the command's
# processes stay: the script and its limiters ignore it meanwhile). A command not started yet gets
# it as it starts.
corral_send() {
    if [ -z "$corral_command" ]; then
        corral_pending=1
    elif [ "$corral_forward_to" = main ]; then
        kill -"$corral_forward" "$corral_command" 2>/dev/null
    else
        trap '' "$corral_forward"
        kill -"$corral_forward" 0 2>/dev/null
        corral_traps
    fi
}
corral_traps() {
    trap 'corral_signal=TERM' TERM
    # An operator's `corral cancel --signal` (scancel --signal --full) reaches this script too: it
    # outlives each (the command gets them back at their default disposition).
    trap : %(signallable)s
    [ -z "$corral_forward" ] || trap corral_send %(carrier)s
}
# The job's own variables, which sbatch ran without (corral.executor.slurm.sbatch_environment):
# set first, so that the script's own (corral_status, ...) are never the job's.
for corral_name in $CORRAL_WITHHELD; do
    eval "export $corral_name=\\"\\$CORRAL_WITHHELD_$corral_name\\"; unset CORRAL_WITHHELD_$corral_name"
done
unset CORRAL_WITHHELD corral_name
corral_command=
corral_pending=
corral_signal=
corral_times_before=
corral_times_after=
corral_traps
corral_status="$1"
corral_max_output="$2"
corral_cut_note="$3"
shift 3
CORRAL_NNODES="${SLURM_JOB_NUM_NODES:-1}"
CORRAL_NODELIST="$(scontrol show hostnames "$SLURM_JOB_NODELIST" 2>/dev/null | paste -sd, -)"
export CORRAL_NNODES CORRAL_NODELIST
corral_started="$(date +%s)"
corral_chdir_failed=
if [ "$corral_forward_to" = all ]; then
    # Not the leader of its own process group (not run by slurmstepd): the main process alone.
    corral_group=
    read -r corral_group 2>/dev/null </proc/$$/stat
    corral_group="${corral_group##*) }"
    corral_group="${corral_group#* }"
    corral_group="${corral_group#* }"
    [ "${corral_group%% *}" = "$$" ] || corral_forward_to=main
fi
# A shell starts a command in the background with SIGINT and SIGQUIT ignored: coreutils' env gives
# them back (8.31 and later; without it the command runs with them ignored).
corral_default_signals=
[ -z "$corral_forward" ] || ! env --default-signal=INT,QUIT true >/dev/null 2>&1 || corral_default_signals=1
# Copies its stdin to its stdout, at most corral_max_output bytes of it, then the cut note.
corral_limit() {
    trap '' TERM %(signallable)s $corral_forward
    # head writes through stdio: unbuffered, the output is there as it comes (`corral logs`).
    # (stdbuf tried first: one that cannot preload its library would run no head at all.)
    if stdbuf -o0 true >/dev/null 2>&1; then
        stdbuf -o0 head -c "$corral_max_output"
    else
        head -c "$corral_max_output"
    fi
    if [ "$(head -c 1 | wc -c)" -gt 0 ]; then
        printf '\\n%s\\n' "$corral_cut_note"
        # exec: the limiter's own process drains the pipe, so that killing it stops the drain.
        exec cat >/dev/null
    fi
}
# The CPU time (user, system) of the script's children it waited for so far: the second line of
# `times`, in corral_times_read. In the script's own shell (a subshell's children start at zero: no
# $(times), no pipe), through a file beside the status file, removed at once.
corral_times() {
    corral_times_read=
    times >"$corral_status.$$" 2>/dev/null &&
        { read -r corral_times_read && read -r corral_times_read; } <"$corral_status.$$"
    rm -f "$corral_status.$$" 2>/dev/null
}
# The CPU seconds between two readings of corral_times_read ("0m1.250000s 0m0.040000s" from dash,
# "0m1.250s 0m0.040s" from bash, whose decimal point is the locale's; minutes go on past 59), to
# the millisecond; nothing if either is not one.
corral_cpu_between() {
    printf '%s\n%s\n' "$1" "$2" | LC_ALL=C awk '
        function seconds(text,  total, number, unit) {
            gsub(",", ".", text)
            total = 0
            while (match(text, /^[0-9]+(\\.[0-9]*)?[hms]/)) {
                number = substr(text, 1, RLENGTH - 1)
                unit = substr(text, RLENGTH, 1)
                total += number * (unit == "h" ? 3600 : unit == "m" ? 60 : 1)
                text = substr(text, RLENGTH + 1)
            }
            if (text != "") bad = 1
            return total
        }
        NF != 2 { bad = 1 }
        { used[NR] = seconds($1) + seconds($2) }
        END { if (!bad && NR == 2) printf "%.3f", (used[2] > used[1] ? used[2] - used[1] : 0) }
    ' 2>/dev/null
}
# Runs the command, its exit status in corral_exit, and reads `times` just before it starts and
# just after it ends (corral_times_before, corral_times_after), before the limiters are reaped. A
# job with a signal: in the background, waited for, as a trap runs only once a foreground command
# has ended (a trap ends a `wait`).
corral_run() {
    corral_times
    corral_times_before="$corral_times_read"
    if [ -z "$corral_forward" ]; then
        (exec "$@")
        corral_exit=$?
        corral_times
        corral_times_after="$corral_times_read"
        return
    fi
    if [ -z "$corral_default_signals" ]; then
        (exec "$@") &
    elif [ "${1#*=}" = "$1" ]; then
        (exec env --default-signal=INT,QUIT -- "$@") &
    else
        # (A name with '=' in it would be env's NAME=VALUE.)
        (exec env --default-signal=INT,QUIT -- /bin/sh -c 'exec "$@"' sh "$@") &
    fi
    corral_command=$!
    [ -z "$corral_pending" ] || corral_send
    while :; do
        wait "$corral_command"
        corral_exit=$?
        kill -0 "$corral_command" 2>/dev/null || break
    done
    # A trap may have ended the last wait as the command ended: the shell still holds its status
    # then (else this wait says 127, or the same status).
    if [ "$corral_exit" -gt 128 ]; then
        wait "$corral_command" 2>/dev/null
        corral_again=$?
        [ "$corral_again" -eq 127 ] || corral_exit=$corral_again
    fi
    corral_times
    corral_times_after="$corral_times_read"
    corral_command=
}
if [ -n "$corral_chdir" ] && ! cd "$corral_chdir" 2>/dev/null; then
    printf 'corral: chdir to %s failed on %s: no such directory, or not one this job may enter\\n' \\
        "$corral_chdir" "$(hostname)" >&2
    corral_exit=1
    corral_chdir_failed=failed
else
    corral_limiter=
    corral_error_limiter=
    corral_pipe_dir=
    if [ "$corral_max_output" -gt 0 ] 2>/dev/null && corral_pipe_dir="$(mktemp -d 2>/dev/null)" &&
        mkfifo "$corral_pipe_dir/output" 2>/dev/null &&
        { [ -z "$corral_separate_stderr" ] || mkfifo "$corral_pipe_dir/error" 2>/dev/null; }; then
        (corral_limit) <"$corral_pipe_dir/output" &
        corral_limiter=$!
        if [ -n "$corral_separate_stderr" ]; then
            (corral_limit) <"$corral_pipe_dir/error" >&2 &
            corral_error_limiter=$!
        fi
        # Both ends open (each open waits for the other), the FIFO's directory goes at once: a
        # SIGKILL of the job (scancel, the time limit's after KillWait) leaves nothing on the node.
        exec 4>"$corral_pipe_dir/output"
        if [ -n "$corral_separate_stderr" ]; then
            exec 5>"$corral_pipe_dir/error"
            rm -rf "$corral_pipe_dir"
            corral_run "$@" >&4 2>&5 4>&- 5>&-
            exec 5>&-
        else
            rm -rf "$corral_pipe_dir"
            corral_run "$@" >&4 2>&1 4>&-
        fi
        exec 4>&-
        # The limiter ends when the pipe does; a process the command left running may hold it open,
        # and then it is killed after 5 s. Polled here, not by a background `sleep 5`, which would
        # outlive the job (Slurm's linuxproc loses a process whose parent ended). (A trapped TERM
        # from Slurm also ends a wait, so no `wait` bounds this.)
        corral_polls=0
        while { kill -0 "$corral_limiter" 2>/dev/null ||
            { [ -n "$corral_error_limiter" ] && kill -0 "$corral_error_limiter" 2>/dev/null; }; } &&
            [ "$corral_polls" -lt 50 ]; do
            # (A sleep that takes no fraction: whole seconds, counted as such.)
            sleep 0.1 2>/dev/null || { sleep 1; corral_polls=$((corral_polls + 9)); }
            corral_polls=$((corral_polls + 1))
        done
        kill -KILL "$corral_limiter" $corral_error_limiter 2>/dev/null
        wait "$corral_limiter" $corral_error_limiter 2>/dev/null
    else
        # (Slurm's --error, when given, takes the command's stderr apart here.)
        [ -z "$corral_pipe_dir" ] || rm -rf "$corral_pipe_dir" 2>/dev/null
        corral_run "$@"
    fi
fi
# The command's CPU time (none for a command never run, or a `times` not read).
corral_cpu=
[ -z "$corral_times_before" ] || [ -z "$corral_times_after" ] ||
    corral_cpu="$(corral_cpu_between "$corral_times_before" "$corral_times_after")"
printf 'exit=%s slurm_job=%s started=%s ended=%s signal=%s chdir=%s cpu=%s\\n' "$corral_exit" "${SLURM_JOB_ID:-}" \\
    "$corral_started" "$(date +%s)" "$corral_signal" "$corral_chdir_failed" "$corral_cpu" >"$corral_status.$$" \\
    && mv -f "$corral_status.$$" "$corral_status"
exit "$corral_exit"
""".replace("%(signallable)s", " ".join(SLURM_SIGNALLABLE)).replace("%(carrier)s", str(FORWARD_CARRIER))
CHDIR_VARIABLE = "CORRAL_CHDIR"  # the job's directory, for the batch script to check it got there
# Set ("1") for a job that keeps its stderr apart: the batch script bounds its --error file too.
SEPARATE_STDERR_VARIABLE = "CORRAL_SEPARATE_STDERR"
STATUS_SUFFIX = ".exit"  # an attempt's exit status file: beside its output (<attempt>.log)
# "signal=" (empty: the command ended by itself) is absent from the files of corral before it,
# "chdir=" ("failed": the job's directory could not be entered, and the command never ran) too, and
# "cpu=" (the command's CPU seconds; empty: not measured) too. Fields after these, of a later corral's
# script, are passed over: a dispatcher reads the files of the jobs it adopts, which a newer peer
# may have submitted in a rolling upgrade (a known field that does not read is no status).
STATUS_FIELDS = re.compile(
    r"^exit=(\d+) slurm_job=(\S+) started=(\d*) ended=(\d*)(?: signal=(\w*))?(?: chdir=(\w*))?"
    r"(?: cpu=(\d+(?:\.\d*)?)?)?(?: (?!(?:exit|slurm_job|started|ended|signal|chdir|cpu)=)[a-z_]+=\S*)*$"
)
# What slurmstepd writes to a job's output (its stderr) as it kills it: "slurmstepd-c1: error: ***
# JOB 17 ON c1 CANCELLED AT 2026-11-26T21:55:05 DUE TO TIME LIMIT ***" (Slurm 22.05; no "DUE TO"
# for a scancel). A cause may go on ("DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS"): its
# first words name it.
KILLED_LINE = re.compile(r"\*\*\* JOB (\d+) ON \S+ CANCELLED AT \S+(?: DUE TO ([^*]*?))? \*\*\*")
KILLED_CAUSES = {
    "TIME LIMIT": "TIMEOUT",
    "PREEMPTION": "PREEMPTED",
    "NODE FAIL": "NODE_FAIL",  # Slurm's own state then: the job's on_node_failure decides
    "SYSTEM FAILURE": "NODE_FAIL",
}
# How much of an output's end `killed_state` is given: slurmstepd's line is among its last.
KILLED_TAIL_BYTES = 4096


def parse_exit_status(text: str) -> ExitStatus | None:
    """The exit status file corral's batch script writes ("exit=3 slurm_job=17 started=T ended=T
    signal=TERM chdir= cpu=1.250"), or None if it is not one (a torn write cannot happen: it is
    renamed into place whole)."""
    match = STATUS_FIELDS.match(text.strip())
    if match is None:
        return None
    started, ended = (float(t) if t else None for t in (match[3], match[4]))
    return ExitStatus(
        int(match[1]),
        match[2],
        started,
        ended,
        signal=match[5] or "",
        chdir_failed=match[6] == "failed",
        cpu_seconds=float(match[7]) if match[7] else None,
    )


def killed_state(output_tail: str, slurm_job: str) -> str:
    """The Slurm state slurmstepd's last word on killing `slurm_job` in its output stands for:
    TIMEOUT, PREEMPTED, NODE_FAIL, or CANCELLED (a scancel); "" if the output has none for that
    job (or a cause not known here: the core then judges by the job's time limit). The last such
    line counts (a user's output before it cannot stand in for Slurm's)."""
    state = ""
    for match in KILLED_LINE.finditer(output_tail):
        if match[1] == slurm_job:
            cause = match[2]
            known = [said for words, said in KILLED_CAUSES.items() if cause is not None and cause.startswith(words)]
            state = "CANCELLED" if cause is None else (known[0] if known else "")
    return state


class SlurmError(Exception):
    """A Slurm command failed; the message is Slurm's (or why the command could not run)."""


@dataclass(frozen=True, slots=True)
class SlurmJob:
    """A Slurm job as squeue lists it."""

    id: str
    state: str
    reason: str
    nodes: str
    nice: int | None  # None: squeue printed no number
    comment: str
    # Slurm's StartTime and EndTime (None: "N/A", "NONE", "Unknown"...). While the job pends its
    # start is an estimate; while it runs its end is its time limit's.
    start: float | None = None
    end: float | None = None

    def corral_ids(self, cluster: str) -> tuple[int, int, str] | None:
        """(job id, attempt id, dispatcher id) if a dispatcher of corral's cluster `cluster`
        submitted it."""
        match = COMMENT.match(self.comment)
        if match is None or match["cluster"] != cluster:
            return None
        return int(match["job"]), int(match["attempt"]), match["dispatcher"]

    def runs(self, cluster: str, job_id: int, attempt_id: int) -> bool:
        """Whether this Slurm job is the one submitted for corral's attempt `attempt_id` of job
        `job_id` in cluster `cluster`, as its comment says (by whichever dispatcher: an adopted
        attempt's comment names the one that submitted it). A slurmctld that lost its state
        (`slurmctld -c`, a lost StateSaveLocation) gives job ids out from the start again, so an
        id recorded on an attempt may name another job since."""
        ids = self.corral_ids(cluster)
        return ids is not None and ids[:2] == (job_id, attempt_id)


def comment_for(cluster: str, job_id: int, attempt_id: int, dispatcher_id: str) -> str:
    return f"corral cluster={cluster} job={job_id} attempt={attempt_id} dispatcher={dispatcher_id}"


def job_name(job_id: int, name: str) -> str:
    """sbatch's --job-name for a corral job: its id, then its name with every run of whitespace
    made one '_'. `scontrol show job` prints the name before JobState= and ExitCode=, so a name
    with spaces could otherwise pass for those fields ("x JobState=COMPLETED ExitCode=0:0")."""
    safe = "_".join(name.split())
    return f"corral-{job_id}" + (f"-{safe}" if safe else "")


def exit_code_of(code: int, signal: int) -> int:
    """Slurm's ExitCode=CODE:SIGNAL as corral's exit code: the code, or 128+N for signal N (the
    signal itself is kept beside it, as the attempt's exit_signal: Slurm's 0:9 is no 137:0)."""
    return 128 + signal if signal else code


@dataclass(frozen=True, slots=True)
class ShownJob:
    """An ended job as `scontrol show job` gives it: its state, and its ExitCode=CODE:SIGNAL as
    corral records an exit (`exit_code_of`, and the signal, None for 0: the script exited)."""

    state: str
    exit_code: int
    exit_signal: int | None = None


def parse_time(text: str) -> float | None:
    """A time as Slurm's commands print it under TIME_ENV ("2024-05-01T10:00:03", UTC) in seconds
    since the epoch; None for anything else: "N/A", "NONE", "Unknown", "None" (not known)."""
    try:
        return datetime.strptime(text.strip(), TIME_FORMAT).replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


# The prefix Slurm's commands put before each error line ("sbatch: error: "), which says nothing
# once the message is a job's reason.
ERROR_PREFIX = re.compile(r"^\w+: error: ")


def error_message(stderr: str) -> str:
    """A Slurm command's error output as one line: "Memory specification can not be satisfied;
    Batch job submission failed: Requested node configuration is not available"."""
    lines = (ERROR_PREFIX.sub("", line.strip()) for line in stderr.splitlines())
    return "; ".join(line for line in lines if line)


def parse_squeue(text: str) -> list[SlurmJob]:
    jobs = []
    for line in text.splitlines():
        parts = line.split("|", SQUEUE_FIELDS - 1)
        if len(parts) == SQUEUE_FIELDS and parts[0].strip():
            job_id, state, reason, nodes, nice_text, start, end = (p.strip() for p in parts[:-1])
            nice = int(nice_text) if nice_text.lstrip("-").isdigit() else None
            jobs.append(
                SlurmJob(job_id, state, reason, nodes, nice, parts[-1].strip(), parse_time(start), parse_time(end))
            )
    return jobs


def parse_show_job(text: str) -> dict[str, ShownJob]:
    """`scontrol show job --oneliner`: job id -> its state and exit. The fields before the
    command line are read (its text is the user's), so each pattern's first match counts."""
    found = {}
    for line in text.splitlines():
        job_id, state, code = JOB_ID.search(line), JOB_STATE.search(line), EXIT_CODE.search(line)
        if job_id and state and code:
            signal = int(code[2])
            found[job_id[1]] = ShownJob(state[1], exit_code_of(int(code[1]), signal), signal or None)
    return found


# sbatch runs on corral's host as corral's user, and reads its environment as it starts: the
# dynamic loader's LD_PRELOAD, Slurm's SLURM_CONF (whose PluginDir names the libraries it loads),
# the PATH that finds it, and, should the site's sbatch be a wrapper script, BASH_ENV,
# BASH_FUNC_cat%%, PYTHONPATH and the like. A job's value of any of them would run code of its
# user's choosing as corral (LD_PRELOAD=/home/alice/x.so). So sbatch runs with corral's own
# environment and the job's variables go beside it, as CORRAL_WITHHELD_NAME listed in
# CORRAL_WITHHELD, for the batch script to set back before the command; only sbatch's input
# variables (SBATCH_*, which act as its options) go to it as they are, and only those that say how
# the job runs inside what corral asked for (SBATCH_PASSED).
PASSED_PREFIX = "SBATCH_"
SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# sbatch submits as corral's Slurm user, so Slurm checks corral's associations, not the job's user's:
# a job's SBATCH_ACCOUNT would charge any account corral may use (another group's), its
# SBATCH_PARTITION or SBATCH_RESERVATION run it where corral's settings do not. What a job is
# charged to, where it runs and what it holds are corral's settings and the job's request (which
# corral's limits and fair share count); what Slurm adds in a later release must not widen that,
# so the variables a job may hand sbatch are listed, not the ones it may not.
SBATCH_PASSED = frozenset(
    {
        "SBATCH_SIGNAL",  # a signal before the time limit (to checkpoint)
        "SBATCH_OPEN_MODE",  # append to or truncate the output file
        "SBATCH_ACCTG_FREQ",
        "SBATCH_PROFILE",
        "SBATCH_CPU_FREQ_REQ",
        "SBATCH_GPU_FREQ",
        "SBATCH_MEM_BIND",
        "SBATCH_GPU_BIND",
        "SBATCH_DISTRIBUTION",
    }
)
# Those that choose what the job is charged to, its priority or where it runs: said so when refused.
SBATCH_ACCOUNTING = {  # -> the slurm setting that chooses it for every job
    "SBATCH_ACCOUNT": "account",
    "SBATCH_WCKEY": "extra_args (--wckey)",
    "SBATCH_QOS": "extra_args (--qos)",
    "SBATCH_PARTITION": "partition",
    "SBATCH_RESERVATION": "extra_args (--reservation)",
    "SBATCH_CLUSTERS": "extra_args (--clusters)",
    "SBATCH_CLUSTER_CONSTRAINT": "extra_args (--cluster-constraint)",
    "SBATCH_CONSTRAINT": "extra_args (--constraint)",
}


# sbatch reads each SBATCH_PASSED variable as its option and exits on a value it cannot parse
# ("Invalid --signal specification"): such a job's every sbatch fails the same way. The values are
# checked at submission as sbatch 22.05 parses them (src/common/proc_args.c, slurm_opt.c; tried on
# the real sbatch of tests/slurm, test_sbatch_environment.py), where that parse needs nothing of
# the cluster's. What depends on the cluster (CpuFreqGovernors, the nodes' GPUs, slurmctld's own
# checks such as SBATCH_ACCTG_FREQ=task=0) is sbatch's to refuse: the job then fails at once with
# sbatch's message (corral.core.batch.OPTION_REFUSALS), never retried.
# sbatch's signal names (proc_args.c's sig_name_num), with or without "SIG", in any case.
SBATCH_SIGNAL_NAMES = frozenset({
    "HUP", "INT", "QUIT", "ABRT", "KILL", "ALRM", "TERM", "USR1", "USR2", "URG", "CONT", "STOP", "TSTP", "TTIN", "TTOU",
    "XCPU",
})  # fmt: skip
# [{R|B}:]<sig_num|sig_name>[@sig_time]: the flags R, B, RB or BR; the signal up to the first '@'.
SBATCH_SIGNAL_FORM = re.compile(r"(?:(?:RB|BR|B|R):)?(?P<signal>[^@]*)(?:@(?P<time>.*))?", re.IGNORECASE | re.DOTALL)
# strtol's number: blanks before it, blanks only after it (the signal; its time takes none after).
SIGNAL_NUMBER = re.compile(r"\s*[+-]?(\d+)\s*")
SIGNAL_NAME = re.compile(r"\s*(?:SIG)?([A-Z0-9]+)\s*", re.IGNORECASE)
SIGNAL_TIME = re.compile(r"\s*\+?(\d+)")
SLURM_UINT16_MAX = 0xFFFF
# --acctg-freq: a number (the task's), or <datatype>=<seconds>, comma-separated; empty is none.
ACCTG_FREQ_ITEM = re.compile(r"\d+|(?:task|energy|network|filesystem)=\d+")
# --profile: sbatch takes a list in which one name at least is one of these (22.05 has no
# "filesystem": "lustre").
PROFILE_NAMES = frozenset({"all", "none", "energy", "task", "lustre", "network"})
SBATCH_FORMS = {  # -> what sbatch takes, said when a value is refused
    "SBATCH_SIGNAL": "[{R|B}:]<sig_num|sig_name>[@sig_time], e.g. B:USR1@60: a signal number 1-65535 or one of"
    f" {', '.join(sorted(SBATCH_SIGNAL_NAMES))} (SIG before it or not), and seconds 0-65535",
    "SBATCH_OPEN_MODE": "append or truncate",
    "SBATCH_ACCTG_FREQ": "<seconds> or <datatype>=<seconds>[,...] with datatype task, energy, network or filesystem",
    "SBATCH_PROFILE": f"all, none, or a list of {', '.join(sorted(PROFILE_NAMES - {'all', 'none'}))}",
}


def _sbatch_signal_valid(value: str) -> bool:
    form = SBATCH_SIGNAL_FORM.fullmatch(value)
    if form is None:
        return False
    number, name = SIGNAL_NUMBER.fullmatch(form["signal"]), SIGNAL_NAME.fullmatch(form["signal"])
    # sbatch reads a number above 65535 or below 1 as another signal (it keeps the low 16 bits): refused.
    if not (number is not None and 1 <= int(number[0]) <= SLURM_UINT16_MAX) and not (
        number is None and name is not None and name[1].upper() in SBATCH_SIGNAL_NAMES
    ):
        return False
    if form["time"] is None or form["time"] == "":  # "USR1@" is sbatch's time 0
        return True
    seconds = SIGNAL_TIME.fullmatch(form["time"])
    return seconds is not None and int(seconds[1]) <= SLURM_UINT16_MAX


def sbatch_value_refusal(name: str, value: str) -> str | None:
    """Why the value of the job's SBATCH_PASSED variable `name` is refused: sbatch would refuse it
    before it asks Slurm anything (or read a signal number as another); None for another variable,
    a value sbatch takes, or one only the cluster can judge."""
    if name not in SBATCH_PASSED:
        return None
    if name == "SBATCH_SIGNAL":
        valid = _sbatch_signal_valid(value)
    elif name == "SBATCH_OPEN_MODE":
        valid = value[:1].lower() in ("a", "t")  # sbatch reads the first letter only
    elif name == "SBATCH_ACCTG_FREQ":
        valid = value == "" or all(ACCTG_FREQ_ITEM.fullmatch(item) for item in value.split(","))
    elif name == "SBATCH_PROFILE":
        valid = any(item.lower() in PROFILE_NAMES for item in value.split(","))
    else:
        valid = value != ""  # sbatch refuses every one of them empty
    if valid:
        return None
    said = SBATCH_FORMS.get(name, "a value sbatch takes (not empty)")
    return f"{name}={value!r} is no value sbatch takes for it (sbatch reads it as its option): it takes {said}"


def sbatch_variable_refusal(name: str) -> str | None:
    """Why a job's variable `name` may not go to sbatch, or None (not sbatch's, or one of
    SBATCH_PASSED)."""
    if not name.startswith(PASSED_PREFIX) or name in SBATCH_PASSED:
        return None
    setting = SBATCH_ACCOUNTING.get(name)
    if setting is not None:
        return (
            f"{name!r} would choose the Slurm account, QOS or partition the job is charged to or runs in: corral"
            f" submits as its own Slurm user, so that is corral's setting (slurm.{setting}), not a job's"
        )
    return (
        f"{name!r} is not an sbatch variable a job may set in front of Slurm (only {', '.join(sorted(SBATCH_PASSED))}):"
        " what the job holds, where and how long it runs are corral's to ask Slurm for"
    )


def job_signal(own: JobSignal | None, job_env: Mapping[str, str]) -> JobSignal | None:
    """The signal a job is sent before its time limit in front of Slurm: its own --signal, else its
    SBATCH_SIGNAL (which sbatch reads as that option), when corral takes that too; one it does not
    (sbatch's R:, KILL) is left to sbatch as it is."""
    if own is not None or "SBATCH_SIGNAL" not in job_env:
        return own
    try:
        return parse_job_signal(job_env["SBATCH_SIGNAL"])
    except ValueError:
        return None


def signal_options(signal: JobSignal | None) -> tuple[list[str], dict[str, str]]:
    """sbatch's --signal for a job's signal (the carrier, to the batch script, which sends the job's
    own: BATCH_SCRIPT), and what the script is told of it (SIGNAL_VARIABLE)."""
    if signal is None:
        return [], {}
    said = f"{'B:' if signal.main_only else ''}{signal.number}"
    return [f"--signal=B:{FORWARD_CARRIER}@{signal.before}"], {SIGNAL_VARIABLE: said}


def sbatch_environment(own: Mapping[str, str], job_env: Mapping[str, str]) -> dict[str, str]:
    """sbatch's environment, which --export=ALL hands to the job: corral's own (`own`), the job's
    SBATCH_PASSED variables, and each other job variable as CORRAL_WITHHELD_NAME for BATCH_SCRIPT to
    set back. A name the script cannot set (not a shell name: submission refuses them in front of
    Slurm, corral.server.api) is left out, never handed to sbatch; another SBATCH_* variable (also
    refused at submission; a job stored before) reaches the job only, as any other variable."""
    env = dict(own)
    kept = []
    for name, value in job_env.items():
        if SHELL_NAME.fullmatch(name) is None:
            continue
        if name in SBATCH_PASSED:
            env[name] = value
        else:
            env[f"CORRAL_WITHHELD_{name}"] = value
            kept.append(name)
    env["CORRAL_WITHHELD"] = " ".join(kept)  # set always: a job's own CORRAL_WITHHELD names nothing
    return env


class Slurm:
    """Runs Slurm's commands. `bin_dir` holds them (else PATH); `conf` is SLURM_CONF."""

    def __init__(self, bin_dir: str = "", conf: str | None = None, timeout: float = 30.0) -> None:
        self.bin_dir = bin_dir
        self.conf = conf
        self.timeout = timeout

    def _command(self, name: str) -> str:
        return str(Path(self.bin_dir) / name) if self.bin_dir else name

    def run(self, args: Sequence[str], env: Mapping[str, str] | None = None) -> str:
        command = [self._command(args[0]), *args[1:]]
        full_env = dict(os.environ if env is None else env)
        if self.conf:
            full_env["SLURM_CONF"] = self.conf
        try:
            done = subprocess.run(
                command,
                env=full_env,
                capture_output=True,
                text=True,
                timeout=self.timeout,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise SlurmError(f"{args[0]} did not answer within {self.timeout:g}s") from None
        except OSError as exc:
            raise SlurmError(f"cannot run {command[0]}: {exc.strerror or exc}") from None
        if done.returncode != 0:
            raise SlurmError(error_message(done.stderr) or f"{args[0]} exited {done.returncode}")
        return done.stdout

    def sbatch(self, options: Sequence[str], script: Path, argv: Sequence[str], env: Mapping[str, str]) -> str:
        """Submit; the Slurm job id."""
        out = self.run(["sbatch", "--parsable", *options, str(script), *argv], env=env).strip()
        job_id = out.split(";")[0].strip()  # "ID" or "ID;cluster"
        if not job_id.isdigit():
            raise SlurmError(f"sbatch printed no job id: {out!r}")
        return job_id

    def test_only(self, options: Sequence[str], script: Path, argv: Sequence[str]) -> None:
        """`sbatch --test-only`: Slurm validates the request and submits nothing (SlurmError:
        refused, with Slurm's message)."""
        self.run(["sbatch", "--test-only", *options, str(script), *argv])

    def squeue(self) -> list[SlurmJob]:
        """Every job Slurm lists, also those ended within MinJobAge (`--states=all`)."""
        args = ["squeue", "--noheader", "--states=all", f"--format={SQUEUE_FORMAT}"]
        return parse_squeue(self.run(args, env={**os.environ, **TIME_ENV}))

    def show_jobs(self) -> dict[str, ShownJob]:
        """Job id -> state and exit of every job slurmctld still holds (accounting may be off, so
        `sacct` is not asked)."""
        return parse_show_job(self.run(["scontrol", "show", "job", "--oneliner"]))

    def renice(self, job_id: str, nice: int) -> None:
        """Set a job's Nice (`scontrol update`); a negative one needs a privileged Slurm user."""
        self.run(["scontrol", "update", f"JobId={job_id}", f"Nice={nice}"])

    def scancel(self, job_ids: Sequence[str]) -> None:
        if job_ids:
            self.run(["scancel", *job_ids])

    def signal(self, job_id: str, number: int) -> None:
        """Send a running job a signal without ending it (`corral cancel --signal`): `--full`, to
        the batch script and every process under it, as the agent signals a run's process group
        (without it, scancel signals only job steps, which corral's jobs have none of)."""
        self.run(["scancel", f"--signal={scancel_signal_text(number)}", "--full", job_id])
