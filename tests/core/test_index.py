"""The snapshot index a shell keeps current, one change at a time, is the one a pass would build from
the snapshot's lists; and a pass reads the same decisions through either."""

from __future__ import annotations

import dataclasses
import random

from corral.core.index import SnapshotIndex
from corral.core.model import Attempt, AttemptState, Job, JobState, Node, NodeState, Resources
from corral.core.reconcile import plan_pass
from corral.core.settings import PolicySettings
from corral.core.snapshot import Snapshot


class World:
    """Plain dicts, as a shell keeps them, and an index filed after every change."""

    def __init__(self) -> None:
        self.jobs: dict[int, Job] = {}
        self.attempts: dict[int, Attempt] = {}
        self.nodes: dict[str, Node] = {}
        self.dropped: list[str] = []  # ids of nodes gone, some of which come back
        self.index = SnapshotIndex()

    def snapshot(self) -> Snapshot:
        return Snapshot(list(self.jobs.values()), list(self.attempts.values()), list(self.nodes.values()), [])

    def step(self, rng: random.Random, serial: int) -> None:
        index = self.index
        kind = rng.randrange(7)
        if kind == 0 or not self.jobs:
            # Mostly in submission order, as jobs arrive; some come late, out of it.
            submitted = serial - rng.choice([0, 0, 0, 50])
            job = Job(serial, ["true"], Resources(1, 512), priority=rng.choice([1, 1, 1, 2, 0]), submitted_at=submitted)
            self.jobs[job.id] = job
            index.put_job(job)
        elif kind == 1:
            job = self.jobs[rng.choice(list(self.jobs))]
            job.state = rng.choice([JobState.QUEUED, JobState.CLAIMED, JobState.RUNNING])
            job.cancel_requested = rng.random() < 0.2
            if rng.random() < 0.2:
                job.priority = rng.choice([0, 1, 2, 3])
            # A requested start or a back-off, either past or still ahead for the passes below.
            job.not_before = rng.choice([None, None, None, 900.0, 1300.0])
            job.retry_at = rng.choice([None, None, None, 1000.0 + serial, 1100.0 + serial])
            index.put_job(job)
        elif kind == 2:
            job_id = rng.choice(list(self.jobs))
            del self.jobs[job_id]
            index.drop_job(job_id)
        elif kind == 3:
            name = self.dropped.pop() if self.dropped and rng.random() < 0.3 else f"n{serial}"
            node = Node(name, "t", Resources(4, 4096), 0.1, rng.choice(list(NodeState)))
            self.nodes[node.id] = node
            index.put_node(node)
        elif kind == 4 and self.nodes:
            node = self.nodes[rng.choice(list(self.nodes))]
            if rng.random() < 0.3:
                del self.nodes[node.id]
                index.drop_node(node.id)
                self.dropped.append(node.id)
            else:
                state = rng.choice(list(NodeState))
                if rng.random() < 0.5:  # a shell may file a new object for the node
                    node = self.nodes[node.id] = dataclasses.replace(node, state=state)
                node.state = state
                index.put_node(node)
        elif kind == 5 and self.nodes:
            # Some attempts name nodes that are gone (a lost node), gangs name several.
            on = rng.sample(sorted(self.nodes) + ["gone"], k=min(len(self.nodes), rng.choice([1, 1, 2])))
            attempt = Attempt(serial, rng.choice(list(self.jobs)), on, Resources(1, 512))
            self.attempts[attempt.id] = attempt
            index.put_attempt(attempt)
        elif self.attempts:
            attempt = self.attempts[rng.choice(list(self.attempts))]
            attempt.state = rng.choice(list(AttemptState))
            if attempt.state.active:
                index.put_attempt(attempt)
            else:
                del self.attempts[attempt.id]
                index.drop_attempt(attempt.id)


def test_a_kept_index_equals_a_fresh_one_after_every_change() -> None:
    rng = random.Random(7)
    world = World()
    deferred = reordered = 0
    for serial in range(1, 3000):
        version = world.index.fleet_version
        world.step(rng, serial)
        deferred += bool(world.index.deferred)
        assert world.index.describe() == SnapshotIndex.of(world.snapshot()).describe(), f"after change {serial}"
        if rng.random() < 0.3:  # (the index sorts when asked: changes pile up in between)
            queued = [job for job in world.jobs.values() if job.state is JobState.QUEUED]
            in_order = sorted(queued, key=lambda job: (-job.priority, job.submitted_at, job.id))
            reordered += list(world.index.queued.values()) != in_order
            assert world.index.in_queue_order() == in_order, f"after change {serial}"
        if world.index.fleet_version != version:  # a list made afresh holds the nodes as filed last
            assert all(node is world.nodes[node.id] for node in world.index.schedulable()), f"after change {serial}"
    fresh = SnapshotIndex.of(world.snapshot())
    # The groups were exercised, and jobs came to the queue out of order.
    assert fresh.unworked and fresh.work and fresh.queued and fresh.flagged and deferred and reordered


def test_a_pass_decides_the_same_through_a_kept_index() -> None:
    rng = random.Random(11)
    world = World()
    settings = PolicySettings()
    decided = 0
    for serial in range(1, 600):
        world.step(rng, serial)
        if serial % 10:
            continue
        snapshot = world.snapshot()
        now = 1000.0 + serial
        kept = plan_pass(dataclasses.replace(snapshot, index=world.index), now, settings)
        assert kept == plan_pass(snapshot, now, settings), f"after change {serial}"
        decided += not kept.empty()
    assert decided > 20
