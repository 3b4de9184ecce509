"""The work ledger a placer keeps between passes gives, pass after pass, exactly what summing every
attempt afresh gives: attempts that come, go and start, measurements, and nodes that come and go."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from placement_helpers import NOW, job, node, running

from corral.core import index as index_module
from corral.core.index import SnapshotIndex
from corral.core.model import Attempt, AttemptState, Job, Node, Resources
from corral.placement.work import WorkLedger

FRACTIONS = [0.1, 0.5, 0.9]


def reference(
    nodes: list[Node], attempts: list[Attempt], jobs: dict[int, Job], now: float, default_limit: float | None
) -> dict[str, np.ndarray]:
    """Per node, straight from the definitions: every active attempt in id order."""
    n = len(nodes)
    out = {
        "jobs": np.zeros(n),
        "capped": np.zeros(n),
        "exclusive": np.zeros(n),
        "dedicated": np.zeros((4, n)),
        "unmeasured": np.zeros((4, n)),
        "ends": np.full((len(FRACTIONS), n), now),
    }
    for i, nd in enumerate(nodes):
        mine = sorted((a for a in attempts if a.state.active and nd.id in a.node_ids), key=lambda a: a.id)
        for a in mine:
            r = (a.resources.vcpus, a.resources.ram_mib, a.resources.scratch_mib, a.resources.gpus)
            job_of = jobs.get(a.job_id)
            out["jobs"][i] += 1
            out["capped"][i] += bool(job_of and job_of.cpu_capped)
            out["exclusive"][i] += bool(job_of and job_of.exclusive)
            out["dedicated"][:, i] += r
            if nd.used_at is None or a.started_at is None or a.started_at > nd.used_at:
                out["unmeasured"][:, i] += r
            limit = job_of.time_limit if job_of and job_of.time_limit is not None else default_limit
            start = a.started_at if a.started_at is not None else a.assigned_at
            for k, share in enumerate(FRACTIONS):
                end = math.inf if limit is None else start + limit * share
                out["ends"][k, i] = max(out["ends"][k, i], end)
    return out


def check(
    ledger: WorkLedger,
    nodes: list[Node],
    attempts: list[Attempt],
    jobs: dict[int, Job],
    now: float,
    world: SnapshotIndex | None = None,
    ending: frozenset[int] = frozenset(),
    ask_ends: bool = True,
) -> None:
    """`ending`: attempts the pass ended; `attempts` leaves them out, the index still files them.
    `ask_ends`: whether the kept ledger is asked for the ends (only the cost gate asks, and not
    every pass: the ends of nodes that changed meanwhile are figured when it does)."""
    ids = [nd.id for nd in nodes]
    used_at = [nd.used_at for nd in nodes]
    load = ledger.update(ids, {x: i for i, x in enumerate(ids)}, used_at, attempts, jobs, world, ending)
    fresh = WorkLedger(FRACTIONS, 7200.0)
    fresh_load = fresh.update(ids, {x: i for i, x in enumerate(ids)}, [nd.used_at for nd in nodes], attempts, jobs)
    want = reference(nodes, attempts, jobs, now, 7200.0)
    for got in (load, fresh_load):
        assert np.array_equal(got.jobs, want["jobs"])
        assert np.array_equal(got.capped, want["capped"])
        assert np.array_equal(got.exclusive, want["exclusive"])
        assert np.array_equal(got.dedicated, want["dedicated"])
        assert np.array_equal(got.unmeasured, want["unmeasured"])
    if ask_ends:
        assert np.array_equal(ledger.ends(now), want["ends"])
    assert np.array_equal(fresh.ends(now), want["ends"])


@pytest.mark.parametrize("journal", ["none", "index", "index, short"])
def test_a_kept_ledger_follows_every_kind_of_change(journal: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a kept index the ledger compares the attempts with the last pass's; with one, it
    reads the index's journal of changed attempts (a short journal forgets, and it compares again)."""
    if journal == "index, short":
        monkeypatch.setattr(index_module, "JOURNAL_KEPT", 1)
    world = SnapshotIndex() if journal != "none" else None
    rng = random.Random(7)
    nodes = [node(f"n{i}", 16, 64) for i in range(12)]
    jobs: dict[int, Job] = {}
    attempts: dict[int, Attempt] = {}
    ledger = WorkLedger(FRACTIONS, 7200.0)
    hidden: list[Node] = []
    next_id = 1
    now = NOW
    for _ in range(300):
        now += rng.choice([1.0, 5.0, 30.0])
        what = rng.random()
        if what < 0.35 or not attempts:  # a placement, sometimes a gang, sometimes not started yet
            limit = rng.choice([None, 600, 5e4])
            j = job(next_id, rng.choice([0.1, 0.7, 1.3, 2.25]), rng.choice([1, 3]), time_limit=limit)
            j.cpu_capped = rng.random() < 0.3
            j.exclusive = rng.random() < 0.2
            jobs[j.id] = j
            on = rng.sample([nd.id for nd in nodes], rng.choice([1, 1, 2]))
            started = None if rng.random() < 0.4 else now - rng.uniform(0, 50)
            a = running(next_id, j.id, on, j.resources, started_at=started)
            a.assigned_at = now - 60
            if started is None:
                a.state = AttemptState.ASSIGNED
            attempts[a.id] = a
            if world is not None:
                world.put_attempt(a)
            next_id += 1
        elif what < 0.6:  # an attempt ends
            ended = attempts.pop(rng.choice(list(attempts)))
            if world is not None:
                world.drop_attempt(ended.id)
        elif what < 0.75:  # an assigned attempt starts
            waiting = [a for a in attempts.values() if a.started_at is None]
            if waiting:
                chosen = rng.choice(waiting)
                chosen.state, chosen.started_at = AttemptState.RUNNING, now
                if world is not None:
                    world.put_attempt(chosen)
        elif what < 0.9:  # an agent reports a measurement
            nd = rng.choice(nodes)
            nd.used_at = now - rng.uniform(0, 40)
            nd.used = Resources(rng.uniform(0, 4), 1024, 0, 0)
        elif what < 0.95 and (hidden or len(nodes) > 4):
            # A node leaves the list with its work (not schedulable for a while), or comes back.
            if hidden and (rng.random() < 0.5 or len(nodes) <= 4):
                nodes.insert(rng.randrange(len(nodes) + 1), hidden.pop())
            else:
                hidden.append(nodes.pop(rng.randrange(len(nodes))))
        else:  # a node goes (its attempts are lost with it), or comes, or both at once
            change = rng.choice(["goes", "comes", "both"])
            if change != "comes" and len(nodes) > 4:
                gone = nodes.pop(rng.randrange(len(nodes)))
                for lost in [a for a in attempts.values() if gone.id in a.node_ids]:
                    del attempts[lost.id]
                    if world is not None:
                        world.drop_attempt(lost.id)
            if change != "goes":
                nodes.insert(rng.randrange(len(nodes) + 1), node(f"m{next_id}", 8, 32))
                next_id += 1
        # The shell hands over the attempts as the store does: in id order; sometimes new objects.
        listed = [attempts[i] for i in sorted(attempts)]
        if world is None and rng.random() < 0.3:
            listed = [Attempt(**{f: getattr(a, f) for f in a.__dataclass_fields__}) for a in listed]
        # Now and then a pass hands over no index (the live loop), or the placer is not asked at
        # all (no queue) while changes pile up in the journal, or the pass ended some attempts
        # itself (the index still files them; the shell may drop them, or may not).
        if rng.random() < 0.3:
            continue
        ending = frozenset(rng.sample(sorted(attempts), min(len(attempts), 2))) if rng.random() < 0.2 else frozenset()
        listed = [a for a in listed if a.id not in ending]
        check(ledger, nodes, listed, jobs, now, world if rng.random() < 0.85 else None, ending, rng.random() < 0.4)
        if ending and rng.random() < 0.7:  # the shell carries the ending out
            for attempt_id in ending:
                del attempts[attempt_id]
                if world is not None:
                    world.drop_attempt(attempt_id)


def test_an_attempt_not_active_counts_for_nothing() -> None:
    nodes = [node("n1")]
    j = job(1, 2, 2, time_limit=600)
    a = running(1, j.id, ["n1"], j.resources)
    ledger = WorkLedger(FRACTIONS)
    check(ledger, nodes, [a], {j.id: j}, NOW)
    a.state = AttemptState.EXITED
    load = ledger.update(["n1"], {"n1": 0}, [None], [a], {j.id: j})
    assert load.jobs.tolist() == [0.0] and load.dedicated.sum() == 0
    assert ledger.ends(NOW).tolist() == [[NOW]] * len(FRACTIONS)


def test_slots_started_over_alike_do_not_keep_the_old_slots_work() -> None:
    """A caller keeping node slots (a Roster) fills its list in place and starts over with a new
    list when it runs out of slots. When the new list reads as the old one first did (every slot
    free: an elastic fleet that shrank to nothing), the work of the old slots' nodes, which died
    with work on them, must not stay at the same positions for the nodes that take them next."""
    ledger = WorkLedger(FRACTIONS, 7200.0)
    slots = [""] * 4
    ledger.update(slots, {}, [None] * 4, [], {})
    slots[0] = "a"  # the first node takes the first slot, and work
    work = running(1, 1, ["a"], Resources(4, 2048))
    jobs = {1: job(1, vcpus=4, ram_gib=2)}
    load = ledger.update(slots, {"a": 0}, [None] * 4, [work], jobs)
    assert list(load.dedicated[:2, 0]) == [4, 2048]
    again = [""] * 4  # "a" died with its work; the caller starts over, every slot free
    ledger.update(again, {}, [None] * 4, [], jobs)
    again[0] = "b"  # a new node, without work, takes the first slot
    load = ledger.update(again, {"b": 0}, [None] * 4, [], jobs)
    assert not load.dedicated.any() and not load.jobs.any()
