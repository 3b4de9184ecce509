"""The node health check the server asks for at pairing (Slurm's HealthCheckProgram): a command run
every `interval` on its own thread, so that a slow check never holds up a ping; each ping carries
the latest result, which the server acts on (corral.core.health)."""

from __future__ import annotations

import subprocess
import threading
from dataclasses import dataclass

from corral.agent import logs

MESSAGE_CHARS = 500  # what the ping carries of the check's word


@dataclass(frozen=True, slots=True)
class Result:
    ok: bool
    message: str  # the first line the check printed (stdout, else stderr), or why it failed to run


def run_check(command: list[str], timeout: float) -> Result:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return Result(False, f"no exit within {timeout:g} s")
    except OSError as exc:
        return Result(False, f"cannot run {command[0]}: {exc.strerror or exc}")
    said = next((line.strip() for line in (done.stdout + "\n" + done.stderr).splitlines() if line.strip()), "")
    if done.returncode != 0 and not said:
        said = f"exit {done.returncode}"
    return Result(done.returncode == 0, said[:MESSAGE_CHARS])


class HealthChecker:
    """Runs the check at once, then every `interval`, until `stop` is set."""

    def __init__(self, command: list[str], interval: float, timeout: float, stop: threading.Event) -> None:
        self.command, self.interval, self.timeout, self.stop = command, interval, timeout, stop
        self.latest: Result | None = None  # (replaced whole: the ping thread reads it as it is)

    def start(self) -> None:
        threading.Thread(target=self._loop, name="health", daemon=True).start()

    def _loop(self) -> None:
        while not self.stop.is_set():
            result = run_check(self.command, self.timeout)
            if self.latest is None or result.ok != self.latest.ok:
                (logs.info if result.ok else logs.warning)("health check", ok=result.ok, message=result.message)
            self.latest = result
            self.stop.wait(self.interval)
