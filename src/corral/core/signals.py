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

    def sbatch_text(self) -> str:
        """As sbatch's --signal takes it: a name sbatch knows, else the number."""
        name = (signal_name(self.number) or "").removeprefix("SIG")
        shown = name if name in SBATCH_NAMES else str(self.number)
        return f"{'B:' if self.main_only else ''}{shown}@{self.before}"

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
