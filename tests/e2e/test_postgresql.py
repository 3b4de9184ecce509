"""corral on PostgreSQL, as an operator runs it for several dispatchers: real `corral run`
processes on one store, driven through the real CLI."""

from __future__ import annotations

import signal
import subprocess

from corral.serve import MAX_DISPATCHER_ID, new_dispatcher_id
from tests.e2e.conftest import CORRAL, Dispatchers
from tests.support import wait_until


def test_a_job_name_longer_than_the_store_keeps_is_refused_by_field(dispatchers: Dispatchers) -> None:
    """Seen: on PostgreSQL (jobs.name is VARCHAR(200)) `corral submit --name <201 characters>`
    answered 'nothing was submitted: Internal Server Error', and so did `corral update --name`."""
    corral = dispatchers.new()
    corral.start()
    later = ("--not-before", "2099-01-01T00:00:00+00:00")  # queued for the whole test
    keeper = corral.cli("submit", "--name", "keeper", *later, "--", "true").stdout.strip()
    refused = corral.cli("submit", "--name", "x" * 201, "--", "true", check=False)
    assert refused.returncode != 0
    assert "--name: a name has at most 200 characters, not 201" in refused.stderr, refused.stderr
    updated = corral.cli("update", keeper, "--name", "y" * 201, check=False)
    assert updated.returncode != 0
    assert "name: a name has at most 200 characters, not 201" in updated.stderr, updated.stderr
    assert [j["name"] for j in corral.jobs().values()] == ["keeper"]
    corral.cli("submit", "--name", "x" * 200, *later, "--", "true")  # the longest it keeps
    assert sorted(len(j["name"]) for j in corral.jobs().values()) == [6, 200]


def test_status_tells_a_dispatcher_stopped_cleanly_from_one_that_crashed(dispatchers: Dispatchers) -> None:
    """Seen: after Ctrl-C of one of two dispatchers, `corral status` on the other showed it in red,
    'stale: its claims are released', for ever, as it showed one killed -9; no event said it stopped."""
    # The survivor judges a peer silent after 5 s (the default is a minute).
    survivor = dispatchers.new('[policy.dispatch]\ndispatcher_stale = "5s"')
    stopped, crashed = dispatchers.new(), dispatchers.new()
    for corral in (survivor, stopped, crashed):
        corral.start()
    ids = {
        name: (c.home / "dispatcher-id").read_text().strip() for name, c in [("stopped", stopped), ("crashed", crashed)]
    }
    wait_until(lambda: len(survivor.cli_json("status")["dispatchers"]) == 3, 30, "three dispatchers heartbeating")
    stopped.stop(signal.SIGINT)
    crashed.stop(signal.SIGKILL)

    report = {d["id"]: d for d in survivor.cli_json("status")["dispatchers"]}
    assert report[ids["stopped"]]["stopped_at"] is not None
    assert report[ids["crashed"]]["stopped_at"] is None  # a crash is no clean stop: it falls silent
    [line] = [line for line in survivor.cli("status").stdout.splitlines() if ids["stopped"] in line]
    assert "stopped" in line and "heartbeat" not in line and "stale" not in line, line
    [event] = [e for e in survivor.cli_json("events", "--kind", "dispatcher.stopped")]
    assert event["message"].startswith(ids["stopped"]) and "its work requeued, its fleet shut down" in event["message"]

    # The crash is said once, by an event a [[notify]] rule can page on; the clean stop is not.
    def stale_events() -> list[dict[str, str]]:
        return survivor.cli_json("events", "--kind", "dispatcher.stale")

    [stale] = wait_until(stale_events, 30, "the crashed dispatcher judged silent")
    assert stale["message"].startswith(f"{ids['crashed']} on ") and "its claims are released" in stale["message"]
    survivor.cli("cancel", survivor.cli("submit", "--", "true").stdout.strip())  # more passes go by
    assert len(stale_events()) == 1

    stopped.start()  # the same data directory: the same dispatcher, running again
    wait_until(
        lambda: {d["id"]: d for d in survivor.cli_json("status")["dispatchers"]}[ids["stopped"]]["stopped_at"] is None,
        30,
        "the restarted dispatcher's heartbeat",
    )


def test_a_dispatcher_id_longer_than_the_store_keeps_is_refused_at_start(dispatchers: Dispatchers) -> None:
    """Seen: with a dispatcher-id of 69 characters (made from a long hostname, or written by hand)
    every pass on PostgreSQL failed ('value too long for type character varying(64)'): the
    dispatcher answered the CLI, and ran nothing."""
    corral = dispatchers.new()
    (corral.home / "dispatcher-id").write_text("d-" + "h" * 60 + "-abcdef\n")
    command = [CORRAL, "run", "--config", str(corral.config), "--port", "0"]
    refused = subprocess.run(command, env=corral.env, capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr, refused.stderr
    assert (
        f"error: {corral.home / 'dispatcher-id'}: a dispatcher id has 1 to 64 characters, not 69" in refused.stderr
    ), refused.stderr


def test_a_dispatcher_id_made_from_the_longest_hostname_fits_the_store() -> None:
    made = new_dispatcher_id("h" * 64)  # Linux's HOST_NAME_MAX; an FQDN may be longer still
    assert len(made) == MAX_DISPATCHER_ID and made.startswith("d-hhh")
    assert len(new_dispatcher_id("vm")) == len("d-vm-") + 6
