"""`corral logs --follow` (tail -f, kubectl logs -f): a job's output is printed while it runs,
through a retry (after a header naming the new attempt), and the command ends by itself once the
job has ended, with nothing of the output lost; and output another dispatcher keeps says where it is."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from corral.core.model import GiB, InstanceType
from corral.store import Store
from tests.e2e.conftest import CORRAL, Corral, wait_until


def test_follow_prints_output_as_it_comes_through_a_retry_and_ends_with_the_job(corral: Corral, tmp_path: Path) -> None:
    corral.start()
    marker = tmp_path / "tried"
    # The first attempt prints, sleeps, prints and fails; the second (marker there) completes.
    script = f"echo first; sleep 4; echo second; [ -e {marker} ] || {{ touch {marker}; exit 3; }}"
    job_id = int(corral.cli("submit", "--max-retries", "1", "--", "sh", "-c", script).stdout)
    follower = subprocess.Popen(
        [CORRAL, "logs", "--follow", str(job_id)], env=corral.env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert follower.stdout is not None
        assert follower.stdout.readline() == "first\n"
        # Printed while the job still runs: its first attempt sleeps before it goes on.
        assert corral.jobs()[job_id]["state"] == "running"
        rest, _ = follower.communicate(timeout=120)
    finally:
        follower.kill()
    assert follower.returncode == 0
    assert corral.jobs()[job_id]["state"] == "complete"
    (retry,) = [line for line in rest.splitlines() if line.startswith("==> attempt")]
    assert rest.replace(retry + "\n", "") == "second\nfirst\nsecond\n"
    first_attempt = corral.cli_json("job", str(job_id))["attempt_list"][0]["id"]
    tail = corral.api("GET", f"/api/jobs/{job_id}/logs", params={"attempt": first_attempt, "offset": 6})
    assert tail.content == b"second\n"

    # A job that keeps its stderr apart (sbatch --error): followed on its own, through a real agent.
    script = "echo out1; echo err1 >&2; sleep 3; echo out2; echo err2 >&2; exit 5"
    apart = int(corral.cli("submit", "--separate-stderr", "--", "sh", "-c", script).stdout)
    follower = subprocess.Popen(
        [CORRAL, "logs", "--follow", "--stderr", str(apart)], env=corral.env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert follower.stdout is not None
        assert follower.stdout.readline() == "err1\n"
        assert corral.jobs()[apart]["state"] == "running"  # printed while it runs
        rest, _ = follower.communicate(timeout=120)
    finally:
        follower.kill()
    assert follower.returncode == 0 and rest == "err2\n"
    assert corral.jobs()[apart]["state"] == "failed"
    assert corral.cli("logs", str(apart)).stdout == "out1\nout2\n"
    assert corral.cli("logs", "--stderr", str(apart)).stdout == "err1\nerr2\n"
    mixed = corral.cli("logs", "--stderr", str(job_id), check=False)
    assert mixed.returncode == 1 and f"job {job_id} keeps its stderr in its output" in mixed.stderr

    # A job that never ran: said, and over at once.
    later = int(corral.cli("submit", "--not-before", "2099-01-01", "--", "true").stdout)
    corral.cli("cancel", str(later))
    wait_until(lambda: corral.jobs()[later]["state"] == "cancelled", 30, "the cancel")
    result = corral.cli("logs", "-f", str(later))
    assert result.stdout == "" and "it never ran" in result.stderr


def test_output_kept_by_another_dispatcher_says_where_it_is(corral: Corral) -> None:
    """Several dispatchers share a store: an agent sends its output to the server of the dispatcher
    that booted its node. Asked through another, `corral logs` says so instead of printing nothing."""
    corral.start()
    later = int(corral.cli("submit", "--not-before", "2099-01-01", "--", "echo", "elsewhere").stdout)
    store = Store(f"sqlite:///{corral.home / 'corral.db'}")
    try:
        small = InstanceType("small", 2, 2 * GiB, 0.085)
        store.create_node("n-theirs", small, "boot-theirs", time.time(), "test", dispatcher_id="d-other")
        attempt = store.claim(later, "d-other", ["n-theirs"], small.capacity, time.time())
    finally:
        store.close()
    result = corral.cli("logs", str(later), check=False)
    assert result.returncode == 1 and result.stdout == ""
    assert f"the output of attempt {attempt} is kept by dispatcher d-other" in result.stderr
    assert "(the output of attempt" in corral.cli("logs", "--all", str(later)).stdout
