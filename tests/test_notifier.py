"""The notifier end to end: a real SQLite store, a ControlLoop pass that finds a node down, a real
command and a real HTTP receiver on 127.0.0.1; a failing and a hanging action; a restart."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from corral import notifier as notifier_module
from corral.cloud.sim import SimCloud
from corral.config import Config
from corral.core.model import Resources
from corral.core.notify import Event, Notification, NotifyRule, shown_url
from corral.jobspec import JobRequest
from corral.loop import ControlLoop
from corral.notifier import Notifier, missing_programs
from corral.sim.settings import SimSettings
from corral.store import Store

START = 1_000_000.0
WRITE_ENV = (
    "import json, os, sys; "
    "open(sys.argv[1], 'a').write(json.dumps({k: v for k, v in os.environ.items() if k.startswith('CORRAL_')}) + '\\n')"
)


class Receiver(BaseHTTPRequestHandler):
    posted: list[dict[str, Any]] = []
    refuse: list[int] = []  # statuses to answer the next requests with (a receiver that is down), then 204

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        status = type(self).refuse.pop(0) if type(self).refuse else 204
        if status < 400:
            type(self).posted.append(json.loads(body))
        self.send_response(status)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    posted: list[dict[str, Any]] = []
    handler = type("Handler", (Receiver,), {"posted": posted})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", posted
    finally:
        server.shutdown()
        server.server_close()


def wait_for(check: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def lines(path: Path) -> list[dict[str, str]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_node_going_down_runs_the_command_and_the_webhook_once_and_a_restart_sends_nothing_again(
    tmp_path: Path, receiver: tuple[str, list[dict[str, Any]]]
) -> None:
    url, posted = receiver
    out = tmp_path / "notified.jsonl"
    config = Config.model_validate(
        {
            "home": tmp_path,
            "instance_types": [{"name": "small", "vcpus": 2, "ram": "4GiB", "price_per_hour": 0.1}],
            "notify": [
                {"name": "page", "on": ["node.down"], "command": [sys.executable, "-c", WRITE_ENV, str(out)]},
                {"name": "hook", "on": ["node.down"], "webhook": url, "rearm": "20m"},
                {
                    "name": "broken",
                    "on": ["node.down"],
                    "retries": 0,
                    "command": [sys.executable, "-c", "raise SystemExit(3)"],
                },
                {"name": "hangs", "on": ["node.down"], "timeout": 0.5, "retries": 0, "command": ["sleep", "30"]},
            ],
        }
    )
    store = Store(f"sqlite:///{tmp_path / 'corral.db'}")
    store.migrate()
    clock = [START]
    types = config.core_instance_types()
    loop = ControlLoop(store, SimCloud(types, SimSettings(), lambda: clock[0]), config, "d-test", lambda: clock[0])
    loop.notifier = Notifier(store, config.notify, lambda: clock[0])
    loop.run_pass()  # the notifier starts at the newest event: the history is not notified
    assert store.notify_cursor() is not None

    def pair(node_id: str) -> None:
        store.create_node(node_id, types[0], "token-" + node_id, clock[0], "test")
        assert store.pair_node(node_id, "token-" + node_id, Resources(2, 4096), "host", clock[0])

    pair("n-a")
    clock[0] += 120  # no ping for longer than ping_stale: the pass marks it down
    started = time.monotonic()
    loop.run_pass()
    assert time.monotonic() - started < 5, "the pass waited for the actions"

    wait_for(lambda: len(lines(out)) == 1 and len(posted) == 1)
    [env] = lines(out)
    assert env["CORRAL_RULE"] == "page" and env["CORRAL_EVENT_KIND"] == "node.down"
    assert env["CORRAL_NODE_ID"] == "n-a" and env["CORRAL_JOB_ID"] == "" and env["CORRAL_SUPPRESSED"] == "0"
    [down] = store.list_events(kind="node.down")
    assert env["CORRAL_EVENT_ID"] == str(down["id"]) and env["CORRAL_EVENT_MESSAGE"] == down["message"]
    assert posted[0]["rule"] == "hook" and posted[0]["event"]["node_id"] == "n-a"
    assert posted[0]["event"]["kind"] == "node.down" and posted[0]["event"]["id"] == down["id"]

    # The failing and the hanging actions are events of their own, about the same node.
    wait_for(lambda: len(store.list_events(kind="notify.failed")) == 2)
    failures = {e["message"].split()[1]: e for e in store.list_events(kind="notify.failed")}
    assert "exit 3" in failures["broken"]["message"] and "timeout" in failures["hangs"]["message"]
    assert {e["node_id"] for e in failures.values()} == {"n-a"}

    # A restart: the new notifier does not send again what was sent, and sends what came after.
    loop.notifier.close()
    # (The pass that found n-a down has shut it down: the event is written as mark_node would.)
    store.add_event(clock[0] + 60, "node.down", "test: down again", node_id="n-a")  # within hook's rearm
    again = Notifier(store, config.notify, lambda: clock[0] + 60)
    assert again.after_pass() == 3  # page, broken, hangs; hook is rearming for n-a
    wait_for(lambda: len(lines(out)) == 2)
    again.close()
    assert lines(out)[1]["CORRAL_EVENT_MESSAGE"] == "test: down again" and len(posted) == 1
    assert Notifier(store, config.notify).after_pass() == 0
    store.close()


def test_a_webhook_that_cannot_be_reached_is_a_notify_failed_event(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'corral.db'}")
    store.migrate()
    rule = {"on": ["job."], "webhook": "http://127.0.0.1:9/x", "timeout": 2, "retries": 0}
    rules = Config.model_validate({"notify": [rule]})
    notifier = Notifier(store, rules.notify, lambda: START)
    assert notifier.after_pass() == 0
    store.add_event(START, "job.failed", "exit 1", job_id=7)
    assert notifier.after_pass() == 1
    wait_for(lambda: store.list_events(kind="notify.failed") != [])
    notifier.close()
    [failed] = store.list_events(kind="notify.failed")
    assert failed["job_id"] == 7 and "notify[0]" in failed["message"]
    assert "POST http://127.0.0.1:9/…: ConnectError" in failed["message"]  # (the path may be the hook's secret)
    store.close()


def test_skipping_to_the_newest_event_sends_nothing_of_the_backlog_and_what_follows_as_before(
    tmp_path: Path, receiver: tuple[str, list[dict[str, Any]]]
) -> None:
    url, posted = receiver
    store = Store(f"sqlite:///{tmp_path / 'corral.db'}")
    store.migrate()
    config = Config.model_validate({"notify": [{"name": "queued", "on": ["job.queued"], "webhook": url}]})
    notifier = Notifier(store, config.notify, lambda: START)
    assert notifier.after_pass() == 0  # the first pass puts the cursor at the newest event
    for job_id in (1, 2, 3):
        store.add_event(START + job_id, "job.queued", "a backlog nobody wants paged about", job_id)

    assert store.move_notify_cursor(store.last_event_id(), START + 10) == 0
    assert notifier.after_pass() == 0  # (the move's own event matches no rule)
    store.add_event(START + 20, "job.queued", "after the skip", 4)
    assert notifier.after_pass() == 1
    notifier.close()
    assert [note["event"]["job_id"] for note in posted] == [4]
    (moved,) = store.list_events(kind="notify.moved")
    assert moved["message"] == "the notifier's cursor moved from 0 to 3: events 1-3 are not notified"


def test_a_commands_corral_cli_reaches_the_corral_that_runs_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CORRAL_HOME is this corral's data directory, and a CORRAL_URL or CORRAL_TOKEN of the shell
    that started it (another corral's, say) is not handed on."""
    monkeypatch.setenv("CORRAL_URL", "http://elsewhere.example:8642")
    monkeypatch.setenv("CORRAL_TOKEN", "not-this-corrals")
    store = Store(f"sqlite:///{tmp_path / 'corral.db'}")
    store.migrate()
    out = tmp_path / "env.jsonl"
    rules = Config.model_validate(
        {"notify": [{"on": ["node."], "command": [sys.executable, "-c", WRITE_ENV, str(out)]}]}
    )
    notifier = Notifier(store, rules.notify, lambda: START, home=tmp_path / "home")
    notifier.after_pass()
    store.add_event(START, "node.down", "no ping", node_id="n-1")
    assert notifier.after_pass() == 1
    wait_for(lambda: out.exists())
    notifier.close()
    [seen] = lines(out)
    assert seen["CORRAL_HOME"] == str(tmp_path / "home") and seen["CORRAL_NODE_ID"] == "n-1"
    assert "CORRAL_URL" not in seen and "CORRAL_TOKEN" not in seen
    store.close()


def test_an_instance_that_vanishes_from_the_cloud_is_a_node_down_a_rule_on_it_hears_of(
    tmp_path: Path, receiver: tuple[str, list[dict[str, Any]]]
) -> None:
    """A spot reclaim or a terminate from the console: the instance is no longer listed. The node
    went straight to `gone`, so a rule on `node.down` (the seed's GEVENTCFG[nodedown]) heard nothing
    of the commonest node failure on a cloud, though the job on it was lost."""
    url, posted = receiver
    config = Config.model_validate(
        {
            "home": tmp_path,
            "instance_types": [{"name": "small", "vcpus": 2, "ram": "4GiB", "price_per_hour": 0.1}],
            "notify": [{"name": "nodedown", "on": ["node.down"], "webhook": url}],
        }
    )
    store = Store(f"sqlite:///{tmp_path / 'corral.db'}")
    store.migrate()
    clock = [START]
    types = config.core_instance_types()
    cloud = SimCloud(types, SimSettings(), lambda: clock[0])
    loop = ControlLoop(store, cloud, config, "d-test", lambda: clock[0])
    loop.notifier = Notifier(store, config.notify, lambda: clock[0])
    loop.run_pass()
    store.create_node("n-a", types[0], "token-n-a", clock[0], "test")
    instance = cloud.create(types[0], "n-a", "token-n-a", {})
    store.set_instance_id("n-a", instance.id)
    assert store.pair_node("n-a", "token-n-a", Resources(2, 4096), "host", clock[0])
    [job_id] = store.submit([JobRequest(command=["sleep", "600"])], clock[0])
    loop.run_pass()
    [attempt] = store.attempts_of(job_id)
    assert attempt["node_id"] == "n-a"

    cloud.destroy(instance.id)  # taken back by the cloud, not by corral
    clock[0] += 1
    loop.run_pass()
    loop.notifier.close()

    events = [(e["kind"], e["message"]) for e in store.list_events(node_id="n-a") if e["kind"].startswith("node.")]
    assert events[-2:] == [
        ("node.down", f"instance {instance.id} disappeared from the cloud"),
        ("node.gone", "instance disappeared from the cloud"),
    ]
    assert [(p["rule"], p["event"]["node_id"], p["summary"]) for p in posted] == [
        ("nodedown", "n-a", f"node.down: instance {instance.id} disappeared from the cloud")
    ]
    [requeued] = store.list_events(kind="job.requeued")
    assert requeued["message"].startswith("node n-a lost; retry 1/") and requeued["node_id"] == "n-a"
    store.close()


def test_a_failed_webhook_is_tried_again_after_a_while_and_across_a_restart_and_sent_once(
    tmp_path: Path, receiver: tuple[str, list[dict[str, Any]]]
) -> None:
    """The receiver is down (HTTP 503) when a job fails: the page was lost, a notify.failed event
    the only trace. It is tried again 10 s later, and a corral stopped meanwhile tries it at its
    next start, once; a rule whose every try fails ends as a notify.failed event saying so."""
    url, posted = receiver
    Receiver.refuse[:] = [503]
    store = Store(f"sqlite:///{tmp_path / 'corral.db'}")
    store.migrate()
    rules = Config.model_validate(
        {
            "notify": [
                {"name": "chat", "on": ["job.failed"], "webhook": url},
                {"name": "dead", "on": ["job.failed"], "webhook": "http://127.0.0.1:9/x", "retries": 1},
            ]
        }
    ).notify
    notifier = Notifier(store, rules, lambda: START)
    notifier.after_pass()
    store.add_event(START, "job.failed", "exit 1", job_id=7, node_id="n-1")
    assert notifier.after_pass() == 2

    def retrying() -> list[dict[str, Any]]:
        notifier.after_pass()  # keeps in the store what the worker handed back
        cursor = store.notify_cursor()
        assert cursor is not None
        return list(cursor[1].get("retry", []))

    wait_for(lambda: len(retrying()) == 2)
    assert {(r["rule"], r["tries"], r["due"]) for r in retrying()} == {("chat", 1, START + 10), ("dead", 1, START + 10)}
    assert posted == [] and store.list_events(kind="notify.failed") == []
    assert notifier.after_pass() == 0  # not due yet
    notifier.close()  # a restart before the retry is due

    again = Notifier(store, rules, lambda: START + 10)
    assert again.after_pass() == 2
    wait_for(lambda: len(posted) == 1 and store.list_events(kind="notify.failed") != [])
    again.close()
    assert [(p["rule"], p["event"]["job_id"], p["event"]["node_id"]) for p in posted] == [("chat", 7, "n-1")]
    [failed] = store.list_events(kind="notify.failed")
    assert failed["message"].startswith("rule dead on event") and failed["message"].endswith("(tried 2 times)")
    assert failed["job_id"] == 7 and failed["node_id"] == "n-1"
    cursor = store.notify_cursor()
    assert cursor is not None and "retry" not in cursor[1]
    assert Notifier(store, rules, lambda: START + 5000).after_pass() == 0  # nothing is sent twice
    store.close()


def test_retries_waiting_are_bounded_and_what_is_past_the_bound_is_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The retries live in the cursor's state, written at every pass with events: a receiver down
    for long under a busy queue must not make it grow without end."""
    monkeypatch.setattr(notifier_module, "RETRIES_KEPT", 2)
    store = Store(f"sqlite:///{tmp_path / 'corral.db'}")
    store.migrate()
    rules = Config.model_validate({"notify": [{"on": ["job."], "webhook": "http://127.0.0.1:9/x"}]}).notify
    notifier = Notifier(store, rules, lambda: START)
    notifier.after_pass()
    for job_id in (1, 2, 3):
        store.add_event(START, "job.failed", "exit 1", job_id=job_id)
    assert notifier.after_pass() == 3

    def waiting() -> int:
        notifier.after_pass()
        cursor = store.notify_cursor()
        assert cursor is not None
        return len(cursor[1].get("retry", []))

    wait_for(lambda: waiting() == 2 and store.list_events(kind="notify.failed") != [])
    notifier.close()
    [failed] = store.list_events(kind="notify.failed")
    assert failed["job_id"] == 3 and failed["message"].endswith("2 notifications already waiting for a retry")
    store.close()


def test_a_failing_webhook_is_named_without_its_secret(
    tmp_path: Path, receiver: tuple[str, list[dict[str, Any]]], caplog: pytest.LogCaptureFixture
) -> None:
    """A webhook's URL often is its credential (Slack's /services/T0/B0/SECRET, a ?token=, a
    user:password@): its failures were events, log lines and `corral notify status` errors that
    gave it whole to anyone with the API token or the server's log."""
    url, _posted = receiver
    Receiver.refuse[:] = [500]
    host = url.removeprefix("http://").removesuffix("/hook")
    secret_url = f"http://hook-user:hook-password@{host}/services/T0/B0/SECRET-PATH?token=SECRET-QUERY"
    store = Store(f"sqlite:///{tmp_path / 'corral.db'}")
    store.migrate()
    rules = Config.model_validate({"notify": [{"on": ["job."], "webhook": secret_url, "retries": 0}]}).notify
    notifier = Notifier(store, rules, lambda: START)
    notifier.after_pass()
    store.add_event(START, "job.failed", "exit 1", job_id=7)
    with caplog.at_level("WARNING", logger="corral.notify"):
        assert notifier.after_pass() == 1
        wait_for(lambda: store.list_events(kind="notify.failed") != [])
        notifier.close()
    [failed] = store.list_events(kind="notify.failed")
    assert failed["message"] == f"rule notify[0] on event 1 (job.failed): POST http://{host}/…: HTTP 500"
    for secret in ("SECRET", "hook-password", "hook-user"):
        assert secret not in caplog.text and secret not in json.dumps(store.notify_cursor())
    # Unreachable: the connection's error, and still not the URL.
    unreachable = Config.model_validate(
        {"notify": [{"on": ["job."], "webhook": "http://u:SECRET@127.0.0.1:9/SECRET", "timeout": 2}]}
    ).notify
    note = Notification("notify[0]", 0, Event(1, START, "job.failed", "exit 1", 7, None), "*")
    error = Notifier(store, unreachable, lambda: START).deliver(note)
    assert error.startswith("POST http://127.0.0.1:9/…: ConnectError: ") and "SECRET" not in error, error
    store.close()
    # As `corral notify status` names a rule's hook (it showed a user:password@ and a ?token= whole).
    assert shown_url("https://u:SECRET@hooks.example.org?token=SECRET") == "https://hooks.example.org/…"
    assert shown_url("https://hooks.example.org:8443") == "https://hooks.example.org:8443"


def test_what_a_live_dispatcher_has_in_hand_is_left_to_it_and_a_silent_ones_is_sent_by_another(
    tmp_path: Path,
) -> None:
    """Two dispatchers share the cursor. One hands a notification to its worker; while it
    heartbeats the other leaves it alone; once it is silent for `dispatch.dispatcher_stale` (it
    froze, or died with the action unsent), the other sends it: at least once."""
    store = Store(f"sqlite:///{tmp_path / 'corral.db'}")
    store.migrate()
    out, release = tmp_path / "sent", tmp_path / "release"
    script = f'echo "$CORRAL_DISPATCHER" >> {out}; while [ ! -e {release} ]; do sleep 0.05; done'
    rules = Config.model_validate(
        {"notify": [{"name": "log", "on": ["node.down"], "timeout": 60, "command": ["sh", "-c", script]}]}
    ).notify
    clock = [START]
    store.heartbeat("a", START)
    first = Notifier(store, rules, lambda: clock[0], dispatcher_id="a")
    first.base_env["CORRAL_DISPATCHER"] = "a"
    second = Notifier(store, rules, lambda: clock[0], dispatcher_id="b")
    second.base_env["CORRAL_DISPATCHER"] = "b"
    assert first.after_pass() == 0
    store.add_event(START, "node.down", "no ping", node_id="n-1")
    assert first.after_pass() == 1
    wait_for(lambda: out.exists() and out.read_text().split() == ["a"])

    clock[0] = START + 30  # "a" heartbeated 30 s ago: its notification is its own
    assert second.after_pass() == 0
    clock[0] = START + 61  # silent past dispatcher_stale (60 s): "b" takes it over
    assert second.after_pass() == 1
    release.touch()
    wait_for(lambda: out.read_text().split() == ["a", "b"])
    wait_for(lambda: second.after_pass() == 0 and "sending" not in (store.notify_cursor() or (0, {}, 0))[1])
    first.close()
    second.close()
    assert out.read_text().split() == ["a", "b"]
    store.close()


def test_a_rule_whose_program_cannot_be_run_here_is_named_before_any_event(tmp_path: Path) -> None:
    """Seen on a first try: examples/notify.toml's diagnose script passed `corral config check`, and
    its every action would only have failed, one notify.failed event at a time."""
    script = tmp_path / "diagnose"
    script.write_text("#!/bin/sh\n")
    rules = [
        NotifyRule(name="mail", on=["node.down"], command=["sh", "-c", "true"]),
        NotifyRule(name="diagnose", on=["node.down"], command=[str(script)]),  # not executable
        NotifyRule(on=["job.failed"], command=["corral-no-such-program"]),
        NotifyRule(name="chat", on=["job.failed"], webhook="https://chat.example.org/hook"),
    ]
    assert missing_programs(rules) == [
        f"notify rule 'diagnose': its command's program '{script}' cannot be run here (no such executable"
        " file): each of its actions would fail (notify.failed)",
        "notify rule 'notify[2]': its command's program 'corral-no-such-program' cannot be run here (not on"
        " PATH): each of its actions would fail (notify.failed)",
    ]
    script.chmod(0o755)
    assert len(missing_programs(rules)) == 1
