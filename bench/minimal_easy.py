"""A yardstick for the simulator's fixed-fleet target: what the interpreter alone costs.

    .venv/bin/python bench/minimal_easy.py [WORKLOAD] [--jobs N ...]

Replays the same jobs as `bench/simulate.py --modes fixed` (its generated 100,000-job trace by
default, gangs shaped by corral's workload mapping, the same 500 m5.12xlarge-sized nodes) through a
deliberately minimal EASY backfill written for this comparison, and through corral's simulator,
and prints both rates. The minimal replay has none of corral's policy: no filters, scorers,
explanations, lifecycle, retries, events or records beyond the wait; first fit over vcpus and RAM
with NumPy; a pass at each second in which jobs arrive or end, as corral's; the blocked head job's
reservation kept until work ends or the head changes, and only new jobs tried while it stands.
It is not corral's EASY and is used by nothing in corral: its waits differ (another node choice),
and it exists to show how fast plain Python goes on this trace, so that the target's distance is
read against the language as well as against corral. `--jobs` takes several counts: the first N
jobs of each.

Prints a table, then, as the last line, one JSON object of the figures.
"""

from __future__ import annotations

import argparse
import heapq
import json
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from corral.sim.engine import Simulation
from corral.workload import read_workload
from corral.workload.model import SimJob
from simulate import TRACE, TYPES, variant_config, write_trace

NO_LIMIT = 86_400.0  # a job without a time limit is taken to hold its nodes for a day


@dataclass(slots=True)
class Running:
    job_id: int
    vcpus: float
    ram_mib: float
    expected_end: float  # start + time limit: what a reservation counts on


@dataclass
class Fleet:
    free_vcpus: np.ndarray
    free_ram: np.ndarray
    on_node: list[list[Running]] = field(default_factory=list)

    def first_fit(self, vcpus: float, ram_mib: float, nodes: int) -> list[int] | None:
        room = ((self.free_vcpus >= vcpus) & (self.free_ram >= ram_mib)).nonzero()[0]
        return room[:nodes].tolist() if len(room) >= nodes else None

    def reservation(self, job: SimJob, now: float) -> tuple[float, set[int]] | None:
        """When `job.nodes` nodes will have room for the job as the running work's limits free
        it, and which nodes: None if they never will."""
        ready: list[tuple[float, int]] = []
        for node, running in enumerate(self.on_node):
            vcpus, ram = float(self.free_vcpus[node]), float(self.free_ram[node])
            if vcpus >= job.vcpus and ram >= job.ram_mib:
                ready.append((now, node))
                continue
            for work in sorted(running, key=lambda w: w.expected_end):
                vcpus += work.vcpus
                ram += work.ram_mib
                if vcpus >= job.vcpus and ram >= job.ram_mib:
                    ready.append((work.expected_end, node))
                    break
        if len(ready) < job.nodes:
            return None
        ready.sort()
        chosen = ready[: job.nodes]
        return chosen[-1][0], {node for _, node in chosen}


def minimal_easy(specs: list[SimJob], nodes: int, vcpus: float, ram_mib: float) -> dict[str, Any]:
    fleet = Fleet(np.full(nodes, vcpus), np.full(nodes, ram_mib), [[] for _ in range(nodes)])
    ends: list[tuple[float, int, SimJob, list[int]]] = []
    queue: deque[SimJob] = deque()
    waits: list[float] = []
    kept: tuple[SimJob, tuple[float, set[int]] | None] | None = None
    passes = arrived = 0
    started = time.perf_counter()

    def start(job: SimJob, on: list[int], now: float) -> None:
        limit = job.time_limit or NO_LIMIT
        for node in on:
            fleet.free_vcpus[node] -= job.vcpus
            fleet.free_ram[node] -= job.ram_mib
            fleet.on_node[node].append(Running(job.id, job.vcpus, job.ram_mib, now + limit))
        heapq.heappush(ends, (now + max(job.run, 0.0), job.id, job, on))
        waits.append(now - job.submit)

    while arrived < len(specs) or ends:
        now = min(specs[arrived].submit if arrived < len(specs) else np.inf, ends[0][0] if ends else np.inf)
        freed = False
        while ends and ends[0][0] <= now:
            _, job_id, job, ran_on = heapq.heappop(ends)
            for node in ran_on:
                fleet.free_vcpus[node] += job.vcpus
                fleet.free_ram[node] += job.ram_mib
                fleet.on_node[node] = [w for w in fleet.on_node[node] if w.job_id != job_id]
            freed = True
        new: list[SimJob] = []
        while arrived < len(specs) and specs[arrived].submit <= now:
            new.append(specs[arrived])
            arrived += 1
        queue.extend(new)
        passes += 1
        while queue:
            on = fleet.first_fit(queue[0].vcpus, queue[0].ram_mib, queue[0].nodes)
            if on is None:
                break
            start(queue.popleft(), on, now)
        if not queue:
            continue
        head = queue[0]
        if freed or kept is None or kept[0] is not head or (kept[1] is not None and kept[1][0] <= now):
            kept = (head, fleet.reservation(head, now))
            candidates = list(queue)[1:]
        else:
            candidates = new
        if kept[1] is None:
            continue
        shadow, reserved = kept[1]
        for job in candidates:
            on = fleet.first_fit(job.vcpus, job.ram_mib, job.nodes)
            if on is not None and (now + (job.time_limit or NO_LIMIT) <= shadow or not reserved.intersection(on)):
                queue.remove(job)
                start(job, on, now)
    wall = time.perf_counter() - started
    return {
        "jobs": len(specs),
        "passes": passes,
        "wall_seconds": round(wall, 2),
        "jobs_per_second": round(len(specs) / wall),
        "wait_mean_s": round(sum(waits) / max(1, len(waits)), 1),
    }


def corral_fixed(specs: list[SimJob]) -> dict[str, Any]:
    started = time.perf_counter()
    sim = Simulation(specs, variant_config("fixed")).run()
    wall = time.perf_counter() - started
    waits = [r.wait for r in sim.records.values() if r.wait is not None]
    return {
        "jobs": len(specs),
        "passes": sim.counters.passes,
        "wall_seconds": round(wall, 2),
        "jobs_per_second": round(len(specs) / wall),
        "wait_mean_s": round(sum(waits) / max(1, len(waits)), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workload", nargs="?", type=Path, help="SWF or JSON Lines; default: bench/simulate.py's trace")
    parser.add_argument("--jobs", type=int, nargs="+", default=[10_000, 30_000, 100_000])
    args = parser.parse_args()
    config = variant_config("fixed")
    fixed = config.sim.fleet.nodes[0]
    vcpus, ram_gib = next((v, m) for name, v, m, _ in TYPES if name == fixed.instance_type)
    with tempfile.TemporaryDirectory() as tmp:
        workload = args.workload
        if workload is None:
            workload = Path(tmp) / "trace.swf"
            write_trace(workload, TRACE)
        jobs = read_workload(workload).jobs
    print(f"{fixed.count} x {fixed.instance_type} ({vcpus} vcpus, {ram_gib} GiB); one core")
    print(f"{'replay':<14} {'jobs':>8} {'passes':>9} {'wall s':>8} {'jobs/s':>8} {'mean wait s':>12}")
    figures: dict[str, Any] = {"minimal_easy": [], "corral": []}
    for count in args.jobs:
        # Corral's simulator shapes gangs to the fleet's type; both replays take those jobs.
        specs = Simulation(jobs[:count], config).specs
        results = {
            "minimal_easy": minimal_easy(specs, fixed.count, float(vcpus), ram_gib * 1024.0),
            "corral": corral_fixed(specs),
        }
        for name, result in results.items():
            figures[name].append(result)
            print(
                f"{name:<14} {result['jobs']:>8,} {result['passes']:>9,} {result['wall_seconds']:>8.1f}"
                f" {result['jobs_per_second']:>8,} {result['wait_mean_s']:>12,.1f}",
                flush=True,
            )
    print(json.dumps(figures), file=sys.stdout)


if __name__ == "__main__":
    main()
