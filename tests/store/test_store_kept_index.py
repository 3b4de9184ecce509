"""The index a store keeps between snapshots (Store.load_snapshot files only what changed) is, after
every snapshot, the one a pass would build from that snapshot's lists (SnapshotIndex.of), whatever
changed in between: jobs submitted, claimed, started, ended, cancelled, held and released,
requeued, reprioritised, updated and purged; attempts assigned, running and ended; nodes created,
paired, marked, reshaped and pinging; a read that failed; other readers."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest
from sqlalchemy import update

from corral.core import retry
from corral.core.index import SnapshotIndex
from corral.core.model import AttemptState, JobState, NodeState, Resources
from corral.core.reconcile import plan_pass
from corral.core.settings import PolicySettings
from corral.core.snapshot import Snapshot
from corral.jobspec import JobRequest
from corral.store import Store, schema
from corral.store import store as store_module
from corral.store.store import NotFound, NotQueued
from tests.store.storekit import NOW, ONE_CPU, SMALL, after_exit

REFUSED = (NotFound, NotQueued, ValueError)


class Boom(RuntimeError):
    pass


def fresh_of(snapshot: Snapshot) -> dict[str, Any]:
    return SnapshotIndex.of(dataclasses.replace(snapshot, index=None)).describe()


def by_id(items: Any) -> list[Any]:
    return sorted(items, key=lambda item: str(item.id))


class Changes:
    """A random sequence of what the loop, the agents and the operators do to a store."""

    def __init__(self, store: Store, rng: random.Random) -> None:
        self.store, self.rng = store, rng
        self.now = NOW
        self.serial = 0
        self.snapshot: Snapshot | None = None

    def step(self) -> str:
        rng, store = self.rng, self.store
        self.now += rng.choice([1.0, 5.0, 30.0])
        now = self.now
        snapshot = self.snapshot
        jobs = list(snapshot.jobs) if snapshot is not None else []
        attempts = list(snapshot.attempts) if snapshot is not None else []
        nodes = list(snapshot.nodes) if snapshot is not None else []
        queued = [job for job in jobs if job.state is JobState.QUEUED]
        kind = rng.randrange(20)
        try:
            if kind <= 2 or not jobs:
                requests = []
                for _ in range(rng.choice([1, 1, 2, 3])):
                    fields: dict[str, Any] = {"command": ["true"], "priority": rng.choice([1, 1, 1, 5, 10, 0])}
                    if rng.random() < 0.5:
                        fields["time_limit"] = rng.choice([600, 3600, 7200])
                    if rng.random() < 0.15:
                        fields["not_before"] = now + rng.choice([-10.0, 100.0])
                    if rng.random() < 0.1:
                        fields["hold"] = True
                    if rng.random() < 0.1:
                        fields["array"] = rng.choice(["0-3", "0-4%2", "1-2%1"])
                    elif jobs and rng.random() < 0.15:
                        fields["dependency"] = f"afterok:{rng.choice(jobs).id}"
                    requests.append(JobRequest(**fields))
                store.submit(requests, now)
                return "submit"
            if kind == 3 and queued:
                idle = [node for node in nodes if node.state in (NodeState.IDLE, NodeState.BUSY)]
                if idle:
                    on = rng.sample(idle, k=min(len(idle), rng.choice([1, 1, 2])))
                    store.claim(rng.choice(queued).id, "d1", [node.id for node in on], ONE_CPU, now)
                    return "claim"
            if kind == 4:
                assigned = [a for a in attempts if a.state is AttemptState.ASSIGNED]
                if assigned:
                    attempt = rng.choice(assigned)
                    store.attempt_started(attempt.id, attempt.node_ids[0], 100, now)
                    return "start"
            if kind == 5 and attempts:
                attempt = rng.choice(attempts)
                code = rng.choice([0, 0, 1])
                store.finish_attempt(attempt.id, attempt.node_ids[0], code, now, after_exit(code, attempt.id))
                return "finish"
            if kind == 6 and jobs:
                job = rng.choice(jobs)
                if rng.random() < 0.5:
                    store.request_cancel(job.id, now)
                    return "cancel requested"
                mine = tuple(a.id for a in attempts if a.job_id == job.id)
                outcome = rng.choice(
                    [
                        retry.after_temp_failure(job, now, PolicySettings().retry, "lost", mine),
                        retry.after_refusal(job, "refused", mine),
                    ]
                )
                store.apply_outcome(outcome, now)
                return "outcome"
            if kind == 7 and jobs:
                job = rng.choice(jobs)
                if job.held:
                    store.release(job.id, now)
                    return "release"
                store.hold(job.id, now, "test")
                return "hold"
            if kind == 8 and jobs:
                store.request_requeue(rng.choice(jobs).id, now, hold=rng.random() < 0.2)
                return "requeue"
            if kind == 9 and jobs:
                store.set_priority(rng.choice(jobs).id, rng.choice([0, 1, 3, 7]), now)
                return "priority"
            if kind == 10 and jobs:
                # Mostly a running job's time limit (its attempt's limit moves with it).
                limited = [job for job in jobs if job.time_limit is not None and job.state is not JobState.QUEUED]
                job = rng.choice(limited if limited and rng.random() < 0.7 else jobs)
                if job.time_limit is not None and rng.random() < 0.8:
                    store.update_job(job.id, {}, now, time_limit_add=rng.choice([60, 600]))
                else:
                    store.update_job(job.id, {"vcpus": rng.choice([1, 2]), "name": f"u{now}"}, now)
                return "update"
            if kind == 11:
                store.purge_jobs(now + 1, 50, now)
                return "purge"
            if kind == 12 or not nodes:
                self.serial += 1
                node_id = f"n{self.serial}"
                store.create_node(node_id, SMALL, f"boot-{node_id}", now, "test")
                if rng.random() < 0.7:
                    store.pair_node(node_id, f"boot-{node_id}", SMALL.capacity, f"host-{node_id}", now)
                return "node"
            if kind == 13:
                booting = [node for node in nodes if node.state is NodeState.BOOTING]
                if booting:
                    node = rng.choice(booting)
                    store.pair_node(node.id, f"boot-{node.id}", Resources(8, 8192), f"host-{node.id}", now)
                    return "pair"
            if kind == 14 and nodes:
                working = sorted({node_id for attempt in attempts for node_id in attempt.node_ids})
                if working and rng.random() < 0.3:  # a node lost under its work
                    store.mark_nodes({rng.choice(working): "lost"}, NodeState.GONE, now)
                    return "mark"
                picked = rng.sample(nodes, k=min(len(nodes), rng.choice([1, 1, 3])))
                state = rng.choice(
                    [NodeState.IDLE, NodeState.BUSY, NodeState.DRAINING, NodeState.DOWN, NodeState.GONE]
                    + [NodeState.SHUTTING_DOWN]
                )
                store.mark_nodes({node.id: "test" for node in picked}, state, now)
                return "mark"
            if kind == 15 and nodes:
                for node in rng.sample(nodes, k=min(len(nodes), rng.choice([1, 3, len(nodes)]))):
                    store.record_ping(node.id, Resources(rng.choice([0.0, 1.0]), 100, 0, 0), now)
                return "ping"
            if kind == 16 and nodes:
                node = rng.choice(nodes)
                rack = rng.choice([None, "r1", "r2"])
                if rng.random() < 0.5:
                    attributes: dict[str, str | list[str]] = {"drain": "yes"} if rng.random() < 0.5 else {"k": "v"}
                    store.set_node_attributes(node.id, attributes, [], rack, now)
                else:
                    store.set_node_attributes(node.id, {}, ["drain", "k"], rack, now)
                return "attributes"
            if kind == 17 and nodes:
                node = rng.choice(nodes)
                with store.write() as conn:
                    values = rng.choice([{"vcpus": rng.choice([4.0, 8.0])}, {"price_per_hour": rng.choice([0.1, 0.2])}])
                    conn.execute(update(schema.nodes).where(schema.nodes.c.id == node.id).values(**values))
                return "reshape"
            if kind == 18:
                arrays = {job.array.array_job_id for job in jobs if job.array is not None}
                if arrays:
                    store.set_array_throttle(rng.choice(sorted(arrays)), rng.choice([0, 1, 2]), now)
                    return "throttle"
            if kind == 19:
                store.queued_jobs()  # another reader, beside the loop
                return "reader"
        except REFUSED:
            return "refused"
        return "nothing"

    def load(self) -> Snapshot:
        snapshot = self.store.load_snapshot("d1", [SMALL], NOW)
        self.snapshot = snapshot
        return snapshot


def test_the_kept_index_is_the_snapshots_after_every_change(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(37)
    changes = Changes(store, rng)
    done: dict[str, int] = {}
    failed = 0
    settings = PolicySettings()
    seen = {"queued": 0, "held": 0, "dependent": 0, "throttled_arrays": 0, "limits": 0, "orphaned": 0, "leaving": 0}
    for step in range(400):
        for _ in range(rng.choice([1, 1, 2, 4])):  # several changes between two snapshots, at times
            what = changes.step()
            done[what] = done.get(what, 0) + 1
        if rng.random() < 0.06:
            # A store outage mid-read, or a load that fails while filing the index: the next
            # snapshot's index is still exactly its own.
            where = rng.choice(["_specs_to_build", "attempt_from_row", "node_from_row"])

            def fail(*args: Any, where: str = where, **kwargs: Any) -> Any:
                raise Boom(where)

            with monkeypatch.context() as patched:
                if where == "_specs_to_build":
                    patched.setattr(Store, where, fail)
                else:
                    patched.setattr(store_module, where, fail)
                try:
                    changes.load()
                except Boom:
                    failed += 1
            changes.step()
        snapshot = changes.load()
        assert snapshot.index is not None
        kept = snapshot.index.describe()
        assert kept == fresh_of(snapshot), f"after step {step}"
        for key in seen:
            seen[key] += bool(kept[key])
        if step % 25 == 0:
            # What the kept objects say is what a new store (a restart, another dispatcher) reads.
            other = Store(store.url)
            try:
                theirs = other.load_snapshot("d1", [SMALL], NOW)
            finally:
                other.close()
            differ = [
                {
                    f.name: (getattr(mine, f.name), getattr(other_job, f.name))
                    for f in dataclasses.fields(mine)
                    if getattr(mine, f.name) != getattr(other_job, f.name)
                }
                for mine, other_job in zip(by_id(snapshot.jobs), by_id(theirs.jobs), strict=False)
                if mine != other_job
            ]
            assert by_id(theirs.jobs) == by_id(snapshot.jobs), (step, differ[:1])
            assert by_id(theirs.attempts) == by_id(snapshot.attempts), f"after step {step}"
            assert by_id(theirs.nodes) == by_id(snapshot.nodes), f"after step {step}"
            # And a pass decides the same through either index.
            now = changes.now + 1
            assert plan_pass(snapshot, now, settings) == plan_pass(
                dataclasses.replace(snapshot, index=None), now, settings
            ), f"after step {step}"
    # The changes and the groups were exercised.
    assert failed >= 3
    for what in (
        "submit",
        "claim",
        "start",
        "finish",
        "cancel requested",
        "outcome",
        "hold",
        "release",
        "requeue",
        "priority",
        "update",
        "purge",
        "node",
        "pair",
        "mark",
        "ping",
        "attributes",
        "reshape",
        "throttle",
        "reader",
    ):
        assert done.get(what, 0) >= 3, (what, done)
    assert all(seen.values()), (seen, done)


def test_a_snapshots_index_is_kept_and_a_new_store_builds_its_own(store: Store) -> None:
    store.submit([JobRequest(command=["true"]) for _ in range(3)], NOW)
    first = store.load_snapshot("d1", [SMALL], NOW)
    second = store.load_snapshot("d1", [SMALL], NOW)
    assert first.index is not None and second.index is first.index
    assert [job.id for job in second.jobs] == [job.id for job in first.jobs]
    other = Store(store.url)
    try:
        theirs = other.load_snapshot("d1", [SMALL], NOW)
    finally:
        other.close()
    assert theirs.index is not None and theirs.index is not first.index
    assert theirs.index.describe()["jobs"] == first.index.describe()["jobs"]


def test_a_steady_snapshot_files_only_what_changed(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    store.submit([JobRequest(command=["true"]) for _ in range(20)], NOW)
    for node_id in ("n1", "n2"):
        store.create_node(node_id, SMALL, f"boot-{node_id}", NOW, "test")
        store.pair_node(node_id, f"boot-{node_id}", SMALL.capacity, f"host-{node_id}", NOW)
    first = store.load_snapshot("d1", [SMALL], NOW)
    index = first.index
    assert index is not None
    filed: list[int] = []
    put_job = SnapshotIndex.put_job

    def counted(self: SnapshotIndex, job: Any) -> None:
        filed.append(job.id)
        put_job(self, job)

    monkeypatch.setattr(SnapshotIndex, "put_job", counted)
    schedulable, version, journal = index.schedulable(), index.fleet_version, index.node_journal.end

    # Nothing changed: nothing is filed, and the placer's lists stay.
    store.load_snapshot("d1", [SMALL], NOW)
    assert filed == [] and index.node_journal.end == journal
    assert index.schedulable() is schedulable and index.fleet_version == version

    # One job changed: it alone is filed. A ping: the node is filed again (its measurement), the
    # same object, not reshaped: the schedulable list stays, and holds what the ping said.
    job_id = list(first.jobs)[5].id
    store.set_priority(job_id, 7, NOW + 1)
    store.record_ping("n1", Resources(1.0, 100, 0, 0), NOW + 2)
    snapshot = store.load_snapshot("d1", [SMALL], NOW)
    assert filed == [job_id]
    assert index.schedulable() is schedulable and index.fleet_version == version
    assert schedulable[0].last_ping_at == NOW + 2 and schedulable[0].used.vcpus == 1.0
    assert list(snapshot.nodes)[0] is schedulable[0]

    # A node reshaped (its attributes): filed as reshaped, the placer's list made again.
    reshaped = index.reshaped
    store.set_node_attributes("n2", {"k": "v"}, [], None, NOW + 3)
    store.load_snapshot("d1", [SMALL], NOW)
    assert index.reshaped == reshaped + 1 and index.fleet_version > version
    assert index.nodes["n2"].attributes == {"k": "v"}
    assert index.schedulable() is not schedulable
