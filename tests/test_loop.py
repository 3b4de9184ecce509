"""The live control loop against a real SQLite store and the `sim` cloud driver."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import sqlalchemy

from corral.cloud.base import CloudInstance
from corral.cloud.sim import SimCloud
from corral.config import Config
from corral.core.model import InstanceType, Resources
from corral.jobspec import JobRequest
from corral.loop import ControlLoop
from corral.sim.settings import SimSettings
from corral.store import JobFilter, Store
from corral.store.store import OUTCOMES_PER_TRANSACTION

CONFIG = Config.model_validate(
    {
        "instance_types": [{"name": "small", "vcpus": 2, "ram": "4GiB", "price_per_hour": 0.1}],
        "policy": {"boot": {"max_instances": 4}},
    }
)


class SlowCreate(SimCloud):
    """A cloud whose `create` takes until the test lets it go: a pass caught mid-boot."""

    def __init__(self) -> None:
        super().__init__(CONFIG.core_instance_types(), SimSettings(), time.time)
        self.creating = threading.Event()
        self.go_on = threading.Event()

    def create(self, instance_type: InstanceType, node_id: str, boot_token: str, tags: dict[str, str]) -> CloudInstance:
        self.creating.set()
        assert self.go_on.wait(30)
        return super().create(instance_type, node_id, boot_token, tags)


def test_a_stop_during_a_pass_waits_for_it_and_leaves_no_instance_running(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'corral.db'}")
    store.migrate()
    store.submit([JobRequest(command=["true"])], time.time())
    cloud = SlowCreate()
    loop = ControlLoop(store, cloud, CONFIG, "d-test")

    in_flight = threading.Thread(target=loop.run_pass)
    in_flight.start()
    assert cloud.creating.wait(30), "the pass never booted"
    # Ctrl-C now: the stop must not run beside the pass (it would see a node without an instance,
    # mark it gone, and the instance the pass then creates would run on, billed, with no record).
    stop = threading.Thread(target=loop.shutdown_fleet, args=("corral stopped",))
    stop.start()
    stop.join(0.5)
    assert stop.is_alive(), "the stop did not wait for the pass in flight"
    cloud.go_on.set()
    in_flight.join(30)
    stop.join(30)

    assert cloud.stats.creates == 1 and cloud.list() == []
    assert [row["state"] for row in store.node_rows(include_gone=True)] == ["gone"]
    # A pass asked for after the stop (the loop's task was already waiting to run one) boots nothing.
    report = loop.run_pass()
    assert report.decisions.empty() and cloud.stats.creates == 1


def test_an_insufficient_capacity_error_stops_the_other_boots_of_that_type_in_the_same_pass(tmp_path: Path) -> None:
    """Seed 004: after one ICE, the pass's other boots of that type are not tried (each would only
    collect the same error, as the seed's nodes did one by one); the next pass boots another type."""
    config = Config.model_validate(
        {
            "instance_types": [
                {"name": "small", "vcpus": 2, "ram": "4GiB", "price_per_hour": 0.1},
                {"name": "medium", "vcpus": 4, "ram": "8GiB", "price_per_hour": 0.3},
            ],
            "policy": {"boot": {"max_instances": 4}},
        }
    )
    store = Store(f"sqlite:///{tmp_path / 'corral.db'}")
    store.migrate()
    store.submit([JobRequest(command=["true"], vcpus=2) for _ in range(3)], time.time())
    never_small = SimSettings.model_validate(
        {"capacity": {"outages": [{"instance_type": "small", "start": 0, "end": 1e12}]}}
    )
    cloud = SimCloud(config.core_instance_types(), never_small, time.time)
    loop = ControlLoop(store, cloud, config, "d-test")

    first = loop.run_pass()
    assert [b.instance_type for b in first.decisions.boots] == ["small"] * 3
    assert cloud.stats.capacity_errors == 1 and cloud.stats.creates == 0
    assert len(store.list_events(kind="capacity.unavailable")) == 1
    # No node record for the boots that were not tried; the one that was is gone with the reason.
    [failed] = store.node_rows(include_gone=True)
    assert failed["state"] == "gone" and "insufficient capacity" in failed["reason"]

    second = loop.run_pass()
    assert {b.instance_type for b in second.decisions.boots} == {"medium"}
    assert cloud.stats.capacity_errors == 1 and cloud.stats.creates == len(second.decisions.boots)


def test_two_dispatchers_with_clouds_of_their_own_leave_each_others_nodes_alone(tmp_path: Path) -> None:
    """Several dispatchers share a store; each loopback cloud lists only its own instances. A node
    another dispatcher booted is not "gone" because this dispatcher's cloud does not list it (the
    other would then destroy its own live instance as an orphan, and both would boot forever)."""
    store = Store(f"sqlite:///{tmp_path / 'corral.db'}")
    store.migrate()
    store.submit([JobRequest(command=["true"])], time.time())
    cloud_a = SimCloud(CONFIG.core_instance_types(), SimSettings(), time.time)
    cloud_b = SimCloud(CONFIG.core_instance_types(), SimSettings(), time.time)
    loop_a = ControlLoop(store, cloud_a, CONFIG, "d-a")
    loop_b = ControlLoop(store, cloud_b, CONFIG, "d-b")

    assert len(loop_a.run_pass().decisions.boots) == 1
    [node] = store.node_rows()
    loop_b.run_pass()
    loop_a.run_pass()

    assert [row["id"] for row in store.node_rows()] == [node["id"]]
    row = store.node_row(node["id"])
    assert row is not None and row["state"] == "booting"
    assert [i.id for i in cloud_a.list()] == [node["instance_id"]] and cloud_b.list() == []
    assert cloud_a.stats.destroys == 0 and cloud_b.stats.creates == 0
    assert store.list_events(kind="node.orphan") == []


def test_a_dispatchers_clean_stop_leaves_the_other_dispatchers_nodes_and_work_alone(tmp_path: Path) -> None:
    """Ctrl-C of one of several dispatchers stops its own fleet and requeues its own work, not the
    nodes another dispatcher booted nor the jobs that one claimed."""
    store = Store(f"sqlite:///{tmp_path / 'corral.db'}")
    store.migrate()
    cloud_a = SimCloud(CONFIG.core_instance_types(), SimSettings(), time.time)
    cloud_b = SimCloud(CONFIG.core_instance_types(), SimSettings(), time.time)
    loop_a = ControlLoop(store, cloud_a, CONFIG, "d-a")
    loop_b = ControlLoop(store, cloud_b, CONFIG, "d-b")
    [job_a] = store.submit([JobRequest(command=["true"], vcpus=2)], time.time())
    loop_a.run_pass()
    [job_b] = store.submit([JobRequest(command=["true"], vcpus=2)], time.time())
    loop_b.run_pass()
    node_a, node_b = (row["id"] for row in store.node_rows())
    for job_id, dispatcher, node_id in ((job_a, "d-a", node_a), (job_b, "d-b", node_b)):
        assert store.claim(job_id, dispatcher, [node_id], Resources(2.0, 1024, 0, 0), time.time()) is not None

    loop_a.shutdown_fleet("corral stopped")

    row_a, row_b = store.node_row(node_a), store.node_row(node_b)
    assert row_a is not None and row_a["state"] == "gone" and cloud_a.list() == []
    assert row_b is not None and row_b["state"] == "booting" and len(cloud_b.list()) == 1
    assert store.job_row(job_a)["state"] == "queued"
    assert store.job_row(job_b)["state"] == "claimed" and store.job_row(job_b)["temp_failures"] == 0


class Killed(BaseException):
    """The process dies (SIGKILL, systemd's stop timeout) in the middle of a cloud call."""


class DiesInDestroy(SimCloud):
    """A cloud whose `destroy` never returns the first time: corral is killed while waiting for it."""

    def __init__(self) -> None:
        super().__init__(CONFIG.core_instance_types(), SimSettings(), time.time)
        self.die = True

    def destroy(self, instance_id: str) -> None:
        if self.die:
            self.die = False
            raise Killed
        super().destroy(instance_id)


def test_a_shutdown_cut_short_by_a_crash_is_finished_by_the_next_corral(tmp_path: Path) -> None:
    """A crash between a node's `shutting_down` record and the cloud's destroy left the instance
    running for ever: no pass looks at a node shutting down, and an instance with a live node is no
    orphan. With the loopback cloud its agent and the attempt it ran lived on beside the job's
    next run; on EC2 the instance stayed up, billed."""
    store = Store(f"sqlite:///{tmp_path / 'corral.db'}")
    store.migrate()
    store.submit([JobRequest(command=["true"])], time.time())
    cloud = DiesInDestroy()
    loop = ControlLoop(store, cloud, CONFIG, "d-test")
    loop.run_pass()
    [node] = store.node_rows()
    with pytest.raises(Killed):
        loop.shutdown_fleet("corral stopped")
    row = store.node_row(node["id"])
    assert row is not None and row["state"] == "shutting_down" and len(cloud.list()) == 1

    restarted = ControlLoop(store, cloud, CONFIG, "d-test")
    restarted.run_pass()

    assert node["instance_id"] not in {inst.id for inst in cloud.list()}
    row = store.node_row(node["id"])
    assert row is not None and row["state"] == "gone" and "cut short" in row["reason"]


class DiesInCreate(SimCloud):
    """A cloud whose `create` starts the instance, but corral is killed before it hears the answer."""

    def __init__(self) -> None:
        super().__init__(CONFIG.core_instance_types(), SimSettings(), time.time)

    def create(self, instance_type: InstanceType, node_id: str, boot_token: str, tags: dict[str, str]) -> CloudInstance:
        super().create(instance_type, node_id, boot_token, tags)
        raise Killed


def test_a_node_booted_as_corral_crashed_gets_its_instance_id_from_the_tags(tmp_path: Path) -> None:
    """A crash between the node's record and the instance id left the node without one: `corral
    nodes` showed no instance, its shutdown destroyed nothing (the instance went only as an orphan,
    a pass later, with a misleading `node.orphan` event)."""
    store = Store(f"sqlite:///{tmp_path / 'corral.db'}")
    store.migrate()
    store.submit([JobRequest(command=["true"])], time.time())
    cloud = DiesInCreate()
    with pytest.raises(Killed):
        ControlLoop(store, cloud, CONFIG, "d-test").run_pass()
    [node] = store.node_rows()
    [instance] = cloud.list()
    assert node["instance_id"] is None

    restarted = ControlLoop(store, cloud, CONFIG, "d-test")
    restarted.sync_cloud(time.time())

    row = store.node_row(node["id"])
    assert row is not None and row["instance_id"] == instance.id
    restarted.shutdown_fleet("corral stopped")
    assert cloud.list() == [] and store.list_events(kind="node.orphan") == []


class DiesBeforeCreate(SimCloud):
    """corral is killed after the node's record and before the cloud makes its instance."""

    def __init__(self) -> None:
        super().__init__(CONFIG.core_instance_types(), SimSettings(), time.time)
        self.die = True

    def create(self, instance_type: InstanceType, node_id: str, boot_token: str, tags: dict[str, str]) -> CloudInstance:
        if self.die:
            self.die = False
            raise Killed
        return super().create(instance_type, node_id, boot_token, tags)


def test_a_boot_cut_short_before_the_cloud_made_the_instance_does_not_hold_the_queue(tmp_path: Path) -> None:
    """Before, the node stayed booting after the restart with no instance to pair: the job waited
    for it a whole boot_grace (10 minutes by default), and its end backed the type off as one whose
    instances do not boot."""
    store = Store(f"sqlite:///{tmp_path / 'corral.db'}")
    store.migrate()
    [job_id] = store.submit([JobRequest(command=["true"])], time.time())
    cloud = DiesBeforeCreate()
    with pytest.raises(Killed):
        ControlLoop(store, cloud, CONFIG, "d-test").run_pass()
    [phantom] = store.node_rows()
    assert phantom["state"] == "booting" and cloud.list() == []

    ControlLoop(store, cloud, CONFIG, "d-test").run_pass()

    row = store.node_row(phantom["id"])
    assert row is not None and row["state"] == "gone" and "cut short" in row["reason"]
    [booted] = store.node_rows()  # the job's instance is booted at once, in the same pass
    assert booted["id"] != phantom["id"] and [i.node_id for i in cloud.list()] == [booted["id"]]
    assert store.list_events(kind="type.boot_failed") == []
    assert store.job_row(job_id)["state"] == "queued"


def test_a_fleet_of_more_than_1000_nodes_is_neither_taken_for_orphans_nor_left_running_by_a_stop(
    tmp_path: Path,
) -> None:
    """The loop read the live nodes through the listing's query, which returns the newest 1,000:
    past 1,000 nodes, each pass destroyed the oldest nodes' instances as orphans (running work
    and all), and a clean stop left them running, billed."""
    store = Store(f"sqlite:///{tmp_path / 'corral.db'}")
    store.migrate()
    cloud = SimCloud(CONFIG.core_instance_types(), SimSettings(), time.time)
    loop = ControlLoop(store, cloud, CONFIG, "d-test")
    itype = loop.instance_types[CONFIG.core_instance_types()[0].name]
    now = time.time()
    count = 1005
    for n in range(count):
        store.create_node(f"n-{n:05d}", itype, f"token-{n}", now - count + n, "test", "d-test")
        instance = cloud.create(itype, f"n-{n:05d}", f"token-{n}", {})
        store.set_instance_id(f"n-{n:05d}", instance.id)

    loop.sync_cloud(now)

    assert store.list_events(kind="node.orphan") == []
    assert len(cloud.list()) == count

    loop.shutdown_fleet("corral stopped")

    assert cloud.list() == []
    assert store.node_rows(include_gone=False, limit=None) == []


def test_a_pass_that_cancels_a_whole_run_commits_it_in_a_few_transactions(tmp_path: Path) -> None:
    """A workflow engine cancels its failed run's 2,000 queued jobs by tag in one request; the pass
    that carried it out committed each job's end alone, 2,000 transactions (49 s on SQLite here),
    and placed nothing for anyone meanwhile. A chain of dependencies never satisfied ended the same
    way. The pass's ends now go in transactions of OUTCOMES_PER_TRANSACTION jobs each."""
    store = Store(f"sqlite:///{tmp_path / 'corral.db'}")
    store.migrate()
    run = store.submit([JobRequest(command=["true"], tags=["run-7"], hold=True) for _ in range(2000)], time.time())
    loop = ControlLoop(store, SimCloud(CONFIG.core_instance_types(), SimSettings(), time.time), CONFIG, "d-test")
    commits: list[object] = []
    sqlalchemy.event.listen(store.engine, "commit", commits.append)
    loop.run_pass()
    commits.clear()
    loop.run_pass()
    idle = len(commits)  # what a pass commits with nothing to end

    assert store.request_cancel_matching(time.time(), JobFilter(tag="run-7")) == run
    commits.clear()
    loop.run_pass()
    assert store.counts() == {"cancelled": 2000}
    assert len(commits) - idle <= -(-2000 // OUTCOMES_PER_TRANSACTION)
    # Each job's end is recorded as before: its state, its reason, an event.
    assert {row["wait_reason"] for row in store.list_job_rows(limit=2000)} == {"cancelled by request"}
    assert len(store.list_events(kind="job.cancelled", limit=5000)) == 2000
