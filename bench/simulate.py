"""Simulator benchmark: replay a workload through corral's reconcile pass in both fleet modes.

    .venv/bin/python bench/simulate.py [WORKLOAD] [--jobs N] [--modes elastic,fixed] [--fixed TYPE:COUNT]
        [--trace JOBS:INTERARRIVAL] [--quality] [--no-cost-gate] [--order priority|submit|fairshare|multifactor]

Without WORKLOAD it generates (deterministically, in-process) a 100,000-job SWF trace with the
statistics of a parallel-machine log (corral.workload.synth) and an arrival rate at which the elastic
fleet peaks around 500 instances. Each mode runs in a child process, so that its peak memory (max
RSS) is its own. Prints a table, then, as the last line, one JSON object of the figures.

A second table splits the wall clock of a pass: the simulator's own work (events, carrying
decisions out), the core's pass without the placer, and the placer; next to it, the wall clock
per pass that the target allows (jobs / target / passes).

Elastic: AWS us-east-1 CPU instance types, the default policy (idle grace 1 min), room for 2,000
instances. Fixed: 500 m5.12xlarge-sized nodes (24,000 vcpus), EASY backfilling (the placement settings' queue).
Targets (issue 4), one core, <= 1 GiB: elastic >= 5,000 jobs/s, fixed with EASY >= 20,000 jobs/s.

--trace JOBS:INTERARRIVAL generates another trace of the same statistics: e.g. `--trace 450000:18
--modes fixed --fixed c5.2xlarge:1024`, a large cluster's log (450,000 jobs on 1,024 8-core nodes)
kept about as busy as the default fixed run.

--quality adds the cost comparison of docs/performance.md on the same trace: the default policy,
the same with hourly billing (seed 000's billing window), and a fixed fleet sized for the elastic
run's peak.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from corral.config import Config
from corral.sim.engine import Simulation
from corral.sim.metrics import measure
from corral.workload import read_workload
from corral.workload.synth import SynthParams, generate, to_swf

TRACE = SynthParams(jobs=100_000, seed=1, max_procs=128, mean_interarrival=6.0)
FIXED_TYPE, FIXED_COUNT = "m5.12xlarge", 500
TARGETS = {"elastic": 5000.0, "fixed": 20000.0}
MEMORY_LIMIT_MIB = 1024

# AWS us-east-1 on-demand Linux list prices (USD/hour, about 2024): the CPU types of
# ../shared/data/instance-types-aws-us-east-1.csv, written out so that the bench runs anywhere.
TYPES: list[tuple[str, int, int, float]] = [
    ("c5.large", 2, 4, 0.085),
    ("c5.xlarge", 4, 8, 0.17),
    ("c5.2xlarge", 8, 16, 0.34),
    ("c5.4xlarge", 16, 32, 0.68),
    ("c5.9xlarge", 36, 72, 1.53),
    ("c5.12xlarge", 48, 96, 2.04),
    ("c5.18xlarge", 72, 144, 3.06),
    ("c5.24xlarge", 96, 192, 4.08),
    ("m5.large", 2, 8, 0.096),
    ("m5.xlarge", 4, 16, 0.192),
    ("m5.2xlarge", 8, 32, 0.384),
    ("m5.4xlarge", 16, 64, 0.768),
    ("m5.8xlarge", 32, 128, 1.536),
    ("m5.12xlarge", 48, 192, 2.304),
    ("m5.16xlarge", 64, 256, 3.072),
    ("m5.24xlarge", 96, 384, 4.608),
    ("r5.large", 2, 16, 0.126),
    ("r5.xlarge", 4, 32, 0.252),
    ("r5.2xlarge", 8, 64, 0.504),
    ("r5.4xlarge", 16, 128, 1.008),
    ("r5.8xlarge", 32, 256, 2.016),
    ("r5.12xlarge", 48, 384, 3.024),
    ("r5.24xlarge", 96, 768, 6.048),
]


def config(mode: str, *, hourly: bool = False, fixed_nodes: list[tuple[str, int]] | None = None) -> Config:
    types: list[dict[str, Any]] = [
        {"name": n, "vcpus": v, "ram": f"{m}GiB", "price_per_hour": p} for n, v, m, p in TYPES
    ]
    if hourly:
        for t in types:
            t["billing_granularity"] = "1h"
    sim: dict[str, Any] = {"seed": 1, "boot_delay": {"distribution": "lognormal", "seconds": 90, "sigma": 0.35}}
    if mode == "fixed":
        nodes = fixed_nodes or [(FIXED_TYPE, FIXED_COUNT)]
        sim["fleet"] = {"mode": "fixed", "nodes": [{"instance_type": n, "count": c} for n, c in nodes]}
    return Config.model_validate(
        {
            "instance_types": types,
            "policy": {
                "boot": {"max_instances": 2000, "max_boots_per_pass": 200},
                "placement": {"queue": {"backfill": "easy"}},
            },
            "sim": sim,
        }
    )


def variant_config(mode: str, variant: str = "", order: str = "") -> Config:
    """The config of a run: `variant` is "", "hourly", "no-cost-gate" or "fixed:TYPE:COUNT"; `order`
    the queue's order (default: the placement settings')."""
    cfg = _variant_config(mode, variant)
    if order:
        placement = cfg.policy.placement
        placement.queue = placement.queue.model_copy(update={"order": order})  # (argparse's choices checked it)
    return cfg


def _variant_config(mode: str, variant: str) -> Config:
    if variant == "hourly":
        return config(mode, hourly=True)
    if variant == "no-cost-gate":
        cfg = config(mode)
        cfg.policy.placement.cost.max_extension = 0.0
        return cfg
    if variant.startswith("fixed:"):
        name, count = variant.split(":")[1:]
        return config("fixed", fixed_nodes=[(name, int(count))])
    return config(mode)


def write_trace(path: Path, trace: SynthParams) -> None:
    path.write_text(to_swf(generate(trace), trace))


def run_child(mode: str, workload: Path, limit: int | None, variant: str, order: str = "") -> dict[str, Any]:
    jobs = read_workload(workload).jobs
    if limit is not None:
        jobs = jobs[:limit]
    cfg = variant_config(mode, variant, order)
    started = time.perf_counter()
    sim = Simulation(jobs, cfg).run()
    wall = time.perf_counter() - started
    figures = measure(sim, wall).summary()
    figures.pop("utilisation_by_type")
    # Where a pass's wall clock goes, and what the target leaves for one.
    passes = max(1, sim.counters.passes)

    def per_pass(seconds: float) -> float:
        return round(seconds / passes * 1e6, 1)

    figures["us_per_pass"] = per_pass(wall)
    figures["simulator_us_per_pass"] = per_pass(wall - sim.times.passes)
    figures["core_us_per_pass"] = per_pass(sim.times.passes - sim.times.placer)
    figures["placer_us_per_pass"] = per_pass(sim.times.placer)
    target = TARGETS.get("fixed" if variant.startswith("fixed:") else mode)
    figures["target_us_per_pass"] = per_pass(len(jobs) / target) if target else None
    figures["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    figures["peak_vcpus"] = peak_vcpus(sim)
    # The placement engine explains its placements; the built-in first fit does not.
    figures["placer"] = "placement engine" if sim.counters.explained else "built-in first fit"
    return figures


def peak_vcpus(sim: Simulation) -> float:
    if sim.fixed:
        return sum(t.vcpus for t in sim.fixed_nodes)
    changes: list[tuple[float, float]] = []
    for inst in sim.cloud.instances.values():
        changes.append((inst.instance.created_at, inst.itype.vcpus))
        changes.append((inst.terminated_at if inst.terminated_at is not None else sim.end_time, -inst.itype.vcpus))
    level = peak = 0.0
    for _, delta in sorted(changes):
        level += delta
        peak = max(peak, level)
    return peak


def in_child(mode: str, workload: Path, limit: int | None, variant: str = "", order: str = "") -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", mode, str(workload), "--variant", variant, "--order", order]
    if limit is not None:
        command += ["--jobs", str(limit)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        how = f"killed by signal {-done.returncode}" if done.returncode < 0 else f"exit status {done.returncode}"
        raise SystemExit(f"{mode} run failed ({how}):\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workload", nargs="?", type=Path, help="SWF or JSON Lines; default: the generated trace")
    parser.add_argument("--jobs", type=int, help="replay only the first N jobs of the workload")
    parser.add_argument("--modes", default="elastic,fixed")
    parser.add_argument("--quality", action="store_true", help="also compare policies' cost on the trace")
    parser.add_argument(
        "--fixed", metavar="TYPE:COUNT", help=f"the fixed fleet (default {FIXED_TYPE}:{FIXED_COUNT}), e.g. c5.large:50"
    )
    parser.add_argument(
        "--no-cost-gate", action="store_true", help="elastic with policy.placement.cost.max_extension = 0"
    )
    parser.add_argument("--write-trace", type=Path, help="write the generated trace here and stop")
    parser.add_argument(
        "--trace",
        metavar="JOBS:INTERARRIVAL",
        help=f"generate JOBS jobs at a mean INTERARRIVAL (s) (default {TRACE.jobs}:{TRACE.mean_interarrival:g})",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--variant", default="", help=argparse.SUPPRESS)
    parser.add_argument(
        "--order",
        default="",
        choices=["", "priority", "submit", "fairshare", "multifactor"],
        help="the queue's order in the runs (default: the placement settings', priority)",
    )
    args = parser.parse_args()

    if args.child:
        print(json.dumps(run_child(args.child, args.workload, args.jobs, args.variant, args.order)))
        return
    trace = TRACE
    if args.trace:
        jobs, interarrival = args.trace.split(":")
        trace = dataclasses.replace(TRACE, jobs=int(jobs), mean_interarrival=float(interarrival))
    with tempfile.TemporaryDirectory() as tmp:
        workload = args.workload
        if workload is None or args.write_trace:
            workload = args.write_trace or Path(tmp) / "trace.swf"
            started = time.perf_counter()
            write_trace(workload, trace)
            print(f"generated {trace.jobs:,} jobs in {time.perf_counter() - started:.1f} s", file=sys.stderr)
            if args.write_trace:
                print(f"wrote {workload}", file=sys.stderr)
                return
        fixed = f"fixed:{args.fixed}" if args.fixed else ""
        name = workload.name if args.workload is not None else f"generated {trace}"
        elastic = "no-cost-gate" if args.no_cost_gate else ""
        figures = bench(workload, name, args.jobs, args.modes.split(","), args.quality, fixed, elastic, args.order)
    print(json.dumps(figures))


def bench(
    workload: Path,
    name: str,
    limit: int | None,
    modes: list[str],
    quality: bool,
    fixed: str = "",
    elastic: str = "",
    order: str = "",
) -> dict[str, Any]:
    print(f"workload: {name}" + (f"; queue order: {order}" if order else ""))
    print("one core; jobs/s = simulated jobs per wall-clock second of the simulation (reading excluded)")
    header = f"{'mode':<8} {'jobs':>8} {'wall s':>8} {'jobs/s':>8} {'target':>8} {'peak MiB':>9} {'passes':>9}"
    header += f" {'peak fleet':>10} {'mean wait':>10} {'cost $':>11} {'cost/packing':>12}  placer"
    print(header, flush=True)
    runs: dict[str, dict[str, Any]] = {}
    for mode in modes:
        r = runs[mode] = in_child(mode, workload, limit, fixed if mode == "fixed" else elastic, order)
        print(
            f"{mode:<8} {r['jobs']:>8,} {r['wall_seconds']:>8.1f} {r['jobs_per_second']:>8,.0f}"
            f" {TARGETS.get(mode, 0):>8,.0f} {r['peak_rss_mib']:>9,.0f} {r['passes']:>9,} {r['peak_fleet']:>10,}"
            f" {r['wait_mean_s']:>10,.0f} {r['cost_usd']:>11,.0f} {r['cost_over_packing_bound'] or 0:>12.3f}"
            f"  {r['placer']}",
            flush=True,
        )
    print()
    print("where a pass goes, µs of wall clock a pass: the simulator's own work, the core's pass (plan_pass)")
    print("without the placer, the placer; and what the target leaves for a whole pass")
    print(f"{'mode':<8} {'all':>8} {'simulator':>10} {'core pass':>10} {'placer':>8} {'target':>8}")
    for mode, r in runs.items():
        budget = r["target_us_per_pass"]
        print(
            f"{mode:<8} {r['us_per_pass']:>8,.0f} {r['simulator_us_per_pass']:>10,.0f} {r['core_us_per_pass']:>10,.0f}"
            f" {r['placer_us_per_pass']:>8,.0f} {'' if budget is None else f'{budget:,.0f}':>8}"
        )
    placers = sorted({r["placer"] for r in runs.values()})
    figures: dict[str, Any] = {"placer": ", ".join(placers)}
    for mode, r in runs.items():
        figures[mode] = {
            key: r[key]
            for key in (
                "jobs",
                "wall_seconds",
                "jobs_per_second",
                "peak_rss_mib",
                "passes",
                "peak_fleet",
                "wait_mean_s",
                "user_wait_median_s",
                "user_wait_max_s",
                "cost_usd",
                "cost_over_packing_bound",
                "us_per_pass",
                "simulator_us_per_pass",
                "core_us_per_pass",
                "placer_us_per_pass",
                "target_us_per_pass",
            )
        }
        figures[mode]["target_jobs_per_second"] = TARGETS.get(mode)
        figures[mode]["target_met"] = bool(
            r["jobs_per_second"] >= TARGETS.get(mode, 0) and r["peak_rss_mib"] <= MEMORY_LIMIT_MIB
        )
    if quality:
        figures["quality"] = cost_quality(workload, limit, runs.get("elastic"))
    return figures


def cost_quality(workload: Path, limit: int | None, elastic: dict[str, Any] | None) -> dict[str, Any]:
    elastic = elastic or in_child("elastic", workload, limit)
    hourly = in_child("elastic", workload, limit, "hourly")
    count = max(1, round(elastic["peak_vcpus"] / dict((n, v) for n, v, _, _ in TYPES)[FIXED_TYPE]))
    fixed = in_child("fixed", workload, limit, f"fixed:{FIXED_TYPE}:{count}")
    rows = {
        "default policy (per-second billing, idle grace 1 min)": elastic,
        "default policy, hourly billing (seed-000 window)": hourly,
        f"fixed fleet sized for the peak ({count} x {FIXED_TYPE})": fixed,
    }
    print()
    print(f"{'policy':<58} {'cost $':>11} {'packing $':>11} {'cost/packing':>12} {'mean wait':>10} {'p95 wait':>9}")
    for name, r in rows.items():
        print(
            f"{name:<58} {r['cost_usd']:>11,.0f} {r['packing_bound_usd']:>11,.0f}"
            f" {r['cost_over_packing_bound']:>12.3f} {r['wait_mean_s']:>10,.0f} {r['wait_p95_s']:>9,.0f}"
        )
    keys = ("cost_usd", "packing_bound_usd", "cost_over_packing_bound", "wait_mean_s", "wait_p95_s")
    return {name: {k: r[k] for k in keys} for name, r in rows.items()}


if __name__ == "__main__":
    main()
