"""What `corral submit` and POST /api/jobs take, as a user gives it, and what the job then holds."""

from __future__ import annotations

from tests.e2e.conftest import Corral, wait_until

YEAR_1 = -62135596800.0  # 0001-01-01T00:00:00+00:00 in epoch seconds


def test_a_start_time_long_past_means_no_wait(corral: Corral) -> None:
    """As Slurm's --begin (and LSF's -b) take a time in the past: the job may start at once.
    0001-01-01 was refused as 'not a time' (the local-time conversion cannot reach year 1)."""
    corral.start()
    by_cli = corral.cli("submit", "--not-before", "0001-01-01", "--", "true").stdout.strip()
    response = corral.api("POST", "/api/jobs", json={"jobs": [{"command": ["true"], "not_before": "0001-01-01"}]})
    assert response.status_code == 201, response.text
    [by_api] = response.json()["ids"]
    aware = corral.cli("submit", "--not-before", "0001-01-01T00:00:00+00:00", "--", "true").stdout.strip()
    assert corral.cli_json("job", aware)["not_before"] == YEAR_1
    for job_id in (int(by_cli), by_api, int(aware)):

        def complete(job_id: int = job_id) -> bool:
            return corral.jobs()[job_id]["state"] == "complete"

        wait_until(complete, 60, f"job {job_id} to run")
        assert corral.cli_json("job", str(job_id))["not_before"] < 0


def test_submit_wait_ends_with_the_jobs_and_gives_their_exit_code(corral: Corral) -> None:
    """As sbatch --wait: the command returns once the jobs ended, 0 if all completed, else the
    highest exit code of those that failed."""
    corral.start()
    done = corral.cli("submit", "--wait", "--", "true")
    assert done.returncode == 0 and corral.jobs()[int(done.stdout)]["state"] == "complete"
    array = corral.cli(
        "submit", "--wait", "--array", "0-2", "--", "sh", "-c", "exit $CORRAL_ARRAY_TASK_ID", check=False
    )
    ids = [int(line) for line in array.stdout.split()]
    assert array.returncode == 2, array.stderr
    assert [corral.jobs()[i]["state"] for i in ids] == ["complete", "failed", "failed"]  # all ended first


def test_submit_gives_locality_hints_and_the_job_keeps_them(corral: Corral) -> None:
    """Jobs could carry near/far hints (seed 003) only from a job file or the API."""
    corral.start()
    first = corral.cli("submit", "--tag", "web", "--", "sleep", "30").stdout.strip()
    replica = corral.cli(
        "submit", "--tag", "web", "--far", "tag:web", "--near", first, "--near", "tag:cache",
        "--strict-locality", "--locality-level", "rack", "--", "sleep", "30",
    ).stdout.strip()  # fmt: skip
    job = corral.cli_json("job", replica)
    assert job["locality"] == {"near": [first, "tag:cache"], "far": ["tag:web"], "strict": True, "level": "rack"}
    shown = corral.cli("job", replica).stdout
    assert f"locality   near {first}, tag:cache; far tag:web (strict, rack level)" in shown
    assert corral.cli_json("job", first)["locality"] is None
    preferred = corral.cli("submit", "--far", first, "--", "true").stdout.strip()
    assert corral.cli_json("job", preferred)["locality"] == {
        "near": [], "far": [first], "strict": False, "level": "server"
    }  # fmt: skip
    # What a job asks of a node besides room: before, only a job file or the API could ask it, and
    # `corral job` did not show it (an UNPLACEABLE "needs accel=h100" named a trait it did not list).
    [node] = wait_until(corral.live_nodes, 60, "a node")
    corral.cli("node", node["id"], "reservation=team-a")  # a reservation no node holds is refused
    pinned = corral.cli(
        "submit", "--trait", "accel=a10", "--trait", "accel=l4", "--trait", "zone=*", "--forbid", "capacity=spot",
        "--min-platform", "1.10", "--reservation", "team-a", "--cpu-capped", "--", "true",
    ).stdout.strip()  # fmt: skip
    shown = corral.cli("job", pinned).stdout
    asks = "accel=a10|l4; zone=*; not capacity=spot; platform >= 1.10; reservation team-a; CPU-capped"
    assert f"runs on    {asks}" in shown
    corral.cli("cancel", first, replica, preferred, pinned)


BAD_HINTS = [
    (["--near", "web"], "--near: not a job id or tag:NAME: 'web'"),
    (["--far", "tag:"], "--far: not a job id or tag:NAME: 'tag:'"),
    (["--far", "7", "--far", "-3"], "--far: not a job id or tag:NAME: '-3'"),
    (["--near", "7", "--locality-level", "row"], "--locality-level: Input should be 'server' or 'rack'"),
    (["--strict-locality"], "--strict-locality and --locality-level say how to keep --near or --far"),
    (["--trait", "accel"], "--trait 'accel': write KEY=VALUE (VALUE '*' for any value)"),
]


def test_a_bad_locality_hint_is_refused_by_its_option(corral: Corral) -> None:
    corral.start()
    for args, message in BAD_HINTS:
        result = corral.cli("submit", *args, "--", "true", check=False)
        assert result.returncode == 1 and message in result.stderr, (args, result.stderr)
    assert corral.jobs() == {}
