"""The notifier through a real `corral run` killed with SIGKILL: what it had handed to its worker
and not sent is sent by the restarted corral (at least once), not lost."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.e2e.conftest import CONFIG, Corral, wait_until

LATER = "2099-01-01T00:00:00+00:00"  # the jobs stay queued: their only events are job.queued


def rule(out: Path, release: Path) -> str:
    # Each action writes its event's id, then holds on until the test releases it: the first
    # is running when corral is killed, the second still waits in the queue behind it.
    script = f'echo "$CORRAL_EVENT_ID" >> {out}; while [ ! -e {release} ]; do sleep 0.1; done'
    return f"""
[[notify]]
name = "log"
on = ["job.queued"]
command = ["sh", "-c", '{script}']
timeout = "5m"
"""


def sent(out: Path) -> list[int]:
    return [int(line) for line in out.read_text().split()] if out.exists() else []


def test_notifications_queued_when_corral_is_killed_are_sent_after_the_restart(corral: Corral, tmp_path: Path) -> None:
    out, release = tmp_path / "sent", tmp_path / "release"
    corral.config.write_text(CONFIG + rule(out, release))
    corral.start()
    wait_until(lambda: corral.cli_json("notify", "status")["last_event_id"] is not None, 30, "the notifier to start")
    for _ in range(2):
        corral.cli("submit", "--not-before", LATER, "--", "true")
    events = [e["id"] for e in corral.cli_json("events", "--kind", "job.queued")]
    assert len(events) == 2
    wait_until(lambda: sent(out) == [min(events)], 30, "the first action to run")
    # Both are past the cursor now: one action running, one queued behind it.
    status = wait_until(lambda: (s := corral.cli_json("notify", "status"))["waiting"] == 0 and s, 30, "the cursor")
    assert status["sending"] == 2
    assert "; 2 being sent" in corral.cli("notify", "status").stdout

    corral.stop(signal.SIGKILL)
    release.touch()  # the killed corral's action ends; nothing runs the queued one
    corral.start()
    wait_until(lambda: max(events) in sent(out), 30, "the queued notification to be sent after the restart")
    # The one that was running is sent again too: at least once (its event id tells the repeat).
    wait_until(lambda: sorted(sent(out)) == sorted([min(events), *events]), 30, "both to be sent")
    assert "sending again 2 notifications" in corral.server_log()
    wait_until(lambda: corral.cli_json("notify", "status")["sending"] == 0, 30, "nothing left being sent")
