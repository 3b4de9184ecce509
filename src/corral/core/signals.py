"""A signal's number as a reader looks it up, shared by the core's reasons and the command line
(which cannot afford to import the core's policies at every start)."""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass


def signal_name(number: int) -> str | None:
    """ "SIGKILL" for 9; None for a number this host has no name for. (Linux's numbering, the
    nodes' and Slurm's as well as the server's.)"""
    try:
        return signal.Signals(number).name
    except ValueError:
        return None


def signal_text(number: int) -> str:
    """ "signal 9 (SIGKILL)"; a number with no name, bare: "signal 77"."""
    name = signal_name(number)
    return f"signal {number} ({name})" if name else f"signal {number}"


# sbatch's --signal: [{R|B}:]<sig_num|sig_name>[@sig_time], the time in seconds, 60 when not given.
SIGNAL_SPEC = re.compile(r"(?:(?P<flags>[A-Za-z]+):)?(?P<signal>[^@]*)(?:@(?P<time>.*))?", re.DOTALL)
DEFAULT_SIGNAL_TIME = 60  # sbatch's, when no @TIME is given
MAX_SIGNAL_TIME = 0xFFFF  # sbatch keeps it in 16 bits: a larger one is refused there too
# Those no process can catch: one sent before the time limit only ends (or freezes) the job early,
# and sent to the job's process group it would also reach the keeper that records its end.
UNCATCHABLE = frozenset({signal.SIGKILL, signal.SIGSTOP})
# The names sbatch itself takes (proc_args.c's sig_name_num): any other is given to it by number.
SBATCH_NAMES = frozenset(
    {"HUP", "INT", "QUIT", "ABRT", "KILL", "ALRM", "TERM", "USR1", "USR2", "URG", "CONT", "STOP", "TSTP", "TTIN"}
    | {"TTOU", "XCPU"}
)
SIGNAL_FORM = "[B:]SIG[@TIME], e.g. USR1, B:USR1@120, 10@300"


@dataclass(frozen=True, slots=True)
class JobSignal:
    """A job's sbatch --signal: `number` sent `before` seconds before its time limit, to its main
    process alone (`main_only`, sbatch's B:) or to its whole process group."""

    number: int
    before: int = DEFAULT_SIGNAL_TIME
    main_only: bool = False

    def __str__(self) -> str:
        """The canonical text, as stored and shown: "B:USR1@60" (a number with no name, bare)."""
        name = signal_name(self.number)
        return f"{'B:' if self.main_only else ''}{name.removeprefix('SIG') if name else self.number}@{self.before}"

    def sent_at(self, time_limit: float) -> float:
        """Seconds of run after which it is sent, given the time limit: at the start if `before`
        is the whole limit or more."""
        return max(0.0, time_limit - self.before)


def parse_job_signal(text: str) -> JobSignal:
    """sbatch's --signal text as a JobSignal; ValueError naming the value and what is wrong.
    SIG is a name (USR1, SIGUSR1, any case) or a number; TIME whole seconds, 0 to 65535 (default
    60). Slurm's R: (the job may overlap a reservation with MaxStartDelay) is refused, naming it:
    corral's reservations have no such setting."""
    form = SIGNAL_SPEC.fullmatch(text.strip())
    if form is None:  # (the pattern takes any text: kept for the type checker)
        raise ValueError(f"not a signal: {text!r} ({SIGNAL_FORM})")
    flags = (form["flags"] or "").upper()
    if "R" in flags:
        raise ValueError(
            f"{text!r}: Slurm's R: flag (let the job overlap a reservation with MaxStartDelay) means nothing"
            f" here: corral's reservations have no MaxStartDelay; write {SIGNAL_FORM}"
        )
    if flags not in ("", "B"):
        raise ValueError(f"{text!r}: {form['flags']}: is no flag sbatch takes (B: for the main process only)")
    word = form["signal"].strip()
    number = _signal_number(word)
    if number is None:
        raise ValueError(f"{text!r}: {word!r} is no signal (a name, USR1 or SIGUSR1, or a number; {SIGNAL_FORM})")
    if number in UNCATCHABLE:
        raise ValueError(
            f"{text!r}: {signal_text(number)} cannot be caught, so no job can checkpoint on it: it would only"
            " end or stop the job early (a shorter time limit does that)"
        )
    before = DEFAULT_SIGNAL_TIME
    if form["time"] is not None:
        seconds = form["time"].strip()
        if not seconds.isascii() or not seconds.isdigit() or int(seconds) > MAX_SIGNAL_TIME:
            raise ValueError(
                f"{text!r}: @{form['time']} is not whole seconds before the time limit, 0 to {MAX_SIGNAL_TIME}"
                " (sbatch's sig_time)"
            )
        before = int(seconds)
    return JobSignal(number, before, flags == "B")


def _signal_number(word: str) -> int | None:
    """A signal's number from its name or number, None for neither (or one this host has not)."""
    if word.isascii() and word.isdigit():
        number = int(word)
        return number if number in VALID_SIGNALS else None
    name = word.upper()
    try:
        return int(signal.Signals[name if name.startswith("SIG") else f"SIG{name}"])
    except KeyError:
        return None


# Linux's: 1-31 and the real-time 34-64 (32 and 33 are the C library's own).
VALID_SIGNALS = frozenset(int(s) for s in signal.valid_signals())


def parse_signal(text: str) -> int:
    """scancel --signal's SIG (a name, USR1 or SIGUSR1, any case, or a number) as its number;
    ValueError naming the value and what is wrong. KILL and STOP are refused, as for a job's
    --signal: sent to the run's process group they would also reach its keeper, which records the
    run's end (corral.agent.keeper), and a run should end by `corral cancel` or `corral requeue`,
    which say why it ended."""
    word = text.strip()
    number = _signal_number(word)
    if number is None:
        raise ValueError(f"{text!r} is no signal (a name, USR1 or SIGUSR1, or a number 1-64)")
    if number in UNCATCHABLE:
        instead = "corral cancel ends a run, corral requeue runs it again" if number == signal.SIGKILL else ""
        raise ValueError(
            f"{text!r}: {signal_text(number)} cannot be caught, and would reach the run's keeper too"
            + (f": {instead}" if instead else ": corral has no suspend")
        )
    return number


def scancel_signal_text(number: int) -> str:
    """A signal as scancel's --signal takes it: a name Slurm knows (proc_args.c), else the number."""
    name = (signal_name(number) or "").removeprefix("SIG")
    return name if name in SBATCH_NAMES else str(number)


# The signals corral's Slurm batch script outlives (it traps each with a no-op and its output
# limiters ignore them: corral.executor.slurm.BATCH_SCRIPT), so that `scancel --signal --full`,
# which signals the batch script and every process under it, reaches the job's command and leaves
# the script there to record its end. TERM is not among them: the script takes it for Slurm's own
# kill (a time limit, a scancel) and records the job as killed.
SLURM_SIGNALLABLE = (
    *("HUP", "INT", "QUIT", "ABRT", "USR1", "USR2", "ALRM"),
    *("URG", "CONT", "TSTP", "TTIN", "TTOU", "XCPU"),
)


def slurm_signal_refusal(number: int, main_only: bool) -> str | None:
    """Why a signal cannot be sent a job run in front of Slurm, or None."""
    if main_only:
        return (
            "--batch: in front of Slurm the batch shell is corral's batch script, not the job's command,"
            " and it would only swallow the signal: give none (the job's whole process group gets it)"
        )
    name = (signal_name(number) or "").removeprefix("SIG")
    if name not in SLURM_SIGNALLABLE:
        return (
            f"{signal_text(number)}: in front of Slurm corral's batch script would be ended by it (or take it"
            f" for Slurm's kill); these reach the command: {', '.join(SLURM_SIGNALLABLE)}"
        )
    return None
