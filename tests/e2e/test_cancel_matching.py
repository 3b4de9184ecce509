"""`corral cancel --user/--name/--state` (Slurm's scancel -u/-n/--state) and `corral jobs --user
--name` on a real `corral run`: every open job matching all the filters is cancelled, running ones
included; others are left; a cancel with no id and no filter is refused."""

from __future__ import annotations

from tests.e2e.conftest import Corral, wait_until


def test_cancel_by_user_and_name_and_list_by_them(corral: Corral) -> None:
    corral.start()

    def submit(user: str, name: str) -> int:
        return int(corral.cli("submit", "--user", user, "--name", name, "--", "sleep", "60").stdout)

    sweep = [submit("alice", "sweep") for _ in range(3)]
    kept = [submit("alice", "keep"), submit("bob", "sweep")]
    wait_until(lambda: corral.jobs()[sweep[0]]["state"] == "running", 60, "a sweep job to run")

    listed = corral.cli_json("jobs", "--user", "alice", "--name", "sweep")
    assert [j["id"] for j in listed] == sweep and {j["user"] for j in listed} == {"alice"}
    said = corral.cli("cancel", "--user", "alice", "--name", "sweep").stdout
    assert said == f"cancel requested for 3 jobs: {', '.join(map(str, sweep))}\n"
    wait_until(lambda: all(corral.jobs()[j]["state"] == "cancelled" for j in sweep), 60, "the sweep to end")
    assert all(corral.jobs()[j]["state"] in ("queued", "claimed", "running") for j in kept)
    assert corral.cli("cancel", "--user", "alice", "--name", "sweep").stdout == "cancel requested for 0 jobs\n"

    refused = corral.cli("cancel", check=False)
    assert refused.returncode == 1 and "give job ids, or --state, --user, --name, --tag or --array" in refused.stderr
    bad = corral.cli("cancel", "--state", "waiting", check=False)
    assert bad.returncode == 1 and "--state 'waiting': not a job state" in bad.stderr
    tagged = int(corral.cli("submit", "--tag", "nightly", "--", "sleep", "60").stdout)
    assert [j["id"] for j in corral.cli_json("jobs", "--tag", "nightly")] == [tagged]
    assert corral.cli("cancel", "--tag", "nightly").stdout == f"cancel requested for 1 job: {tagged}\n"
    corral.cli("cancel", *map(str, kept))
