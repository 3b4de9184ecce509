"""Where the simulator's passes go: passes grouped by what came before them and what they decided.

    .venv/bin/python bench/pass_kinds.py [WORKLOAD] [--jobs 30000] [--mode fixed|elastic] [--fixed TYPE:COUNT]

Replays a workload (default: the first 30,000 jobs of bench/simulate.py's generated trace) in one
fleet mode, with bench/simulate.py's settings, and times every pass (the core's pass and the
simulator carrying its decisions out). Each pass is grouped by
- what happened since the last pass: jobs arrived, jobs ended, both, other events (boots, pairs,
  failures, cancellations), or nothing (a tick the simulator asked for);
- whether any job was queued when it ran;
- what it decided: placed a job, decided something else (boots, drains, marks, outcomes, reasons),
  or nothing at all.
Prints a table, largest share of the time first, then, as the last line, one JSON object.

A diagnostic for the speed work of issue 4: it shows which kinds of pass a change must make cheaper.
The timing wraps the simulator's own methods, which adds about a microsecond a pass.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from corral.core.snapshot import Decisions
from corral.sim.engine import END, Simulation
from corral.workload import read_workload
from simulate import TRACE, variant_config, write_trace


def kinds(sim: Simulation) -> dict[tuple[str, str, str], list[float]]:
    """Wraps `sim`'s arrivals, events and passes; returns the table they fill as it runs: per
    kind of pass, [passes, seconds]."""
    table: dict[tuple[str, str, str], list[float]] = defaultdict(lambda: [0, 0.0])
    seen = {"arrivals": 0, "ends": 0, "other": 0}
    arrive, handle, run_pass = sim._arrive, sim._handle, sim._pass

    def counted_arrive(spec: Any) -> None:
        seen["arrivals"] += 1
        arrive(spec)

    def counted_handle(kind: int, ref: object, now: float) -> None:
        seen["ends" if kind == END else "other"] += 1
        handle(kind, ref, now)

    def timed_pass(now: float) -> Decisions:
        queued = "jobs queued" if sim.queued else "none queued"
        started = time.perf_counter()
        decisions = run_pass(now)
        seconds = time.perf_counter() - started
        if seen["other"]:
            before = "other events"
        elif seen["arrivals"] and seen["ends"]:
            before = "arrivals and ends"
        elif seen["arrivals"]:
            before = "arrivals"
        elif seen["ends"]:
            before = "job ends"
        else:
            before = "no event"
        if decisions.placements:
            decided = "placed"
        elif decisions.empty():
            decided = "nothing"
        else:
            decided = "something else"
        row = table[(before, queued, decided)]
        row[0] += 1
        row[1] += seconds
        for key in seen:
            seen[key] = 0
        return decisions

    sim._arrive, sim._handle, sim._pass = counted_arrive, counted_handle, timed_pass  # type: ignore[method-assign]
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workload", nargs="?", type=Path, help="SWF or JSON Lines; default: the generated trace")
    parser.add_argument("--jobs", type=int, default=30_000, help="replay the first N jobs (default 30,000)")
    parser.add_argument("--mode", choices=["fixed", "elastic"], default="fixed")
    parser.add_argument("--fixed", metavar="TYPE:COUNT", help="the fixed fleet (default: bench/simulate.py's)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        workload = args.workload
        if workload is None:
            workload = Path(tmp) / "trace.swf"
            write_trace(workload, TRACE)
        jobs = read_workload(workload).jobs[: args.jobs]
    sim = Simulation(jobs, variant_config(args.mode, f"fixed:{args.fixed}" if args.fixed else ""))
    table = kinds(sim)
    started = time.perf_counter()
    sim.run()
    wall = time.perf_counter() - started
    passes = sum(int(count) for count, _ in table.values())
    pass_seconds = sum(seconds for _, seconds in table.values())

    print(f"{len(jobs):,} jobs, {args.mode}: {passes:,} passes, {pass_seconds:.1f} s of {wall:.1f} s in passes")
    header = f"{'since the last pass':<18} {'queue':<12} {'decided':<15}"
    print(f"{header} {'passes':>8} {'% passes':>9} {'% time':>7} {'µs':>6}")
    figures: dict[str, Any] = {"jobs": len(jobs), "mode": args.mode, "passes": passes, "wall_seconds": round(wall, 2)}
    rows: list[dict[str, Any]] = []
    for (before, queued, decided), (count, seconds) in sorted(table.items(), key=lambda item: -item[1][1]):
        share, time_share, us = count / passes * 100, seconds / pass_seconds * 100, seconds / count * 1e6
        print(f"{before:<18} {queued:<12} {decided:<15} {int(count):>8,} {share:>9.1f} {time_share:>7.1f} {us:>6.0f}")
        rows.append({"since": before, "queue": queued, "decided": decided, "passes": int(count), "us": round(us, 1)})
    figures["kinds"] = rows
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
