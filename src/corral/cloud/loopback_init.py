"""A loopback instance's init: runs its agent and starts it again when it dies, as the ec2
driver's systemd unit does (Restart=on-failure, RestartSec, RestartPreventExitStatus=2 3).

`python -m corral.cloud.loopback_init --restart-delay SECONDS -- AGENT_ARGV...`

This process is the instance: the loopback driver records its pid, and the instance lives as long
as it does (power it off with SIGKILL and its agent and the agent's work go with it, at the
driver's next listing). The agent is its child, in its process group, so the driver's SIGTERM to
the group reaches both: the agent stops its work, and this process waits for it and exits. The
agent that dies otherwise (a non-zero exit other than 2 and 3, or a signal: a crash, SIGKILL, the
OOM killer) is started again after the delay, and resumes its node with the credentials it saved
at pairing (docs/agent.md, "Restarts"). Its exit 0 (the server's `shutdown`), 2 (pairing refused)
and 3 (the node forgotten) end the instance: starting the agent again would change nothing.

Only the standard library: it must not fail to start the agent for anything corral imports.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

FINAL_EXITS = frozenset({0, 2, 3})


def say(level: str, msg: str, **fields: Any) -> None:
    """One JSON line, as the agent logs, into the same agent.log."""
    print(json.dumps({"ts": round(time.time(), 3), "level": level, "msg": msg, **fields}), file=sys.stderr, flush=True)


def run(agent_argv: Sequence[str], restart_delay: float) -> int:
    stopping = threading.Event()  # wakes the wait between two starts
    asked: list[int] = []  # the signals that asked for a stop, read as soon as the handler returns
    child: subprocess.Popen[bytes] | None = None

    def stop(signum: int, _frame: Any) -> None:
        asked.append(signum)
        # The event is set from a thread: the handler runs in the main thread, which may hold the
        # event's lock inside stopping.wait(), and set() there would wait for ever (as the agent's did).
        threading.Thread(target=stopping.set, daemon=True).start()
        if child is not None and child.poll() is None:
            # (Already sent to the whole group by the driver's power-off; not if sent to this pid alone.)
            child.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop)
    while True:
        try:
            child = subprocess.Popen(list(agent_argv), stdin=subprocess.DEVNULL)
        except OSError as exc:
            say("error", "cannot start the agent", error=str(exc))
            return 1
        code = child.wait()
        if asked:
            return 0
        if code in FINAL_EXITS:
            return code
        died = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit {code}"
        say("warning", "the agent died; starting it again", pid=child.pid, died=died, delay=restart_delay)
        if stopping.wait(restart_delay) or asked:
            return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    usage = "usage: python -m corral.cloud.loopback_init --restart-delay SECONDS -- AGENT_ARGV..."
    if len(args) < 4 or args[0] != "--restart-delay" or args[2] != "--":
        print(usage, file=sys.stderr)
        return 2
    try:
        delay = float(args[1])
    except ValueError:
        delay = -1.0
    if not 0 <= delay < float("inf"):
        print(f"--restart-delay: must be a number of seconds, at least 0 (got {args[1]!r})\n{usage}", file=sys.stderr)
        return 2
    return run(args[3:], delay)


if __name__ == "__main__":
    sys.exit(main())
