"""What the agent API relies on: pairing, start and exit reports, and the kill list."""

from __future__ import annotations

from corral.core import retry
from corral.core.model import AttemptState, JobState, NodeState, Resources
from corral.core.snapshot import JobOutcome
from corral.store import Store

from .storekit import NOW, ONE_CPU, SMALL, claim, event_kinds, snapshot_of_tables, submit

MEASURED = Resources(3.5, 7000, 50_000, 0)  # what the agent reports: a little less than the type's nominal


def test_pairing_with_the_one_time_token_works_once(store: Store) -> None:
    store.create_node("n1", SMALL, "the-token", NOW, "3 jobs waiting")
    row = store.node_row("n1")
    assert row is not None and row["state"] == NodeState.BOOTING.value
    assert row["boot_token_hash"] is not None and row["boot_token_hash"] != "the-token"  # only its hash is kept

    assert store.pair_node("n1", "wrong-token", MEASURED, "host-1", NOW + 1) is None
    assert store.pair_node("n2", "the-token", MEASURED, "host-1", NOW + 1) is None  # right token, other node
    row = store.node_row("n1")
    assert row is not None and row["state"] == NodeState.BOOTING.value and row["secret_hash"] is None

    secret = store.pair_node("n1", "the-token", MEASURED, "host-1", NOW + 2)
    assert secret
    paired = store.node_for_secret(secret)
    assert paired is not None and paired["id"] == "n1"
    assert paired["state"] == NodeState.IDLE.value and paired["hostname"] == "host-1"
    assert (paired["vcpus"], paired["ram_mib"], paired["scratch_mib"]) == (3.5, 7000, 50_000)
    assert paired["paired_at"] == NOW + 2 and paired["last_ping_at"] == NOW + 2
    assert paired["boot_token_hash"] is None

    before = snapshot_of_tables(store)
    assert store.pair_node("n1", "the-token", MEASURED, "impostor", NOW + 3) is None  # never twice
    assert snapshot_of_tables(store) == before
    assert store.node_for_secret(secret) is not None  # the first pairing still stands
    assert store.node_for_secret("not-a-secret") is None
    assert [e["kind"] for e in store.list_events(node_id="n1")] == ["node.booting", "node.paired"]


def test_a_gone_node_loses_its_secret(store: Store) -> None:
    store.create_node("n1", SMALL, "tok", NOW, "r")
    secret = store.pair_node("n1", "tok", MEASURED, "h", NOW)
    assert secret is not None
    assert store.mark_node("n1", NodeState.GONE, "instance disappeared", NOW + 1)
    assert store.node_for_secret(secret) is None
    assert store.mark_node("n1", NodeState.IDLE, "", NOW + 2) is False  # gone is final


def test_attempt_started_moves_the_job_to_running_once(store: Store) -> None:
    [job_id] = submit(store)
    attempt_id = claim(store, job_id, nodes=["n1"])

    assert store.attempt_started(attempt_id, "n2", 99, NOW + 1) is False  # not that node's attempt
    assert store.attempt_started(attempt_id, "n1", 4242, NOW + 1) is True
    assert store.attempt_started(attempt_id, "n1", 4242, NOW + 2) is True  # a repeated report: still wanted
    row = store.job_row(job_id)
    assert row["state"] == JobState.RUNNING.value and row["started_at"] == NOW + 1
    attempt = store.attempt_row(attempt_id)
    assert attempt is not None
    assert (
        attempt["state"] == AttemptState.RUNNING.value and attempt["pid"] == 4242 and attempt["started_at"] == NOW + 1
    )
    assert event_kinds(store, job_id) == ["job.queued", "job.claimed", "job.running"]
    assert store.work_for("n1") == []  # no longer handed out


def test_attempt_started_on_a_cancelled_attempt_is_refused(store: Store) -> None:
    [job_id] = submit(store)
    attempt_id = claim(store, job_id, nodes=["n1"])
    assert store.request_cancel(job_id, NOW + 1)["changed"]
    assert store.apply_outcome(JobOutcome(job_id, JobState.CANCELLED, "cancelled by request", (attempt_id,)), NOW + 2)
    assert store.work_for("n1") == []
    before = snapshot_of_tables(store)

    assert store.attempt_started(attempt_id, "n1", 4242, NOW + 3) is False  # the agent must kill it
    assert snapshot_of_tables(store) == before
    assert store.attempts_to_kill("n1", [attempt_id]) == [attempt_id]


def test_attempt_started_after_a_requeue_is_refused(store: Store) -> None:
    """The start report of an attempt that timed out comes late: the job was requeued meanwhile."""
    [job_id] = submit(store)
    attempt_id = claim(store, job_id, nodes=["n1"])
    job = store.job(job_id)
    outcome = retry.after_temp_failure(job, NOW + 200, retry.RetrySettings(), "start timeout", (attempt_id,))
    assert store.apply_outcome(outcome, NOW + 200)
    newer = claim(store, job_id, "d2", nodes=["n2"], now=NOW + 300)

    assert store.attempt_started(attempt_id, "n1", 1, NOW + 301) is False
    assert store.job_row(job_id)["state"] == JobState.CLAIMED.value  # the newer attempt's claim stands
    assert store.attempt_row(newer)["state"] == AttemptState.ASSIGNED.value  # type: ignore[index]


def test_record_exit_is_idempotent(store: Store) -> None:
    [job_id] = submit(store)
    attempt_id = claim(store, job_id, nodes=["n1"])
    assert store.attempt_started(attempt_id, "n1", 7, NOW + 1)

    assert store.record_exit(attempt_id, "n2", 0, NOW + 5) is None  # another node cannot report it
    first = store.record_exit(attempt_id, "n1", 0, NOW + 5)
    assert first is not None
    job, reported = first
    assert reported == attempt_id and job.id == job_id and job.state is JobState.RUNNING
    attempt = store.attempt_row(attempt_id)
    assert attempt is not None
    assert attempt["state"] == AttemptState.EXITED.value and attempt["exit_code"] == 0
    assert attempt["finished_at"] == NOW + 5
    assert store.apply_outcome(retry.after_exit(job, 0, (attempt_id,)), NOW + 5)
    before = snapshot_of_tables(store)

    assert store.record_exit(attempt_id, "n1", 0, NOW + 6) is None  # the agent re-sends its report
    assert store.record_exit(attempt_id, "n1", 1, NOW + 6) is None  # even with another exit code
    assert snapshot_of_tables(store) == before
    assert store.job_row(job_id)["state"] == JobState.COMPLETE.value
    assert store.record_exit(987654, "n1", 0, NOW) is None  # unknown attempt


def test_record_exit_without_a_start_report_still_counts_as_run(store: Store) -> None:
    [job_id] = submit(store)
    attempt_id = claim(store, job_id, nodes=["n1"])
    exited = store.record_exit(attempt_id, "n1", 2, NOW + 9)  # the start report was lost
    assert exited is not None
    assert exited[0].state is JobState.RUNNING and exited[0].started_at == NOW + 9


def test_attempts_to_kill_lists_only_attempts_no_longer_wanted(store: Store) -> None:
    assigned, running, cancelled, exited, elsewhere = submit(store, 5)
    a_assigned = claim(store, assigned, nodes=["n1"])
    a_running = claim(store, running, nodes=["n1"])
    assert store.attempt_started(a_running, "n1", 1, NOW)
    a_cancelled = claim(store, cancelled, nodes=["n1"])
    assert store.apply_outcome(JobOutcome(cancelled, JobState.CANCELLED, "cancel", (a_cancelled,)), NOW)
    a_exited = claim(store, exited, nodes=["n1"])
    assert store.record_exit(a_exited, "n1", 0, NOW) is not None
    a_elsewhere = claim(store, elsewhere, nodes=["n2"], resources=ONE_CPU)
    unknown = max(a_assigned, a_running, a_cancelled, a_exited, a_elsewhere) + 100

    reported = [a_running, a_cancelled, a_assigned, a_exited, a_elsewhere, unknown]
    assert store.attempts_to_kill("n1", reported) == [a_cancelled, a_exited, a_elsewhere, unknown]
    assert store.attempts_to_kill("n2", [a_elsewhere]) == []
    assert store.attempts_to_kill("n1", []) == []
