"""Admin reservations as a Slurm administrator uses them: a job naming one that does not exist is
refused ("Requested reservation is invalid"), on every way in; one whose reservation goes away
while it waits stays queued and says why, rather than running outside it; a node an operator
reserved is kept up while it idles, until the reservation ends."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from corral.cli import when
from tests.e2e.conftest import Corral, wait_until

REFUSED = "Requested reservation is invalid: no admin reservation 'nosuch' is in force"


def test_a_job_naming_no_reservation_in_force_is_refused_on_every_way_in(corral: Corral, tmp_path: Path) -> None:
    corral.start()
    first = int(corral.cli("submit", "--", "sleep", "300").stdout)
    wait_until(lambda: corral.jobs()[first]["state"] == "running", 60, "the first job to run")
    [node] = corral.live_nodes()
    corral.cli("node", node["id"], "reservation=team-a")

    by_cli = corral.cli("submit", "--reservation", "nosuch", "--", "true", check=False)
    assert by_cli.returncode != 0 and REFUSED in by_cli.stderr and "(in force: team-a)" in by_cli.stderr
    array = corral.cli("submit", "--array", "0-3", "--reservation", "nosuch", "--", "true", check=False)
    assert array.returncode != 0 and REFUSED in array.stderr
    jobs_file = tmp_path / "jobs.jsonl"
    jobs_file.write_text('{"command": ["true"]}\n{"command": ["true"], "reservation": "nosuch"}\n')
    from_file = corral.cli("submit", "-f", str(jobs_file), check=False)
    assert from_file.returncode != 0 and REFUSED in from_file.stderr
    by_api = corral.api(
        "POST",
        "/api/jobs",
        json={"jobs": [{"command": ["true"], "reservation": "team-a"}, {"command": ["true"], "reservation": "nosuch"}]},
    )
    assert by_api.status_code == 422 and by_api.json()["detail"][0].startswith(f"jobs.1.reservation: {REFUSED}")
    # Nothing of a refused submission is stored: not even the file's or the batch's valid jobs.
    assert list(corral.jobs()) == [first]
    assert [e["job_id"] for e in corral.cli_json("events", "--kind", "job.queued")] == [first]

    # The reservation the node holds is taken, and its job may run on the reserved node.
    mine = int(corral.cli("submit", "--reservation", "team-a", "--", "true").stdout)
    wait_until(lambda: corral.jobs()[mine]["state"] == "complete", 60, "the reservation's job to run")
    corral.cli("cancel", str(first))


def test_a_job_whose_reservation_is_removed_while_it_waits_stays_queued_and_says_why(corral: Corral) -> None:
    corral.start()
    first = int(corral.cli("submit", "--", "sleep", "300").stdout)
    wait_until(lambda: corral.jobs()[first]["state"] == "running", 60, "the first job to run")
    [node] = corral.live_nodes()
    corral.cli("node", node["id"], "reservation=team-a")
    waiting = int(corral.cli("submit", "--reservation", "team-a", "--not-before", "2099-01-01", "--", "true").stdout)

    corral.cli("node", node["id"], "--unset", "reservation")  # scontrol delete reservation
    corral.cli("update", str(waiting), "--not-before", "now")
    why = "ReservationDeleted: reservation 'team-a' is in force on no node and no instance type"
    explained = wait_until(
        lambda: (e := corral.cli_json("explain", str(waiting)))["wait_reason"].startswith(why) and e,
        60,
        "the job to say its reservation is gone",
    )
    assert explained["state"] == "queued" and not explained["unplaceable"]
    assert corral.cli_json("job", str(waiting))["attempts"] == 0  # not run elsewhere meanwhile

    # Put back, the reservation takes its job again.
    corral.cli("node", node["id"], "reservation=team-a")
    wait_until(lambda: corral.jobs()[waiting]["state"] == "complete", 60, "the job to run in its reservation")
    corral.cli("cancel", str(first))


def test_an_idle_node_an_operator_reserved_is_kept_for_it_until_the_reservation_ends(
    corral: Corral, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reserved for a team until Friday, a node had been shut down after its idle grace (2 s
    here), the reservation dying with it, and `corral nodes` did not say it was reserved. It is
    kept while it idles, takes its reservation's work, and once the reservation ends it is
    drained as any idle node is."""
    monkeypatch.setenv("COLUMNS", "250")  # `corral nodes` on a wide terminal: the note unwrapped
    corral.start()
    first = int(corral.cli("submit", "--", "sleep", "300").stdout)
    wait_until(lambda: corral.jobs()[first]["state"] == "running", 60, "the first job to run")
    [node] = corral.live_nodes()
    reserved = node["id"]
    until = round(time.time() + 3600)
    corral.cli("node", reserved, "reservation=team-a", f"reservation_until={until}")
    assert f"reservation=team-a until {when(until)}" in corral.cli("nodes").stdout
    corral.cli("cancel", str(first))

    def reserved_row() -> dict[str, Any]:
        rows = {n["id"]: n for n in corral.cli_json("nodes")}
        assert reserved in rows, f"the reserved node was shut down: {corral.cli_json('events', '--node', reserved)}"
        return rows[reserved]

    # Idle for three times its idle grace, and still up (seen by `corral nodes --json`).
    kept = wait_until(lambda: (row := reserved_row())["idle_for"] and row["idle_for"] > 6 and row, 60, "idle time")
    assert kept["state"] == "idle" and kept["attributes"]["reservation"] == "team-a"
    mine = int(corral.cli("submit", "--reservation", "team-a", "--", "true").stdout)
    wait_until(lambda: corral.jobs()[mine]["state"] == "complete", 60, "the reservation's job to run")
    assert corral.jobs()[mine]["node"] == reserved and [n["id"] for n in corral.live_nodes()] == [reserved]

    # Its end brought forward to a moment from now: from then the normal idle grace applies.
    ends = time.time() + 3
    corral.cli("node", reserved, f"reservation_until={ends:.3f}")
    wait_until(lambda: reserved not in {n["id"] for n in corral.live_nodes()}, 60, "the node to be released")
    events = corral.cli_json("events", "--node", reserved)
    [drained] = [e for e in events if e["kind"] == "node.draining"]
    assert drained["at"] >= ends and "idle exceeded" in drained["message"]


def test_a_queued_job_is_moved_into_a_reservation_in_force_and_refused_one_in_force_nowhere(corral: Corral) -> None:
    """Slurm's `scontrol update JobId= ReservationName=`: the job's reservation could only be given
    at submission. A reservation in force nowhere is refused in the words of a submission's
    refusal, and the job keeps what it had; '' takes the job out of its reservation."""
    corral.start()
    first = int(corral.cli("submit", "--", "sleep", "300").stdout)
    wait_until(lambda: corral.jobs()[first]["state"] == "running", 60, "the first job to run")
    [node] = corral.live_nodes()
    corral.cli("node", node["id"], "reservation=team-a")
    waiting = int(corral.cli("submit", "--not-before", "2099-01-01", "--", "true").stdout)

    refused = corral.cli("update", str(waiting), "--reservation", "nosuch", check=False)
    assert refused.returncode != 0
    assert f"--reservation: {REFUSED} on any node or instance type (in force: team-a)" in refused.stderr
    assert corral.cli_json("job", str(waiting))["reservation"] == ""

    moved = corral.cli("update", str(waiting), "--reservation", "team-a").stdout
    assert moved == f"{waiting}: reservation none -> team-a\n"
    assert corral.cli_json("job", str(waiting))["reservation"] == "team-a"
    out = corral.cli("update", str(waiting), "--reservation", "").stdout
    assert out == f"{waiting}: reservation team-a -> none\n"
    corral.cli("update", str(waiting), "--reservation", "team-a")
    events = corral.cli_json("events", "--job", str(waiting), "--kind", "job.updated")
    assert [e["message"] for e in events] == [
        "reservation none -> team-a",
        "reservation team-a -> none",
        "reservation none -> team-a",
    ]
    # It runs on the reserved node, as one submitted with --reservation does.
    corral.cli("cancel", str(first))
    corral.cli("update", str(waiting), "--not-before", "now")
    wait_until(lambda: corral.jobs()[waiting]["state"] == "complete", 60, "the moved job to run")
    assert corral.jobs()[waiting]["node"] == node["id"]

    # Only while queued, as its resources.
    done = corral.cli("update", str(waiting), "--reservation", "", check=False)
    assert done.returncode != 0 and "a finished job cannot change" in done.stderr


def test_a_maintenance_window_set_ahead_takes_until_then_only_jobs_that_end_by_its_start(
    corral: Corral, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Slurm's reservation StartTime: the node runs, until the window opens, the jobs whose time
    limits end by then, and keeps off one that would run into it."""
    monkeypatch.setenv("COLUMNS", "250")
    corral.start()
    first = int(corral.cli("submit", "--", "sleep", "300").stdout)
    wait_until(lambda: corral.jobs()[first]["state"] == "running", 60, "the first job to run")
    [node] = corral.live_nodes()
    start = round(time.time() + 3600)
    iso = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start))
    corral.cli("node", node["id"], "reservation=maint", f"reservation_start={iso}")
    assert f"reservation=maint from {when(start)}" in corral.cli("nodes").stdout

    short = int(corral.cli("submit", "--time-limit", "30m", "--", "true").stdout)
    wait_until(lambda: corral.jobs()[short]["state"] == "complete", 60, "the short job to run")
    assert corral.jobs()[short]["node"] == node["id"]
    # One that would run into the window goes to a node booted for it (the reserved one had room).
    long = int(corral.cli("submit", "--time-limit", "2h", "--", "true").stdout)
    wait_until(lambda: corral.jobs()[long]["state"] == "complete", 90, "the long job to run elsewhere")
    assert corral.jobs()[long]["node"] != node["id"]
    corral.cli("cancel", str(first))
