"""`corral run` with `executor = "slurm"`, driven through the real CLI against a real Slurm."""

from __future__ import annotations

import re
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import Corral, free_port
from tests.slurm.conftest import SlurmCluster
from tests.support import wait_until


def corral_on(tmp_path: Path, slurm: SlurmCluster, interval: str) -> Iterator[Corral]:
    home = tmp_path / "home"
    home.mkdir()
    config = tmp_path / "corral.toml"
    config.write_text(
        f"""
executor = "slurm"

[slurm]
conf = "{slurm.conf}"

[cloud]
cluster = "e2e-{uuid.uuid4().hex[:8]}"

[loop]
interval = "{interval}"
"""
    )
    instance = Corral(home=home, port=free_port(), config=config)
    yield instance
    if instance.process is not None:
        instance.stop()


@pytest.fixture
def corral(tmp_path: Path, slurm: SlurmCluster) -> Iterator[Corral]:
    yield from corral_on(tmp_path, slurm, "0.3s")


@pytest.fixture
def slow_corral(tmp_path: Path, slurm: SlurmCluster) -> Iterator[Corral]:
    """Passes 10 s apart (and one at each submission): a short job runs between two of them."""
    yield from corral_on(tmp_path, slurm, "10s")


def test_corral_run_dispatches_to_slurm(corral: Corral, slurm: SlurmCluster) -> None:
    corral.start("--keep-fleet")
    ok = int(corral.cli("submit", "--", "sh", "-c", "echo hello from $CORRAL_NODELIST").stdout.strip())
    long = int(corral.cli("submit", "--ram", "128MiB", "--", "sleep", "300").stdout.strip())
    wait_until(lambda: corral.jobs()[ok]["state"] == "complete", 30, "the job to complete")
    assert corral.cli("logs", str(ok)).stdout.startswith("hello from c")

    wait_until(lambda: corral.jobs()[long]["state"] == "running", 30, "the long job to run")
    assert str(corral.jobs()[long]["node"]).startswith("slurm:c")
    # The Slurm job id, for `scontrol show job`: on the job (its latest attempt's) and its attempts.
    cluster = corral.config.read_text().split('cluster = "')[1].split('"')[0]
    (ref,) = [line.split("|")[0] for line in slurm.jobs() if f"cluster={cluster} job={long} " in line]
    shown = corral.api("GET", f"/api/jobs/{long}").json()
    assert shown["executor_ref"] == ref and [a["executor_ref"] for a in shown["attempt_list"]] == [ref]
    assert corral.jobs()[long]["executor_ref"] == ref
    assert f"slurm job  {ref}\n" in corral.cli("job", str(long)).stdout
    assert "JobState=RUNNING" in slurm.show_job(ref)
    # A stop for a restart leaves the Slurm job running; the next corral takes it back.
    corral.stop()
    corral.start()
    time.sleep(1.0)  # a few passes (0.3 s apart) of the new corral: none may submit the job again
    attempts = corral.api("GET", f"/api/jobs/{long}").json()["attempt_list"]
    assert [a["state"] for a in attempts] == ["running"]
    events = corral.cli_json("events", "--job", str(long))
    assert [e["kind"] for e in events].count("job.submitted") == 1

    corral.cli("cancel", str(long))
    wait_until(lambda: corral.jobs()[long]["state"] == "cancelled", 30, "the cancel")
    wait_until(
        lambda: all("CANCELLED" in line for line in slurm.jobs() if f"job={long} " in line and cluster in line),
        20,
        "slurm to cancel it",
    )


def test_a_clean_stop_scancels_and_requeues_this_dispatchers_slurm_jobs(corral: Corral, slurm: SlurmCluster) -> None:
    corral.start()
    long = int(corral.cli("submit", "--ram", "128MiB", "--", "sleep", "300").stdout.strip())
    wait_until(lambda: corral.jobs()[long]["state"] == "running", 30, "the job to run")
    corral.stop()
    cluster = corral.config.read_text().split('cluster = "')[1].split('"')[0]
    wait_until(
        lambda: all("CANCELLED" in line for line in slurm.jobs() if f"job={long} " in line and cluster in line),
        20,
        "slurm to cancel it",
    )
    corral.start()
    row = corral.jobs()[long]
    assert row["state"] in ("queued", "claimed", "running")


def test_a_job_pending_in_slurm_shows_slurms_reason_in_corral_jobs_and_corral_job(
    corral: Corral, slurm: SlurmCluster
) -> None:
    """The reason was recorded ("slurm: Resources") but `corral jobs` and `corral job` showed a
    reason only for queued and ended jobs: a job waiting in Slurm's queue said nothing of why."""
    corral.start()
    submit = ("submit", "--vcpus", "2", "--ram", "128MiB", "--", "sleep", "300")
    for _ in slurm.nodes:  # fills both nodes
        int(corral.cli(*submit).stdout)
    waiting = int(corral.cli(*submit).stdout)
    # Slurm's reason once it has tried to schedule the job ("None" until then: "slurm: pending").
    reasons = ("slurm: Resources", "slurm: Priority")
    wait_until(lambda: corral.jobs()[waiting]["wait_reason"] in reasons, 30, "slurm's reason")
    assert corral.jobs()[waiting]["state"] == "claimed"
    (line,) = [line for line in corral.cli("jobs", "--state", "claimed").stdout.splitlines() if f" {waiting} " in line]
    assert any(reason in line for reason in reasons), line
    shown = corral.cli("job", str(waiting)).stdout
    assert any(f"waiting    {reason}\n" in shown for reason in reasons), shown

    # A job pending in Slurm takes `corral update` and `corral hold`, as `scontrol update` and
    # `scontrol hold` take a pending Slurm job (they were refused: "only while it is queued").
    said = corral.cli("update", str(waiting), "--ram", "256MiB").stdout
    assert said.startswith(f"{waiting}: ram ") and said.endswith(
        " (it was pending in Slurm: the next pass takes it back and submits it again)\n"
    )
    wait_until(lambda: corral.jobs()[waiting]["attempts"] == 2, 30, "a new Slurm job")
    said = corral.cli("hold", str(waiting)).stdout
    assert said == f"{waiting}: pending in Slurm: the next pass takes it back from Slurm's queue and holds it\n"
    wait_until(lambda: corral.jobs()[waiting]["held"], 30, "the job held in corral's queue")
    assert corral.jobs()[waiting]["state"] == "queued"


# Burns a second of CPU.
BURN = """
import time
start = time.process_time()
while time.process_time() - start < 1.0:
    pass
"""


def test_corral_usage_counts_the_vcpu_hours_of_slurm_jobs_at_no_cost(corral: Corral) -> None:
    """Slurm's nodes are not instances corral booted: their work counts, their cost is 0. What each
    run used is its CPU time as corral's batch script measured it (`times`); its peak RAM is not
    known there."""
    corral.start()
    single = int(corral.cli("submit", "--vcpus", "1", "--ram", "128MiB", "--", sys.executable, "-c", BURN).stdout)
    gang = int(corral.cli("submit", "--nodes", "2", "--vcpus", "2", "--ram", "128MiB", "--", "sleep", "1").stdout)
    # Starts and ends between two passes of the loop, unseen running: it ran all the same.
    quick = int(corral.cli("submit", "--ram", "128MiB", "--", "true").stdout)
    wait_until(
        lambda: all(corral.jobs()[j]["state"] == "complete" for j in (single, gang, quick)), 60, "the jobs to complete"
    )
    report = corral.cli_json("usage", "--since", "1h", "--by", "job")
    rows = {int(row["key"]): row for row in report["rows"]}
    assert set(rows) == {single, gang, quick} and report["jobs"] == 3
    for job_id, vcpus_in_all in ((single, 1), (gang, 4), (quick, 1)):
        (attempt,) = corral.api("GET", f"/api/jobs/{job_id}").json()["attempt_list"]
        ran = attempt["finished_at"] - attempt["started_at"]
        assert rows[job_id]["jobs"] == 1 and rows[job_id]["cost"] == 0
        assert rows[job_id]["vcpu_hours"] == pytest.approx(ran * vcpus_in_all / 3600)
    assert rows[gang]["vcpu_hours"] > 0 and rows[single]["vcpu_hours"] > 0
    # Each run measured: its CPU time (the burner's second; next to none for a sleep), no peak RAM.
    assert all(rows[job_id]["measured"] == 1 for job_id in (single, gang, quick)) and report["total"]["measured"] == 3
    (burnt,) = corral.api("GET", f"/api/jobs/{single}").json()["attempt_list"]
    assert 0.95 <= burnt["cpu_seconds"] < 3 and burnt["max_rss_mib"] is None, burnt
    assert rows[single]["cpu_efficiency"] > 0.25 and rows[single]["ram_efficiency"] is None
    assert rows[gang]["cpu_efficiency"] < 0.1  # `sleep 1`, on 4 vcpus
    line = r"\n  used       CPU [0-9.]+s of [0-9.]+s \(\d+%\), peak RAM not known\n"
    assert re.search(line, shown := corral.cli("job", str(single)).stdout), shown
    assert report["billed"] == 0 and report["used"] == 0 and report["types"] == []
    # No fleet, so no fleet limits: `corral status` says nothing of max_instances.
    status = corral.cli_json("status")
    assert (status["max_instances"], status["max_cost_per_hour"]) == (0, None)
    assert "at most" not in corral.cli("status").stdout


def test_a_slurm_job_run_between_two_passes_shows_and_counts_the_time_slurm_says_it_ran(
    slow_corral: Corral, slurm: SlurmCluster
) -> None:
    corral = slow_corral
    corral.start()
    job_id = int(corral.cli("submit", "--ram", "128MiB", "--", "sleep", "2").stdout)
    wait_until(lambda: corral.jobs()[job_id]["state"] == "complete", 60, "the job to complete")
    shown = corral.api("GET", f"/api/jobs/{job_id}").json()
    (attempt,) = shown["attempt_list"]
    start, end = slurm.times(attempt["executor_ref"])
    assert start <= attempt["started_at"] < start + 1 and attempt["finished_at"] == end
    assert (shown["started_at"], shown["finished_at"]) == (attempt["started_at"], end)
    ran = end - attempt["started_at"]
    assert ran > 1  # `sleep 2`, give or take Slurm's whole second; not 0
    report = corral.cli_json("usage", "--since", "1h", "--by", "job")
    (row,) = report["rows"]
    assert row["key"] == str(job_id) and row["vcpu_hours"] == pytest.approx(ran / 3600)


def test_a_sigstopped_dispatchers_slurm_jobs_are_adopted_by_a_running_one_and_run_once(
    tmp_path: Path, slurm: SlurmCluster
) -> None:
    """Two `corral run` on one PostgreSQL store in front of one Slurm cluster; one is SIGSTOPped.
    The other released its claims, scancelled its running Slurm job as an orphan and ran both of
    its jobs again (the one that had completed, twice). It now adopts them and follows them to
    their end; the stopped one, continued, leaves them alone."""
    from tests.store.conftest import pg_schema, require_postgresql

    require_postgresql()
    cluster = f"e2e-{uuid.uuid4().hex[:8]}"
    shared = tmp_path / "outputs"
    runs = tmp_path / "runs"
    with pg_schema() as url:
        instances = []
        for name in ("a", "b"):
            home = tmp_path / name
            home.mkdir()
            config = tmp_path / f"{name}.toml"
            config.write_text(
                f"""
executor = "slurm"

[slurm]
conf = "{slurm.conf}"
output_dir = "{shared}"

[cloud]
cluster = "{cluster}"

[loop]
interval = "0.3s"

[policy.dispatch]
dispatcher_stale = "3s"

[store]
url = "{url}"
"""
            )
            instances.append(Corral(home=home, port=free_port(), config=config))
        silent, peer = instances
        try:
            silent.start()
            done = int(
                silent.cli("submit", "--ram", "128MiB", "--", "sh", "-c", f"sleep 5; echo done >> {runs}").stdout
            )
            long = int(
                silent.cli("submit", "--ram", "128MiB", "--", "sh", "-c", f"sleep 20; echo long >> {runs}").stdout
            )
            wait_until(lambda: {silent.jobs()[j]["state"] for j in (done, long)} == {"running"}, 30, "both to run")
            assert silent.process is not None
            # Frozen while both run: the short one completes in Slurm while nobody watches it.
            silent.process.send_signal(signal.SIGSTOP)
            try:
                peer.start()
                wait_until(
                    lambda: len(peer.cli_json("events", "--kind", "slurm.adopted")) == 2, 30, "the peer to adopt both"
                )
                wait_until(
                    lambda: {peer.jobs()[j]["state"] for j in (done, long)} == {"complete"}, 60, "both to complete"
                )
            finally:
                silent.process.send_signal(signal.SIGCONT)
            time.sleep(1.0)  # a few passes of the continued one: it submits and scancels nothing
            assert sorted(runs.read_text().split()) == ["done", "long"]  # each ran once
            for job_id in (done, long):
                attempts = peer.api("GET", f"/api/jobs/{job_id}").json()["attempt_list"]
                assert [a["state"] for a in attempts] == ["exited"]
            ours = [line for line in slurm.jobs() if f"cluster={cluster} " in line]
            assert len(ours) == 2 and all("COMPLETED" in line for line in ours), ours
            assert peer.cli("logs", str(long)).stdout == ""  # (its output went to runs)
        finally:
            for instance in instances:
                if instance.process is not None:
                    instance.stop()
