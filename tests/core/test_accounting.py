"""Usage accounting (corral usage): what a window of time billed, and whose work it ran."""

from __future__ import annotations

import pytest

from corral.core.accounting import NO_USER, TOTAL, UNTAGGED, AttemptSpan, NodeSpan, billed_seconds, share, usage
from corral.core.model import GiB, Resources

PER_SECOND = 3.6  # $/hour: $0.001 a second, so a bill reads as seconds / 1000


def node(
    node_id: str,
    created_at: float,
    gone_at: float | None,
    *,
    price: float = PER_SECOND,
    granularity: float = 1.0,
    minimum: float = 60.0,
    capacity: Resources = Resources(4.0, 8 * GiB, 0, 0),
    instance_type: str = "m5.xlarge",
) -> NodeSpan:
    return NodeSpan(node_id, instance_type, price, granularity, minimum, capacity, created_at, gone_at)


def attempt(
    job_id: int,
    nodes: tuple[str, ...],
    started_at: float,
    finished_at: float | None,
    request: Resources = Resources(1.0, 1 * GiB, 0, 0),
    user: str = "alice",
    tags: tuple[str, ...] = (),
    node_count: int | None = None,
    cpu_seconds: float | None = None,
    max_rss_mib: int | None = None,
) -> AttemptSpan:
    count = node_count or len(nodes)
    return AttemptSpan(job_id, user, tags, nodes, request, started_at, finished_at, count, cpu_seconds, max_rss_mib)


def test_billing_rounds_up_to_the_granularity_and_never_below_the_minimum() -> None:
    assert billed_seconds(0.0, 30.0, 1.0, 60.0) == 60.0
    assert billed_seconds(0.0, 90.4, 1.0, 60.0) == 91.0
    assert billed_seconds(0.0, 3601.0, 3600.0, 0.0) == 7200.0
    assert billed_seconds(0.0, 3600.0, 3600.0, 0.0) == 3600.0


def test_a_share_is_the_largest_fraction_of_the_node_asked_for() -> None:
    capacity = Resources(4.0, 8 * GiB, 0, 2)
    assert share(Resources(1.0, 6 * GiB, 0, 0), capacity) == 0.75  # RAM decides
    assert share(Resources(2.0, 1 * GiB, 0, 0), capacity) == 0.5  # vcpus decide
    assert share(Resources(1.0, 1 * GiB, 0, 2), capacity) == 1.0  # both GPUs: the whole node


def test_a_node_is_billed_for_its_life_inside_the_window_and_its_rounding_where_it_ends() -> None:
    short = [node("n1", created_at=1000.0, gone_at=1030.0)]  # 30 s up, billed the 60 s minimum
    assert usage(short, [], 0.0, 2000.0, now=5000.0).billed == pytest.approx(0.060)
    assert usage(short, [], 1010.0, 2000.0, now=5000.0).billed == pytest.approx(0.050)  # 20 s + 30 s rounding
    assert usage(short, [], 0.0, 1020.0, now=5000.0).billed == pytest.approx(0.020)  # its end is after the window
    assert usage(short, [], 2000.0, 3000.0, now=5000.0).types == []  # gone before the window


def test_a_live_node_is_billed_to_now_with_what_its_billing_has_committed() -> None:
    hourly = [node("n1", created_at=0.0, gone_at=None, granularity=3600.0, minimum=0.0)]
    report = usage(hourly, [], 0.0, 1e12, now=600.0)
    assert report.until == 600.0  # a window past now ends now
    assert report.billed == pytest.approx(3.6)  # ten minutes into an hour that is billed whole
    assert report.types[0].instance_hours == pytest.approx(600 / 3600)


def test_each_job_pays_its_share_of_its_node_and_the_rest_is_unattributed() -> None:
    nodes = [node("n1", created_at=0.0, gone_at=7200.0)]  # two hours: $7.20
    attempts = [
        attempt(1, ("n1",), 0.0, 3600.0, Resources(1.0, 6 * GiB, 0, 0), user="alice"),  # 3/4 of the node
        attempt(2, ("n1",), 0.0, 3600.0, Resources(1.0, 1 * GiB, 0, 0), user="bob"),  # 1/4 of it
    ]
    report = usage(nodes, attempts, 0.0, 7200.0, now=9000.0)
    assert [(r.key, r.jobs) for r in report.rows] == [("alice", 1), ("bob", 1)]  # the largest cost first
    assert [r.cost for r in report.rows] == pytest.approx([2.7, 0.9])
    assert [r.vcpu_hours for r in report.rows] == pytest.approx([1.0, 1.0])
    assert report.billed == pytest.approx(7.2)
    assert report.used == pytest.approx(3.6)
    assert report.unattributed == pytest.approx(3.6)  # the second hour the node idled, and room nobody asked for
    assert report.types[0].used == pytest.approx(3.6)


def test_only_the_part_of_a_run_inside_the_window_counts_and_a_running_one_counts_to_now() -> None:
    nodes = [node("n1", created_at=0.0, gone_at=None)]
    attempts = [attempt(1, ("n1",), 1000.0, None, Resources(4.0, 1 * GiB, 0, 0))]  # the whole node, still running
    report = usage(nodes, attempts, 1800.0, 1e12, now=3600.0)
    (row,) = report.rows
    assert row.vcpu_hours == pytest.approx(4 * 1800 / 3600)
    assert row.cost == pytest.approx(1.8)


def test_a_gang_pays_for_each_of_its_nodes() -> None:
    nodes = [node("n1", 0.0, 3600.0), node("n2", 0.0, 3600.0)]
    report = usage(nodes, [attempt(7, ("n1", "n2"), 0.0, 3600.0, Resources(2.0, 1 * GiB, 0, 0))], 0.0, 3600.0, 3600.0)
    (row,) = report.rows
    assert (row.vcpu_hours, row.cost) == pytest.approx((4.0, 3.6))


def test_grouping_by_tag_counts_a_job_under_each_of_its_tags_and_by_job_one_row_each() -> None:
    nodes = [node("n1", 0.0, 3600.0)]
    attempts = [
        attempt(1, ("n1",), 0.0, 3600.0, tags=("web", "prod")),
        attempt(2, ("n1",), 0.0, 1800.0, tags=("web",)),
        attempt(3, ("n1",), 0.0, 1800.0, user=""),
    ]
    by_tag = usage(nodes, attempts, 0.0, 3600.0, 3600.0, by="tag")
    assert {r.key: r.jobs for r in by_tag.rows} == {"web": 2, "prod": 1, UNTAGGED: 1}
    assert by_tag.jobs == 3  # a job under two tags is one job
    by_job = usage(nodes, attempts, 0.0, 3600.0, 3600.0, by="job")
    assert [r.key for r in by_job.rows] == ["1", "2", "3"]
    by_user = usage(nodes, attempts, 0.0, 3600.0, 3600.0, by="user")
    assert {r.key for r in by_user.rows} == {"alice", NO_USER}


def test_work_on_a_node_corral_did_not_boot_is_counted_but_charges_nothing() -> None:
    # Slurm mode: attempts run on Slurm's nodes, which are no instances of corral's.
    report = usage([], [attempt(1, ("slurm-node-1",), 0.0, 3600.0)], 0.0, 3600.0, 3600.0)
    (row,) = report.rows
    assert (row.vcpu_hours, row.cost, report.billed) == (1.0, 0.0, 0.0)


def test_a_slurm_gang_counts_the_vcpus_of_each_of_its_nodes() -> None:
    # In front of Slurm an attempt names one node ("slurm") whatever the gang's size.
    gang = attempt(1, ("slurm",), 0.0, 3600.0, Resources(2.0, GiB, 0, 1), node_count=3)
    (row,) = usage([], [gang], 0.0, 3600.0, 3600.0).rows
    assert (row.vcpu_hours, row.gpu_hours, row.cost) == (6.0, 3.0, 0.0)


def test_a_run_too_short_to_measure_is_still_a_job_that_ran() -> None:
    report = usage([node("n1", 0.0, 60.0)], [attempt(1, ("n1",), 30.0, 30.0)], 0.0, 60.0, 60.0)
    (row,) = report.rows
    assert (row.jobs, row.vcpu_hours, report.jobs) == (1, 0.0, 1)
    assert usage([node("n1", 0.0, 60.0)], [attempt(1, ("n1",), 30.0, 30.0)], 40.0, 60.0, 60.0).rows == []


def test_efficiency_is_what_the_runs_used_over_what_they_reserved_summed_before_dividing() -> None:
    nodes = [node("n1", created_at=0.0, gone_at=7200.0)]
    attempts = [
        # Two vcpus for an hour, one used: 50%; 1 GiB peak of 4 GiB asked.
        attempt(1, ("n1",), 0.0, 3600.0, Resources(2.0, 4 * GiB, 0, 0), cpu_seconds=3600.0, max_rss_mib=1 * GiB),
        # One vcpu for an hour, all used: 100%; its 1 GiB all used.
        attempt(2, ("n1",), 0.0, 3600.0, Resources(1.0, 1 * GiB, 0, 0), cpu_seconds=3600.0, max_rss_mib=1 * GiB),
    ]
    (alice,) = usage(nodes, attempts, 0.0, 7200.0, now=7200.0).rows
    # Each run weighs what it reserved (seff's figures summed as XDMoD sums them), not 75% and 62.5%.
    assert alice.cpu_efficiency == pytest.approx(7200 / 10800)
    assert alice.ram_efficiency == pytest.approx((1 + 1) / (4 + 1))
    assert alice.cpu_hours == pytest.approx(2.0)
    assert (alice.attempts, alice.measured) == (2, 2)


def test_a_run_its_node_did_not_measure_is_not_counted_as_using_nothing() -> None:
    nodes = [node("n1", created_at=0.0, gone_at=7200.0)]
    half = Resources(2.0, 2 * GiB, 0, 0)
    attempts = [
        attempt(1, ("n1",), 0.0, 3600.0, half, user="bob", cpu_seconds=3600.0, max_rss_mib=512),
        attempt(2, ("n1",), 0.0, 3600.0, half, user="bob"),  # before accounting, or in front of Slurm
        attempt(3, ("n1",), 0.0, 3600.0, half, user="carol"),
        # Still running: its usage comes at its end, whatever it said so far.
        attempt(4, ("n1",), 0.0, None, half, user="dave", cpu_seconds=10.0, max_rss_mib=10),
    ]
    rows = {row.key: row for row in usage(nodes, attempts, 0.0, 7200.0, now=7200.0).rows}
    assert (rows["bob"].cpu_efficiency, rows["bob"].ram_efficiency) == pytest.approx((0.5, 0.25))
    assert (rows["bob"].attempts, rows["bob"].measured) == (2, 1)
    for unmeasured in ("carol", "dave"):
        assert (rows[unmeasured].cpu_efficiency, rows[unmeasured].ram_efficiency) == (None, None)
        assert (rows[unmeasured].attempts, rows[unmeasured].measured, rows[unmeasured].cpu_hours) == (1, 0, 0.0)


def test_a_run_the_window_cuts_is_credited_its_cpu_time_pro_rata() -> None:
    nodes = [node("n1", created_at=0.0, gone_at=7200.0)]
    # An hour on one vcpu, 1,800 CPU-seconds used; the window holds its second half.
    attempts = [attempt(1, ("n1",), 0.0, 3600.0, cpu_seconds=1800.0, max_rss_mib=512)]
    (row,) = usage(nodes, attempts, 1800.0, 7200.0, now=7200.0).rows
    assert row.cpu_hours == pytest.approx(0.25)  # half its CPU time, as if it used it evenly
    assert row.cpu_efficiency == pytest.approx(0.5)
    assert row.ram_efficiency == pytest.approx(0.5)  # 512 MiB of 1 GiB, however much of it is inside


def test_a_gangs_efficiency_is_of_the_node_that_runs_its_command() -> None:
    nodes = [node("n1", created_at=0.0, gone_at=3600.0), node("n2", created_at=0.0, gone_at=3600.0)]
    gang = attempt(1, ("n1", "n2"), 0.0, 3600.0, Resources(2.0, 2 * GiB, 0, 0), cpu_seconds=3600.0, max_rss_mib=1024)
    (row,) = usage(nodes, [gang], 0.0, 3600.0, now=3600.0).rows
    assert row.vcpu_hours == pytest.approx(4.0)  # both nodes' vcpus reserved
    assert row.cpu_efficiency == pytest.approx(0.5)  # but only the first node's measured, against its own


def test_the_total_counts_each_job_and_run_once_whatever_the_grouping() -> None:
    nodes = [node("n1", created_at=0.0, gone_at=7200.0)]
    attempts = [
        attempt(1, ("n1",), 0.0, 3600.0, tags=("web", "prod"), cpu_seconds=900.0, max_rss_mib=256),
        attempt(2, ("n1",), 0.0, 3600.0, tags=("web",)),
    ]
    report = usage(nodes, attempts, 0.0, 7200.0, now=7200.0, by="tag")
    assert {row.key: (row.jobs, row.attempts) for row in report.rows} == {"web": (2, 2), "prod": (1, 1)}
    total = report.total
    assert (total.key, total.jobs, total.attempts, total.measured) == (TOTAL, 2, 2, 1)
    assert (total.vcpu_hours, total.cost) == pytest.approx((2.0, report.used))
    assert (total.cpu_efficiency, total.ram_efficiency) == pytest.approx((0.25, 0.25))
    assert report.jobs == 2
