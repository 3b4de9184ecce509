"""The running work's ends that a placer keeps between passes make, pass after pass, exactly the
timeline that reading every attempt afresh makes: work that comes, goes and starts, gangs, work
without a time limit, nodes that are not taking work, and a new set of nodes."""

from __future__ import annotations

import random

import numpy as np
from placement_helpers import NOW, job, node, running

from corral.core.index import SnapshotIndex
from corral.core.model import Attempt, AttemptState, Job
from corral.placement.arrays import NodeArrays
from corral.placement.backfill import RunningEnds, Timeline
from corral.placement.settings import PlacementSettings


def test_kept_ends_make_the_timeline_made_afresh() -> None:
    rng = random.Random(3)
    settings = PlacementSettings()
    nodes = [node(f"n{i}", 16, 64) for i in range(8)]
    arrays = NodeArrays(nodes[:6], None, settings, NOW)  # n6 and n7 take no work: no events there
    world = SnapshotIndex()
    kept = RunningEnds(default_limit=900.0)
    jobs: dict[int, Job] = {}
    attempts: dict[int, Attempt] = {}
    now, next_id, compared = NOW, 1, 0
    for step in range(400):
        now += rng.choice([0.0, 3.0, 40.0])
        what = rng.random()
        if what < 0.45 or not attempts:
            j = job(next_id, rng.choice([0.5, 1, 3]), rng.choice([1, 4]), time_limit=rng.choice([None, 60, 600]))
            jobs[j.id] = j
            on = rng.sample([n.id for n in nodes], rng.choice([1, 1, 2, 3]))
            a = running(next_id, j.id, on, j.resources, started_at=None if rng.random() < 0.3 else now)
            a.assigned_at = now
            attempts[a.id] = a
            world.put_attempt(a)
            next_id += 1
        elif what < 0.75:
            gone = attempts.pop(rng.choice(list(attempts)))
            world.drop_attempt(gone.id)
        else:
            waiting = [a for a in attempts.values() if a.started_at is None]
            if waiting:
                started = rng.choice(waiting)
                started.state, started.started_at = AttemptState.RUNNING, now
                world.put_attempt(started)
        if step == 250:  # the nodes change: positions are others
            arrays = NodeArrays(nodes[2:], None, settings, NOW)
        if rng.random() < 0.3:
            continue  # no reservation this pass: changes pile up in the journal
        # Now and then the pass ended some attempts itself: they are left out (the index still
        # files them), and the shell then drops them, or does not.
        ending = frozenset(rng.sample(sorted(attempts), min(2, len(attempts)))) if rng.random() < 0.2 else frozenset()
        listed = [a for a in world.attempts.values() if a.id not in ending]
        fresh = Timeline.of_running(arrays, listed, jobs, now, 900.0).arrays()
        got = kept.timeline(arrays.index, listed, jobs, now, world, ending).arrays()
        for mine, theirs in zip(got, fresh, strict=True):
            assert np.array_equal(mine, theirs)
        if ending and rng.random() < 0.7:
            for attempt_id in ending:
                del attempts[attempt_id]
                world.drop_attempt(attempt_id)
        # Without the index (the live loop) it makes them afresh, the same again.
        again = RunningEnds(900.0).timeline(arrays.index, listed, jobs, now, None).arrays()
        for mine, theirs in zip(again, fresh, strict=True):
            assert np.array_equal(mine, theirs)
        compared += 1
    assert compared > 200
