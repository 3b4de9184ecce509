"""Users with tokens of their own, over real HTTP against corral's server app: as in Slurm, every user
submits and sees the queue, but changes only their own jobs ("Access/permission denied"), cannot
submit as another, and an admin (the data directory's token, or a user added with --admin) may do
anything."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner, Result

from corral.cli import app
from corral.config import Config
from corral.store import Store
from tests.support import served_app

OPERATOR = "t"  # served_app's API token: the data directory's `token`


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Store]]:
    with served_app(tmp_path) as served:
        yield served


def api(url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30)


def add_user(url: str, name: str, admin: bool = False) -> str:
    with api(url, OPERATOR) as operator:
        added = operator.post("/api/users", json={"name": name, "admin": admin})
    assert added.status_code == 201, added.text
    token: str = added.json()["token"]
    return token


def submit(client: httpx.Client, **job: Any) -> int:
    answer = client.post("/api/jobs", json={"jobs": [{"command": ["sleep", "60"], **job}]})
    assert answer.status_code == 201, answer.text
    job_id: int = answer.json()["ids"][0]
    return job_id


def test_a_user_cannot_change_anothers_job_which_stays_queued_and_an_admin_can(served: tuple[str, Store]) -> None:
    url, _ = served
    alice, bob, carol = add_user(url, "alice"), add_user(url, "bob"), add_user(url, "carol", admin=True)
    with api(url, alice) as as_alice, api(url, bob) as as_bob, api(url, carol) as as_carol:
        job = submit(as_bob)
        assert as_alice.get(f"/api/jobs/{job}").json()["user"] == "bob"  # a token's jobs are its user's

        changes = [
            ("POST", f"/api/jobs/{job}/cancel", None, "cancel"),
            ("POST", f"/api/jobs/{job}/hold", None, "hold"),
            ("POST", f"/api/jobs/{job}/release", None, "release"),
            ("POST", f"/api/jobs/{job}/requeue", None, "requeue"),
            ("PATCH", f"/api/jobs/{job}", {"priority": 0}, "change the priority of"),
            ("POST", f"/api/jobs/{job}/update", {"name": "mine"}, "update"),
            ("PATCH", f"/api/arrays/{job}", {"throttle": 1}, "throttle"),
            ("GET", f"/api/jobs/{job}/logs", None, "read the output of"),
        ]
        for method, path, body, action in changes:
            refused = as_alice.request(method, path, json=body)
            assert refused.status_code == 403, (path, refused.text)
            assert refused.json()["detail"] == (
                f"Access/permission denied: job {job} belongs to bob: only its owner may {action} it"
                " (you are alice; an admin may)"
            )
        untouched = as_bob.get(f"/api/jobs/{job}").json()
        assert (untouched["state"], untouched["held"], untouched["cancel_requested"]) == ("queued", False, False)
        assert (untouched["name"], untouched["priority"]) == ("", 1)

        # Reading is everyone's (squeue, scontrol show job, sacct).
        for path in ("/api/jobs", f"/api/jobs/{job}", f"/api/jobs/{job}/explain", "/api/nodes", "/api/events"):
            assert as_alice.get(path).status_code == 200, path

        assert as_bob.post(f"/api/jobs/{job}/hold").status_code == 200
        assert as_alice.get(f"/api/jobs/{job}").json()["wait_reason"] == "held by bob"  # not "by an operator"
        assert as_carol.post(f"/api/jobs/{job}/cancel").status_code == 200
        asked = as_bob.get(f"/api/jobs/{job}").json()
        # Who asked is on the job itself (not only in its event), as the listing shows it too.
        assert (asked["cancel_requested"], asked["cancelled_by"]) == (True, "carol")
        assert [j["cancelled_by"] for j in as_bob.get("/api/jobs").json() if j["id"] == job] == ["carol"]
        # Whoever changed a job is named in its events (the operator's token names no one, as before).
        said = [(e["kind"], e["message"]) for e in as_bob.get("/api/events", params={"job": job}).json()]
        assert said[-2:] == [("job.held", "held by bob"), ("job.cancel_requested", "cancel requested (by carol)")]


def test_a_user_may_lower_their_jobs_priority_but_only_an_admin_raises_it(served: tuple[str, Store]) -> None:
    url, _ = served
    with api(url, add_user(url, "alice")) as as_alice, api(url, OPERATOR) as operator:
        # Nor submits above the default: her job would pass everyone's (priority comes first in
        # every queue order), as the change she is refused below would make it.
        above = as_alice.post("/api/jobs", json={"jobs": [{"command": ["true"]}, {"command": ["true"], "priority": 5}]})
        assert above.status_code == 403
        assert above.json()["detail"] == [
            "jobs.1.priority: Access/permission denied: 5 is above 1, the most a user submits at (alice; an admin"
            " may submit higher, or raise it with corral priority)"
        ]
        assert as_alice.get("/api/jobs").json() == []
        assert as_alice.get(f"/api/jobs/{submit(as_alice, priority=1)}").json()["priority"] == 1
        job = submit(operator, priority=5, user="alice")
        assert as_alice.patch(f"/api/jobs/{job}", json={"priority": 3}).json()["priority"] == 3
        raised = as_alice.patch(f"/api/jobs/{job}", json={"priority": 9})
        assert raised.status_code == 403
        assert "only an admin raises a job's priority (3 to 9)" in raised.json()["detail"]
        assert operator.patch(f"/api/jobs/{job}", json={"priority": 9}).json()["priority"] == 9


def test_a_user_may_shorten_their_jobs_time_limit_but_only_an_admin_lengthens_it(served: tuple[str, Store]) -> None:
    url, _ = served
    with api(url, add_user(url, "alice")) as as_alice, api(url, OPERATOR) as operator:
        job = submit(as_alice, time_limit=3600)
        shortened = as_alice.post(f"/api/jobs/{job}/update", json={"time_limit": "30m"})
        assert shortened.json()["changes"] == {"time_limit": [3600, 1800]}
        # Longer, added to, or none at all (0): each would let the job hold its node past its promise.
        for change, said in (
            ({"time_limit": "2h"}, "1800 s to 7200 s"),
            ({"time_limit_add": "10m"}, "1800 s to 2400 s"),
            ({"time_limit": 0}, "1800 s to no limit"),
        ):
            refused = as_alice.post(f"/api/jobs/{job}/update", json=change)
            assert refused.status_code == 403, refused.text
            assert refused.json()["detail"] == (
                f"Access/permission denied: job {job}: only an admin lengthens a job's time limit ({said})"
                " (you are alice; an admin may)"
            )
        assert as_alice.get(f"/api/jobs/{job}").json()["time_limit"] == 1800

        # An array: one task that would be lengthened refuses the change for all of them.
        array = submit(as_alice, array="0-1")
        assert as_alice.post(f"/api/jobs/{array}_1/update", json={"time_limit": 600}).status_code == 200
        whole = as_alice.post(f"/api/jobs/{array}/update", json={"time_limit": 900})
        assert whole.status_code == 403, whole.text
        assert [as_alice.get(f"/api/jobs/{array}_{task}").json()["time_limit"] for task in (0, 1)] == [None, 600]

        assert operator.post(f"/api/jobs/{job}/update", json={"time_limit": "2h"}).json()["changes"] == {
            "time_limit": [1800, 7200]
        }


def test_a_users_bulk_cancel_takes_only_their_own_jobs_and_naming_another_is_refused(
    served: tuple[str, Store],
) -> None:
    url, _ = served
    with api(url, add_user(url, "alice")) as as_alice, api(url, add_user(url, "bob")) as as_bob:
        mine, theirs = submit(as_alice, name="x"), submit(as_bob, name="x")

        refused = as_alice.post("/api/jobs/cancel", json={"user": "bob"})
        assert refused.status_code == 403
        assert "the jobs of bob are theirs: a user cancels only their own" in refused.json()["detail"]

        assert as_alice.post("/api/jobs/cancel", json={"name": "x"}).json()["ids"] == [mine]
        assert as_bob.get(f"/api/jobs/{theirs}").json()["cancel_requested"] is False


def test_a_user_cannot_submit_as_another_but_an_admin_can(served: tuple[str, Store]) -> None:
    url, _ = served
    with api(url, add_user(url, "alice")) as as_alice, api(url, OPERATOR) as operator:
        refused = as_alice.post(
            "/api/jobs", json={"jobs": [{"command": ["true"], "user": "alice"}, {"command": ["true"], "user": "bob"}]}
        )
        assert refused.status_code == 403
        assert refused.json()["detail"] == [
            "jobs.1.user: Access/permission denied: 'bob' is not you (alice): a user submits only as themselves"
            " (an admin may submit as another)"
        ]
        assert as_alice.get("/api/jobs").json() == []  # nothing of it was stored

        # The operator's token: a job naming a user is theirs, one naming none the CLI's login name's.
        assert operator.get(f"/api/jobs/{submit(operator, user='bob')}").json()["user"] == "bob"
        answer = operator.post("/api/jobs", json={"jobs": [{"command": ["true"]}], "submitter": "ops"})
        assert operator.get(f"/api/jobs/{answer.json()['ids'][0]}").json()["user"] == "ops"


def test_a_removed_users_token_is_refused_at_once_and_both_are_events(served: tuple[str, Store]) -> None:
    url, _ = served
    alice = add_user(url, "alice")
    with api(url, alice) as as_alice, api(url, OPERATOR) as operator:
        job = submit(as_alice)
        assert operator.delete("/api/users/alice").status_code == 200

        for refused in (as_alice.get("/api/jobs"), as_alice.post(f"/api/jobs/{job}/cancel")):
            assert refused.status_code == 401
            assert refused.json()["detail"].startswith("wrong API token")
        assert operator.get(f"/api/jobs/{job}").json()["state"] == "queued"  # their jobs stay
        events = operator.get("/api/events", params={"kind": "user."}).json()
        assert [(e["kind"], e["message"]) for e in events] == [
            ("user.added", "user alice added"),
            ("user.removed", "user alice removed: its token is refused"),
        ]
        assert operator.delete("/api/users/alice").json()["detail"] == "no user 'alice'"


def test_nodes_the_fleet_the_notifier_and_users_are_for_admins(served: tuple[str, Store]) -> None:
    url, _ = served
    alice = add_user(url, "alice")
    with api(url, alice) as as_alice:
        for method, path, body in [
            ("PATCH", "/api/nodes/n-1", {"rack": "r1"}),
            ("POST", "/api/backoffs/clear", {"all": True}),
            ("GET", "/api/notify", None),
            ("POST", "/api/notify/skip", None),
            ("GET", "/api/users", None),
            ("POST", "/api/users", {"name": "mallory", "admin": True}),
            ("DELETE", "/api/users/alice", None),
        ]:
            refused = as_alice.request(method, path, json=body)
            assert refused.status_code == 403, (path, refused.text)
            assert refused.json()["detail"] == (
                f"Access/permission denied: {method} {path} is for an admin (the data directory's token, or a user"
                " added with --admin); you are user alice"
            )
        assert as_alice.get("/api/whoami").json()["name"] == "alice"
        # `corral node ID` with nothing to change shows the node: a read, which is everyone's.
        unchanged = as_alice.patch("/api/nodes/n-1", json={"set": {}, "unset": [], "rack": None})
        assert unchanged.status_code == 404 and unchanged.json()["detail"].startswith("no ")
    # The dashboard shows every job and the fleet's bill: an admin's page, not a user's.
    assert httpx.get(f"{url}/dashboard", params={"token": alice}).status_code == 401
    assert httpx.get(f"{url}/dashboard", params={"token": add_user(url, "carol", admin=True)}).status_code == 303


def test_a_user_name_is_checked_and_taken_once(served: tuple[str, Store]) -> None:
    url, _ = served
    add_user(url, "alice")
    with api(url, OPERATOR) as operator:
        bad = operator.post("/api/users", json={"name": "bob smith"})
        assert bad.status_code == 422 and "'bob smith' is not a user name" in bad.json()["detail"][0]
        again = operator.post("/api/users", json={"name": "alice"})
        assert again.status_code == 409 and "user 'alice' exists already" in again.json()["detail"]
        assert [u["name"] for u in operator.get("/api/users").json()] == ["alice"]


def test_the_cli_adds_a_user_whose_token_file_acts_as_them(served: tuple[str, Store], tmp_path: Path) -> None:
    """Through the CLI's own code (Typer's runner: a process per command took 3 s each here)."""
    url, _ = served
    runner = CliRunner()
    operator = {"CORRAL_URL": url, "CORRAL_TOKEN": OPERATOR}

    def cli(env: Mapping[str, str | None], *args: str) -> Result:
        return runner.invoke(app, list(args), env={**env, "COLUMNS": "200"})

    added = cli(operator, "users", "add", "alice")
    assert added.exit_code == 0, added.stderr
    assert "user alice added: the token above is shown once" in added.stderr
    assert "alice" in cli(operator, "users", "list").stdout
    bobs = cli(operator, "submit", "--user", "bob", "--", "true").stdout.strip()  # the operator may

    # alice's own token file, as she keeps it; no CORRAL_TOKEN, no readable data directory.
    token_file = tmp_path / "config" / "corral" / "token"
    token_file.parent.mkdir(parents=True)
    token_file.write_text(added.stdout)
    alice = {
        "CORRAL_URL": url,
        "CORRAL_TOKEN": None,
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "CORRAL_HOME": str(tmp_path / "none"),
    }

    mine = cli(alice, "submit", "--", "true").stdout.strip()
    assert "the dashboard is the operator's and the admins' (you are user alice)" in cli(alice, "dashboard").stderr
    assert "alice" in cli(operator, "job", mine).stdout
    refused = cli(alice, "cancel", bobs)
    assert refused.exit_code != 0 and f"Access/permission denied: job {bobs} belongs to bob" in refused.stderr
    impersonating = cli(alice, "submit", "--user", "bob", "--", "true")
    assert impersonating.exit_code != 0 and "'bob' is not you (alice)" in impersonating.stderr

    # The same machine's operator, with alice's file in reach: the data directory's server goes with
    # its token.
    home = tmp_path / "home"
    home.mkdir()
    (home / "server.json").write_text(json.dumps({"url": url, "pid": os.getpid()}))
    (home / "token").write_text(OPERATOR)
    on_the_server = {**alice, "CORRAL_URL": None, "CORRAL_HOME": str(home)}
    assert cli(on_the_server, "users", "whoami").stdout == "the operator (admin)\n"

    assert cli(operator, "users", "remove", "alice").stdout == "user alice removed: their token is refused\n"
    gone = cli(alice, "jobs")
    assert gone.exit_code != 0 and "wrong API token" in gone.stderr
    assert f"(the token of {token_file})" in gone.stderr


def test_adding_a_user_under_the_loopback_cloud_warns_that_their_jobs_can_read_the_operators_token(
    tmp_path: Path,
) -> None:
    """The loopback cloud runs each job as corral's own user on corral's machine: a user's job printed
    CORRAL_HOME/token (a real corral showed it: `cat ../../../../../token` from the attempt's
    directory), which made the user the operator."""
    with served_app(tmp_path) as (url, _):
        added = CliRunner().invoke(app, ["users", "add", "alice"], env={"CORRAL_URL": url, "CORRAL_TOKEN": OPERATOR})
    assert added.exit_code == 0, added.stderr
    said = " ".join(added.stderr.split())
    assert "warning: the loopback cloud runs every job as this corral's own user on this machine" in said
    assert 'give users tokens of their own only with cloud.driver = "ec2"' in said
    # In front of Slurm corral runs no job on its own machine: nothing to warn of.
    (tmp_path / "slurm").mkdir()
    slurm = Config(executor="slurm", instance_types=[])
    with served_app(tmp_path / "slurm", slurm) as (url, _), api(url, OPERATOR) as operator:
        answer = operator.post("/api/users", json={"name": "bob"})
    assert answer.status_code == 201 and answer.json()["warnings"] == []


def test_a_user_has_at_most_max_submitted_jobs_open_and_a_submission_past_it_queues_nothing(tmp_path: Path) -> None:
    # Without a bound, one user's loop of submissions (100,000 jobs each) grew the store and every
    # pass without end.
    config = Config.model_validate({"policy": {"users": {"max_submitted_jobs": 3, "by_user": {"ci": {}}}}})
    with served_app(tmp_path, config) as (url, store):
        alice, ci = add_user(url, "alice"), add_user(url, "ci")
        with api(url, alice) as as_alice, api(url, ci) as as_ci:
            submit(as_alice)
            submit(as_alice)
            past = as_alice.post("/api/jobs", json={"jobs": [{"command": ["true"], "array": "0-1"}]})
            assert past.status_code == 403
            assert past.json()["detail"] == [
                "QOSMaxSubmitJobPerUserLimit: alice has 2 open jobs (queued, claimed or running) and submits 2 more:"
                " policy.users.max_submitted_jobs lets a user have 3 at most; nothing of the submission is queued"
            ]
            assert len(store.list_job_rows()) == 2
            submit(as_alice)  # the third fits
            # Their own limits instead ({}: none).
            answer = as_ci.post("/api/jobs", json={"jobs": [{"command": ["true"], "array": "0-9"}]})
            assert answer.status_code == 201, answer.text
