"""A placer kept between passes starts its queue loop where the last pass left it (QueueWalk) when
the jobs already waiting would get the same verdicts: its decisions are a fresh placer's, exactly,
pass after pass, on a busy bounded fleet with EASY backfill or strict FIFO, with work that comes,
starts when placed or later (an agent's start latency), ends and lacks a time limit, and nodes
drained and put back."""

from __future__ import annotations

import random
from typing import Any, Literal

import pytest
from placement_helpers import NOW, job, node, running

from corral.core.index import SnapshotIndex
from corral.core.model import Attempt, AttemptState, Job, NodeState
from corral.core.snapshot import PlacementResult, Snapshot
from corral.placement import placer as placer_module
from corral.placement.backfill import Reservation
from corral.placement.placer import FactsMemo, QueueWalk
from corral.placement.settings import PlacementSettings


@pytest.mark.parametrize("starts", ["when placed", "passes later"])
@pytest.mark.parametrize("backfill", ["easy", "strict-fifo"])
def test_a_resumed_queue_walk_decides_as_a_fresh_placer(
    backfill: str, starts: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = PlacementSettings.model_validate(
        {"queue": {"capacity": "bounded", "backfill": backfill, "max_job_test": 40}}
    )
    resumed = {"quiet": 0, "after placements": 0}
    resume = QueueWalk.resume

    def spy(walk: QueueWalk, *args: Any) -> Reservation | None | Literal[False]:
        found = resume(walk, *args)
        if found is not False:
            resumed["after placements" if walk.placed else "quiet"] += 1
        return found

    monkeypatch.setattr(QueueWalk, "resume", spy)
    rng = random.Random(5)
    nodes = [node(f"n{i}", rng.choice([8, 16]), 64) for i in range(16)]
    index = SnapshotIndex()
    for n in nodes:
        index.put_node(n)
    jobs: dict[int, Job] = {}
    attempts: dict[int, Attempt] = {}
    memo = FactsMemo(settings)
    next_id, now = 1, NOW
    for _ in range(1500):
        now += rng.choice([0.0, 1.0, 5.0, 60.0, 600.0])
        for _ in range(rng.choice([0, 1, 1, 2])):  # arrivals, at the queue's end
            size = rng.choice([1, 2, 4, 6, 12, 16, 16, 24])  # 24: more than any node has
            limit = rng.choice([120, 900, 3600, 3600, None])  # None: runs until it ends
            j = job(next_id, size, 4, time_limit=limit, submitted_at=now + next_id * 1e-3)
            jobs[j.id] = j
            index.put_job(j)
            next_id += 1
        if attempts and rng.random() < 0.5:  # work ends
            ended = attempts.pop(rng.choice(list(attempts)))
            jobs.pop(ended.job_id)
            index.drop_attempt(ended.id)
            index.drop_job(ended.job_id)
        if rng.random() < 0.03:  # an operator drains a node, or puts it back
            drained = rng.choice(nodes)
            drained.state = NodeState.DRAINING if drained.state is NodeState.IDLE else NodeState.IDLE
            index.put_node(drained)
        running_jobs = {a.job_id for a in attempts.values()}
        queued = sorted((j for j in jobs.values() if j.id not in running_jobs), key=lambda j: (j.submitted_at, j.id))
        snapshot = Snapshot(
            jobs=list(jobs.values()),
            attempts=list(attempts.values()),
            nodes=list(nodes),
            instance_types=[],
            index=index,
        )
        schedulable = index.schedulable()
        kept = placer_module.place(snapshot, queued, schedulable, None, now, settings, memo=memo, explanations=False)
        fresh = placer_module.place(
            snapshot, queued, schedulable, None, now, settings, memo=FactsMemo(settings), explanations=False
        )
        assert kept == fresh, f"at {now - NOW:g}s"
        # An agent starts work it was assigned: the work's end moves from its assignment's time
        # limit to its start's, which reservations count (its node's room stays as it was).
        for a in attempts.values():
            if a.started_at is None and rng.random() < 0.5:
                a.state, a.started_at = AttemptState.RUNNING, now
                index.put_attempt(a)
        # The shell carries most placements out; now and then one is lost on the way.
        for p in kept.placements:
            if rng.random() < 0.95:
                a = running(
                    next_id,
                    p.job_id,
                    list(p.node_ids),
                    jobs[p.job_id].resources,
                    started_at=now if starts == "when placed" else None,
                )
                a.assigned_at = now
                attempts[a.id] = a
                index.put_attempt(a)
                next_id += 1
    assert resumed["quiet"] > 30 and resumed["after placements"] > 30


def test_a_walk_is_not_resumed_when_the_queue_before_the_new_jobs_changed() -> None:
    """A job that left the queue (cancelled) or came back ahead of others (a retry keeps its place)
    makes the loop start from the queue's head again."""
    settings = PlacementSettings.model_validate({"queue": {"capacity": "bounded", "backfill": "easy"}})
    nodes = [node("n1", 8, 16)]
    index = SnapshotIndex()
    index.put_node(nodes[0])
    big = job(1, 4, 4, time_limit=600)
    index.put_attempt(running(100, 1, ["n1"], big.resources, started_at=NOW))
    index.put_job(big)
    queue = [job(2, 8, 4, time_limit=600), job(3, 2, 2, time_limit=6000), job(4, 1, 1, time_limit=6000)]
    for j in queue:
        index.put_job(j)
    memo = FactsMemo(settings)

    def run(jobs: list[Job], now: float, kept: FactsMemo = memo) -> PlacementResult:
        snapshot = Snapshot(
            jobs=[big, *jobs], attempts=list(index.attempts.values()), nodes=nodes, instance_types=[], index=index
        )
        return placer_module.place(
            snapshot, jobs, index.schedulable(), None, now, settings, memo=kept, explanations=False
        )

    first = run(queue, NOW + 1)
    assert "reserved n1" in first.reasons[2] and "would delay job 2" in first.reasons[3]
    assert memo.walk is not None and memo.walk.waiting == queue
    # A retried job comes back ahead of the others (it keeps its submission time): it is the one
    # reserved for now, as a fresh placer finds.
    retried = job(5, 8, 4, time_limit=600, submitted_at=0.5)
    index.put_job(retried)
    ahead = run([retried, *queue], NOW + 2)
    assert "reserved n1" in ahead.reasons[5] and "would delay job 5" in ahead.reasons[3]
    assert ahead == run([retried, *queue], NOW + 2, FactsMemo(settings))
    # Jobs 5 and 2 are cancelled: nothing holds jobs 3 and 4 back any more.
    assert {p.job_id for p in run(queue[1:], NOW + 3).placements} == {3, 4}


def test_a_job_held_back_whose_room_a_later_placement_took_fits_nowhere_next_pass() -> None:
    """Job 3 fits now but would delay job 2's reservation; job 4, after it in the queue, ends
    before the reservation starts and takes that room. Next pass job 3 fits nowhere at all."""
    settings = PlacementSettings.model_validate({"queue": {"capacity": "bounded", "backfill": "easy"}})
    nodes = [node("n1", 8, 16)]
    index = SnapshotIndex()
    index.put_node(nodes[0])
    first = job(1, 6, 4, time_limit=600)
    index.put_job(first)
    index.put_attempt(running(100, 1, ["n1"], first.resources, started_at=NOW))
    queue = [job(2, 8, 4, time_limit=600), job(3, 2, 2, time_limit=6000), job(4, 2, 2, time_limit=60)]
    for j in queue:
        index.put_job(j)
    memo = FactsMemo(settings)

    def run(jobs: list[Job], now: float, kept: FactsMemo) -> PlacementResult:
        snapshot = Snapshot(
            jobs=[first, *jobs], attempts=list(index.attempts.values()), nodes=nodes, instance_types=[], index=index
        )
        return placer_module.place(
            snapshot, jobs, index.schedulable(), None, now, settings, memo=kept, explanations=False
        )

    before = run(queue, NOW + 1, memo)
    assert [p.job_id for p in before.placements] == [4]
    assert before.reasons[3] == "would delay job 2, which has a reservation"
    index.put_attempt(running(101, 4, ["n1"], queue[2].resources, started_at=NOW + 1))
    after = run(queue[:2], NOW + 2, memo)
    assert after.reasons[3] == "waiting for resources"
    assert after == run(queue[:2], NOW + 2, FactsMemo(settings))
    # Job 4 ends early: job 3 fits again, and is held back again.
    index.drop_attempt(101)
    again = run(queue[:2], NOW + 3, memo)
    assert again.reasons[3] == "would delay job 2, which has a reservation"
    assert again == run(queue[:2], NOW + 3, FactsMemo(settings))


def test_a_request_that_could_not_be_reserved_for_gets_its_reservation_once_work_without_a_limit_ends() -> None:
    """Job 3 fits nowhere, and no reservation can be made for it while job 1 (no time limit) runs.
    Job 1 ends; job 3 still fits nowhere, but job 2 will end: job 3 is reserved for, and job 4,
    new, is held back for it."""
    settings = PlacementSettings.model_validate({"queue": {"capacity": "bounded", "backfill": "easy"}})
    nodes = [node("n1", 8, 16)]
    index = SnapshotIndex()
    index.put_node(nodes[0])
    endless, limited = job(1, 4, 2), job(2, 2, 2, time_limit=600)
    for j, attempt_id in ((endless, 100), (limited, 101)):
        index.put_job(j)
        index.put_attempt(running(attempt_id, j.id, ["n1"], j.resources, started_at=NOW))
    blocked, later = job(3, 8, 4, time_limit=600), job(4, 1, 1, time_limit=6000)
    index.put_job(blocked)
    memo = FactsMemo(settings)

    def run(queue: list[Job], now: float, kept: FactsMemo = memo) -> PlacementResult:
        snapshot = Snapshot(
            jobs=list(index.jobs.values()),
            attempts=list(index.attempts.values()),
            nodes=nodes,
            instance_types=[],
            index=index,
        )
        return placer_module.place(
            snapshot, queue, index.schedulable(), None, now, settings, memo=kept, explanations=False
        )

    assert run([blocked], NOW + 1).reasons[3] == "waiting for resources"  # no reservation
    index.drop_attempt(100)
    index.drop_job(1)
    index.put_job(later)
    after = run([blocked, later], NOW + 2)
    assert "reserved n1" in after.reasons[3] and after.reasons[4] == "would delay job 3, which has a reservation"
    assert after == run([blocked, later], NOW + 2, FactsMemo(settings))
