"""What `corral events` and the reconcile pass read: event filters and the snapshot."""

from __future__ import annotations

import pytest

from corral.core.model import AttemptState, JobState, NodeState, Resources
from corral.core.snapshot import JobOutcome
from corral.store import Store
from corral.store.store import NotFound
from tests.support import utc

from .storekit import NOW, SMALL, add_node, claim, submit


def test_list_events_filters_by_job_node_and_kind_prefix(store: Store) -> None:
    first, second = submit(store, 2)
    store.create_node("n1", SMALL, "tok", NOW, "for job 1")
    claim(store, first, nodes=["n1"], now=NOW + 1)
    store.add_event(NOW + 2, "capacity.unavailable", "small: none left")
    store.add_event(NOW + 3, "node.orphan", "stray instance", node_id="n9")

    assert [(e["kind"], e["job_id"]) for e in store.list_events(job_id=first)] == [
        ("job.queued", first),
        ("job.claimed", first),
    ]
    assert [e["kind"] for e in store.list_events(job_id=second)] == ["job.queued"]
    assert [e["kind"] for e in store.list_events(node_id="n1")] == ["node.booting", "job.claimed"]
    assert [e["kind"] for e in store.list_events(node_id="n9")] == ["node.orphan"]

    jobs_only = store.list_events(kind="job.")
    assert [e["kind"] for e in jobs_only] == ["job.queued", "job.queued", "job.claimed"]
    assert [e["kind"] for e in store.list_events(kind="node")] == ["node.booting", "node.orphan"]
    assert [e["kind"] for e in store.list_events(kind="job.claimed")] == ["job.claimed"]
    assert [e["kind"] for e in store.list_events(kind="job.claim")] == ["job.claimed"]  # the start of a kind
    assert [e["job_id"] for e in store.list_events(job_id=first, kind="job.queued")] == [first]
    assert store.list_events(job_id=second, node_id="n1") == []

    everything = store.list_events()
    assert [e["at"] for e in everything] == sorted(e["at"] for e in everything)  # oldest first
    assert [e["kind"] for e in store.list_events(limit=2)] == ["capacity.unavailable", "node.orphan"]  # the latest


def test_load_snapshot_holds_only_open_jobs_active_attempts_and_nodes_not_gone(store: Store) -> None:
    for node in ("n1", "n2", "down", "gone"):
        add_node(store, node, NOW)
    store.create_node("booting", SMALL, "tok", NOW, "boot")
    assert store.mark_node("down", NodeState.DOWN, "no ping", NOW + 1)
    assert store.mark_node("gone", NodeState.GONE, "destroyed", NOW + 1)
    store.heartbeat("disp-a", NOW)
    store.set_unavailable("big", NOW + 300, "no capacity", NOW)

    queued, claimed, running, complete, cancelled, failed, requeued = submit(store, 7)
    a_claimed = claim(store, claimed, nodes=["n1", "n2"], resources=Resources(2.0, 2048, 0, 0))
    a_running = claim(store, running, nodes=["n1"])
    assert store.attempt_started(a_running, "n1", 5, NOW + 1)
    for job_id, state in ((complete, JobState.COMPLETE), (cancelled, JobState.CANCELLED), (failed, JobState.FAILED)):
        attempt_id = claim(store, job_id, nodes=["n2"])
        assert store.apply_outcome(JobOutcome(job_id, state, "done", (attempt_id,), exit_code=0), NOW + 2)
    a_requeued = claim(store, requeued, nodes=["n2"])
    assert store.apply_outcome(
        JobOutcome(requeued, JobState.QUEUED, "lost", (a_requeued,), retry_at=NOW + 60, temp_failure=True), NOW + 2
    )

    snap = store.load_snapshot("disp-b", [SMALL], observing_since=NOW - 5)

    assert {j.id: j.state for j in snap.jobs} == {
        queued: JobState.QUEUED,
        claimed: JobState.CLAIMED,
        running: JobState.RUNNING,
        requeued: JobState.QUEUED,
    }
    jobs = {j.id: j for j in snap.jobs}
    assert jobs[requeued].retry_at == NOW + 60 and jobs[requeued].temp_failures == 1
    assert jobs[claimed].claimed_by == "d1" and jobs[claimed].attempt_count == 1
    assert {a.id: a.state for a in snap.attempts} == {a_claimed: AttemptState.ASSIGNED, a_running: AttemptState.RUNNING}
    gang = next(a for a in snap.attempts if a.id == a_claimed)
    assert gang.node_ids == ["n1", "n2"] and gang.resources == Resources(2.0, 2048, 0, 0)
    assert gang.job_id == claimed and gang.dispatcher_id == "d1"
    assert {n.id: n.state for n in snap.nodes} == {
        "n1": NodeState.IDLE,
        "n2": NodeState.IDLE,
        "down": NodeState.DOWN,
        "booting": NodeState.BOOTING,
    }
    n1 = next(n for n in snap.nodes if n.id == "n1")
    assert n1.capacity == SMALL.capacity and n1.price_per_hour == SMALL.price_per_hour and n1.last_ping_at == NOW
    assert snap.dispatcher_id == "disp-b" and [d.id for d in snap.dispatchers] == ["disp-a"]
    assert snap.unavailable_types == {"big": NOW + 300}
    assert snap.instance_types == [SMALL] and snap.observing_since == NOW - 5
    assert store.counts() == {"queued": 2, "claimed": 1, "running": 1, "complete": 1, "cancelled": 1, "failed": 1}


def test_a_second_capacity_error_never_shortens_a_back_off(store: Store) -> None:
    store.set_unavailable("big", NOW + 600, "first", NOW)
    store.set_unavailable("big", NOW + 300, "second", NOW + 10)
    assert store.load_snapshot("d", [SMALL], observing_since=NOW).unavailable_types == {"big": NOW + 600}
    store.set_unavailable("big", NOW + 900, "third", NOW + 20)
    assert store.load_snapshot("d", [SMALL], observing_since=NOW).unavailable_types == {"big": NOW + 900}

    assert [e["message"] for e in store.list_events(kind="capacity.unavailable")] == [
        f"big until {utc(NOW + 600)}: first",
        f"big until {utc(NOW + 300)}: second (the back-off until {utc(NOW + 600)} stays)",
        f"big until {utc(NOW + 900)}: third",
    ]


def test_a_gangs_attempt_counts_on_each_of_its_nodes(store: Store) -> None:
    gang, alone = submit(store, 2)
    claim(store, gang, nodes=["n1", "n2"])
    claim(store, alone, nodes=["n2"])
    assert store.running_counts() == {"n1": 1, "n2": 2}


def test_an_operator_sets_a_live_nodes_attributes_and_rack_and_the_snapshot_reads_them(store: Store) -> None:
    """Seeds 002 and 003 put memos on a node (a hold, a category, a planned reboot, a rack): the
    next pass must see them, and `corral events` says who changed what."""
    add_node(store, "n1")
    row = store.set_node_attributes("n1", {"held": "true", "zone": ["a", "b"]}, [], "r7", NOW + 1)
    assert row["attributes"] == {"held": "true", "zone": ["a", "b"]} and row["rack"] == "r7"
    store.set_node_attributes("n1", {"next_reboot": "2000000000"}, ["held", "nothing-there"], None, NOW + 2)
    [node] = store.load_snapshot("d", [SMALL], 0.0).nodes
    assert node.attributes == {"zone": ["a", "b"], "next_reboot": "2000000000"} and node.rack == "r7"
    assert [e["message"] for e in store.list_events(node_id="n1", kind="node.attributes")] == [
        "held=true zone=a,b rack=r7",
        "next_reboot=2000000000 -held",
    ]
    store.mark_node("n1", NodeState.GONE, "terminated", NOW + 3)
    with pytest.raises(NotFound):
        store.set_node_attributes("n1", {"held": "false"}, [], None, NOW + 4)
    with pytest.raises(NotFound):
        store.set_node_attributes("n9", {}, [], None, NOW + 4)


def test_the_notify_cursor_is_moved_only_from_the_state_it_was_read_in(store: Store) -> None:
    """A write that leaves the event id where it was (the notifier taking its retries) must not
    undo another dispatcher's: it names the `updated_at` it read, to the float."""
    assert store.advance_notify_cursor(None, 5, {}, NOW + 0.123456789)
    assert not store.advance_notify_cursor(None, 9, {}, NOW + 1)  # another dispatcher's first start came first
    cursor = store.notify_cursor()
    assert cursor is not None and cursor[0] == 5 and cursor[2] == NOW + 0.123456789
    assert store.advance_notify_cursor(5, 5, {"retry": [1]}, NOW + 1.5, moved_at=cursor[2])
    assert not store.advance_notify_cursor(5, 5, {"retry": []}, NOW + 2, moved_at=cursor[2])  # read before that
    assert store.notify_cursor() == (5, {"retry": [1]}, NOW + 1.5)
