"""What the agent API relies on: pairing, start and exit reports, and the kill list."""

from __future__ import annotations

from corral.core import retry
from corral.core.model import AttemptState, Job, JobState, NodeState, Resources
from corral.core.snapshot import JobOutcome
from corral.store import Store

from .storekit import NOW, ONE_CPU, SMALL, after_exit, attempts_to_kill, claim, event_kinds, snapshot_of_tables, submit

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


def test_a_start_is_never_recorded_before_the_attempt_was_placed(store: Store) -> None:
    """An agent's clock behind the server's: its start time is taken no earlier than the claim."""
    [job_id] = submit(store)
    attempt_id = claim(store, job_id, nodes=["n1"], now=NOW + 10)
    assert store.attempt_started(attempt_id, "n1", 7, NOW + 4)
    assert store.job_row(job_id)["started_at"] == NOW + 10
    attempt = store.attempt_row(attempt_id)
    assert attempt is not None and attempt["started_at"] == NOW + 10


def test_attempt_started_on_a_cancelled_attempt_is_refused(store: Store) -> None:
    [job_id] = submit(store)
    attempt_id = claim(store, job_id, nodes=["n1"])
    assert store.request_cancel(job_id, NOW + 1)["changed"]
    assert store.apply_outcome(JobOutcome(job_id, JobState.CANCELLED, "cancelled by request", (attempt_id,)), NOW + 2)
    assert store.work_for("n1") == []
    before = snapshot_of_tables(store)

    assert store.attempt_started(attempt_id, "n1", 4242, NOW + 3) is False  # the agent must kill it
    assert snapshot_of_tables(store) == before
    assert attempts_to_kill(store, "n1", [attempt_id]) == [attempt_id]


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
    attempt = store.attempt_row(newer)
    assert attempt is not None and attempt["state"] == AttemptState.ASSIGNED.value


def test_an_exit_is_recorded_once_with_its_outcome(store: Store) -> None:
    [job_id] = submit(store)
    attempt_id = claim(store, job_id, nodes=["n1"])
    assert store.attempt_started(attempt_id, "n1", 7, NOW + 1)

    assert not store.finish_attempt(attempt_id, "n2", 0, NOW + 5, after_exit(0, attempt_id))  # not its node
    seen: list[Job] = []

    def outcome_of(job: Job) -> JobOutcome:
        seen.append(job)
        return retry.after_exit(job, 0, (attempt_id,))

    assert store.finish_attempt(attempt_id, "n1", 0, NOW + 5, outcome_of)
    assert [(job.id, job.state) for job in seen] == [(job_id, JobState.RUNNING)]  # the core saw it running
    attempt = store.attempt_row(attempt_id)
    assert attempt is not None
    assert attempt["state"] == AttemptState.EXITED.value and attempt["exit_code"] == 0
    assert attempt["finished_at"] == NOW + 5
    assert store.job_row(job_id)["state"] == JobState.COMPLETE.value  # in the same transaction
    before = snapshot_of_tables(store)

    assert not store.finish_attempt(attempt_id, "n1", 0, NOW + 6, outcome_of)  # the agent re-sends its report
    assert not store.finish_attempt(attempt_id, "n1", 1, NOW + 6, after_exit(1, attempt_id))  # another exit code
    assert snapshot_of_tables(store) == before and len(seen) == 1
    assert not store.finish_attempt(987654, "n1", 0, NOW, after_exit(0, 987654))  # unknown attempt


def test_an_exit_reported_late_is_recorded_when_the_agent_saw_it(store: Store) -> None:
    # The agent keeps an exit while the server is down and reports it when it is back: the run
    # ended then, not when the report arrives (run times and costs would grow by the outage).
    early, skewed = submit(store, 2)
    a_early = claim(store, early, nodes=["n1"])
    assert store.attempt_started(a_early, "n1", 7, NOW + 1)
    assert store.finish_attempt(a_early, "n1", 0, NOW + 40, after_exit(0, a_early), ended_at=NOW + 13)
    attempt = store.attempt_row(a_early)
    assert attempt is not None and attempt["finished_at"] == NOW + 13
    assert store.job_row(early)["finished_at"] == NOW + 13
    # A clock that disagrees with the server's is kept within the attempt's start and the report.
    a_skewed = claim(store, skewed, nodes=["n1"])
    assert store.attempt_started(a_skewed, "n1", 8, NOW + 2)
    assert store.finish_attempt(a_skewed, "n1", 0, NOW + 40, after_exit(0, a_skewed), ended_at=NOW - 500)
    assert store.job_row(skewed)["finished_at"] == NOW + 2


def test_an_exit_without_a_start_report_still_counts_as_run(store: Store) -> None:
    [job_id] = submit(store)
    attempt_id = claim(store, job_id, nodes=["n1"])
    seen: list[Job] = []

    def outcome_of(job: Job) -> JobOutcome:
        seen.append(job)
        return retry.after_exit(job, 2, (attempt_id,))

    assert store.finish_attempt(attempt_id, "n1", 2, NOW + 9, outcome_of)  # the start report was lost
    assert seen[0].state is JobState.RUNNING and seen[0].started_at == NOW + 9
    # Its history says so too: corral events went from job.claimed to job.failed, as if it never ran.
    assert event_kinds(store, job_id) == ["job.queued", "job.claimed", "job.running", "job.failed"]
    running = store.list_events(job_id=job_id, kind="job.running")[0]
    assert running["at"] == NOW + 9 and running["node_id"] == "n1"
    assert running["message"] == f"attempt {attempt_id} (its start was not reported: seen at its exit)"


def test_attempts_to_kill_lists_only_attempts_no_longer_wanted(store: Store) -> None:
    assigned, running, cancelled, exited, elsewhere = submit(store, 5)
    a_assigned = claim(store, assigned, nodes=["n1"])
    a_running = claim(store, running, nodes=["n1"])
    assert store.attempt_started(a_running, "n1", 1, NOW)
    a_cancelled = claim(store, cancelled, nodes=["n1"])
    assert store.apply_outcome(JobOutcome(cancelled, JobState.CANCELLED, "cancel", (a_cancelled,)), NOW)
    a_exited = claim(store, exited, nodes=["n1"])
    assert store.finish_attempt(a_exited, "n1", 0, NOW, after_exit(0, a_exited))
    a_elsewhere = claim(store, elsewhere, nodes=["n2"], resources=ONE_CPU)
    unknown = max(a_assigned, a_running, a_cancelled, a_exited, a_elsewhere) + 100

    reported = [a_running, a_cancelled, a_assigned, a_exited, a_elsewhere, unknown]
    assert attempts_to_kill(store, "n1", reported) == [a_cancelled, a_exited, a_elsewhere, unknown]
    assert attempts_to_kill(store, "n2", [a_elsewhere]) == []
    assert attempts_to_kill(store, "n1", []) == []


def test_a_timeout_fails_the_job_ends_the_attempt_for_the_agent_to_kill_and_ignores_its_late_exit(
    store: Store,
) -> None:
    [job_id] = submit(store, time_limit=60, max_retries=2)
    attempt_id = claim(store, job_id, nodes=["n1"])
    assert store.attempt_started(attempt_id, "n1", 4242, NOW + 1)
    outcome = retry.after_timeout(store.job(job_id), 60.0, (attempt_id,))
    assert store.apply_outcome(outcome, NOW + 61)

    row = store.job_row(job_id)
    assert row["state"] == JobState.FAILED.value and row["finished_at"] == NOW + 61
    attempt = store.attempt_row(attempt_id)
    assert attempt is not None and attempt["state"] == AttemptState.TIMEOUT.value
    assert attempt["reason"] == "TIMEOUT: ran past its time limit of 1m"
    # The event a Slurm user looks for (and a [[notify]] rule names), not job.failed.
    assert event_kinds(store, job_id) == ["job.queued", "job.claimed", "job.running", "job.timeout"]
    assert attempts_to_kill(store, "n1", [attempt_id]) == [attempt_id]
    # The agent kills it and reports the exit (SIGTERM: 143): the job stays failed, not retried.
    assert not store.finish_attempt(attempt_id, "n1", 143, NOW + 65, after_exit(143, attempt_id))
    assert store.job_row(job_id)["state"] == JobState.FAILED.value


def test_a_jobs_end_names_the_node_it_ran_on_and_a_node_failure_the_node_lost(store: Store) -> None:
    """`corral events --node N` listed N's own changes but not the jobs that failed there or were
    lost with it, and a notification of a job.failed had no node to say where it failed."""
    one, two = submit(store, 2)
    first = claim(store, one, nodes=["n1"])
    assert store.attempt_started(first, "n1", 7, NOW + 1)
    assert store.finish_attempt(first, "n1", 3, NOW + 5, after_exit(3, first))
    gang = claim(store, two, nodes=["n1", "n2"])
    lost = retry.after_node_failure(store.job(two), NOW + 9, retry.RetrySettings(), "n2", (gang,))
    assert store.apply_outcome(lost, NOW + 9)

    assert [(e["kind"], e["job_id"]) for e in store.list_events(node_id="n1", kind="job.")] == [
        ("job.claimed", one),
        ("job.running", one),
        ("job.failed", one),
        ("job.claimed", two),
    ]
    [requeued] = store.list_events(node_id="n2")
    assert (requeued["kind"], requeued["job_id"]) == ("job.requeued", two)
    assert requeued["message"].startswith("node n2 lost; retry 1/")


def test_mark_nodes_marks_many_in_one_transaction_as_mark_node_does_one(store: Store) -> None:
    """A clean stop marks its whole fleet shutting down, then gone: one transaction for all, with
    mark_node's rules (gone is final, an unknown node is skipped) and one event each."""
    for node_id in ("n1", "n2", "n3"):
        store.create_node(node_id, SMALL, f"tok-{node_id}", NOW, "r")
    assert store.mark_node("n3", NodeState.GONE, "instance disappeared", NOW + 1)

    changed = store.mark_nodes(
        {"n1": "corral stopped", "n2": "idle", "n3": "x", "n9": "y"}, NodeState.SHUTTING_DOWN, NOW + 2
    )

    assert changed == {"n1", "n2"}
    rows = {row["id"]: row for row in store.node_rows(include_gone=True)}
    assert (rows["n1"]["state"], rows["n1"]["reason"]) == ("shutting_down", "corral stopped")
    assert (rows["n2"]["state"], rows["n2"]["reason"]) == ("shutting_down", "idle")
    assert rows["n3"]["state"] == "gone"
    assert store.mark_nodes({"n1": "corral stopped"}, NodeState.GONE, NOW + 3) == {"n1"}
    assert [e["kind"] for e in store.list_events(node_id="n1")] == ["node.booting", "node.shutting_down", "node.gone"]

    store.add_node_events(
        NOW + 4, "node.orphan", [("instance i-1 has no live node record; destroyed", "n7"), ("b", None)]
    )
    assert [(e["message"], e["node_id"]) for e in store.list_events(kind="node.orphan")][-2:] in (
        [("instance i-1 has no live node record; destroyed", "n7"), ("b", None)],
        [("b", None), ("instance i-1 has no live node record; destroyed", "n7")],
    )
