"""Notifications and triggers (seed 002 §5.4.3-5.4.4): which rules fire for which new events.

Moab's `GEVENTCFG[nodedown] ACTION=notify REARM=00:20:00` is here a `[[notify]]` rule: the event
kinds it is `on`, the action it runs (a command or a webhook, carried out by the shell,
`corral.notifier`), and its `rearm` time. After a rule fires for a subject it does not fire again
for that subject until `rearm` has passed since it fired; the matching events in between are
counted, and the next notification for that subject says how many were suppressed.

The subject (`rearm_per = "subject"`, the default) is a job event's job, else the event's node,
else its job, else the rule as a whole: a node going down again and again pages once per rearm
time, while another node going down pages at once. `rearm_per = "rule"` makes the rule as a
whole the subject. A threshold rule (`threshold = N`, `window`) fires when N matching events fall
within `window`; its subject is the rule as a whole, and what it suppresses are crossings of the
threshold.

Times are the events' own (`at`), so a notifier that catches up after a restart judges the rearm
time as it would have live. `decide` is pure: it takes the rules, the new events in id order, the
state as the last call left it and `now`, and returns the notifications and the new state.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from corral.core.events import EVENT_KINDS, matching_kinds
from corral.core.units import Duration, Int

RULE_SUBJECT = "*"  # the subject of a rule as a whole
NOTIFY_KINDS = "notify."  # the notifier's own events: matched only by an `on` entry that names them
# A subject's suppressed count waits for its next notification this long after its rearm time ends
# (a job that ended, a node that is gone, has none): then it is forgotten.
SUPPRESSED_KEPT = 86400.0


class NotifyRule(BaseModel):
    """One `[[notify]]` entry. `command` or `webhook` is its action; with neither, a notification
    is written to corral's log."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str = Field(
        "",
        pattern=r"^[A-Za-z0-9_.:-]*$",
        max_length=64,
        description="the rule's name in logs, events and CORRAL_RULE; default: notify[<index>]",
    )
    on: list[str] = Field(
        min_length=1,
        description="event kinds, each exact or a start ('node.', 'job.failed'; '*' for every kind),"
        " as `corral events --kind` reads them",
    )
    command: list[str] | None = Field(
        None,
        min_length=1,
        description="action: an argument list run without a shell, the event in CORRAL_EVENT_* variables",
    )
    webhook: str | None = Field(None, description="action: an http(s) URL the event is POSTed to as JSON")
    rearm: Duration = Field(
        0.0, ge=0, description="after the rule fires for a subject, no notification for it for this long"
    )
    rearm_per: Literal["subject", "rule"] = Field(
        "subject", description="'subject': the event's node, else its job, else the rule; 'rule': the rule as a whole"
    )
    threshold: Int | None = Field(None, ge=1, description="fire only when this many matching events fall in `window`")
    window: Duration = Field(600.0, gt=0, description="the time a threshold's events must fall within")
    timeout: Duration = Field(10.0, gt=0, le=300, description="an action that takes longer has failed")
    retries: Int = Field(
        5,
        ge=0,
        le=20,
        description="a failed action is tried again this many times, after 10 s, 40 s, 160 s, 640 s, then every"
        " 30 min (kept across a restart); then it is a notify.failed event",
    )

    @field_validator("on")
    @classmethod
    def _kinds(cls, value: list[str]) -> list[str]:
        for kind in value:
            if kind != "*" and not re.fullmatch(r"[a-z_]+(\.[a-z_]*)?", kind):
                raise ValueError(f"{kind!r} is not an event kind or its start (e.g. 'node.down', 'node.')")
            if not matching_kinds(kind):
                # 'node.dwn' passed `corral config check` and the rule never fired: no event has it.
                close = difflib.get_close_matches(kind, EVENT_KINDS, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ValueError(
                    f"{kind!r} matches no event kind corral records{hint}; the operator guide lists them"
                    " (Notifications and triggers)"
                )
        return value

    @field_validator("webhook")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"https?://[^\s/]+(/\S*)?", value):
            raise ValueError(f"not an http:// or https:// URL: {value!r}")
        return value

    @model_validator(mode="after")
    def _one_action(self) -> NotifyRule:
        if self.command is not None and self.webhook is not None:
            raise ValueError("a rule has one action: command or webhook, not both")
        return self

    def matches(self, kind: str) -> bool:
        for on in self.on:
            if kind.startswith(NOTIFY_KINDS) and not on.startswith(NOTIFY_KINDS):
                continue  # no loop: a rule on '*' or 'node.' does not fire on the notifier's own failures
            if on == "*" or kind.startswith(on):
                return True
        return False


def rule_names(rules: list[NotifyRule]) -> list[str]:
    return [rule.name or f"notify[{i}]" for i, rule in enumerate(rules)]


@dataclass(frozen=True)
class Event:
    id: int
    at: float
    kind: str
    message: str = ""
    job_id: int | None = None
    node_id: str | None = None

    def subject(self) -> str:
        # A job's event is about the job, though it names the node it ran on: two jobs failing on
        # one node are two notifications, a job failing again within the rearm time is one.
        if self.job_id is not None and self.kind.startswith("job."):
            return f"job:{self.job_id}"
        if self.node_id is not None:
            return f"node:{self.node_id}"
        if self.job_id is not None:
            return f"job:{self.job_id}"
        return RULE_SUBJECT


@dataclass(frozen=True)
class Notification:
    rule: str  # the rule's name
    index: int  # its place in the rules
    event: Event
    subject: str
    suppressed: int = 0  # matching events (a threshold rule: crossings) not notified since the last
    count: int = 1  # the events it is about: a threshold rule's events in its window


RETRY_FIRST = 10.0  # the wait before the first retry of a failed action; each next one is 4 times longer
RETRY_MAX = 1800.0


def retry_delay(tries: int) -> float:
    """The wait before the next try of an action that has failed `tries` times (1 or more): long
    enough for a webhook's service to come back from a restart or a deploy, and growing."""
    return min(RETRY_FIRST * 4.0 ** (tries - 1), RETRY_MAX)


@dataclass(frozen=True)
class Retry:
    """A notification whose action failed `tries` times, to be tried again at `due` (or, with no
    try yet, one a stop left unsent). Kept in the cursor's state, so that a restart sends it."""

    note: Notification
    tries: int
    due: float
    error: str = ""  # the last failure

    def to_json(self) -> dict[str, Any]:
        note = self.note
        return {
            "rule": note.rule,
            "event": dataclasses.asdict(note.event),
            "subject": note.subject,
            "suppressed": note.suppressed,
            "count": note.count,
            "tries": self.tries,
            "due": self.due,
            "error": self.error,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], names: list[str]) -> Retry | None:
        """None when its rule is no longer configured (its index is looked up by name: the rules
        may have been reordered across a restart)."""
        if data["rule"] not in names:
            return None
        note = Notification(
            data["rule"],
            names.index(data["rule"]),
            Event(**data["event"]),
            data["subject"],
            int(data["suppressed"]),
            int(data["count"]),
        )
        return cls(note, int(data["tries"]), float(data["due"]), str(data.get("error", "")))


@dataclass
class Armed:
    fired_at: float
    suppressed: int = 0


@dataclass
class NotifyState:
    armed: dict[str, dict[str, Armed]] = field(default_factory=dict)  # rule name -> subject -> when it fired
    recent: dict[str, list[float]] = field(default_factory=dict)  # threshold rule name -> its events' times

    def to_json(self) -> dict[str, Any]:
        return {
            "armed": {
                rule: {subject: [a.fired_at, a.suppressed] for subject, a in subjects.items()}
                for rule, subjects in self.armed.items()
            },
            "recent": self.recent,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> NotifyState:
        data = data or {}
        armed = {
            rule: {subject: Armed(float(at), int(n)) for subject, (at, n) in subjects.items()}
            for rule, subjects in data.get("armed", {}).items()
        }
        recent = {rule: [float(t) for t in times] for rule, times in data.get("recent", {}).items()}
        return cls(armed, recent)


def decide(
    rules: list[NotifyRule], events: list[Event], state: NotifyState, now: float
) -> tuple[list[Notification], NotifyState]:
    """The notifications for `events` (new, in id order), and the state after them. `state` is
    not changed. Entries that no longer matter at `now` (rearm passed, nothing suppressed; a rule
    no longer configured) are dropped, so the state stays the size of what is rearming."""
    names = rule_names(rules)
    armed = {name: {s: Armed(a.fired_at, a.suppressed) for s, a in state.armed.get(name, {}).items()} for name in names}
    recent = {name: list(state.recent.get(name, [])) for name, rule in zip(names, rules, strict=True) if rule.threshold}
    out: list[Notification] = []
    for event in events:
        for index, (name, rule) in enumerate(zip(names, rules, strict=True)):
            if not rule.matches(event.kind):
                continue
            count = 1
            if rule.threshold is not None:
                times = [t for t in recent[name] if t > event.at - rule.window] + [event.at]
                if len(times) < rule.threshold:
                    recent[name] = times
                    continue
                recent[name] = []  # a crossing; the next needs `threshold` new events
                count, subject = len(times), RULE_SUBJECT
            else:
                subject = event.subject() if rule.rearm_per == "subject" else RULE_SUBJECT
            last = armed[name].get(subject)
            if last is not None and event.at < last.fired_at + rule.rearm:
                last.suppressed += 1
                continue
            suppressed = last.suppressed if last is not None else 0
            armed[name][subject] = Armed(event.at)
            out.append(Notification(name, index, event, subject, suppressed, count))
    for name, rule in zip(names, rules, strict=True):
        armed[name] = {
            s: a
            for s, a in armed[name].items()
            if now < a.fired_at + rule.rearm + (SUPPRESSED_KEPT if a.suppressed else 0.0)
        }
        if rule.threshold is not None:
            recent[name] = [t for t in recent[name] if t > now - rule.window]
    kept = {name: subjects for name, subjects in armed.items() if subjects}
    return out, NotifyState(kept, {name: times for name, times in recent.items() if times})


def shown_url(url: str) -> str:
    """A webhook's URL as corral shows it (events, logs, `corral notify status`): its scheme, host
    and port, and '/…' for the rest. The rest is often the hook's credential (Slack's
    /services/T0/B0/SECRET, a ?token=), as a user:password@ before the host is."""
    scheme, _, rest = url.partition("://")
    host = re.split(r"[/?#]", rest, maxsplit=1)[0].rpartition("@")[2]
    return f"{scheme}://{host}" + ("/…" if rest != host else "")


def describe(note: Notification) -> str:
    """One line about a notification, for a log, a mail subject, a chat message."""
    event = note.event
    text = f"{event.kind}: {event.message}" if event.message else event.kind
    if note.count > 1:
        text = f"{note.count} events within the window; the last: {text}"
    if note.suppressed:
        text += f" ({note.suppressed} more suppressed since the last notification)"
    return text
