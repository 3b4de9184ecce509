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
        wait_until(lambda j=job_id: corral.jobs()[j]["state"] == "complete", 60, f"job {job_id} to run")
        assert corral.cli_json("job", str(job_id))["not_before"] < 0
