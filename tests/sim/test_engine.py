"""The simulated world around the core's pass: what happens to jobs, instances and the bill."""

from __future__ import annotations

import math

import pytest

from corral.core.model import JobState
from corral.jobspec import JobRequest
from tests.sim.helpers import BIG, SMALL, config, job, simulate


def test_one_job_boots_the_cheapest_fitting_type_runs_and_the_idle_node_is_shut_down() -> None:
    sim, r = simulate([job(1, run=600)], config())
    (instance,) = sim.cloud.instances.values()
    assert instance.itype.name == "small"
    # Boot at 0, pairs at 60 and runs to 660; idle from the pass at 660, drained at 720 (idle grace
    # 60 s), shut down on the next pass at 721.
    assert instance.terminated_at == 721
    assert (r.completed, r.boots, r.shutdowns, r.peak_fleet) == (1, 1, 1, 1)
    assert r.wait_mean == 60
    assert r.bounded_slowdown == pytest.approx(660 / 600) and r.slowdown == pytest.approx(660 / 600)
    assert r.cost == pytest.approx(721 * 0.10 / 3600) and r.instance_hours == pytest.approx(721 / 3600)
    assert r.utilisation == pytest.approx(600 * 1 / (721 * 2))
    assert r.makespan == 660


def test_cost_bounds() -> None:
    # 1 vcpu / 1 GiB for 600 s: cheapest type that fits is small ($0.10); the share of small is half
    # its vcpus ($0.05) and of big an eighth ($0.05).
    _, r = simulate([job(1, run=600)], config())
    assert r.per_job_bound == pytest.approx(600 * 0.10 / 3600)
    assert r.packing_bound == pytest.approx(600 * 0.05 / 3600)
    assert r.cost_over_packing_bound == pytest.approx(r.cost / r.packing_bound)


def test_bounded_slowdown_has_a_ten_second_floor() -> None:
    _, r = simulate([job(1, run=2)], config())
    assert r.wait_mean == 60
    assert r.bounded_slowdown == pytest.approx(62 / 10) and r.slowdown == pytest.approx(62 / 2)


def test_a_job_that_runs_no_time_counts_in_the_bounded_slowdown_but_has_no_plain_one() -> None:
    # (wait + run) / run has no value for a run of 0 s: the plain mean is over the jobs that ran
    # some time; the bounded slowdown's 10 s floor takes them all.
    _, r = simulate([job(1, run=0), job(2, run=100)], config())
    assert r.completed == 2 and r.wait_mean == 60
    assert r.slowdown == pytest.approx(160 / 100)
    assert r.bounded_slowdown == pytest.approx((60 / 10 + 160 / 100) / 2)
    _, only = simulate([job(1, run=0)], config())
    assert only.completed == 1 and only.summary()["slowdown_mean"] is None


def test_a_job_fitting_on_a_running_node_is_placed_there_without_a_boot() -> None:
    _, r = simulate([job(1, run=600), job(2, submit=100, run=100)], config())
    assert r.boots == 1 and r.completed == 2
    assert sorted(r.waits) == [0, 60]


def test_a_gang_starts_when_all_its_nodes_are_up() -> None:
    sim, r = simulate([job(1, run=100, vcpus=2, nodes=3)], config())
    assert r.boots == 3 and r.completed == 1 and r.wait_mean == 60
    assert r.per_job_bound == pytest.approx(3 * 100 * 0.10 / 3600)


def test_a_gang_whose_instances_pair_far_apart_boots_each_once() -> None:
    """Boots of 20 to 300 s and an idle grace of 30 s: the first instances up wait idle for the
    last, held for the gang, instead of being drained and booted again."""
    for max_boots_per_pass in (16, 1):  # 1: the gang's three boot over three passes
        cfg = config(
            policy={
                "boot": {"max_instances": 10, "max_boots_per_pass": max_boots_per_pass},
                "lifecycle": {"idle_grace": 30},
            },
            sim={"seed": 3, "boot_delay": {"distribution": "uniform", "low": 20, "high": 300}},
        )
        sim, r = simulate([job(1, run=100, vcpus=2, nodes=3)], cfg)
        assert r.completed == 1 and r.boots == 3, max_boots_per_pass
        pairs = sorted(i.ready_at for i in sim.cloud.instances.values() if i.ready_at is not None)
        assert pairs[-1] - pairs[0] > 30  # they did pair further apart than the idle grace
        assert r.wait_mean == math.ceil(pairs[-1])  # placed at the first pass after the last pairs


def test_a_constrained_gang_whose_instances_pair_far_apart_boots_each_once() -> None:
    """The same for a gang that asks for traits, a platform or strict locality: it counted none of
    its own instances up, and booted one more each time one paired (seven instances for three)."""
    zoned = {**SMALL, "name": "small-a", "price_per_hour": 0.12, "attributes": {"zone": "a", "platform": "3"}}
    asks: list[dict[str, object]] = [
        {"traits": {"zone": "a"}},
        {"min_platform": "2"},
        {"locality": {"far": ["tag:db"], "strict": True, "level": "rack"}},
    ]
    for constraint in asks:
        cfg = config(
            instance_types=[SMALL, zoned, BIG],
            policy={"boot": {"max_instances": 10}, "lifecycle": {"idle_grace": 30}},
            sim={"seed": 3, "boot_delay": {"distribution": "uniform", "low": 20, "high": 300}},
        )
        request = JobRequest.model_validate({"command": ["true"], "vcpus": 2, "nodes": 3, **constraint})
        sim, r = simulate([job(1, run=100, vcpus=2, nodes=3, request=request)], cfg)
        assert r.completed == 1 and r.boots == 3, constraint
        pairs = sorted(i.ready_at for i in sim.cloud.instances.values() if i.ready_at is not None)
        assert pairs[-1] - pairs[0] > 30, constraint
        assert r.wait_mean == math.ceil(pairs[-1]), constraint


def test_coarse_billing_keeps_an_idle_node_until_the_end_of_its_paid_hour() -> None:
    hourly = {"name": "hourly", "vcpus": 2, "ram": "4GiB", "price_per_hour": 0.05, "billing_granularity": "1h"}
    sim, r = simulate([job(1, run=600)], config(instance_types=[hourly]))
    (instance,) = sim.cloud.instances.values()
    # Idle from 660, but the seed-000 billing window opens only in the last 300 s of the hour.
    assert instance.terminated_at is not None and 3300 <= instance.terminated_at <= 3600
    assert r.cost == pytest.approx(0.05)
    # The report's cost curve ends at the cost: the rest of the paid hour is billed at shutdown.
    times, cost = r.cost_curve
    assert times[-1] == r.end_time and cost[-1] == pytest.approx(r.cost)


def test_an_instance_kept_warm_is_billed_until_the_last_job_ends_and_the_fleet_is_down_to_its_floor() -> None:
    # min_instances = 1 keeps a node up for ever; the run ends once no job is left and the fleet is
    # down to that floor, as a fixed fleet's does. The node boots at 0 and pairs at 60; the job runs
    # from 60 to 660: the node is billed for 660 s (not until an idle timer that changes nothing).
    cfg = config(policy={"lifecycle": {"min_instances": 1}})
    sim, r = simulate([job(1, run=600)], cfg)
    assert (r.completed, r.boots, r.makespan) == (1, 1, 660)
    assert sim.end_time == 660
    assert r.cost == pytest.approx(660 * 0.10 / 3600)
    # A run cut at its time limit: its recorded end (a day later) is ignored, and bills nothing.
    sim, r = simulate([job(1, run=86400, time_limit=100)], cfg)
    assert (r.failed, r.timed_out, r.makespan) == (1, 1, 160)
    assert r.cost == pytest.approx(160 * 0.10 / 3600) and sim.end_time == 160
    # Failures drawn for the instances (a day apart on average) come after the workload: the one
    # kept warm would fail and be replaced again and again until the horizon, a week on, and the
    # gang's other node, shut down after the job, would fail too (nothing happens then). The run
    # ends when that node is shut down, and the node kept warm is billed until then.
    failing = config(policy={"lifecycle": {"min_instances": 1}}, sim={"failures": {"per_instance_day": 1}})
    sim, r = simulate([job(1, run=600, nodes=2)], failing)
    assert (r.completed, r.boots, r.node_failures, r.makespan) == (1, 2, 0, 660)
    ends = sorted(i.terminated_at or sim.end_time for i in sim.cloud.instances.values())
    assert sim.end_time == ends[0] == ends[1] == 721  # idle from 660, drained at 720, shut down at 721
    assert r.instance_hours == pytest.approx(2 * 721 / 3600)


def test_insufficient_capacity_backs_the_type_off_and_the_next_cheapest_is_booted() -> None:
    cfg = config(sim={"capacity": {"outages": [{"instance_type": "small", "start": 0, "end": 10_000}]}})
    sim, r = simulate([job(1, run=600)], cfg)
    assert r.capacity_errors == 1 and r.boots == 1
    assert [i.itype.name for i in sim.cloud.instances.values()] == ["big"]
    assert r.wait_mean == 61  # the failed boot at 0, big booted on the pass at 1
    assert sim.unavailable["small"] == 0 + cfg.policy.boot.capacity_backoff


def test_an_outage_of_every_type_delays_the_job_until_a_retry_after_it_ends() -> None:
    cfg = config(
        sim={"capacity": {"outages": [{"start": 0, "end": 1000}]}},
        policy={"boot": {"capacity_backoff": 400}},
    )
    _, r = simulate([job(1, run=60)], cfg)
    # Both types fail at 0 and at 400 (back-off 400 s); at 800 still out; at 1200 small boots.
    assert r.capacity_errors == 6
    assert r.wait_mean == 1200 + 60


def test_a_failed_node_is_noticed_by_its_silence_and_its_job_retried_elsewhere() -> None:
    cfg = config(sim={"failures": {"schedule": [{"at": 500}]}})
    _, r = simulate([job(1, run=1000)], cfg)
    # Fails at 500; its ping is stale after 60 s, so at 561 the node is down, the job requeued with a
    # 5 s back-off and the node shut down; at 566 a new node boots, pairs at 626, the job runs again.
    assert (r.node_failures, r.requeues, r.boots, r.completed) == (1, 1, 2, 1)
    assert r.wait_mean == 626
    assert r.work_lost_vcpu_hours == pytest.approx((500 - 60) * 1 / 3600)  # 1 vcpu, from 60 to 500


def test_instances_that_never_pair_are_shut_down_after_the_boot_grace_until_the_horizon() -> None:
    cfg = config(sim={"boot_delay": {"never_pairs": 1.0}, "horizon": 3600})
    _, r = simulate([job(1, run=60)], cfg)
    assert r.horizon_reached and r.unfinished == 1 and r.completed == 0
    assert r.boots >= 5 and r.shutdowns >= 5


def test_a_job_no_type_can_hold_ends_the_run_at_once() -> None:
    sim, r = simulate([job(1, run=60, gpus=1)], config())
    assert r.boots == 0 and r.unfinished == 1 and not r.horizon_reached
    assert sim.jobs[1].unplaceable and "1 GPU (none has any)" in sim.jobs[1].wait_reason


def test_user_cancellations_and_exit_codes() -> None:
    jobs = [
        job(1, cancel_at=0.0),  # cancelled as it arrives (SWF run time -1 or 0)
        job(2, run=100, cancel_on_end=True),  # SWF status 5: ran, then the user cancelled it
        job(3, run=100, exit_code=1),
        job(4, submit=10, run=5000, cancel_at=300.0),  # cancelled while running
    ]
    sim, r = simulate(jobs, config())
    states = {job_id: record.state for job_id, record in sim.records.items()}
    assert states == {1: JobState.CANCELLED, 2: JobState.CANCELLED, 3: JobState.FAILED, 4: JobState.CANCELLED}
    assert sim.records[2].wait == 60 and sim.records[4].wait is None
    assert (r.cancelled, r.failed, r.completed) == (3, 1, 0)


def test_a_job_asking_for_retries_runs_again_after_a_non_zero_exit() -> None:
    request = JobRequest(command=["x"], max_retries=2)
    sim, r = simulate([job(1, run=100, exit_code=3, request=request)], config())
    assert r.requeues == 2 and r.failed == 1 and sim.records[1].wait is not None


def test_a_job_cancelled_during_its_retry_has_no_wait_though_its_first_run_ended() -> None:
    # The first run ends at 160 (exit 3, retried at once); the user cancels the second at 200. Its
    # run never ended, as that of a job cancelled in its first run: it is in no wait, slowdown or
    # bound (the first run's end is not its end).
    request = JobRequest(command=["x"], max_retries=1)
    sim, r = simulate([job(1, run=100, exit_code=3, request=request, cancel_at=200.0)], config())
    assert (r.requeues, r.cancelled) == (1, 1)
    assert sim.records[1].wait is None and len(r.waits) == 0 and r.per_job_bound == 0


def test_an_attempt_whose_agent_never_starts_it_times_out_and_is_retried() -> None:
    cfg = config(sim={"start_latency": 200}, policy={"dispatch": {"start_timeout": 120}})
    _, r = simulate([job(1, run=10)], cfg, every_tick=False)
    assert r.requeues >= 1


def test_fixed_fleet_never_boots_and_jobs_wait_their_turn() -> None:
    cfg = config(sim={"fleet": {"mode": "fixed", "nodes": [{"instance_type": "small", "count": 2}]}})
    sim, r = simulate([job(i, run=100, vcpus=2) for i in (1, 2, 3)], cfg)
    assert (r.boots, r.shutdowns, r.peak_fleet, r.completed) == (0, 0, 2, 3)
    assert sorted(r.waits) == [0, 0, 100]
    assert r.cost == pytest.approx(2 * 0.10 * 200 / 3600)
    assert r.utilisation == pytest.approx(3 * 100 * 2 / (2 * 2 * 200))


def test_a_job_left_waiting_gets_the_live_loop_s_reason_in_the_report() -> None:
    """A replay explains no waiting job (for speed); the jobs it leaves queued get the reasons the
    live loop's placer would give them. Before, this one was counted under "waiting for resources"."""
    cfg = config(sim={"fleet": {"mode": "fixed", "nodes": [{"instance_type": "small", "count": 1}]}, "horizon": 600})
    request = JobRequest(command=["x"], traits={"accel": "h100"})
    _, r = simulate([job(1, run=100), job(2, run=100, request=request)], cfg)
    assert r.completed == 1
    assert r.unfinished_reasons == {"TRAITS_MISMATCH: needs accel=h100 (0 of 1 nodes have it)": 1}


def test_fixed_fleet_repairs_a_failed_node() -> None:
    cfg = config(
        sim={
            "fleet": {"mode": "fixed", "nodes": [{"instance_type": "small", "count": 1}], "repair_time": 1000},
            "failures": {"schedule": [{"at": 50}]},
        }
    )
    _, r = simulate([job(1, run=100, vcpus=2)], cfg)
    # Fails at 50, down at 111, back at 1111; the job runs again from 1111 to 1211.
    assert (r.node_failures, r.requeues, r.completed, r.boots) == (1, 1, 1, 0)
    assert r.wait_mean == 1111
    assert r.work_lost_vcpu_hours == pytest.approx(50 * 2 / 3600)
    # Busy while the job ran: 0 to 50, until the node broke (not until its silence was noticed at
    # 111: before, that minute on a dead node counted as busy), then 1111 to 1211.
    assert r.utilisation == pytest.approx((50 + 100) * 2 / (1211 * 2))


def test_a_gang_that_loses_a_node_loses_the_work_of_all_its_nodes_once() -> None:
    cfg = config(sim={"failures": {"schedule": [{"at": 500, "count": 2}]}})
    _, r = simulate([job(1, run=1000, vcpus=8, ram_gib=4, nodes=2)], cfg)
    # Two big nodes pair at 60; both fail at 500: 440 s of 2 x 8 vcpus, counted once.
    assert r.node_failures == 2 and r.requeues == 1 and r.completed == 1
    assert r.work_lost_vcpu_hours == pytest.approx(440 * 16 / 3600)


def test_spot_instances_one_type_that_fails_often_beside_others_that_do_not() -> None:
    """The what-if "with spot instances": the cheap type is taken back often; jobs on it run again."""
    spot = {"failures": {"per_instance_day_by_type": {"small": 86400 / 900}}, "horizon": 86400}
    # One small instance in 15 breaks before its agent pairs, which backs small off (corral.core.
    # capacity.boot_failed) and would send the jobs to big: a short back-off keeps them on spot.
    policy = {"boot": {"capacity_backoff": 1}}
    _, r = simulate([job(i, submit=i * 60.0, run=1200, vcpus=2) for i in range(20)], config(sim=spot, policy=policy))
    _, calm = simulate([job(i, submit=i * 60.0, run=1200, vcpus=2) for i in range(20)], config())
    assert calm.node_failures == 0 and calm.work_lost_vcpu_hours == 0
    assert r.node_failures > 5 and r.requeues > 5 and r.work_lost_vcpu_hours > 0
    # A 20-minute job on an instance that lives 15 minutes on average: most run again, and some
    # use up their retries (policy.retry) and fail, as they would on a real spot fleet.
    assert r.completed + r.failed == 20 and r.completed > 10 and r.failed > 0
    assert r.wait_mean > calm.wait_mean


def test_a_job_that_must_not_run_on_spot_gets_an_on_demand_instance_once() -> None:
    """Before, the planner booted the cheaper spot type for it, by room alone: the job never ran and
    10,082 instances were booted and shut down idle before the horizon."""
    cfg = config(instance_types=[{**SMALL, "attributes": {"capacity": "spot"}}, BIG])
    request = JobRequest(command=["x"], forbidden_traits={"capacity": "spot"})
    sim, r = simulate([job(1, run=100, request=request)], cfg)
    assert (r.completed, r.boots) == (1, 1)
    assert [i.itype.name for i in sim.cloud.instances.values()] == ["big"]


def test_the_same_seed_gives_the_same_run_and_another_seed_another() -> None:
    def run(seed: int) -> dict[str, object]:
        cfg = config(
            sim={
                "seed": seed,
                "boot_delay": {"distribution": "lognormal", "seconds": 90, "sigma": 0.5},
                "failures": {"per_instance_day": 4},
                "capacity": {"outages_per_day": 6},
            }
        )
        _, r = simulate([job(i, submit=i * 97.0, run=900.0 + i) for i in range(60)], cfg)
        summary = r.summary()
        for key in ("wall_seconds", "jobs_per_second"):
            summary.pop(key)
        return summary

    assert run(1) == run(1)
    assert run(1) != run(2)


@pytest.mark.parametrize(("backfill", "c_wait"), [("easy", 0), ("strict-fifo", 1098), ("none", 0)])
def test_a_fixed_partition_answers_how_long_jobs_wait_under_fifo_or_easy(backfill: str, c_wait: float) -> None:
    cfg = config(
        policy={"placement": {"queue": {"backfill": backfill}}},
        sim={"fleet": {"mode": "fixed", "nodes": [{"instance_type": "small", "count": 2}]}},
    )
    jobs = [
        job(1, submit=0, run=1000, vcpus=2, time_limit=1000),  # holds one node until 1000
        job(2, submit=1, run=100, vcpus=2, nodes=2, time_limit=100),  # needs both: reserved for 1000
        job(3, submit=2, run=100, vcpus=2, time_limit=100),  # fits now and ends before the reservation
    ]
    sim, _ = simulate(jobs, cfg)
    assert sim.records[2].wait == 999
    assert sim.records[3].wait == c_wait


@pytest.mark.parametrize("fleet", ["elastic", "fixed"])
def test_a_run_stopped_at_the_horizon_bills_and_counts_the_work_up_to_it(fleet: str) -> None:
    """Before, a run whose next event lay past the horizon ended at its last pass: an instance
    running a long job for the whole hour to the horizon was billed for a minute or two (a fixed
    fleet for nothing), and the job's time on it counted as idle."""
    sim_section: dict[str, object] = {"horizon": 3600}
    if fleet == "fixed":
        sim_section["fleet"] = {"mode": "fixed", "nodes": [{"instance_type": "small", "count": 1}]}
    _, r = simulate([job(1, run=86400, vcpus=2)], config(sim=sim_section))
    assert r.horizon_reached and r.unfinished_reasons == {"running at the end": 1}
    started = 60 if fleet == "elastic" else 0  # an elastic fleet's instance pairs at 60
    assert r.end_time == 3600
    # The report's fleet curve goes on to the horizon with the instance up, as its cost curve does.
    assert (r.trace.time[-1], r.trace.fleet[-1], r.trace.running[-1]) == (3600, 1, 1)
    assert r.cost_curve[0][-1] == 3600
    assert r.instance_hours == pytest.approx(1.0) and r.cost == pytest.approx(0.10)
    assert r.utilisation == pytest.approx((3600 - started) / 3600)
    assert r.utilisation_by_type == {"small": pytest.approx((3600 - started) / 3600)}


def test_a_fixed_partition_runs_a_large_swf_job_on_the_type_it_has_enough_nodes_of() -> None:
    """100 thin nodes and 2 fat ones, as on-premises partitions often are: a 70-processor job fits
    no node, and 3 fat nodes would be the fewest that hold it, but there are only 2. Before, it
    was shaped for 3 fat nodes all the same and never ran (TOO_FEW_NODES); it runs on 70 thin ones."""
    thin = {"name": "thin", "vcpus": 1, "ram": "2GiB", "price_per_hour": 0.01}
    fat = {"name": "fat", "vcpus": 32, "ram": "64GiB", "price_per_hour": 0.5}
    nodes = [{"instance_type": "thin", "count": 100}, {"instance_type": "fat", "count": 2}]
    cfg = config(instance_types=[thin, fat], sim={"fleet": {"mode": "fixed", "nodes": nodes}})
    sim, r = simulate([job(1, run=100, procs=70, ram_per_proc=1024), job(2, run=100, procs=60, ram_per_proc=1024)], cfg)
    assert (r.completed, r.unfinished, r.gangs) == (2, 0, 2)
    # The 60-processor job still takes the fewest nodes, the two fat ones (30 each).
    assert [(s.nodes, s.vcpus) for s in sim.specs] == [(70, 1), (2, 30)]
