"""What a simulation run measured: waits, slowdowns, cost, utilisation and the two cost bounds.

Definitions (docs/simulator.md):
- wait: response time less the recorded run time, for every job whose recorded run ended (it
  includes time lost to retries); mean, median, p95.
- per user: each user's mean wait (a workload's user field; jobs without one are one user, ""); the
  median over users, and the worst, say how the typical and the worst-served user fare, however
  many jobs each submits (fair share, queue.order = "fairshare", is for them).
- bounded slowdown: max(1, (wait + run) / max(run, 10 s)); plain slowdown: (wait + run) / run.
- cost: every instance billed from creation to shutdown (or the end of the run), rounded up to its type's billing
  granularity, at least the billing minimum; a fixed fleet is billed for the whole makespan (to the
  horizon, if the run was stopped there).
- utilisation: vcpu-seconds held by attempts (those still running at a horizon, up to it; those
  whose node failed, up to the failure) / vcpu-seconds billed; GPU utilisation likewise, of the
  GPUs (none when no instance billed has one).
- work lost: vcpu-hours that running attempts had done when a node of theirs failed (they run
  again from the start, if their retries allow).
- per-job bound: sum of run x nodes x price of the cheapest type that holds one node's request.
- packing bound: sum of run x nodes x min over types of price x the share of the type one node's
  request occupies (max of the vcpu, RAM and GPU fractions). No policy can pay less.
  Both over the types the job may run on (the placement filters': traits, forbidden traits...).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from corral.core.accounting import share
from corral.core.model import InstanceType, JobState, Resources
from corral.placement.boot import TypeRanker
from corral.placement.demand import Demand
from corral.placement.settings import coerce
from corral.sim.engine import Simulation, Trace
from corral.workload.swf import NO_MEMORY

BOUNDED_SLOWDOWN_FLOOR = 10.0


@dataclass
class SimResult:
    label: str
    mode: str
    jobs: int
    completed: int
    failed: int
    cancelled: int
    unfinished: int
    wait_mean: float
    wait_median: float
    wait_p95: float
    bounded_slowdown: float
    slowdown: float
    makespan: float
    instance_hours: float
    cost: float
    utilisation: float
    peak_fleet: int
    peak_queue: int
    boots: int
    shutdowns: int
    capacity_errors: int
    node_failures: int
    notices: int  # of the failures, those the cloud gave notice of to a node up (sim.failures.notice_by_type)
    requeues: int
    work_lost_vcpu_hours: float  # what running attempts had done when their node failed
    passes: int
    per_job_bound: float
    packing_bound: float
    users: int = 0  # distinct users among the jobs whose run ended
    user_wait_median: float = float("nan")  # the median over users of each one's mean wait
    user_wait_max: float = float("nan")  # the worst user's mean wait
    wall_seconds: float = 0.0
    horizon_reached: bool = False  # stopped at sim.horizon with work left
    timed_out: int = 0  # of the failed, those the core ended past their time limit (TIMEOUT)
    gangs: int = 0  # jobs no one node of the run's types holds, run as gangs of several
    boot_failures: int = 0  # instances that did not pair within the boot grace (their types backed off)
    reclaims: int = 0  # of the failures, spot instances the cloud took back (gone at once, billed no more)
    interruption_backoffs: int = 0  # types backed off after a notice (policy.boot.interruption_backoff)
    # Why the jobs that never finished did not: the core's wait reason of each still queued
    # (e.g. "needs 16 nodes, max_instances is 8"), or the state it was left in; counts, the
    # most common first.
    unfinished_reasons: dict[str, int] = field(default_factory=dict)
    # Of the jobs that never finished, those whose RAM the SWF mapping gave them (the log has none:
    # --default-memory per processor), and that RAM per processor in MiB: a default too large for
    # the instance types leaves them all waiting, and the reasons name the RAM, not where it came from.
    unfinished_default_memory: int = 0
    default_memory_mib: float = 0.0
    # Scheduled outages and failures wholly outside the run (its clock is the workload's: a log's
    # first submission may be days after 0), which therefore did nothing.
    outside_run: list[str] = field(default_factory=list)
    # For the report; not part of the JSON summary.
    waits: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)
    user_waits: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)  # each user's mean wait
    trace: Trace = field(default_factory=Trace, repr=False)
    cost_curve: tuple[np.ndarray, np.ndarray] = field(default_factory=lambda: (np.zeros(0), np.zeros(0)), repr=False)
    utilisation_by_type: dict[str, float] = field(default_factory=dict)
    # GPU-seconds held by attempts / GPU-seconds billed; NaN when no instance billed has a GPU
    gpu_utilisation: float = float("nan")
    start_time: float = 0.0
    end_time: float = 0.0

    @property
    def cost_over_per_job_bound(self) -> float:
        return self.cost / self.per_job_bound if self.per_job_bound > 0 else float("nan")

    @property
    def cost_over_packing_bound(self) -> float:
        return self.cost / self.packing_bound if self.packing_bound > 0 else float("nan")

    @property
    def jobs_per_second(self) -> float:
        return self.jobs / self.wall_seconds if self.wall_seconds > 0 else float("nan")

    def warnings(self) -> list[str]:
        """What a reader of the figures must know: work the figures leave out."""
        notes = []
        if self.horizon_reached:
            notes.append(
                "stopped at sim.horizon with work left: the job figures cover only the jobs that ended before it"
            )
        if self.unfinished:
            reasons = list(self.unfinished_reasons.items())  # the most common first
            shown = "; ".join(f"{count:,} {reason}" for reason, count in reasons[:3])
            others = reasons[3:]
            jobs = sum(count for _, count in others)
            more = (
                f"; {jobs:,} {'job' if jobs == 1 else 'jobs'} for {len(others):,} other"
                f" {'reason' if len(others) == 1 else 'reasons'}"
                if others
                else ""
            )
            notes.append(
                f"{self.unfinished:,} {'job' if self.unfinished == 1 else 'jobs'} never finished"
                f" (not in the waits, slowdowns or bounds): {shown}{more}"
            )
            if self.unfinished_default_memory:
                mib = self.default_memory_mib
                per_processor = f"{mib / 1024:g} GiB" if mib >= 1024 else f"{mib:g} MiB"
                notes.append(
                    f"{self.unfinished_default_memory:,} of the jobs that never finished have no memory in the log"
                    f" and were given --default-memory (sim.workload.default_memory), {per_processor} per"
                    " processor: a smaller default may let them run"
                )
        if self.outside_run:
            notes.append(
                f"{', '.join(self.outside_run)}: outside the run (from {self.start_time:g} s to {self.end_time:g} s"
                " on the workload's clock), so nothing happened"
            )
        return notes

    def summary(self) -> dict[str, Any]:
        """The JSON-able figures (what `--json` prints)."""

        def num(value: float) -> float | None:
            return None if value != value else round(float(value), 6)  # NaN -> null

        return {
            "label": self.label,
            "mode": self.mode,
            "jobs": self.jobs,
            "completed": self.completed,
            "failed": self.failed,
            "jobs_timed_out": self.timed_out,
            "cancelled": self.cancelled,
            "unfinished": self.unfinished,
            "unfinished_reasons": self.unfinished_reasons,
            "unfinished_with_default_memory": self.unfinished_default_memory,
            "gangs": self.gangs,
            "outside_run": self.outside_run,
            "wait_mean_s": num(self.wait_mean),
            "wait_median_s": num(self.wait_median),
            "wait_p95_s": num(self.wait_p95),
            "users": self.users,
            "user_wait_median_s": num(self.user_wait_median),
            "user_wait_max_s": num(self.user_wait_max),
            "bounded_slowdown_mean": num(self.bounded_slowdown),
            "slowdown_mean": num(self.slowdown),
            "makespan_s": num(self.makespan),
            "instance_hours": num(self.instance_hours),
            "cost_usd": num(self.cost),
            "utilisation": num(self.utilisation),
            "utilisation_by_type": {k: num(v) for k, v in sorted(self.utilisation_by_type.items())},
            "gpu_utilisation": num(self.gpu_utilisation),
            "peak_fleet": self.peak_fleet,
            "peak_queue": self.peak_queue,
            "boots": self.boots,
            "shutdowns": self.shutdowns,
            "capacity_errors": self.capacity_errors,
            "boot_failures": self.boot_failures,
            "node_failures": self.node_failures,
            "interruption_notices": self.notices,
            "reclaims": self.reclaims,
            "interruption_backoffs": self.interruption_backoffs,
            "requeues": self.requeues,
            "work_lost_vcpu_hours": num(self.work_lost_vcpu_hours),
            "passes": self.passes,
            "per_job_bound_usd": num(self.per_job_bound),
            "packing_bound_usd": num(self.packing_bound),
            "cost_over_per_job_bound": num(self.cost_over_per_job_bound),
            "cost_over_packing_bound": num(self.cost_over_packing_bound),
            "horizon_reached": self.horizon_reached,
            "wall_seconds": num(self.wall_seconds),
            "jobs_per_second": num(self.jobs_per_second),
        }


_CURVE_SLICE = 2048  # instances per slice of the cost curve's sum


def measure(sim: Simulation, wall_seconds: float = 0.0, curve_points: int = 400) -> SimResult:
    records = sim.records.values()
    states = [r.state for r in records]
    ran = [r for r in records if r.wait is not None]
    by_user: dict[str, list[float]] = {}
    for job_id, record in sim.records.items():
        if record.wait is not None:
            by_user.setdefault(sim.spec_of[job_id].user, []).append(record.wait)
    user_waits = np.array([sum(waits) / len(waits) for waits in by_user.values()], dtype=float)
    waits = np.array([r.wait for r in ran], dtype=float)
    runs = np.array([r.run for r in ran], dtype=float)
    if len(waits):
        bounded = np.maximum(1.0, (waits + runs) / np.maximum(runs, BOUNDED_SLOWDOWN_FLOOR))
        # (wait + run) / run has no value for a job that ran no time (a JSON Lines run_time of 0):
        # the plain mean is over the others, NaN (null in JSON) if there are none.
        timed = runs > 0
        plain = (waits[timed] + runs[timed]) / runs[timed]
        wait_stats = (float(waits.mean()), float(np.median(waits)), float(np.percentile(waits, 95)))
        slowdowns = (float(bounded.mean()), float(plain.mean()) if len(plain) else float("nan"))
    else:
        wait_stats = (float("nan"),) * 3
        slowdowns = (float("nan"),) * 2

    start, end = sim.start_time, sim.end_time
    makespan = sim.last_finish - start
    billed_vcpu: dict[str, float] = {}
    if sim.fixed:
        # Owned from the first submission to the last job's end, or to the horizon if the run was
        # stopped there with work on the nodes.
        until = end if sim.stopped_early else sim.last_finish
        span = max(0.0, until - start)
        cost = sum(t.price_per_hour for t in sim.fixed_nodes) * span / 3600.0
        hours = len(sim.fixed_nodes) * span / 3600.0
        billed_gpu = sum(t.gpus for t in sim.fixed_nodes) * span
        for t in sim.fixed_nodes:
            billed_vcpu[t.name] = billed_vcpu.get(t.name, 0.0) + t.vcpus * span
        times = np.linspace(start, max(start, until), curve_points)
        curve = (times, (times - start) * sum(t.price_per_hour for t in sim.fixed_nodes) / 3600.0)
    else:
        instances = list(sim.cloud.instances.values())
        billed = np.array([i.billed_seconds(end) for i in instances], dtype=float)
        prices = np.array([i.itype.price_per_hour for i in instances], dtype=float)
        created = np.array([i.instance.created_at for i in instances], dtype=float)
        stopped = np.array([i.terminated_at if i.terminated_at is not None else end for i in instances], dtype=float)
        cost = float((billed * prices).sum() / 3600.0)
        hours = float(billed.sum() / 3600.0)
        billed_gpu = float((billed * np.array([i.itype.gpus for i in instances], dtype=float)).sum())
        for inst, seconds in zip(instances, billed, strict=True):
            billed_vcpu[inst.itype.name] = billed_vcpu.get(inst.itype.name, 0.0) + inst.itype.vcpus * seconds
        times = np.linspace(start, max(start, end), curve_points)
        accumulated = np.zeros_like(times)
        # Each instance's bill grows with its time up until it stops, and is then what it was billed
        # (its last period, or its minimum, rounded up): the curve ends at the cost. A slice of the
        # instances at a time: a run's tens of thousands of instances at every point of the curve
        # would take hundreds of MiB at once.
        for first in range(0, len(instances), _CURVE_SLICE):
            part = slice(first, first + _CURVE_SLICE)
            elapsed = np.clip(times[:, None] - created[None, part], 0.0, billed[None, part])
            elapsed = np.where(times[:, None] >= stopped[None, part], billed[None, part], elapsed)
            accumulated += elapsed @ prices[part] / 3600.0
        curve = (times, accumulated)
    busy = sim.busy_vcpu_seconds_until(end)
    total_billed = sum(billed_vcpu.values())
    per_job, packing = cost_bounds(sim)
    counters = sim.counters
    unfinished_reasons: dict[str, int] = {}
    default_memory = [sim.spec_of[job_id] for job_id in sim.jobs if NO_MEMORY in sim.spec_of[job_id].quirks]
    for job in sim.jobs.values():  # the jobs still open when the run ended
        reason = (job.wait_reason or "waiting") if job.state is JobState.QUEUED else f"{job.state.value} at the end"
        unfinished_reasons[reason] = unfinished_reasons.get(reason, 0) + 1
    not_arrived = len(sim.specs) - len(states) - len(sim.jobs)
    if not_arrived > 0:
        unfinished_reasons["not submitted before the run ended"] = not_arrived
    return SimResult(
        label=sim.label,
        mode="fixed" if sim.fixed else "elastic",
        jobs=len(sim.specs),
        completed=states.count(JobState.COMPLETE),
        failed=states.count(JobState.FAILED),
        cancelled=states.count(JobState.CANCELLED),
        unfinished=len(sim.specs) - len(states),
        wait_mean=wait_stats[0],
        wait_median=wait_stats[1],
        wait_p95=wait_stats[2],
        bounded_slowdown=slowdowns[0],
        slowdown=slowdowns[1],
        makespan=makespan,
        instance_hours=hours,
        cost=cost,
        utilisation=sum(busy.values()) / total_billed if total_billed > 0 else float("nan"),
        gpu_utilisation=sim.busy_gpu_seconds_until(end) / billed_gpu if billed_gpu > 0 else float("nan"),
        peak_fleet=counters.peak_fleet,
        peak_queue=counters.peak_queue,
        boots=counters.boots,
        shutdowns=counters.shutdowns,
        capacity_errors=counters.capacity_errors,
        node_failures=counters.node_failures,
        notices=counters.notices,
        requeues=counters.requeues,
        work_lost_vcpu_hours=counters.lost_vcpu_seconds / 3600.0,
        passes=counters.passes,
        per_job_bound=per_job,
        packing_bound=packing,
        users=len(user_waits),
        user_wait_median=float(np.median(user_waits)) if len(user_waits) else float("nan"),
        user_wait_max=float(user_waits.max()) if len(user_waits) else float("nan"),
        wall_seconds=wall_seconds,
        horizon_reached=sim.stopped_early,
        timed_out=counters.timeouts,
        gangs=sim.gangs,
        boot_failures=counters.boot_failures,
        reclaims=counters.reclaims,
        interruption_backoffs=counters.interruption_backoffs,
        unfinished_reasons=dict(sorted(unfinished_reasons.items(), key=lambda item: (-item[1], item[0]))),
        unfinished_default_memory=len(default_memory),
        default_memory_mib=default_memory[0].ram_per_proc if default_memory else 0.0,
        outside_run=outside_run(sim),
        waits=waits,
        user_waits=user_waits,
        trace=sim.trace,
        cost_curve=curve,
        utilisation_by_type={
            name: busy.get(name, 0.0) / seconds for name, seconds in billed_vcpu.items() if seconds > 0
        },
        start_time=start,
        end_time=end,
    )


def outside_run(sim: Simulation) -> list[str]:
    """The scheduled outages, failures and waves that fall wholly before the first submission or after
    the run's end."""
    start, end = sim.start_time, sim.end_time
    found = []
    for i, outage in enumerate(sim.config.sim.capacity.outages):
        if outage.end <= start or outage.start >= end:
            found.append(f"sim.capacity.outages.{i} ({outage.start:g} s to {outage.end:g} s)")
    for i, failure in enumerate(sim.config.sim.failures.schedule):
        if not start <= failure.at <= end:
            found.append(f"sim.failures.schedule.{i} (at {failure.at:g} s)")
    for i, wave in enumerate(sim.config.sim.failures.waves):
        if wave.at + wave.length <= start or wave.at >= end:
            found.append(f"sim.failures.waves.{i} ({wave.at:g} s to {wave.at + wave.length:g} s)")
    return found


def cost_bounds(sim: Simulation) -> tuple[float, float]:
    """(per-job bound, packing bound) in dollars over the jobs whose recorded run ended, or that ran
    to their time limit and were ended there. Each job is priced on the types it may run on: those
    whose new node the placement filters let it use (its traits and forbidden traits, platform,
    room), as the boot planner reads them; a job that forbids spot is priced on demand."""
    ranker = TypeRanker(sim.types, coerce(sim.policy))
    by_request: dict[tuple[object, ...], tuple[Demand, float]] = {}  # per-node request -> node-seconds
    for job_id, record in sim.records.items():
        if record.wait is None:
            continue
        spec = sim.spec_of[job_id]
        demand = Demand.of(spec.to_job())
        key = (demand.static_key, demand.amounts)
        seconds = record.run * spec.nodes  # (a timed-out job's: until its end)
        known = by_request.get(key)
        by_request[key] = (demand, seconds + (known[1] if known else 0.0))
    per_job = packing = 0.0
    for demand, node_seconds in by_request.values():
        accepting = ranker.accepting(demand)
        types = [t for t in sim.types if t.name in accepting] or sim.types
        request = demand.resources
        cheapest, share = cheapest_prices(request.vcpus, request.ram_mib, request.gpus, types)
        per_job += node_seconds * cheapest / 3600.0
        packing += node_seconds * share / 3600.0
    return per_job, packing


def cheapest_prices(vcpus: float, ram_mib: int, gpus: int, types: list[InstanceType]) -> tuple[float, float]:
    """(price of the cheapest type that fits, cheapest price of the share of a type it occupies);
    NaN when no type fits."""
    whole = cheapest_share = float("inf")
    request = Resources(vcpus, ram_mib, 0, gpus)
    for t in types:
        if vcpus > t.vcpus + 1e-9 or ram_mib > t.ram_mib or gpus > t.gpus:
            continue
        whole = min(whole, t.price_per_hour)
        cheapest_share = min(cheapest_share, t.price_per_hour * share(request, t.capacity))
    if whole == float("inf"):
        return float("nan"), float("nan")
    return whole, cheapest_share
