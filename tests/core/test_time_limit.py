"""Time limits are enforced (Slurm's `--time`): a running attempt whose job has run its time limit
plus `policy.dispatch.time_limit_grace` (Slurm's OverTimeLimit) ends, and its job fails with
TIMEOUT, not retried. Snapshot in, decisions out."""

from __future__ import annotations

import dataclasses
import math
from typing import Unpack

import pytest
from tests.core.test_reconcile import TYPES, idle_node, job
from tests.support import JobFields

from corral.config import Config
from corral.core.index import SnapshotIndex
from corral.core.model import Attempt, AttemptState, Job, JobState, Resources
from corral.core.reconcile import next_time_limit_end, plan_pass
from corral.core.settings import PolicySettings
from corral.core.snapshot import Decisions, JobOutcome, Snapshot

STARTED = 1000.0


def policy(grace: float | str | None = 0.0, default_time_limit: float | None = None) -> PolicySettings:
    return PolicySettings.model_validate(
        {
            "dispatch": {"time_limit_grace": grace},
            "placement": {"queue": {"default_time_limit": default_time_limit}},
        }
    )


def running(
    job_id: int, limit: float | None, nodes: tuple[str, ...] = ("n1",), vcpus: float = 1, **fields: Unpack[JobFields]
) -> tuple[Job, Attempt]:
    """Job `job_id` runs since STARTED on `nodes` (one attempt, a gang if several)."""
    runs = dataclasses.replace(
        job(job_id, vcpus, **fields), state=JobState.RUNNING, claimed_by="local", time_limit=limit
    )
    attempt = Attempt(
        job_id * 10, job_id, list(nodes), Resources(1, 1024), AttemptState.RUNNING, "local", STARTED - 5, STARTED
    )
    return runs, attempt


def world(*runs: tuple[Job, Attempt], queued: tuple[Job, ...] = ()) -> Snapshot:
    node_ids = sorted({n for _, attempt in runs for n in attempt.node_ids} | {"n1"})
    return Snapshot(
        jobs=[j for j, _ in runs] + list(queued),
        attempts=[a for _, a in runs],
        nodes=[idle_node(n, now=STARTED + 10_000) for n in node_ids],
        instance_types=TYPES,
    )


def plan(snapshot: Snapshot, now: float, settings: PolicySettings) -> Decisions:
    """The pass at `now`, every node's agent heard from then."""
    nodes = [dataclasses.replace(node, last_ping_at=now) for node in snapshot.nodes]
    return plan_pass(dataclasses.replace(snapshot, nodes=nodes), now, settings)


def timeouts(decisions_outcomes: list[JobOutcome]) -> list[JobOutcome]:
    return [o for o in decisions_outcomes if o.timeout]


def test_a_job_past_its_limit_fails_with_timeout_and_its_attempt_ends() -> None:
    snapshot = world(running(1, 600.0, max_retries=3))
    decisions = plan(snapshot, STARTED + 600.0, policy())
    (outcome,) = decisions.job_outcomes
    assert outcome.state is JobState.FAILED and outcome.timeout
    assert outcome.attempt_ids == (10,)
    assert outcome.reason == "TIMEOUT: ran past its time limit of 10m"
    # Not retried, whatever its max_retries (a run that timed out would time out again).
    assert outcome.retry_at is None and not outcome.perm_failure and not outcome.temp_failure


def test_within_its_limit_or_its_grace_a_job_runs_on() -> None:
    snapshot = world(running(1, 600.0))
    assert plan(snapshot, STARTED + 599.0, policy()).job_outcomes == []
    assert plan(snapshot, STARTED + 600.0 + 299.0, policy(grace="5m")).job_outcomes == []
    (outcome,) = plan(snapshot, STARTED + 900.0, policy(grace="5m")).job_outcomes
    assert outcome.timeout
    assert outcome.reason == "TIMEOUT: ran past its time limit of 10m (+ 5m grace, policy.dispatch.time_limit_grace)"


def test_a_job_without_a_limit_is_never_ended_and_default_time_limit_only_plans() -> None:
    # queue.default_time_limit is what placement assumes of a job without a limit; it kills nothing.
    snapshot = world(running(1, None))
    assert plan(snapshot, STARTED + 10 * 86400, policy()).job_outcomes == []
    assert plan(snapshot, STARTED + 10 * 86400, policy(default_time_limit=60.0)).job_outcomes == []


def test_unlimited_grace_turns_enforcement_off() -> None:
    settings = policy(grace="UNLIMITED")  # Slurm's OverTimeLimit=UNLIMITED
    assert settings.dispatch.time_limit_grace is None
    snapshot = world(running(1, 60.0))
    assert plan(snapshot, STARTED + 86400.0, settings).job_outcomes == []
    assert next_time_limit_end(SnapshotIndex.of(snapshot), settings) == math.inf


def test_a_gangs_one_attempt_ends_on_all_its_nodes_and_frees_them_for_the_queue() -> None:
    gang = running(1, 60.0, nodes=("n1", "n2"), vcpus=2)
    snapshot = world(gang, queued=(job(2, vcpus=2, submitted_at=1.0),))
    decisions = plan(snapshot, STARTED + 60.0, policy())
    (outcome,) = decisions.job_outcomes
    assert outcome.timeout and outcome.attempt_ids == (10,)
    # The room the gang held is free in the same pass: the queued job goes on the first node.
    assert [(p.job_id, p.node_ids) for p in decisions.placements] == [(2, ("n1",))]


def test_only_the_jobs_past_their_limits_end_first_to_pass_it_first() -> None:
    snapshot = world(running(1, 3600.0), running(2, 120.0), running(3, None), running(4, 60.0), running(5, 100.0))
    decisions = plan(snapshot, STARTED + 120.0, policy())
    assert [o.job_id for o in timeouts(decisions.job_outcomes)] == [4, 5, 2]


def test_a_job_cancelled_in_the_same_pass_is_cancelled_not_timed_out() -> None:
    runs, attempt = running(1, 60.0)
    snapshot = world((dataclasses.replace(runs, cancel_requested=True), attempt))
    (outcome,) = plan(snapshot, STARTED + 600.0, policy()).job_outcomes
    assert outcome.state is JobState.CANCELLED and not outcome.timeout


def test_an_attempt_not_started_yet_has_no_run_to_time() -> None:
    runs, attempt = running(1, 60.0)
    assigned = dataclasses.replace(attempt, state=AttemptState.ASSIGNED, started_at=None, assigned_at=STARTED + 500)
    claimed = dataclasses.replace(runs, state=JobState.CLAIMED)
    assert plan(world((claimed, assigned)), STARTED + 600.0, policy()).job_outcomes == []


def test_the_kept_index_finds_the_next_limit_and_forgets_ended_attempts() -> None:
    # The simulator keeps one index change by change; a pass with no limit due reads one entry.
    index = SnapshotIndex()
    one, first = running(1, 600.0)
    two, second = running(2, 60.0)
    for j in (one, two):
        index.put_job(j)
    index.put_attempt(first)
    index.put_attempt(second)
    assert index.next_limit() == STARTED + 60.0
    index.drop_attempt(second.id)  # it ended well within its limit
    assert index.next_limit() == STARTED + 600.0
    assert index.limits_reached(STARTED + 599.0) == []
    assert index.limits_reached(STARTED + 600.0) == [(STARTED + 600.0, first.id)]
    assert next_time_limit_end(index, policy(grace=30.0)) == STARTED + 630.0
    # Many attempts that end early do not pile up in the heap.
    for i in range(100, 1100):
        extra, attempt = running(i, 3600.0)
        index.put_job(extra)
        index.put_attempt(attempt)
        index.drop_attempt(attempt.id)
        index.drop_job(i)
    assert len(index.limits) < 100
    assert index.next_limit() == STARTED + 600.0


@pytest.mark.parametrize("value", ["forever", -5, "nan"])
def test_a_bad_grace_is_refused_naming_the_key_and_what_is_allowed(value: object) -> None:
    with pytest.raises(ValueError) as error:
        Config.model_validate({"policy": {"dispatch": {"time_limit_grace": value}}})
    assert "time_limit_grace" in str(error.value)
    if value == "forever":
        assert "'unlimited'" in str(error.value)


def test_a_restarted_corral_judges_a_run_it_did_not_see_start_once_its_agent_could_be_heard() -> None:
    # corral was down while the job ran: the job may have ended within its limit on its node, and
    # the agent's report be on its way. The first pass after the restart must not fail it TIMEOUT.
    restarted = STARTED + 3600.0
    snapshot = dataclasses.replace(world(running(1, 60.0)), observing_since=restarted)
    ping_stale = policy().lifecycle.ping_stale
    assert plan(snapshot, restarted + 1.0, policy()).job_outcomes == []
    (outcome,) = plan(snapshot, restarted + ping_stale + 1.0, policy()).job_outcomes
    assert outcome.timeout
    # A run this corral saw start is judged at its limit, as ever.
    runs, attempt = running(2, 60.0)
    seen = dataclasses.replace(attempt, started_at=restarted + 1.0, assigned_at=restarted)
    snapshot = dataclasses.replace(world((runs, seen)), observing_since=restarted)
    (outcome,) = plan(snapshot, restarted + 61.0, policy()).job_outcomes
    assert outcome.timeout and outcome.job_id == 2
