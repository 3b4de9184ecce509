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
    assert "SECRET" not in shown


def test_notify_status_without_rules_says_nothing_is_notified(corral: Corral) -> None:
    corral.start()
    shown = corral.cli("notify", "status").stdout
    assert "no [[notify]] rules in the running corral's config: nothing is notified" in shown
    assert "the notifier has not run yet" in shown
