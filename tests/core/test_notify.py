"""The notification decision (seed 002 §5.4.3-5.4.4), pure: rules, events, state, now."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from corral.core.notify import Event, NotifyRule, NotifyState, decide, describe


def rule(**kw: Any) -> NotifyRule:
    return NotifyRule.model_validate(kw)


def down(id: int, at: float, node: str = "n-1") -> Event:
    return Event(id, at, "node.down", "stale ping", node_id=node)


def fired(notes: list[Any]) -> list[tuple[str, int, int]]:
    return [(n.rule, n.event.id, n.suppressed) for n in notes]


def test_a_rule_fires_on_its_kinds_exact_or_by_their_start() -> None:
    rules = [rule(name="nodes", on=["node."]), rule(name="fail", on=["job.failed"]), rule(name="all", on=["*"])]
    events = [down(1, 0.0), Event(2, 1.0, "job.failed", "exit 1", job_id=7), Event(3, 2.0, "job.queued", job_id=8)]
    notes, _ = decide(rules, events, NotifyState(), 3.0)
    assert fired(notes) == [("nodes", 1, 0), ("all", 1, 0), ("fail", 2, 0), ("all", 2, 0), ("all", 3, 0)]
    assert notes[2].subject == "job:7" and notes[0].subject == "node:n-1"


def test_a_job_event_is_about_its_job_though_it_names_its_node() -> None:
    # Two jobs failing on one node within the rearm time: two notifications, not one.
    rules = [rule(on=["job.failed"], rearm="1h")]
    events = [
        Event(i, float(i), "job.failed", "exit 1", job_id=job, node_id="n-1") for i, job in ((1, 7), (2, 8), (3, 7))
    ]
    notes, _ = decide(rules, events, NotifyState(), 10.0)
    assert [(n.event.id, n.subject) for n in notes] == [(1, "job:7"), (2, "job:8")]
    failed = Event(4, 4.0, "notify.failed", "rule x on event 1: HTTP 500", job_id=7, node_id="n-1")
    assert failed.subject() == "node:n-1"  # not a job's event: its node, as before


def test_rearm_suppresses_a_subject_and_the_next_notification_counts_what_it_suppressed() -> None:
    rules = [rule(on=["node.down"], rearm="20m")]
    state = NotifyState()
    notes, state = decide(rules, [down(1, 0.0), down(2, 60.0), down(3, 120.0, node="n-2")], state, 130.0)
    # n-1 again within 20 minutes: suppressed; another node is another subject and fires at once.
    assert fired(notes) == [("notify[0]", 1, 0), ("notify[0]", 3, 0)]
    notes, state = decide(rules, [down(4, 600.0)], state, 600.0)
    assert notes == []
    notes, state = decide(rules, [down(5, 1200.0)], state, 1200.0)  # 20 minutes after it fired: re-armed
    assert fired(notes) == [("notify[0]", 5, 2)]
    assert "2 more suppressed" in describe(notes[0])
    notes, _ = decide(rules, [down(6, 2500.0)], state, 2500.0)
    assert fired(notes) == [("notify[0]", 6, 0)]


def test_rearm_per_rule_treats_every_subject_as_one() -> None:
    rules = [rule(on=["node.down"], rearm=100, rearm_per="rule")]
    notes, state = decide(rules, [down(1, 0.0), down(2, 1.0, node="n-2"), down(3, 2.0, node="n-3")], NotifyState(), 2)
    assert fired(notes) == [("notify[0]", 1, 0)]
    notes, _ = decide(rules, [down(4, 150.0, node="n-4")], state, 150.0)
    assert fired(notes) == [("notify[0]", 4, 2)] and notes[0].subject == "*"


def test_the_state_survives_json_and_forgets_what_no_longer_rearms() -> None:
    rules = [rule(name="r", on=["node."], rearm=60)]
    _, state = decide(rules, [down(1, 0.0)], NotifyState(), 10.0)
    state = NotifyState.from_json(state.to_json())
    assert state.armed == {"r": {"node:n-1": state.armed["r"]["node:n-1"]}}
    notes, _ = decide(rules, [down(2, 30.0)], state, 30.0)
    assert notes == []
    _, later = decide(rules, [], state, 61.0)
    assert later.armed == {}
    # A rule taken out of the config takes its state with it.
    _, gone = decide([rule(name="other", on=["job."])], [], state, 10.0)
    assert gone.armed == {}


def test_a_threshold_rule_fires_when_enough_events_fall_in_its_window() -> None:
    rules = [rule(name="storm", on=["node.down"], threshold=3, window="5m", rearm="1h")]
    events = [down(1, 0.0), down(2, 100.0, "n-2"), down(3, 350.0, "n-3"), down(4, 390.0, "n-4")]
    notes, state = decide(rules, events, NotifyState(), 390.0)
    # 1 fell out of the window by the time 3 came; 2, 3, 4 are within 5 minutes.
    assert fired(notes) == [("storm", 4, 0)] and notes[0].count == 3 and notes[0].subject == "*"
    more = [down(i, 500.0 + i, f"n-{i}") for i in range(5, 11)]  # two more crossings, within the rearm time
    notes, state = decide(rules, more, state, 520.0)
    assert notes == []
    notes, _ = decide(rules, [down(i, 4000.0 + i) for i in range(11, 14)], state, 4020.0)
    assert fired(notes) == [("storm", 13, 2)]


def test_the_notifiers_own_failures_match_only_a_rule_that_names_them() -> None:
    failed = Event(1, 0.0, "notify.failed", "rule x: exit 1")
    rules = [rule(name="all", on=["*"]), rule(name="n", on=["n"]), rule(name="mine", on=["notify.failed"])]
    notes, _ = decide(rules, [failed], NotifyState(), 0.0)
    assert fired(notes) == [("mine", 1, 0)]


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"on": []}, "on"),
        ({"on": ["Node Down"]}, "on"),
        ({"on": ["node.down"], "rearm": "soon"}, "rearm"),
        ({"on": ["node.down"], "webhook": "ftp://x"}, "webhook"),
        ({"on": ["node.down"], "command": []}, "command"),
        ({"on": ["node.down"], "threshold": 0}, "threshold"),
        ({"on": ["node.down"], "then": "page"}, "then"),
    ],
)
def test_a_bad_rule_names_its_key(data: dict[str, Any], key: str) -> None:
    with pytest.raises(ValidationError) as info:
        NotifyRule.model_validate(data)
    assert [e["loc"][0] for e in info.value.errors()] == [key]


def test_a_rule_has_one_action() -> None:
    with pytest.raises(ValidationError, match="command or webhook"):
        NotifyRule.model_validate({"on": ["node."], "command": ["true"], "webhook": "http://x/"})
