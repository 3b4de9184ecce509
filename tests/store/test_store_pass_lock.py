"""Dispatchers sharing a PostgreSQL store take their passes one at a time (Store.pass_lock): what a
pass places is counted on its snapshot, so two overlapping passes fill the same free room."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy.engine import make_url

from corral.cloud.sim import SimCloud
from corral.config import Config
from corral.core.model import GiB, InstanceType
from corral.core.snapshot import Decisions, Snapshot
from corral.jobspec import JobRequest
from corral.loop import ControlLoop, PassReport
from corral.sim.settings import SimSettings
from corral.store import Store

from .storekit import add_node, wait_for_lock_waiters

CONFIG = Config.model_validate(
    {
        "instance_types": [{"name": "small", "vcpus": 2, "ram": "4GiB", "price_per_hour": 0.1}],
        # The one node is all there is: no boot hides a placement on it.
        "policy": {"boot": {"max_instances": 1}},
    }
)
SMALL = InstanceType("small", vcpus=2.0, ram_mib=4 * GiB, price_per_hour=0.1)


def two_vcpus(name: str, priority: int = 1) -> JobRequest:
    return JobRequest(name=name, command=["true"], vcpus=2, ram="1GiB", priority=priority)


def test_a_second_holder_waits_for_the_first(store: Store) -> None:
    other = Store(store.url)
    try:
        with ThreadPoolExecutor(1) as pool:
            with store.pass_lock(5.0) as first:
                assert first

                def second_pass() -> bool:
                    with other.pass_lock(30.0) as second:
                        return second

                waiting = pool.submit(second_pass)
                wait_for_lock_waiters(store, 1)
                assert not waiting.done() or store.engine.dialect.name != "postgresql", "two passes at once"
            assert waiting.result(timeout=30)
        with other.pass_lock(5.0) as after:
            assert after
    finally:
        other.close()


class OverlappedBy(ControlLoop):
    """A dispatcher whose pass, between its snapshot and its claims, is overtaken: a job is
    submitted, and the other dispatcher's pass runs (as far as it gets in a second)."""

    def __init__(self, store: Store, other: ControlLoop) -> None:
        super().__init__(store, SimCloud(CONFIG.core_instance_types(), SimSettings(), time.time), CONFIG, "d-a")
        self.other = other
        self.overtaking: threading.Thread | None = None

    def execute(self, decisions: Decisions, snapshot: Snapshot, now: float, report: PassReport) -> None:
        self.store.submit([two_vcpus("urgent", priority=10)], time.time())
        self.overtaking = threading.Thread(target=self.other.run_pass)
        self.overtaking.start()
        self.overtaking.join(1.0)
        super().execute(decisions, snapshot, now, report)


@pytest.mark.parametrize("backend", ["postgresql"])  # several dispatchers share a PostgreSQL store
def test_two_dispatchers_passes_never_fill_the_same_free_room(store: Store) -> None:
    """Seen live: two dispatchers each put a 2-vCPU job on the same idle 2-vCPU node, 2 ms apart,
    and both ran there at once. Each pass had counted the node free."""
    add_node(store, "n1", time.time(), SMALL)
    store.submit([two_vcpus("first")], time.time())
    store_b = Store(store.url)
    try:
        loop_b = ControlLoop(store_b, SimCloud(CONFIG.core_instance_types(), SimSettings(), time.time), CONFIG, "d-b")
        loop_a = OverlappedBy(store, loop_b)
        loop_a.run_pass()
        assert loop_a.overtaking is not None
        loop_a.overtaking.join(30)
        assert not loop_a.overtaking.is_alive()

        active = [a for a in store.load_snapshot("d-a", [SMALL], 0.0).attempts if "n1" in a.node_ids]
        assert sum(a.resources.vcpus for a in active) <= SMALL.vcpus, (
            f"node n1 (2 vCPUs) was given {[(a.job_id, a.dispatcher_id) for a in active]}"
        )
        assert len(active) == 1
    finally:
        store_b.close()


def test_a_pass_wakes_its_nodes_for_work_another_dispatcher_placed_there(store: Store) -> None:
    """The agent of a node long-polls the server of the dispatcher that booted it: another's claim
    does not wake it, so that server's next pass names the node among those given work."""
    loop_a = ControlLoop(store, SimCloud(CONFIG.core_instance_types(), SimSettings(), time.time), CONFIG, "d-a")
    loop_b = ControlLoop(store, SimCloud(CONFIG.core_instance_types(), SimSettings(), time.time), CONFIG, "d-b")
    assert loop_a.run_pass().started_nodes == set()  # (each heartbeats: a knows of b after b's pass)
    add_node(store, "n1", time.time(), SMALL)
    store.submit([two_vcpus("theirs")], time.time())
    assert loop_b.run_pass().started_nodes == {"n1"}  # b placed it, on a node b's server does not serve
    assert loop_a.run_pass().started_nodes == {"n1"}


@pytest.mark.parametrize("backend", ["postgresql"])  # several dispatchers share a PostgreSQL store
def test_a_dispatcher_stuck_in_its_pass_is_fenced_and_the_others_take_turns_again(store: Store) -> None:
    """Seen live: a dispatcher frozen (SIGSTOP) in its pass kept the pass lock for as long as it
    lived; every pass of the two others waited out half of dispatcher_stale for it, and then ran
    beside the other's, unserialised (the double placement the lock is there to stop)."""
    other, third = Store(store.url), Store(store.url)
    try:
        with store.pass_lock(30.0) as stuck:
            assert stuck
            with other.pass_lock(0.3) as taken:
                assert taken, "the stuck pass still held the lock: this pass ran beside it"
            with third.pass_lock(0.3) as next_turn:
                assert next_turn
        # The stuck pass ends (it lost its turn: a warning, no error), and takes its turn again later.
        with store.pass_lock(0.3) as again:
            assert again
    finally:
        other.close()
        third.close()


def test_a_statement_timeout_shorter_than_the_wait_for_the_turn_still_fences_a_stuck_pass(store: Store) -> None:
    """A DBA's statement_timeout (on corral's role, or in store.url) below the wait for the pass
    turn cancelled that wait (SQLSTATE 57014) before its lock_timeout: the pass failed, every pass,
    and a stuck peer was never fenced."""
    if store.engine.dialect.name != "postgresql":
        pytest.skip("the pass lock is PostgreSQL's")
    url = make_url(store.url)
    options = f"{url.query['options']} -cstatement_timeout=100"
    timed = Store(url.update_query_dict({"options": options}).render_as_string(hide_password=False))
    try:
        with store.pass_lock(30.0) as stuck:
            assert stuck
            with timed.pass_lock(0.3) as taken:
                assert taken, "the stuck pass still held the lock: this pass ran beside it"
    finally:
        timed.close()
