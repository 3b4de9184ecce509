"""A placer that keeps node slots (a Roster) over a kept index places exactly as one over the
index's schedulable list: nodes that boot, pair, fill up, drain, go down, go away and come back
under the same name, are reshaped or measured, with the cost gate, backfill and every scorer but
price at work."""

from __future__ import annotations

import random

import pytest
from placement_helpers import NOW, job, node, running

from corral.core.index import SnapshotIndex
from corral.core.model import Attempt, GiB, InstanceType, Job, Node, NodeState, Resources
from corral.core.snapshot import Snapshot
from corral.placement import placer as placer_module
from corral.placement.placer import FactsMemo
from corral.placement.settings import PlacementSettings

WEIGHTS = {"pack": 1.0, "platform": 0.5, "hardware": 0.25, "reboot": 0.25, "failures": 0.5, "random": 0.0001}


@pytest.mark.parametrize("elastic", [True, False])
def test_slots_place_as_the_list_does(elastic: bool) -> None:
    rng = random.Random(5)
    settings = PlacementSettings.model_validate({"weights": WEIGHTS})
    types = [InstanceType("small", 4, 16 * GiB, 0.2), InstanceType("big", 16, 64 * GiB, 0.8)] if elastic else []
    index = SnapshotIndex(track_pings=True)
    kept = FactsMemo(settings)
    jobs: dict[int, Job] = {}
    attempts: dict[int, Attempt] = {}
    serial, now, used_slots = 0, NOW, 0

    def new_node(name: str | None = None) -> Node:
        nonlocal serial
        serial += 1
        attributes: dict[str, str | list[str]] = {}
        if rng.random() < 0.3:
            attributes["platform"] = rng.choice(["1.0", "2.0", "3.1"])
        if rng.random() < 0.3:
            attributes["hardware_priority"] = str(rng.choice([1, 5, 9]))
        n = node(
            name or f"n{serial}",
            rng.choice([4, 16]),
            rng.choice([16, 64, 256]),  # the largest RAM decides the pack scale
            price=rng.choice([0.2, 0.8]),
            state=NodeState.BOOTING if rng.random() < 0.5 else NodeState.IDLE,
            **attributes,
        )
        index.put_node(n)
        return n

    for _ in range(8):
        new_node()
    for step in range(400):
        now += rng.choice([0.0, 1.0, 9.0])
        for _ in range(rng.choice([0, 1, 2])):
            limit = rng.choice([None, 600.0, 7200.0])
            j = job(10_000 + step * 10 + len(jobs), rng.choice([0.5, 2, 6]), rng.choice([1, 8, 40]), time_limit=limit)
            jobs[j.id] = j
            index.put_job(j)
        for _ in range(rng.choice([1, 1, 2])):  # now and then two changes in one pass
            live = list(index.nodes.values())
            what = rng.random()
            if what < 0.15:
                new_node()
            elif what < 0.3 and live:  # a node pairs, drains, goes down, or is back to work
                n = rng.choice(live)
                n.state = rng.choice([NodeState.IDLE, NodeState.BUSY, NodeState.DRAINING, NodeState.DOWN])
                index.put_node(n)
            elif what < 0.4 and live:  # a node goes away; now and then it comes back under its name
                n = rng.choice(live)
                for a in [a for a in attempts.values() if n.id in a.node_ids]:
                    del attempts[a.id]
                    index.drop_attempt(a.id)
                index.drop_node(n.id)
                if rng.random() < 0.4:
                    new_node(n.id)
            elif what < 0.45 and live:  # an operator labels a node
                n = rng.choice(live)
                n.attributes["platform"] = "4.0"
                index.put_node(n, reshaped=True)
            elif what < 0.55 and live:  # an agent's measurement
                n = rng.choice(live)
                n.used, n.used_at = Resources(rng.uniform(0, 2), 2 * GiB, 0, 0), now
                index.put_node(n)
            elif what < 0.75 and attempts:  # work ends
                a = attempts.pop(rng.choice(list(attempts)))
                index.drop_attempt(a.id)
                jobs.pop(a.job_id, None)
                index.drop_job(a.job_id)
        waiting = [j for j in jobs.values() if not any(a.job_id == j.id for a in attempts.values())]
        snapshot = Snapshot(
            list(jobs.values()), list(attempts.values()), list(index.nodes.values()), types, index=index
        )
        schedulable = index.schedulable()
        got = placer_module.place(snapshot, waiting, schedulable, None, now, settings, memo=kept, explanations=False)
        used_slots += kept.roster is not None
        fresh = placer_module.place(
            snapshot, waiting, list(schedulable), None, now, settings, memo=FactsMemo(settings), explanations=False
        )
        assert got.placements == fresh.placements, f"step {step}"
        assert got.reasons == fresh.reasons, f"step {step}"
        assert (got.revisit, got.revisit_from) == (fresh.revisit, fresh.revisit_from)
        for p in got.placements:  # carried out
            a = running(len(attempts) + 100_000 + step * 10, p.job_id, list(p.node_ids), jobs[p.job_id].resources)
            a.started_at = a.assigned_at = now
            attempts[a.id] = a
            index.put_attempt(a)
    assert used_slots > 350
