"""`corral usage`: what the fleet billed and whose work it ran, from a running corral."""

from __future__ import annotations

import getpass
import re
import sys

import pytest

from tests.e2e.conftest import Corral, wait_until
from tests.e2e.test_job_usage import BURN  # 100 MiB touched, a second of CPU burnt

SMALL_PRICE = 0.085  # tests/e2e/conftest.py's "small": 2 vcpus, 2 GiB


def test_usage_charges_each_user_the_share_of_the_node_their_jobs_ran_on(corral: Corral) -> None:
    corral.start()
    alice = corral.cli("submit", "--user", "alice", "--vcpus", "2", "--tag", "render", "--", "sleep", "2").stdout
    bob = corral.cli("submit", "--user", "bob", "--vcpus", "1", "--ram", "512MiB", "--", "sleep", "1").stdout
    mine = corral.cli("submit", "--", "true").stdout  # no --user: the submitter's login name
    ids = [int(alice), int(bob), int(mine)]
    wait_until(lambda: all(corral.jobs()[i]["state"] == "complete" for i in ids), 90, "the three jobs to complete")

    job = corral.cli_json("job", str(ids[0]))
    assert (job["user"], job["tags"]) == ("alice", ["render"])
    assert corral.cli_json("job", str(ids[2]))["user"] == getpass.getuser()
    (run,) = job["attempt_list"]
    alice_hours = (run["finished_at"] - run["started_at"]) / 3600

    report = corral.cli_json("usage", "--since", "1h")
    rows = {row["key"]: row for row in report["rows"]}
    assert set(rows) == {"alice", "bob", getpass.getuser()}
    assert rows["alice"]["jobs"] == 1
    assert rows["alice"]["vcpu_hours"] == pytest.approx(2 * alice_hours)
    assert rows["alice"]["cost"] == pytest.approx(SMALL_PRICE * alice_hours)  # both vcpus: the whole node
    assert rows["bob"]["cost"] < rows["alice"]["cost"]
    assert report["jobs"] == 3
    assert report["billed"] >= report["used"] == pytest.approx(sum(row["cost"] for row in report["rows"]))
    assert report["unattributed"] == pytest.approx(report["billed"] - report["used"])
    assert [t["instance_type"] for t in report["types"]] == ["small"]

    by_tag = {row["key"]: row["jobs"] for row in corral.cli_json("usage", "--since", "1h", "--by", "tag")["rows"]}
    assert by_tag == {"render": 1, "(untagged)": 2}

    text = corral.cli("usage", "--since", "1h").stdout
    assert "alice" in text and "3 jobs ran; the fleet billed $" in text


def test_usage_names_a_bad_window_or_grouping(corral: Corral) -> None:
    corral.start()
    result = corral.cli("usage", "--since", "last tuesday", check=False)
    assert result.returncode != 0 and "--since: 'last tuesday' is neither a time ago" in result.stderr
    result = corral.cli("usage", "--by", "team", check=False)
    assert result.returncode != 0 and "--by" in result.stderr and "'user', 'tag' or 'job'" in result.stderr
    result = corral.cli("usage", "--since", "1h", "--until", "2h", check=False)
    assert result.returncode != 0 and "must be before until" in result.stderr
    # In the times given, not the API's epoch seconds ("since (1.79568e+09) must be before until
    # (1.79568e+09)": two numbers that read as equal).
    assert "--since '1h' is " in result.stderr and "--until '2h' is " in result.stderr
    assert "e+09" not in result.stderr
    result = corral.cli("usage", "--since", "2099-01-01", check=False)
    assert result.returncode != 0 and "--since '2099-01-01' is 2099-01-01 00:00:00" in result.stderr
    assert "(now, " in result.stderr
    # As every 422 of the API (its OpenAPI schema says so): a list of lines.
    refused = corral.api("GET", "/api/usage", params={"since": 100, "until": 50})
    assert refused.status_code == 422 and refused.json() == {"detail": ["since (100) must be before until (50)"]}


def test_usage_says_how_much_of_the_cpu_and_ram_asked_each_user_used(corral: Corral) -> None:
    corral.start()
    burn = corral.cli("submit", "--user", "carol", "--vcpus", "2", "--ram", "1GiB", "--", sys.executable, "-c", BURN)
    job_id = int(burn.stdout)
    wait_until(lambda: corral.jobs()[job_id]["state"] == "complete", 120, "the burning job to complete")
    (run,) = corral.cli_json("job", str(job_id))["attempt_list"]
    elapsed = run["finished_at"] - run["started_at"]

    report = corral.cli_json("usage", "--since", "1h")
    (carol,) = report["rows"]
    assert (carol["key"], carol["attempts"], carol["measured"]) == ("carol", 1, 1)
    assert carol["cpu_hours"] == pytest.approx(run["cpu_seconds"] / 3600)
    # A second of CPU on one of two vcpus, over a run a little longer than a second: under half.
    assert carol["cpu_efficiency"] == pytest.approx(run["cpu_seconds"] / (2 * elapsed))
    assert 0.2 < carol["cpu_efficiency"] < 0.55, (carol, elapsed)
    assert carol["ram_efficiency"] == pytest.approx(run["max_rss_mib"] / 1024)
    assert 0.08 < carol["ram_efficiency"] < 0.5, carol
    assert report["total"]["cpu_efficiency"] == pytest.approx(carol["cpu_efficiency"])
    assert (report["total"]["key"], report["total"]["jobs"]) == ("(total)", 1)

    text = corral.cli("usage", "--since", "1h").stdout
    assert re.search(r"CPU eff\s.*RAM eff\s.*measured", text), text
    cpu, ram = f"{carol['cpu_efficiency']:.0%}", f"{carol['ram_efficiency']:.0%}"
    assert re.search(rf"\n\s*carol\s.*\s{cpu}\s.*\s{ram}\s.*1/1", text), text
    assert "(total)" in text
