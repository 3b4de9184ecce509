"""The figures /metrics serves, read from a real store (SQLite and PostgreSQL)."""

from __future__ import annotations

from corral.core import job_array, user_limits
from corral.core.model import GiB, InstanceType, JobState, NodeState
from corral.core.settings import PolicySettings
from corral.core.snapshot import Annotation, BootFailures, JobOutcome
from corral.server.metrics import Metrics
from corral.store import Store

from .storekit import NOW, SMALL, add_node, claim, submit

BIG = InstanceType("big", vcpus=16.0, ram_mib=64 * GiB, price_per_hour=0.68)


def started_metrics(store: Store) -> Metrics:
    """Metrics as a server that starts now makes them: counting from the store's newest event."""
    metrics = Metrics()
    metrics.event_cursor = store.last_event_id()
    return metrics


def figure(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_the_fleet_figures_count_every_live_node_by_state_and_type_and_price_them(store: Store) -> None:
    # More nodes than a node listing shows (1,000): the figures must not stop there.
    for i in range(1001):
        store.create_node(f"b{i}", SMALL, "tok", NOW, "boot")
    add_node(store, "idle-big", itype=BIG)
    add_node(store, "down-big", itype=BIG)
    assert store.mark_node("down-big", NodeState.DOWN, "no ping", NOW + 1)
    add_node(store, "gone-big", itype=BIG)
    assert store.mark_node("gone-big", NodeState.GONE, "destroyed", NOW + 1)

    metrics = started_metrics(store)
    metrics.refresh(store, NOW + 2)

    assert figure(metrics, "corral_nodes", state="booting") == 1001
    assert figure(metrics, "corral_nodes", state="idle") == 1
    assert figure(metrics, "corral_nodes", state="down") == 1
    assert figure(metrics, "corral_nodes", state="gone") is None  # gone nodes are no fleet
    assert figure(metrics, "corral_fleet_instances", instance_type="small") == 1001
    assert figure(metrics, "corral_fleet_instances", instance_type="big") == 2
    cost = figure(metrics, "corral_fleet_cost_per_hour")
    assert cost is not None and abs(cost - (1001 * 0.10 + 2 * 0.68)) < 1e-6

    # The last big node goes: its type reads 0, not its last figure.
    for node in ("idle-big", "down-big"):
        assert store.mark_node(node, NodeState.GONE, "shut down", NOW + 3)
    metrics.refresh(store, NOW + 4)
    assert figure(metrics, "corral_fleet_instances", instance_type="big") == 0
    cost = figure(metrics, "corral_fleet_cost_per_hour")
    assert cost is not None and abs(cost - 1001 * 0.10) < 1e-6


def test_the_oldest_wait_is_of_the_job_that_could_run_now(store: Store) -> None:
    (held,) = submit(store, 1, now=NOW - 500)
    store.hold(held, NOW - 400)
    submit(store, 1, now=NOW - 300, not_before=NOW + 3600)  # asked not to start yet
    (backing_off,) = submit(store, 1, now=NOW - 200)
    attempt = claim(store, backing_off, now=NOW - 150)
    requeue = JobOutcome(backing_off, JobState.QUEUED, "node lost", (attempt,), retry_at=NOW + 60, temp_failure=True)
    assert store.apply_outcome(requeue, NOW - 100)
    (due,) = submit(store, 1, now=NOW - 40)

    metrics = started_metrics(store)
    metrics.refresh(store, NOW)
    assert figure(metrics, "corral_queue_oldest_wait_seconds") == 40
    assert figure(metrics, "corral_jobs_held") == 1
    assert figure(metrics, "corral_jobs", state="queued") == 4

    # Past its back-off, the requeued job is the oldest that could run; waits count from submission.
    metrics.refresh(store, NOW + 61)
    assert figure(metrics, "corral_queue_oldest_wait_seconds") == 261
    for job_id in (backing_off, due):
        claim(store, job_id, now=NOW + 62)
    metrics.refresh(store, NOW + 63)
    assert figure(metrics, "corral_queue_oldest_wait_seconds") == 0  # held and not-yet jobs do not count


def test_a_job_pending_in_slurms_queue_waits_unless_held_there(store: Store) -> None:
    """In front of Slurm most jobs wait claimed, in Slurm's queue ("slurm: Resources"): `corral
    status` said "no job that could run is waiting" and the queue's alert figure read 0 while
    they waited for hours."""
    in_slurm, held_in_slurm = submit(store, 2, now=NOW - 300)
    for job_id in (in_slurm, held_in_slurm):
        claim(store, job_id, now=NOW - 290)
    metrics = started_metrics(store)
    metrics.refresh(store, NOW)
    assert figure(metrics, "corral_queue_oldest_wait_seconds") == 0  # claimed, no reason yet: not waiting

    store.set_claimed_wait_reasons({in_slurm: "slurm: Resources", held_in_slurm: "slurm: JobHeldAdmin"}, NOW - 280)
    metrics.refresh(store, NOW)
    assert figure(metrics, "corral_queue_oldest_wait_seconds") == 300
    store.set_claimed_wait_reasons({in_slurm: "slurm: JobHeldUser"}, NOW - 10)
    assert store.oldest_wait(NOW) is None  # held in Slurm, by someone's choice


def test_a_job_its_users_limits_or_its_arrays_throttle_hold_back_is_not_a_wait_that_starves(store: Store) -> None:
    # A user at policy.users' limits (or with a job larger than they may ever hold) waits by their
    # own rule, as an array's task does behind its throttle: neither may set off the queue alert,
    # for hours, while no one else's job waits.
    over_jobs, over_cpus, throttled, due = submit(store, 4, now=NOW - 900)
    store.annotate_many(
        [
            Annotation(over_jobs, f"{user_limits.JOBS_REASON}: bob runs at most 2 jobs at once (...)"),
            Annotation(over_cpus, f"{user_limits.CPU_REASON}: it needs 6 vCPUs, more than alice may hold (4)"),
            Annotation(throttled, f"{job_array.THROTTLE_REASON}: array 1 runs at most 2 tasks at once"),
        ],
        {},
        NOW - 899,
    )
    assert store.oldest_wait(NOW) == 900  # the one that could run
    claim(store, due, now=NOW - 10)
    assert store.oldest_wait(NOW) is None


def test_waits_and_event_counts_are_of_what_happened_since_the_server_started(store: Store) -> None:
    (before,) = submit(store, 1, now=NOW)  # before the server started: not counted
    metrics = started_metrics(store)
    first, second = submit(store, 2, now=NOW + 10)
    add_node(store, "n1", NOW + 10)
    attempt = claim(store, first, now=NOW + 20)
    assert store.attempt_started(attempt, "n1", 100, NOW + 40)  # waited 30 s
    metrics.refresh(store, NOW + 41)

    assert figure(metrics, "corral_job_wait_seconds_count") == 1
    assert figure(metrics, "corral_job_wait_seconds_sum") == 30
    assert figure(metrics, "corral_job_wait_seconds_bucket", le="30.0") == 1
    assert figure(metrics, "corral_job_wait_seconds_bucket", le="15.0") == 0
    assert figure(metrics, "corral_events_total", kind="job.queued") == 2
    assert figure(metrics, "corral_events_total", kind="node.booting") == 1
    assert figure(metrics, "corral_events_total", kind="job.running") == 1

    # The first job is requeued and starts again; the second starts: only the second is a new wait.
    requeue = JobOutcome(first, JobState.QUEUED, "node lost", (attempt,), temp_failure=True)
    assert store.apply_outcome(requeue, NOW + 50)
    again = claim(store, first, now=NOW + 60)
    assert store.attempt_started(again, "n1", 101, NOW + 61)
    other = claim(store, second, now=NOW + 60)
    assert store.attempt_started(other, "n1", 102, NOW + 70)  # waited 60 s
    metrics.refresh(store, NOW + 71)
    metrics.refresh(store, NOW + 72)  # a second scrape counts nothing twice

    assert figure(metrics, "corral_job_wait_seconds_count") == 2
    assert figure(metrics, "corral_job_wait_seconds_sum") == 90
    assert figure(metrics, "corral_events_total", kind="job.running") == 3
    assert figure(metrics, "corral_events_total", kind="job.requeued") == 1
    assert before not in (first, second)


def test_the_fleet_cost_in_all_counts_every_node_ever_by_type_and_never_goes_down(store: Store) -> None:
    """`rate(corral_fleet_cost_dollars_total[1h])` is the spend: each node's price over its life so
    far, the gone ones' too. A counter that dips is a reset to Prometheus, which then counts the
    whole sum again as spent: a figure the store gives lower than the last one is not exported."""
    add_node(store, "live-small", now=NOW)
    add_node(store, "short-big", now=NOW, itype=BIG)
    assert store.mark_node("short-big", NodeState.GONE, "shut down", NOW + 1800)

    metrics = started_metrics(store)
    metrics.refresh(store, NOW + 3600)
    small = figure(metrics, "corral_fleet_cost_dollars_total", instance_type="small")
    big = figure(metrics, "corral_fleet_cost_dollars_total", instance_type="big")
    assert small is not None and abs(small - 0.10) < 1e-9  # an hour, still up
    assert big is not None and abs(big - 0.34) < 1e-9  # half an hour, then gone

    # A pass records the small node's end at its own start, before the last scrape's time.
    assert store.mark_node("live-small", NodeState.GONE, "shut down", NOW + 3000)
    metrics.refresh(store, NOW + 3700)
    assert figure(metrics, "corral_fleet_cost_dollars_total", instance_type="small") == small
    # A new node's bill carries it on once the store's sum passes it again.
    add_node(store, "next-small", now=NOW + 3700)
    metrics.refresh(store, NOW + 3700 + 1200)
    after = figure(metrics, "corral_fleet_cost_dollars_total", instance_type="small")
    assert after is not None and abs(after - 0.10 * (3000 + 1200) / 3600) < 1e-9
    assert figure(metrics, "corral_fleet_cost_dollars_total", instance_type="big") == big


def test_back_offs_and_the_notifier_are_read_from_the_store(store: Store) -> None:
    store.set_unavailable("big", NOW + 600, "did not pair", NOW, "type.boot_failed", BootFailures(2, NOW))
    store.set_unavailable("small", NOW - 1, "InsufficientInstanceCapacity", NOW - 300)  # over
    metrics = started_metrics(store)
    metrics.refresh(store, NOW + 100, PolicySettings(), ["small", "big", "medium"])
    assert figure(metrics, "corral_instance_type_backoff_seconds", instance_type="big") == 500
    assert figure(metrics, "corral_instance_type_boot_failures", instance_type="big") == 2
    for instance_type in ("small", "medium"):  # one whose back-off ended, one never backed off
        assert figure(metrics, "corral_instance_type_backoff_seconds", instance_type=instance_type) == 0
    assert figure(metrics, "corral_notify_waiting_events") == 0  # no notifier yet
    assert figure(metrics, "corral_notify_retries_pending") == 0


def test_the_oldest_wait_is_the_older_of_the_queue_and_slurms(store: Store) -> None:
    """Each state is read apart, in its index's order (the two at once were sorted whole, every
    queued job's row read): the oldest is still the older of the two."""
    (in_slurm,) = submit(store, 1, now=NOW - 300)
    claim(store, in_slurm, now=NOW - 290)
    store.set_claimed_wait_reasons({in_slurm: "slurm: Resources"}, NOW - 280)
    submit(store, 1, now=NOW - 100)
    assert store.oldest_wait(NOW) == 300
    submit(store, 1, now=NOW - 500, not_before=NOW + 60)  # older, but not to start yet
    assert store.oldest_wait(NOW) == 300
    submit(store, 1, now=NOW - 400)
    assert store.oldest_wait(NOW) == 400
