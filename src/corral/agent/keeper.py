"""An attempt's keeper: runs the attempt's command as its child and writes how it ended to a file,
so that an agent started again after the one that started it died can re-adopt the run (as
slurmstepd holds a Slurm job while slurmd restarts) and learn its exit status.

`python -I -S keeper.py STATUS_FILE READY_FD GO_FD [--ignore SIGNAL] -- COMMAND...`

The agent starts it in the attempt's own session (it is the session and group leader, as the
command was before), with the attempt's cwd, environment and output. It waits for "go" on GO_FD,
which the agent writes once it has recorded the run: an agent killed before that closes GO_FD
with nothing said, and the keeper exits without starting the command (which no later agent would
know of, and which would run again beside it). Then it starts the command, tells
the agent on READY_FD whether it could ("ok", or "err ERRNO MESSAGE": the agent then reports 127
or 126 as before), and waits. SIGTERM, SIGINT and SIGHUP are for the command (the agent signals the
whole group): the keeper outlives them to record the end, and so it does every other signal it
can ignore (the job's --signal before its time limit, an operator's `corral cancel --signal`),
each of which its command gets back at its default disposition. Once the
command ends, its Popen-style return code (-N for signal N) is written to STATUS_FILE atomically,
and the keeper ends the same way (the same exit code, or killed by the same signal), so an agent
that is its parent reads the command's end from its own child as it always did. Should the status
not be written (no disk left), the keeper exits with the command's code (128+N for signal N), never
by a signal: its agent then tells that end from a keeper killed, which dies by a signal without a
status.

Only the standard library, run isolated (-I -S): it starts with every attempt.

Just before the status, what the command used is written beside it, atomically too (usage_path:
the same name ending .usage, a JSON object, write_usage): a status file that exists has its usage
written before it, unless the disk refused it (usage is optional, the end is not).
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import sys

# The agent died before it recorded the run: the command was not started.
NOT_STARTED = 125


# Not ignored: SIGCHLD (ignored by hand, its children would be reaped by the kernel and the
# command's end could not be read), and those no process can ignore.
NOT_IGNORED = frozenset({signal.SIGCHLD, signal.SIGKILL, signal.SIGSTOP})


def main(argv: list[str]) -> int:
    # Every signal the agent sends the run's whole group is for the command, which gets each back at
    # its default disposition: SIGTERM, SIGINT, SIGHUP (a kill), the job's --signal, and whatever an
    # operator sends with `corral cancel --signal` (USR1, HUP, RT signals...).
    ignored: list[int] = sorted(s for s in signal.valid_signals() if s not in NOT_IGNORED)
    dashes = argv.index("--", 3) if "--" in argv[3:] else -1
    options, command = argv[3:dashes], argv[dashes + 1 :]
    ignoring = len(options) == 2 and options[0] == "--ignore" and options[1].isdigit()
    if len(argv) < 5 or dashes < 0 or not command or (options and not ignoring):
        print("usage: keeper.py STATUS_FILE READY_FD GO_FD [--ignore SIGNAL] -- COMMAND...", file=sys.stderr)
        return 2
    # (--ignore SIGNAL: the job's --signal, which every catchable signal being ignored covers now.
    # Still taken, and nothing done with it: an agent of session 38's corral, still running while
    # its node's install is upgraded, starts this file with it.)
    status_file, ready_fd, go_fd = argv[0], int(argv[1]), int(argv[2])
    for sig in ignored:
        with contextlib.suppress(OSError, ValueError):  # (one the C library keeps for itself)
            signal.signal(sig, signal.SIG_IGN)
    said = b""
    while len(said) < 2:
        chunk = os.read(go_fd, 2 - len(said))
        if not chunk:
            break
        said += chunk
    os.close(go_fd)
    if said != b"go":
        return NOT_STARTED
    forked_kib = _rss_kib()  # (what the command's process has from its fork, until its exec)
    try:
        # The command gets the default dispositions back (Popen restores SIGPIPE; these by hand).
        child = subprocess.Popen(command, preexec_fn=lambda: _default_signals(ignored), close_fds=True)
    except (OSError, ValueError) as exc:
        errno = getattr(exc, "errno", None) or 0
        why = getattr(exc, "strerror", None) or str(exc)
        os.write(ready_fd, f"err {errno} {why}".encode(errors="replace"))
        os.close(ready_fd)
        return 127
    os.write(ready_fd, b"ok")
    os.close(ready_fd)
    code = child.wait()
    write_usage(status_file, forked_kib)
    if not _keep(status_file, code):
        # No status (a full disk, likely what ended the command): an exit of the keeper's own is
        # then the only word of the end, which its agent reads as the command's; a signal's end as
        # the shell's 128+N, for dying by a signal is how the agent knows a keeper killed.
        return 128 - code if code < 0 else code
    if code < 0:
        # Ended as the command did: a signal's default action (SIGKILL's cannot be changed).
        if -code not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        # (A signal whose default is to be ignored, SIGCHLD or SIGWINCH: the shell's 128+N.)
        return 128 - code
    return code


def _keep(status_file: str, code: int) -> bool:
    return _write_atomically(status_file, f"{code}\n", sync=True)


def _write_atomically(path: str, text: str, sync: bool = False) -> bool:
    """`text` in `path`, whole or not at all (a temp file renamed); False if the disk refused it."""
    tmp = f"{path}.tmp"
    try:
        with open(tmp, "w") as f:
            f.write(text)
            if sync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return False
    return True


def _default_signals(ignored: list[int]) -> None:
    for sig in ignored:
        with contextlib.suppress(OSError, ValueError):
            signal.signal(sig, signal.SIG_DFL)


def usage_path(status_file: str) -> str:
    """Where the usage of the run whose status goes to `status_file` is written: `7.status`, `7.usage`."""
    return os.path.splitext(status_file)[0] + ".usage"


def write_usage(status_file: str, forked_kib: int) -> None:
    """What the command and every descendant it (or they) waited for used, counted exactly by the
    kernel (getrusage's RUSAGE_CHILDREN; a process reaped by init is not in it), even for a command
    that ended before the agent sampled it once: `cpu_seconds`, user and system; `max_rss_kib`, the
    largest RSS of any one of them (not of them together). A forked child's RSS before its exec is
    this keeper's, which counts in its peak: `forked_rss_kib`, the keeper's RSS when it forked the
    command, tells the agent when the command's figure may be only that (runner.KeptUsage). (Not
    the keeper's own peak: that is the agent's RSS, which the keeper had from its own fork.)"""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_seconds = float(children.ru_utime + children.ru_stime)
    # JSON by hand, of numbers only: importing json costs every attempt's start 2-3 ms more.
    used = (
        f'{{"cpu_seconds": {cpu_seconds!r}, "max_rss_kib": {int(children.ru_maxrss)},'  # (Linux gives KiB)
        f' "forked_rss_kib": {int(forked_kib)}}}'
    )
    # (Refused by a full disk: the run's end matters, its usage is a nicety the agent can do without.)
    _write_atomically(usage_path(status_file), used + "\n")


def _rss_kib() -> int:
    """This process's resident set now, in KiB (0 if /proc cannot say)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
    except (OSError, ValueError, IndexError):
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
