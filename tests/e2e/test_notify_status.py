"""`corral notify status`: the notifier's place in the event log, its rules, and what rearm keeps quiet."""

from __future__ import annotations

from typing import Any

from tests.e2e.conftest import CONFIG, Corral, wait_until

RULES = """
[[notify]]
name = "queued"
on = ["job.queued"]
rearm = "1h"
rearm_per = "rule"

[[notify]]
name = "pager"
on = ["node.down"]
webhook = "https://hooks.example.org/services/T0/SECRET-TOKEN"

[[notify]]
name = "burst"
on = ["job.queued"]
threshold = 5
window = "10m"
rearm = "30m"
"""


def test_notify_status_shows_the_position_the_rules_and_what_is_kept_quiet(corral: Corral) -> None:
    corral.config.write_text(CONFIG + RULES)
    corral.start()
    # The first pass puts the cursor at the newest event: the history is not notified.
    wait_until(lambda: corral.cli_json("notify", "status")["last_event_id"] is not None, 30, "the notifier to start")
    later = "2099-01-01T00:00:00+00:00"  # queued, and left so: no events but job.queued
    for _ in range(3):
        corral.cli("submit", "--not-before", later, "--", "true")

    def caught_up() -> Any:
        status = corral.cli_json("notify", "status")
        return status["waiting"] == 0 and status["last_event_id"] == status["newest_event_id"] and status

    status = wait_until(caught_up, 30, "the notifier to handle the job events")
    assert [r["name"] for r in status["rules"]] == ["queued", "pager", "burst"]
    assert status["rules"][1]["action"] == "webhook https://hooks.example.org/…"  # the path may be its secret
    [quiet] = status["quiet"]
    assert quiet["rule"] == "queued" and quiet["subject"] == "*" and quiet["suppressed"] == 2
    assert quiet["until"] == quiet["fired_at"] + 3600
    assert status["threshold_counts"] == {"burst": 3}

    shown = corral.cli("notify", "status").stdout
    newest = status["newest_event_id"]
    assert f"handled events up to {newest} (newest {newest}, 0 waiting)" in shown
    assert "queued: quiet for * until" in shown and "(2 suppressed so far)" in shown
    assert "5 in 10m00s (now 3)" in shown
    # A threshold rule's subject is the rule as a whole, whatever rearm_per says: it read "per subject".
    assert status["rules"][2]["rearm_per"] == "rule" and "30m00s per rule" in shown
    assert "SECRET" not in shown


def test_notify_status_without_rules_says_nothing_is_notified(corral: Corral) -> None:
    corral.start()
    shown = corral.cli("notify", "status").stdout
    assert "no [[notify]] rules in the running corral's config: nothing is notified" in shown
    assert "the notifier has not run yet" in shown


def test_notify_skip_back_replays_the_events_after_it(corral: Corral) -> None:
    sent = corral.home / "sent.txt"
    script = corral.home / "record.sh"
    script.write_text(f'#!/bin/sh\necho "$CORRAL_EVENT_ID $CORRAL_SUPPRESSED" >> {sent}\n')
    script.chmod(0o755)
    rules = f'[[notify]]\nname = "queued"\non = ["job.queued"]\ncommand = ["{script}"]\n'
    rules += 'rearm = "1h"\nrearm_per = "rule"\n'
    corral.config.write_text(CONFIG + rules)
    corral.start()
    wait_until(lambda: corral.cli_json("notify", "status")["last_event_id"] is not None, 30, "the notifier to start")
    before = corral.cli_json("notify", "status")["newest_event_id"]
    later = "2099-01-01T00:00:00+00:00"  # queued, and left so: no events but job.queued
    for _ in range(2):
        corral.cli("submit", "--not-before", later, "--", "true")
    handled = lambda: corral.cli_json("notify", "status")["last_event_id"] == before + 2  # noqa: E731
    wait_until(handled, 30, "the notifier to handle both events")
    wait_until(lambda: sent.exists() and sent.read_text().count("\n") == 1, 30, "the first notification")
    # The second job.queued was kept quiet by rearm: one line. Back to before both: replayed,
    # rearm started over, so the first is sent again.
    result = corral.cli("notify", "skip", "--to", str(before)).stdout
    assert f"moved back from event {before + 2} to {before}: 2 events notified again" in result
    wait_until(lambda: sent.read_text().count("\n") == 2, 30, "the replayed notification")
    first_id = sent.read_text().split()[0]
    assert sent.read_text().split()[2] == first_id
    moved = corral.cli_json("events", "--kind", "notify.moved")
    assert len(moved) == 1 and f"from {before + 2} to {before}" in moved[0]["message"]

    refused = corral.cli("notify", "skip", "--to", "999999", check=False)
    assert refused.returncode != 0 and "there is no event 999999 yet" in refused.stderr
