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

A failed action is tried again (corral.core.notify.retry_delay, up to the rule's `retries`): the
worker hands it back, and the next `after_pass` keeps it in the cursor's state (`retry`) and queues
it when due, so a retry outlives a restart. After the last try the failure is an event
`notify.failed` (with the job and node of the event it was about); it never stops the loop. The
cursor moves before the actions run, in the same write as the notifications it hands to the worker
(the state's `sending`, each with the dispatcher that holds it), which leave that list once their
action has run. So nothing is lost to a crash (at least once): a notification still in `sending`
that no live process holds (its dispatcher restarted, or stopped, or went silent for
`dispatch.dispatcher_stale`) is sent again, by the restarted dispatcher or by another; one whose
action was running at the crash may so be sent twice (the event id tells a repeat). At a stop the
queue is given `STOP_GRACE` seconds, and what it did not send is kept for the next start. On the
first start the cursor is put at the newest event: the history before it is not notified.
Dispatchers sharing a store share the cursor: each event is notified by whichever dispatcher reads
it first (give them the same rules); a retry, by whichever takes it from the cursor's state first.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import queue
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from corral.core.dispatchers import is_stale
from corral.core.notify import (
    NOTIFY_KINDS,
    Event,
    Notification,
    NotifyRule,
    NotifyState,
    Retry,
    decide,
    describe,
    retry_delay,
    rule_names,
    shown_url,
)
from corral.core.settings import PolicySettings
from corral.store import Store, store_unreachable

log = logging.getLogger("corral.notify")

BATCH = 500  # events read per call; a backlog is worked through over the next passes
QUEUE_MAX = 1000  # notifications waiting for the worker; past it they are dropped (and a failure recorded)
STOP_GRACE = 10.0
RETRIES_KEPT = 1000  # notifications waiting for a retry; past it the newest are given up (a failure recorded)
RETRY_KEY = "retry"  # the cursor state's list of notifications to try again (corral.core.notify.Retry)
SENDING_KEY = "sending"  # ... and of those handed to a worker whose action has not run yet (with "owner")

Key = tuple[str, int]  # a notification: its rule's name and its event's id


def key_of(note: Notification) -> Key:
    return note.rule, note.event.id


def missing_programs(rules: list[NotifyRule]) -> list[str]:
    """The rules whose command names a program that cannot be run from here (not on PATH, no such
    file, not executable), each in words: its every action would fail, seen only in a notify.failed
    event. `corral config check` and `corral run` say so at once."""
    found = []
    for name, rule in zip(rule_names(rules), rules, strict=True):
        if not rule.command:
            continue
        program = rule.command[0]
        if os.sep in program:
            runnable = os.path.isfile(program) and os.access(program, os.X_OK)
            why = "no such executable file"
        else:
            runnable = shutil.which(program) is not None
            why = "not on PATH"
        if not runnable:
            found.append(
                f"notify rule {name!r}: its command's program {program!r} cannot be run here ({why}):"
                " each of its actions would fail (notify.failed)"
            )
    return found


class Notifier:
    def __init__(
        self,
        store: Store,
        rules: list[NotifyRule],
        clock: Callable[[], float] = time.time,
        home: Path | None = None,
        dispatcher_id: str = "",
        policy: PolicySettings | None = None,
    ) -> None:
        """`dispatcher_id`: the dispatcher this notifier sends for (it takes over, after a restart,
        what it had in hand); `policy`: when another dispatcher counts as gone (its
        `dispatch.dispatcher_stale`), so that what it had in hand is sent by this one."""
        self.store = store
        self.rules = rules
        self.clock = clock
        self.dispatcher_id = dispatcher_id
        self.policy = policy or PolicySettings()
        # The environment of a command: this process's, pointed at this corral (`home`, its data
        # directory), not at whichever the starting shell's CORRAL_URL named.
        self.base_env = dict(os.environ)
        if home is not None:
            for name in ("CORRAL_URL", "CORRAL_TOKEN"):
                self.base_env.pop(name, None)
            self.base_env["CORRAL_HOME"] = str(home)
        self._queue: queue.Queue[tuple[Notification, int] | None] = queue.Queue(QUEUE_MAX)  # (note, failed tries)
        self._worker: threading.Thread | None = None
        self._lock = threading.Lock()  # one after_pass at a time (the loop's and the stop's)
        self._back: list[Retry] = []  # failures the worker hands back, for after_pass to keep in the store
        # The notifications this process queued, until after_pass has written that their action ran
        # (`_done`: the worker's word, not written yet). Both under `_back_lock`.
        self._in_hand: dict[Key, Retry] = {}
        self._done: set[Key] = set()
        self._back_lock = threading.Lock()
        self._closing = False  # the stop's last look: nothing more is sent, what is left is kept

    # ---- deciding (the loop's thread) ---------------------------------------------------------

    def after_pass(self) -> int:
        """Notify the events since the last call, and the retries now due; the number of
        notifications queued. Never raises."""
        try:
            with self._lock:
                return self._after_pass()
        except Exception as exc:  # the loop goes on; the events are tried again next pass
            reason = store_unreachable(exc)
            if reason is None:
                log.exception("notifier failed")
            else:
                log.warning("notifier: store unreachable: %s (its events are notified once it answers)", reason)
            return 0

    def _after_pass(self) -> int:
        if not self.rules:
            return 0
        cursor = self.store.notify_cursor()
        if cursor is None:  # first start: from now on, not the history
            self.store.advance_notify_cursor(None, self.store.last_event_id(), NotifyState().to_json(), self.clock())
            return 0
        last_id, state_json, moved_at = cursor
        names = rule_names(self.rules)
        with self._back_lock:  # the worker's failures to try again, and the actions that ran
            back, self._back = self._back, []
            done, self._done = self._done, set()
            in_hand = {k: r for k, r in self._in_hand.items() if k not in done}
        # What the worker handed back (failures to try again, actions that ran) is out of its
        # hands now: given back if the cursor does not move, or the failures were never tried again
        # (a store outage in the middle of this: their webhooks never sent, no notify.failed).
        try:
            retries = [r for data in state_json.get(RETRY_KEY, []) if (r := Retry.from_json(data, names))] + back
            rows = self.store.events_after(last_id, BATCH)
            now = self.clock()
            held_elsewhere, orphans = self._sending_elsewhere(
                state_json.get(SENDING_KEY, []), names, in_hand, done, now
            )
            due = [] if self._closing else [r for r in retries if r.due <= now] + orphans
            if not rows and not due and not back and not done:
                return 0
            events = [
                Event(row["id"], row["at"], row["kind"], row["message"] or "", row["job_id"], row["node_id"])
                for row in rows
            ]
            notes, state = decide(self.rules, events, NotifyState.from_json(state_json), now)
            taken = {id(r) for r in due}
            kept = [r for r in retries if id(r) not in taken]
            if self._closing:  # stopping: what this last look finds goes out after the restart
                kept += [Retry(note, 0, now) for note in notes]
                notes = []
            # The state is written at every pass with events: a receiver down for long under a busy
            # queue must not make it grow without end. The newest past the bound are given up.
            kept, given_up = kept[:RETRIES_KEPT], kept[RETRIES_KEPT:]
            queued = [(note, 0) for note in notes] + [(r.note, r.tries) for r in due]
            sending = {**in_hand, **{key_of(note): Retry(note, tries, now) for note, tries in queued}}
            new_state = state.to_json()
            if kept:
                new_state[RETRY_KEY] = [r.to_json() for r in kept]
            if sending or held_elsewhere:
                mine = [{**r.to_json(), "owner": self.dispatcher_id} for r in sending.values()]
                new_state[SENDING_KEY] = held_elsewhere + mine
            new_id = events[-1].id if events else last_id
            advanced = self.store.advance_notify_cursor(last_id, new_id, new_state, now, moved_at=moved_at)
        except BaseException:
            self._give_back(back, done)
            raise
        if not advanced:  # another dispatcher moved it first; these are tried next pass
            self._give_back(back, done)
            return 0
        with self._back_lock:
            for key in done:
                self._in_hand.pop(key, None)
            self._in_hand.update((k, r) for k, r in sending.items() if k not in in_hand)
        if orphans:
            log.warning(
                "sending again %d notifications a stopped or silent corral had not sent (at least once)", len(orphans)
            )
        for r in given_up:
            self._failed(r.note, f"{r.error or 'not sent'}; {RETRIES_KEPT} notifications already waiting for a retry")
        for note, tries in queued:
            self._start_worker()
            try:
                self._queue.put_nowait((note, tries))
            except queue.Full:
                self._failed(note, f"{QUEUE_MAX} notifications already waiting; dropped")
                self._ran(note)
        return len(queued)

    def _give_back(self, back: list[Retry], done: set[Key]) -> None:
        with self._back_lock:
            self._back[:0] = back
            self._done |= done

    def _sending_elsewhere(
        self, entries: list[dict[str, Any]], names: list[str], in_hand: dict[Key, Retry], done: set[Key], now: float
    ) -> tuple[list[dict[str, Any]], list[Retry]]:
        """The cursor state's `sending` that this process does not hold: those a live dispatcher
        holds (kept as they are), and those nobody does (to send again): this dispatcher's from
        before a restart, and those of a dispatcher stopped, silent for `dispatcher_stale` or
        unknown. Entries of rules no longer configured are dropped."""
        held: list[dict[str, Any]] = []
        orphans: list[Retry] = []
        gone: dict[str, bool] | None = None
        for data in entries:
            retry = Retry.from_json(data, names)
            if retry is None or key_of(retry.note) in in_hand or key_of(retry.note) in done:
                continue
            owner = str(data.get("owner", ""))
            if owner != self.dispatcher_id:
                if gone is None:
                    gone = {
                        row["id"]: row["stopped_at"] is not None or is_stale(row["last_heartbeat"], now, self.policy)
                        for row in self.store.dispatcher_rows()
                    }
                if not gone.get(owner, True):
                    held.append(data)
                    continue
            orphans.append(retry)
        return held, orphans

    def close(self, grace: float = STOP_GRACE) -> None:
        """Notify what the last pass left, give the queued notifications `grace` seconds, then
        keep in the store what is still to be tried (the retries, what the grace did not send) for
        the next start, and stop."""
        self.after_pass()
        worker = self._worker
        if worker is not None:
            deadline = time.monotonic() + grace
            while worker.is_alive() and time.monotonic() < deadline:
                try:
                    self._queue.put(None, timeout=0.1)
                    break
                except queue.Full:
                    continue
            worker.join(max(0.0, deadline - time.monotonic()))
            unsent = 0
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    unsent += 1
                    with self._back_lock:
                        self._back.append(Retry(item[0], item[1], self.clock()))
                    self._ran(item[0])
            if worker.is_alive():
                # The one it is on stays in `sending`: the next start sends it (again, if it went out).
                log.warning(
                    "notifier stopped with an action still running; %d waiting are kept for the next start", unsent
                )
        self._closing = True
        self.after_pass()

    # ---- acting (the worker thread) -----------------------------------------------------------

    def _start_worker(self) -> None:
        if self._worker is None or not self._worker.is_alive():
            self._worker = threading.Thread(target=self._work, name="corral-notifier", daemon=True)
            self._worker.start()

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            note, tries = item
            try:
                error = self.deliver(note)
            except Exception as exc:  # a bug in an action must not stop the others
                log.exception("notification %s failed", note.rule)
                error = f"{type(exc).__name__}: {exc}"
            if error:
                self._try_again(note, tries + 1, error)
            self._ran(note)

    def _ran(self, note: Notification) -> None:
        """Its action has run (or it was given up, or kept as a retry): the next after_pass takes
        it off the state's `sending`."""
        with self._back_lock:
            self._done.add(key_of(note))

    def _try_again(self, note: Notification, tries: int, error: str) -> None:
        """After the action's `tries`-th failure: a retry after a while, or, past the rule's
        `retries`, a notify.failed event."""
        retries = self.rules[note.index].retries
        if tries > retries:
            self._failed(note, error if tries == 1 else f"{error} (tried {tries} times)")
            return
        delay = retry_delay(tries)
        log.warning(
            "notify %s on event %d failed (%s); try %d of %d in %gs",
            note.rule,
            note.event.id,
            error,
            tries + 1,
            retries + 1,
            delay,
        )
        with self._back_lock:
            self._back.append(Retry(note, tries, self.clock() + delay, error))

    def deliver(self, note: Notification) -> str:
        """Carry out the notification's action: what went wrong, or "" when it went out."""
        rule = self.rules[note.index]
        if rule.command is not None:
            return self._run(rule, note)
        if rule.webhook is not None:
            return self._post(rule, rule.webhook, note)
        log.warning("notify %s: %s", note.rule, describe(note))
        return ""

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
        """What went wrong, naming the hook by shown_url: the error goes to the log, to the
        notifier's state in the store and to a notify.failed event, where the whole URL (often the
        hook's credential) would be read by anyone who reads those."""
        shown = shown_url(url)
        try:
            response = httpx.post(url, json=payload(note), timeout=rule.timeout)
        except httpx.HTTPError as exc:
            return f"POST {shown}: {type(exc).__name__}: {str(exc).replace(url, shown)}"
        if response.status_code >= 400:
            return f"POST {shown}: HTTP {response.status_code}"
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
