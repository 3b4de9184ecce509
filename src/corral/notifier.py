"""The notifier: carries out `[[notify]]` rules (seed 002 §5.4.3-5.4.4) for the live loop.

After each pass the loop calls `after_pass`: it reads the events after the last one it handled,
asks the core (`corral.core.notify.decide`) which rules fire, moves its cursor in the store (table
`notify_cursor`: the last event id and the rules' rearm state) and hands the notifications to one
worker thread, which runs each action with the rule's timeout. The loop never waits for an action.

- A `command` is run without a shell, with the event in environment variables: CORRAL_RULE,
  CORRAL_EVENT_ID, CORRAL_EVENT_TIME, CORRAL_EVENT_KIND, CORRAL_EVENT_MESSAGE, CORRAL_JOB_ID,
  CORRAL_NODE_ID (empty when the event has none), CORRAL_SUPPRESSED, CORRAL_EVENT_COUNT,
  CORRAL_SUMMARY, and CORRAL_HOME set to this corral's data directory (CORRAL_URL and CORRAL_TOKEN
  removed), so that the corral CLI in a trigger acts on the corral that runs it (`corral node
  "$CORRAL_NODE_ID" drain=true`). A non-zero exit, a timeout or a missing program is a failure.
- A `webhook` is POSTed `{"rule", "summary", "suppressed", "count", "event": {...}}` as JSON; a
  connection error, a timeout or a status of 400 or more is a failure.
- A rule with neither writes the notification to corral's log.

A failure is an event `notify.failed` (with the job and node of the event it was about), and never
stops the loop. The cursor moves before the actions run, so a restart never sends a notification
twice; notifications still queued when corral stops are given `STOP_GRACE` seconds to go out
(at most once, not at least once). On the first start the cursor is put at the newest event: the
history before it is not notified. Dispatchers sharing a store share the cursor: each event is
notified once, by whichever dispatcher reads it first (give them the same rules).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import queue
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from corral.core.notify import NOTIFY_KINDS, Event, Notification, NotifyRule, NotifyState, decide, describe
from corral.store import Store

log = logging.getLogger("corral.notify")

BATCH = 500  # events read per call; a backlog is worked through over the next passes
QUEUE_MAX = 1000  # notifications waiting for the worker; past it they are dropped (and a failure recorded)
STOP_GRACE = 10.0


class Notifier:
    def __init__(
        self, store: Store, rules: list[NotifyRule], clock: Callable[[], float] = time.time, home: Path | None = None
    ) -> None:
        self.store = store
        self.rules = rules
        self.clock = clock
        # The environment of a command: this process's, pointed at this corral (`home`, its data
        # directory), not at whichever the starting shell's CORRAL_URL named.
        self.base_env = dict(os.environ)
        if home is not None:
            for name in ("CORRAL_URL", "CORRAL_TOKEN"):
                self.base_env.pop(name, None)
            self.base_env["CORRAL_HOME"] = str(home)
        self._queue: queue.Queue[Notification | None] = queue.Queue(QUEUE_MAX)
        self._worker: threading.Thread | None = None
        self._lock = threading.Lock()  # one after_pass at a time (the loop's and the stop's)

    # ---- deciding (the loop's thread) ---------------------------------------------------------

    def after_pass(self) -> int:
        """Notify the events since the last call; the number of notifications queued. Never raises."""
        try:
            with self._lock:
                return self._after_pass()
        except Exception:  # the loop goes on; the events are tried again next pass
            log.exception("notifier failed")
            return 0

    def _after_pass(self) -> int:
        if not self.rules:
            return 0
        cursor = self.store.notify_cursor()
        if cursor is None:  # first start: from now on, not the history
            self.store.advance_notify_cursor(None, self.store.last_event_id(), NotifyState().to_json(), self.clock())
            return 0
        last_id, state_json = cursor
        rows = self.store.events_after(last_id, BATCH)
        if not rows:
            return 0
        events = [
            Event(row["id"], row["at"], row["kind"], row["message"] or "", row["job_id"], row["node_id"])
            for row in rows
        ]
        now = self.clock()
        notes, state = decide(self.rules, events, NotifyState.from_json(state_json), now)
        if not self.store.advance_notify_cursor(last_id, events[-1].id, state.to_json(), now):
            return 0  # another dispatcher took these events
        for note in notes:
            self._start_worker()
            try:
                self._queue.put_nowait(note)
            except queue.Full:
                self._failed(note, f"{QUEUE_MAX} notifications already waiting; dropped")
        return len(notes)

    def close(self, grace: float = STOP_GRACE) -> None:
        """Notify what the last pass left, give the queued notifications `grace` seconds, stop."""
        self.after_pass()
        worker = self._worker
        if worker is None:
            return
        deadline = time.monotonic() + grace
        while worker.is_alive() and time.monotonic() < deadline:
            try:
                self._queue.put(None, timeout=0.1)
                break
            except queue.Full:
                continue
        worker.join(max(0.0, deadline - time.monotonic()))
        if worker.is_alive():
            log.warning("notifier stopped with %d notifications not sent", self._queue.qsize())

    # ---- acting (the worker thread) -----------------------------------------------------------

    def _start_worker(self) -> None:
        if self._worker is None or not self._worker.is_alive():
            self._worker = threading.Thread(target=self._work, name="corral-notifier", daemon=True)
            self._worker.start()

    def _work(self) -> None:
        while True:
            note = self._queue.get()
            if note is None:
                return
            try:
                self.deliver(note)
            except Exception as exc:  # a bug in an action must not stop the others
                log.exception("notification %s failed", note.rule)
                self._failed(note, f"{type(exc).__name__}: {exc}")

    def deliver(self, note: Notification) -> None:
        rule = self.rules[note.index]
        if rule.command is not None:
            error = self._run(rule, note)
        elif rule.webhook is not None:
            error = self._post(rule, rule.webhook, note)
        else:
            log.warning("notify %s: %s", note.rule, describe(note))
            return
        if error:
            self._failed(note, error)

    def _run(self, rule: NotifyRule, note: Notification) -> str:
        assert rule.command is not None
        try:
            done = subprocess.run(
                rule.command,
                env={**self.base_env, **environment(note)},
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=rule.timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return f"{rule.command[0]}: no exit within {rule.timeout:g} s (timeout)"
        except OSError as exc:
            return f"{rule.command[0]}: {exc.strerror or exc}"
        if done.returncode != 0:
            tail = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or [""]
            return f"{rule.command[0]}: exit {done.returncode}" + (f": {tail[0][:200]}" if tail[0] else "")
        return ""

    def _post(self, rule: NotifyRule, url: str, note: Notification) -> str:
        try:
            response = httpx.post(url, json=payload(note), timeout=rule.timeout)
        except httpx.HTTPError as exc:
            return f"POST {url}: {type(exc).__name__}: {exc}"
        if response.status_code >= 400:
            return f"POST {url}: HTTP {response.status_code}"
        return ""

    def _failed(self, note: Notification, error: str) -> None:
        event = note.event
        message = f"rule {note.rule} on event {event.id} ({event.kind}): {error}"
        log.warning("notify failed: %s", message)
        if event.kind.startswith(NOTIFY_KINDS):
            return  # a failure about a failure is logged only: no loop
        try:
            self.store.add_event(self.clock(), "notify.failed", message, event.job_id, event.node_id)
        except Exception:
            log.exception("could not record a notification's failure")


def environment(note: Notification) -> dict[str, str]:
    event = note.event
    return {
        "CORRAL_RULE": note.rule,
        "CORRAL_EVENT_ID": str(event.id),
        "CORRAL_EVENT_TIME": f"{event.at:.3f}",
        "CORRAL_EVENT_KIND": event.kind,
        "CORRAL_EVENT_MESSAGE": event.message,
        "CORRAL_JOB_ID": "" if event.job_id is None else str(event.job_id),
        "CORRAL_NODE_ID": event.node_id or "",
        "CORRAL_SUPPRESSED": str(note.suppressed),
        "CORRAL_EVENT_COUNT": str(note.count),
        "CORRAL_SUMMARY": describe(note),
    }


def payload(note: Notification) -> dict[str, Any]:
    event = note.event
    return {
        "rule": note.rule,
        "summary": describe(note),
        "suppressed": note.suppressed,
        "count": note.count,
        "event": dataclasses.asdict(event),
    }
