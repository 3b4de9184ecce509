"""Bad input gets an error that names the field, line or value, and stores nothing."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import text

from corral.server.app import WRONG_TOKEN
from corral.store import Store
from corral.store.migrate import alembic_config
from tests.e2e.conftest import CORRAL, Corral, new_corral


def keeping(corral: Corral) -> Corral:
    corral.start()
    corral.cli("submit", "--name", "keeper", "--", "true")
    return corral


@pytest.fixture
def running(corral: Corral) -> Corral:
    return keeping(corral)


@pytest.fixture(scope="module")
def refusing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Corral]:
    """One running corral (per test worker) for the tests whose requests are all refused: each of
    them asserts that the keeper is still the only job, which holds after the others' refusals as
    after its own, and a corral started for each of them cost the suite several minutes."""
    for corral in new_corral(tmp_path_factory.mktemp("refusing")):
        yield keeping(corral)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--ram", "-1", "--", "x"], "--ram: a size cannot be negative"),
        (["--ram", "lots", "--", "x"], "--ram: not a size: 'lots'"),
        (["--priority", "-1", "--", "x"], "--priority: Input should be greater than or equal to 0"),
        (["--vcpus", "0", "--", "x"], "--vcpus: Input should be greater than 0"),
        (["--", ""], "--command: the command is empty"),
        (["--", "   "], "--command: the command is empty"),
        (["--vcpus", "inf", "--", "x"], "--vcpus: Input should be a finite number"),
        (["--vcpus", "nan", "--", "x"], "--vcpus: Input should be a finite number"),
        ([], "no command"),
        (["--not-before", "tomorrow", "--", "x"], "--not-before: not a time: 'tomorrow'"),
        (["--on-node-failure", "requeue-later", "--", "x"], "--on-node-failure: unknown action 'requeue-later'"),
        (["--on-node-failure", "migrate", "--", "x"], "--on-node-failure: 'migrate' is not offered: corral cannot"),
        (["--array", " ", "--", "x"], "--array: no task ids"),
    ],
)
def test_malformed_submissions_are_refused_by_field(refusing: Corral, args: list[str], message: str) -> None:
    result = refusing.cli("submit", *args, check=False)
    assert result.returncode != 0
    assert message in result.stderr
    assert [j["name"] for j in refusing.jobs().values()] == ["keeper"]


def test_a_job_file_with_one_bad_line_submits_nothing_and_names_the_line(refusing: Corral, tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text(
        '{"command": ["echo", "1"]}\n\n{"command": ["echo", "2"], "rma": "1GiB"}\n{"command": []}\n'
        '{"command": ["echo", "3"], "priority": false}\n'  # not 0 (which would cancel it)
        '{"command": ["echo", "4"], "ram": "1GiB", "ram": "64GiB"}\n'  # json would keep the last
        '{"command": ["echo", "5"], "gpus": true, "not_before": false}\n'  # not 1 GPU, not the epoch
        '{"command": ["echo", "6"], "locality": {"near": ["7", "12a"], "far": ["tag:"]}}\n'
    )
    result = refusing.cli("submit", "-f", str(jobs), check=False)
    assert result.returncode != 0
    assert "line 3: rma: unknown field" in result.stderr
    assert "line 4: command: the command is empty" in result.stderr
    assert "line 5: priority: Input should be a valid integer" in result.stderr
    assert "line 6: key 'ram' is given twice" in result.stderr
    assert "line 7: gpus: must be a number, not true" in result.stderr
    assert "line 7: not_before: not a time: false" in result.stderr
    # Placement would only have listed them as not understood, pass after pass.
    assert "line 8: locality.near.1: not a job id or tag:NAME: '12a'" in result.stderr
    assert "line 8: locality.far.0: not a job id or tag:NAME: 'tag:'" in result.stderr
    assert len(refusing.jobs()) == 1
    # A JSON array of jobs, as a .json file holds one: it read "(job): Input should be a valid
    # dictionary or instance of JobRequest", and spread over lines, "not valid JSON: Expecting value".
    forms = "a job file is JSON Lines, one job's object per line, or a YAML list of jobs (.yaml, .yml)"
    array = tmp_path / "jobs.json"
    array.write_text('[{"command": ["echo", "1"]}]\n"echo 2"\n')
    result = refusing.cli("submit", "-f", str(array), check=False)
    assert f"{array}: line 1: not a job, but a list ({forms})" in result.stderr, result.stderr
    assert f"{array}: line 2: not a job, but a string ({forms})" in result.stderr
    array.write_text('[\n  {"command": ["echo", "1"]}\n]\n')
    result = refusing.cli("submit", "-f", str(array), check=False)
    assert f"{array}: line 1: not valid JSON: Expecting value ({forms})" in result.stderr, result.stderr
    assert len(refusing.jobs()) == 1


def test_yaml_job_files_are_read_too(running: Corral, tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.YAML"  # a suffix in capitals (it was read as JSON Lines)
    jobs.write_text(
        "jobs:\n  - command: [echo, a]\n    ram: 512MiB\n  - command: [echo, b]\n    nodes: 2\n"
        "    on_node_failure: cancel\n"
    )
    ids = running.cli("submit", "-f", str(jobs)).stdout.split()
    assert len(ids) == 2
    second = running.cli_json("job", ids[1])
    assert second["nodes"] == 2 and second["on_node_failure"] == "cancel"
    assert running.cli_json("job", ids[0])["on_node_failure"] is None


def test_the_http_api_refuses_a_whole_batch_naming_the_bad_field(refusing: Corral) -> None:
    body = {
        "jobs": [
            {"command": ["ok"]},
            {"command": ["bad"], "ram": "-5", "colour": "red"},
            {"command": ["bad"], "on_node_failure": "ignore"},
            {"command": ["bad"], "vcpus": True, "nodes": False},
            {"command": ["bad"], "locality": {"near": ["tag:db"], "far": ["web"]}},
        ]
    }
    response = refusing.api("POST", "/api/jobs", json=body)
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert "jobs.1.ram: a size cannot be negative" in detail and "jobs.1.colour: unknown field" in detail
    assert any(
        line.startswith("jobs.2.on_node_failure: 'ignore' is not offered: a lost node is shut down") for line in detail
    )
    assert "jobs.3.vcpus: must be a number, not true" in detail
    assert "jobs.3.nodes: must be a number, not false" in detail
    assert "jobs.4.locality.far.0: not a job id or tag:NAME: 'web'" in detail
    assert len(refusing.jobs()) == 1


def test_the_api_wants_the_token(refusing: Corral) -> None:
    import httpx

    response = httpx.get(f"http://127.0.0.1:{refusing.port}/api/jobs", headers={"Authorization": "Bearer wrong"})
    assert response.status_code == 401
    # A token that is not ASCII (a pasted typographic quote, say) is as wrong, not a server error.
    for token in (b"Bearer \xe9t\xe9", "Bearer ‘x’".encode()):
        response = httpx.get(f"http://127.0.0.1:{refusing.port}/api/jobs", headers={b"Authorization": token})
        assert response.status_code == 401 and response.json()["detail"] == WRONG_TOKEN


def test_config_check_names_the_key_and_reason(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(
        '[policy.lifecycle]\nidle_grace = "soon"\n[server]\nprot = 1\n[[instance_types]]\nname = "x"\nvcpus = 2\n'
        '[loop]\ninterval = "[red]"\n'
    )
    result = subprocess.run([CORRAL, "config", "check", str(bad)], capture_output=True, text=True)
    assert result.returncode == 2
    assert "policy.lifecycle.idle_grace: not a duration: 'soon'" in result.stderr
    assert "loop.interval: not a duration: '[red]'" in result.stderr  # shown as written, not taken for markup
    assert "server.prot: unknown key" in result.stderr
    assert "instance_types.0.ram: Field required" in result.stderr
    good = tmp_path / "good.yaml"
    good.write_text("policy:\n  lifecycle:\n    idle_grace: 5m\n")
    assert subprocess.run([CORRAL, "config", "check", str(good)], capture_output=True).returncode == 0
    one = tmp_path / "one.toml"
    one.write_text('[[instance_types]]\nname = "a"\nvcpus = 2\nram = "4GiB"\nprice_per_hour = 0.1\n')
    checked = subprocess.run([CORRAL, "config", "check", str(one)], capture_output=True, text=True).stdout
    assert checked.startswith(f"{one}: OK (1 instance type, store ")  # it read "1 instance types"

    # Valid, but nothing could ever boot: said, and still OK (it may be meant for a while).
    capped = tmp_path / "capped.toml"
    capped.write_text("[policy.boot]\nmax_cost_per_hour = 0.01\n")
    result = subprocess.run([CORRAL, "config", "check", str(capped)], capture_output=True, text=True)
    assert result.returncode == 0
    assert "warning: policy.boot.max_cost_per_hour ($0.01/h) is below every instance type's price" in result.stdout


def test_a_job_no_instance_type_can_hold_is_marked_unplaceable_not_left_silently(running: Corral) -> None:
    from tests.e2e.conftest import wait_until

    job_id = running.cli("submit", "--ram", "40GiB", "--", "true").stdout.strip()
    # (Submitted now, to run on the keeper's node while the other is judged.)
    ran = running.cli("submit", "--near", "99999", "--far", "tag:nosuch", "--", "true").stdout.strip()
    job = wait_until(lambda: (j := running.cli_json("job", job_id))["unplaceable"] and j, 30, "the job to be marked")
    assert job["state"] == "queued"
    assert job["wait_reason"] == "no instance type has 40 GiB RAM (the largest has 8 GiB RAM)"
    shown = running.cli("explain", job_id).stdout
    assert "UNPLACEABLE: no instance type has 40 GiB RAM" in shown
    # The filter also by seed 003's name (DAPI's), which a user may search for.
    assert "(hard-filter-min-ram)" in shown
    # And the listing marks it (before, only `corral job` and `corral explain` did).
    assert "UNPLACEABLE" in running.cli("jobs").stdout
    assert [e["kind"] for e in running.cli_json("events", "--job", job_id)] == ["job.queued", "job.unplaceable"]
    # A placed job's hints that named no running job: before, `corral explain` printed its scores
    # only, and that its hints constrained nothing was in the JSON alone (as are hints dropped for room).
    wait_until(lambda: running.cli_json("job", ran)["state"] == "complete", 60, "the job with hints to run")
    assert "note: locality: not running, so ignored: 99999, tag:nosuch" in running.cli("explain", ran).stdout


def test_explain_follows_the_fleet_while_the_reason_stays_the_same(running: Corral) -> None:
    from tests.e2e.conftest import wait_until

    waiting = running.cli("submit", "--ram", "40GiB", "--", "true").stdout.strip()

    def explanation() -> dict[str, Any]:
        data: dict[str, Any] = running.cli_json("explain", waiting)["explanation"] or {}
        return data

    # The fixture's job booted a node; once it is shut down, the explanation counts no node.
    first = wait_until(
        lambda: not running.cli_json("nodes") and (e := explanation()).get("nodes") == 0 and e,
        60,
        "the first node to go, and the explanation to say so",
    )
    # No filter table of 0 of 0 nodes each: the line that says why.
    said = running.cli("explain", waiting).stdout
    assert "no live node to filter" in said and "INSUFFICIENT_RAM" not in said, said
    sleeper = running.cli("submit", "--", "sleep", "3").stdout.strip()
    # A node boots for the other job: the waiting job's one-line reason stays the same, but what
    # it says about the nodes must follow (it used to keep the first pass's "0 of 0 nodes").
    seen = wait_until(lambda: (e := explanation())["nodes"] == 1 and e, 60, "the explanation to see the new node")
    (ram,) = [f for f in seen["filters"] if f["code"] == "INSUFFICIENT_RAM"]
    assert ram["sample"] == [running.cli_json("job", sleeper)["node"]] and seen["at"] > first["at"]
    assert "as of" in running.cli("explain", waiting).stdout
    # The node idles out and is shut down: the explanation says so too.
    wait_until(lambda: explanation()["nodes"] == 0, 60, "the explanation to lose the node")
    reason = running.cli_json("job", waiting)["wait_reason"]
    assert reason == "no instance type has 40 GiB RAM (the largest has 8 GiB RAM)"


def test_a_second_corral_on_the_same_data_directory_or_port_is_refused(running: Corral, tmp_path: Path) -> None:
    # A second corral on the same data directory would share the first's dispatcher id, and its
    # stop would requeue the first's work and destroy its fleet.
    command = [CORRAL, "run", "--config", str(running.config), "--port", "0"]
    second = subprocess.run(command, env=running.env, capture_output=True, text=True, timeout=60)
    assert second.returncode != 0
    assert f"another corral is running with the data directory {running.home}" in second.stderr
    assert running.cli_json("nodes") is not None  # the first one still answers, its fleet untouched

    other_home = dict(running.env, CORRAL_HOME=str(tmp_path / "other"))
    command = [CORRAL, "run", "--config", str(running.config), "--port", str(running.port)]
    taken = subprocess.run(command, env=other_home, capture_output=True, text=True, timeout=60)
    assert taken.returncode != 0 and "Traceback" not in taken.stderr
    assert f"cannot listen on 127.0.0.1:{running.port}" in taken.stderr


BIG = 2**64  # past any integer column of the store (SQLite: 64 bits, PostgreSQL: 32)


@pytest.mark.parametrize(
    ("method", "path", "body", "message"),
    [
        ("GET", f"/api/jobs/{BIG}", None, "path.job_id: Input should be less than or equal to 2147483647"),
        ("POST", f"/api/jobs/{BIG}/cancel", None, "path.job_id: Input should be less than"),
        ("POST", f"/api/jobs/{BIG}/hold", None, "path.job_id: Input should be less than"),
        ("POST", f"/api/jobs/{BIG}/release", None, "path.job_id: Input should be less than"),
        ("PATCH", f"/api/jobs/{BIG}", {"priority": 1}, "path.job_id: Input should be less than"),
        ("PATCH", "/api/jobs/1", {"priority": BIG}, "priority: Input should be less than or equal to 1000000"),
        # false is no priority (pydantic took it for 0, which cancelled the job)
        ("PATCH", "/api/jobs/1", {"priority": False}, "priority: Input should be a valid integer"),
        ("GET", f"/api/jobs/{BIG}/logs", None, "path.job_id: Input should be less than"),
        ("GET", f"/api/jobs/1/logs?attempt={BIG}", None, "query.attempt: Input should be less than"),
        ("GET", f"/api/jobs/{BIG}/explain", None, "path.job_id: Input should be less than"),
        ("GET", f"/api/events?job={BIG}", None, "query.job: Input should be less than"),
        (
            "POST",
            "/api/agent/pair",
            {"node_id": "n-x", "boot_token": "t", "capacity": {"vcpus": 1, "ram_mib": 1024, "gpus": BIG}},
            "capacity.gpus: Input should be less than",
        ),
    ],
)
def test_numbers_too_large_to_store_are_refused_by_field_not_a_server_error(
    refusing: Corral, method: str, path: str, body: Any, message: str
) -> None:
    response = refusing.api(method, path, json=body)
    assert response.status_code == 422, response.text
    assert any(line.startswith(message) for line in response.json()["detail"]), response.json()
    assert [j["priority"] for j in refusing.jobs().values()] == [1]


def test_a_refused_option_is_named_as_the_cli_option(refusing: Corral) -> None:
    # The server names its query parameter ("query.limit"); the user typed --limit.
    result = refusing.cli("jobs", "--limit", "-1", check=False)
    assert result.returncode != 0 and "--limit: Input should be greater than" in result.stderr, result.stderr


def test_an_agent_sending_numbers_too_large_to_store_gets_them_named(running: Corral) -> None:
    import httpx

    from corral.core.model import InstanceType
    from corral.store import Store

    store = Store(f"sqlite:///{running.home / 'corral.db'}")
    try:
        store.create_node("n-fake", InstanceType("small", 2, 2048, 0.085), "boot-fake", time.time(), "test")
    finally:
        store.close()
    url = f"http://127.0.0.1:{running.port}/api/agent"
    capacity = {"vcpus": 2, "ram_mib": 2048}
    paired = httpx.post(f"{url}/pair", json={"node_id": "n-fake", "boot_token": "boot-fake", "capacity": capacity})
    assert paired.status_code == 200, paired.text
    headers = {"Authorization": f"Bearer {paired.json()['secret']}"}
    for path, body, message in [
        ("/ping", {"running": [BIG]}, "running.0: Input should be less than"),
        ("/ping", {"finished": [{"attempt_id": 1, "exit_code": BIG}]}, "finished.0.exit_code: Input should be"),
        (f"/attempts/{BIG}/started", {"pid": 1}, "path.attempt_id: Input should be less than"),
        ("/attempts/1/started", {"pid": BIG}, "pid: Input should be less than"),
        (f"/attempts/{BIG}/finished", {"exit_code": 0}, "path.attempt_id: Input should be less than"),
    ]:
        response = httpx.post(f"{url}{path}", json=body, headers=headers)
        assert response.status_code == 422, (path, response.text)
        assert any(line.startswith(message) for line in response.json()["detail"]), response.json()
    # A nan would be stored as NULL (SQLite), in a column that must not be: named too.
    nan = '{"used": {"vcpus": NaN}}'
    response = httpx.post(f"{url}/ping", content=nan, headers={**headers, "Content-Type": "application/json"})
    assert response.status_code == 422 and response.json()["detail"] == ["used.vcpus: Input should be a finite number"]


def test_what_users_wrote_is_listed_as_written_not_taken_for_markup(running: Corral) -> None:
    # A job name or argument in square brackets vanished from the listings, and one that closed a
    # tag it had not opened ('[/bold]') made corral jobs, job and events end in a traceback, for
    # every user of the corral.
    job_id = running.cli("submit", "--name", "[/bold]", "--", "echo", "[red]x[/red]").stdout.strip()
    listings = [
        running.cli("jobs").stdout,
        running.cli("job", job_id).stdout,
        running.cli("events", "--job", job_id).stdout,
    ]
    for listing in listings:
        assert "[/bold]" in listing
    assert "[red]x[/red]" in listings[1] and "[red]x[/red]" in listings[2]
    assert running.cli("explain", job_id).returncode == 0


def test_a_job_file_that_is_not_utf8_names_the_line_and_a_byte_order_mark_is_no_part_of_it(
    running: Corral, tmp_path: Path
) -> None:
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b'{"command": ["echo", "1"]}\n{"command": ["echo", "caf\xe9"]}\n')
    result = running.cli("submit", "-f", str(latin), check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"{latin}: line 2: not UTF-8 text" in result.stderr
    assert len(running.jobs()) == 1
    for name in ("bom.jsonl", "bom.yaml"):
        marked = tmp_path / name
        marked.write_bytes(
            b"\xef\xbb\xbf" + (b'{"command": ["echo", "1"]}\n' if name.endswith(".jsonl") else b"- command: [x]\n")
        )
        assert len(running.cli("submit", "-f", str(marked)).stdout.split()) == 1


def test_a_bad_url_token_or_server_file_is_an_error_that_names_it(running: Corral) -> None:
    def jobs(**env: str) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([CORRAL, "jobs"], env={**running.env, **env}, capture_output=True, text=True)
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
        return result

    assert "CORRAL_URL: not a valid URL: 'http://[::1'" in jobs(CORRAL_URL="http://[::1").stderr
    for token in ("‘pasted’", "two\nlines"):
        assert "CORRAL_TOKEN: the API token has a character no token has" in jobs(CORRAL_TOKEN=token).stderr
    # CORRAL_URL from another machine, where no token file is: this was "cannot reach corral at
    # http://...: Illegal header value b'Bearer '".
    elsewhere = running.home / "elsewhere"
    away = jobs(CORRAL_URL=running.base, CORRAL_HOME=str(elsewhere)).stderr
    assert "error: no API token: set CORRAL_TOKEN to the server's (the token file in its data directory;" in away
    assert f"{elsewhere}/token is missing or empty)" in away
    info = running.home / "server.json"
    written = info.read_text()
    info.write_text('{"url": ')  # cut short (a full disk)
    assert f"{info} is damaged (not JSON" in jobs().stderr
    for damaged in ('{"url": 8642, "pid": 1}', '{"url": null}', '["http://127.0.0.1:8642"]', '{"pid": 1}'):
        info.write_text(damaged)  # a hand edit: these were "cannot reach corral: Request URL is missing ..."
        assert f"{info} is damaged" in jobs().stderr
    info.write_text(written)


@pytest.mark.parametrize(
    ("damaged", "reason"),
    [
        ('{"url": "http://127.0.0.1:1", "pi', "not JSON"),
        ('{"url": "http://127.0.0.1:1", "pid": "1234"}', "no server pid in it"),
        ('{"pid": 1234}', "no server URL in it"),
    ],
)
def test_a_server_file_damaged_while_corral_runs_is_one_line_at_stop(corral: Corral, damaged: str, reason: str) -> None:
    """The stop read server.json to remove it: a damaged one was a traceback and 'Application
    shutdown failed', exit 1, after a stop that had done everything else."""
    corral.start()
    info = corral.home / "server.json"
    info.write_text(damaged)
    assert corral.stop(signal.SIGINT) in (0, 130)  # as any Ctrl-C ends it (it was 1)
    log = corral.server_log()
    assert "Traceback" not in log and "shutdown failed" not in log, log
    assert [line for line in log.splitlines() if f"{info} is damaged ({reason}" in line and "removed it" in line]
    assert not info.exists()  # the CLI says no corral runs, not that the file is damaged


def test_a_refusal_of_one_value_is_one_line(running: Corral) -> None:
    # It was "error: " and, on the line below, "  --ram: not a size: 'lots'".
    job = running.cli("submit", "--not-before", "2099-01-01", "--", "true").stdout.strip()
    bad = running.cli("update", job, "--ram", "lots", check=False)
    assert bad.returncode == 1
    assert bad.stderr == "error: --ram: not a size: 'lots' (write MiB, or e.g. '512MiB', '4GiB')\n"
    # The attribute as the operator typed it (drain=soon), not the API's body field ("set: drain: ...").
    refused = running.cli("node", "n-1a2b", "drain=soon", check=False)
    assert refused.returncode == 1 and refused.stderr == "error: drain: 'soon' is not true, false or now\n"


def test_cancel_goes_on_past_an_id_that_is_wrong(running: Corral) -> None:
    first, second = (running.cli("submit", "--", "sleep", "60").stdout.strip() for _ in range(2))
    result = running.cli("cancel", first, "999", second, check=False)
    assert result.returncode == 1
    assert "999: no job 999" in result.stderr
    assert result.stdout.splitlines() == [f"{first}: cancel requested", f"{second}: cancel requested"]
    assert all(running.cli_json("job", j)["cancel_requested"] for j in (first, second))


def test_corral_run_with_a_store_it_cannot_open_says_so(tmp_path: Path) -> None:
    config = tmp_path / "corral.toml"
    config.write_text(f'[store]\nurl = "sqlite:///{tmp_path}/no/such/dir/corral.db"\n')
    env = {**os.environ, "CORRAL_HOME": str(tmp_path / "home")}
    command = [CORRAL, "run", "--config", str(config), "--port", "0"]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    assert f"cannot open the store sqlite:///{tmp_path}/no/such/dir/corral.db (store.url)" in result.stderr


def test_corral_run_on_a_store_a_newer_corral_migrated_says_so(tmp_path: Path) -> None:
    # After an upgrade and a roll back to the older corral, `corral run` printed Alembic's
    # traceback, "Can't locate revision identified by '0099'", and nothing an operator could act on.
    home = tmp_path / "home"
    home.mkdir()
    store = Store(f"sqlite:///{home}/corral.db")
    store.migrate()
    head = ScriptDirectory.from_config(alembic_config(store.engine)).get_current_head()
    with store.engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0099'"))
    store.close()
    env = {**os.environ, "CORRAL_HOME": str(home)}
    command = [CORRAL, "run", "--port", "0"]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    assert (
        f"error: the store sqlite:///{home}/corral.db (store.url) was migrated by a newer corral"
        f": its schema is at revision 0099, which this corral does not know (its newest is {head}): run the newer"
        " corral, or restore a backup taken before the upgrade"
    ) in result.stderr, result.stderr


def test_the_openapi_spec_describes_the_errors_the_api_returns(refusing: Corral) -> None:
    # A client generated from the spec parsed a 422's detail as FastAPI's default objects (loc,
    # msg, type), where corral returns one line per bad value; 401 and 404 were not in it at all.
    spec = refusing.api("GET", "/openapi.json").json()
    schemas = spec["components"]["schemas"]

    def detail_of(operation: dict[str, Any], status: str) -> Any:
        ref = operation["responses"][status]["content"]["application/json"]["schema"]["$ref"]
        return schemas[ref.rsplit("/", 1)[1]]["properties"]["detail"]

    submit = spec["paths"]["/api/jobs"]["post"]
    assert detail_of(submit, "422") == {"items": {"type": "string"}, "title": "Detail", "type": "array"}
    refused = refusing.api("POST", "/api/jobs", json={"jobs": [{"command": ["x"], "ram": "-1"}]}).json()
    assert all(isinstance(line, str) for line in refused["detail"])
    show = spec["paths"]["/api/jobs/{job_id}"]["get"]
    assert detail_of(show, "401")["type"] == detail_of(show, "404")["type"] == "string"
    assert "application/octet-stream" in spec["paths"]["/api/jobs/{job_id}/logs"]["get"]["responses"]["200"]["content"]
    assert detail_of(spec["paths"]["/api/agent/attempts/{attempt_id}/started"]["post"], "409")["type"] == "string"


def test_a_node_writes_only_its_own_attempts_output_and_leaves_no_hole(running: Corral) -> None:
    """An agent's output chunks: another paired node's were taken once the attempt was known to the
    server, and an offset far past the end made a sparse file of that size."""
    import httpx

    from corral.core.model import InstanceType, Resources
    from corral.jobspec import JobRequest
    from corral.store import Store

    url = f"http://127.0.0.1:{running.port}/api/agent"
    store = Store(f"sqlite:///{running.home / 'corral.db'}")
    try:
        for node_id in ("n-own", "n-other"):
            store.create_node(node_id, InstanceType("small", 2, 2048, 0.085), f"boot-{node_id}", time.time(), "test")
        # Not before next year: the loop leaves it queued, and the test claims it for n-own.
        [job_id] = store.submit([JobRequest(command=["true"], not_before=time.time() + 365 * 86400)], time.time())
        attempt_id = store.claim(job_id, "d-test", ["n-own"], Resources(1, 1024), time.time())
    finally:
        store.close()
    headers = {}
    for node_id in ("n-own", "n-other"):
        body = {"node_id": node_id, "boot_token": f"boot-{node_id}", "capacity": {"vcpus": 2, "ram_mib": 2048}}
        paired = httpx.post(f"{url}/pair", json=body)
        assert paired.status_code == 200, paired.text
        headers[node_id] = {"Authorization": f"Bearer {paired.json()['secret']}"}
    log = f"{url}/attempts/{attempt_id}/log"

    assert httpx.post(log, params={"offset": 0}, content=b"hello ", headers=headers["n-own"]).status_code == 200
    for _ in range(2):  # whether the server knows the attempt already or not
        other = httpx.post(log, params={"offset": 6}, content=b"forged", headers=headers["n-other"])
        assert other.status_code == 404, other.text
    gap = httpx.post(log, params={"offset": 10**12}, content=b"x", headers=headers["n-own"])
    assert gap.status_code == 409 and "past the end of the output stored (6 bytes)" in gap.text
    assert httpx.post(log, params={"offset": 6}, content=b"world", headers=headers["n-own"]).status_code == 200
    assert running.cli("logs", str(job_id)).stdout == "hello world"
    assert max(p.stat().st_size for p in (running.home / "logs").rglob("*.log")) == len("hello world")


@pytest.mark.parametrize("node_id", ["", " ", "a/b"])
def test_a_node_id_no_node_can_have_is_named_not_a_traceback(refusing: Corral, node_id: str) -> None:
    """`corral node '' drain=true` sent PATCH /api/nodes/, which the server redirects to /api/nodes:
    the CLI took the empty redirect for a node and ended in a TypeError traceback."""
    result = refusing.cli("node", node_id, "drain=true", check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"no live node {node_id!r}" in result.stderr


def test_a_crashed_corral_is_said_so_with_its_address(corral: Corral) -> None:
    """After a SIGKILL the CLI said only "cannot reach corral: [Errno 111] Connection refused": not
    where it looked, nor that the corral server.json names is gone (start it again)."""
    corral.start()
    url = json.loads((corral.home / "server.json").read_text())["url"]
    pid = corral.process.pid if corral.process is not None else 0
    corral.stop(signal.SIGKILL)
    result = corral.cli("jobs", check=False)
    assert result.returncode == 1 and f"cannot reach corral at {url}: " in result.stderr
    assert f"names pid {pid}, which is not running" in result.stderr


def test_a_misspelt_event_kind_is_answered_with_the_kinds_recorded(refusing: Corral) -> None:
    result = refusing.cli("events", "--kind", "job.queud")
    assert "no event of a kind starting 'job.queud' was recorded" in result.stderr
    assert "job.queued" in result.stderr.split("the kinds recorded:")[1]
    assert "no event of a kind" not in refusing.cli("events", "--kind", "job.queued").stderr


def test_events_of_a_job_that_does_not_exist_say_so(running: Corral) -> None:
    """`corral events --job 999` printed an empty table: a mistyped id read as a job nothing happened to."""
    result = running.cli("events", "--job", "999")
    assert "no events:" in result.stderr and "999" in result.stderr
    job_id = int(running.cli("submit", "--", "true").stdout)
    assert "no events:" not in running.cli("events", "--job", str(job_id)).stderr


def test_a_change_whose_answer_never_came_says_it_may_have_been_carried_out(tmp_path: Path) -> None:
    """From a chaos review: corral killed while it handled a request left the CLI saying only
    "cannot reach corral: Server disconnected without sending a response", as when nothing was
    sent, though the change is made if the kill came after its commit. (A submission is sent again
    with its key instead: tests/server/test_submission_lost_answer.py.)"""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        url = f"http://127.0.0.1:{server.getsockname()[1]}"

        def take_it_and_go_away() -> None:
            connection, _ = server.accept()
            with connection:
                connection.recv(65536)  # the request, then no answer

        taker = threading.Thread(target=take_it_and_go_away)
        taker.start()
        env = {**os.environ, "CORRAL_URL": url, "CORRAL_TOKEN": "t", "CORRAL_HOME": str(tmp_path)}
        sent = subprocess.run([CORRAL, "hold", "12"], env=env, capture_output=True, text=True, timeout=60)
        taker.join()
    assert sent.returncode == 1
    assert "it went away after the request was sent, which it may have carried out: look (corral jobs" in sent.stderr

    # Refused at the connection, nothing was sent: nothing to look for.
    refused = subprocess.run([CORRAL, "submit", "--", "true"], env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1 and "cannot reach corral" in refused.stderr
    assert "may have carried out" not in refused.stderr
