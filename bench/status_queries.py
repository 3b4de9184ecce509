"""What an operator's read queries cost on a large store: `corral status` and /metrics (job counts,
the oldest wait, the fleet), `corral usage` (a week's node and attempt spans, and the report) and
`corral jobs -t queued` (the newest 1,000 waiting jobs).

Builds a SQLite store (or --url) with --queued queued jobs, each with the explanation a pass leaves
on a job that waits, and --finished jobs that ran (one attempt each, on --nodes nodes over a
week), then times each read --repeat times and prints the median. Prints a table, then one JSON
object of the figures as the last line.

    .venv/bin/python bench/status_queries.py [--queued 100000] [--finished 100000] [--nodes 500]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.progress import track
from rich.table import Table
from sqlalchemy import insert, update

from corral.core import accounting
from corral.core.model import GiB, InstanceType, JobState
from corral.jobspec import JobRequest
from corral.store import Store, schema

WEEK = 7 * 86400.0
NOW = 1_800_000_000.0
TYPE = InstanceType("m5.2xlarge", vcpus=8.0, ram_mib=32 * GiB, price_per_hour=0.384)


def waiting_explanation(nodes: int) -> dict[str, Any]:
    """The shape of what a pass stores on a job that cannot be placed (corral.placement.explain):
    each filter with what it removed, the one that kept it waiting with a sample of its nodes."""
    sample = [f"n{n}" for n in range(min(nodes, 3))]
    filters: list[dict[str, Any]] = [
        {"filter": name, "code": code, "removed": 0, "failed": 0, "seed": f"hard-filter-{name}"}
        for name, code in (
            ("state", "NODE_NOT_SCHEDULABLE"), ("reserved", "NODE_RESERVED"), ("reservation", "ADMIN_RESERVATION"),
            ("category", "NODE_CATEGORY"), ("max-jobs", "MAX_JOBS_REACHED"), ("capness", "CAPNESS_MISMATCH"),
            ("platform", "PLATFORM_TOO_OLD"), ("traits", "TRAITS_MISMATCH"), ("overprovision", "OVERPROVISION_LIMIT"),
            ("min-ram", "INSUFFICIENT_RAM"), ("min-disk", "INSUFFICIENT_DISK"), ("gpus", "INSUFFICIENT_GPU"),
        )
    ]  # fmt: skip
    detail = f"needs 4 vcpu, the largest free is 2 vcpu on {sample[0] if sample else '-'}"
    filters.append(
        {"filter": "min-cpu", "code": "INSUFFICIENT_CPU", "removed": nodes, "failed": nodes,
         "seed": "hard-filter-min-cpu", "sample": sample, "detail": detail}
    )  # fmt: skip
    return {
        "request": "4 vcpu, 8 GiB RAM", "availability": "COMBINED", "nodes": nodes, "survivors": 0,
        "filters": filters, "reason": f"INSUFFICIENT_CPU: {detail}",
        "nearest": {"node": sample[0] if sample else None, "fails": ["INSUFFICIENT_CPU"]}, "at": NOW,
    }  # fmt: skip


def build(store: Store, queued: int, finished: int, nodes: int) -> None:
    for start in track(range(0, queued, 5000), description="queued jobs"):
        count = min(5000, queued - start)
        store.submit([JobRequest(command=["true"], user=f"user{i % 20}") for i in range(count)], NOW - 3600 + start)
    with store.write() as conn:
        explained = update(schema.jobs).where(schema.jobs.c.state == JobState.QUEUED.value)
        conn.execute(explained.values(explanation=waiting_explanation(nodes)))
    for n in range(nodes):
        store.create_node(f"n{n}", TYPE, f"boot-{n}", NOW - WEEK + n * 60, "bench")
    spec = JobRequest(command=["true"], user="done").model_dump(mode="json")
    run = WEEK / max(1, finished) * nodes  # each node runs one job after another through the week
    with store.write() as conn:
        for start in track(range(0, finished, 5000), description="finished jobs"):
            ids = range(start, min(finished, start + 5000))
            rows = [_finished_job(spec, i, NOW - WEEK + (i // nodes) * run) for i in ids]
            job_ids = [r[0] for r in conn.execute(insert(schema.jobs).returning(schema.jobs.c.id), rows)]
            attempts = [
                _attempt(job_id, f"n{i % nodes}", NOW - WEEK + (i // nodes) * run, run)
                for job_id, i in zip(job_ids, ids, strict=True)
            ]
            conn.execute(insert(schema.attempts), attempts)


def _finished_job(spec: dict[str, Any], i: int, at: float) -> dict[str, Any]:
    return {
        "name": f"done-{i}", "state": JobState.COMPLETE.value, "priority": 1, "spec": spec,
        "user_name": spec["user"], "submitted_at": at,
        "temp_failures": 0, "perm_failures": 0, "attempt_count": 1, "wait_reason": "", "unplaceable": False,
        "cancel_requested": False, "held": False, "updated_at": at,
    }  # fmt: skip


def _attempt(job_id: int, node_id: str, at: float, run: float) -> dict[str, Any]:
    return {
        "job_id": job_id, "node_id": node_id, "node_ids": [node_id], "vcpus": 1.0, "ram_mib": 1024,
        "scratch_mib": 0, "gpus": 0, "state": "exited", "assigned_at": at, "started_at": at,
        "finished_at": at + run, "exit_code": 0, "reason": "",
        # Measured, as agents report runs since store revision 0022: corral usage sums their efficiency too.
        "cpu_seconds": run * 0.4, "max_rss_mib": 300,
    }  # fmt: skip


def median_ms(call: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queued", type=int, default=100_000)
    parser.add_argument("--finished", type=int, default=100_000)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--url", help="a store URL (default: a new SQLite file)")
    args = parser.parse_args()
    url = args.url or f"sqlite:///{tempfile.mkdtemp(prefix='corral-bench-')}/corral.db"
    store = Store(url)
    store.migrate()
    build(store, args.queued, args.finished, args.nodes)

    def usage() -> accounting.Usage:
        nodes, attempts = store.usage_spans(NOW - WEEK, NOW)
        return accounting.usage(nodes, attempts, NOW - WEEK, NOW, NOW)

    figures = {
        "counts_ms": median_ms(store.counts, args.repeat),
        "oldest_wait_ms": median_ms(lambda: store.oldest_wait(NOW), args.repeat),
        "fleet_counts_ms": median_ms(store.fleet_counts, args.repeat),
        "usage_week_ms": median_ms(usage, args.repeat),
        "queued_listing_ms": median_ms(lambda: store.list_job_rows([JobState.QUEUED.value], 1000), args.repeat),
    }
    report = usage()
    backend = url.split(":")[0]
    console = Console()
    console.print(f"{args.queued:,} queued, {args.finished:,} finished jobs, {args.nodes} nodes ({backend})")
    table = Table()
    table.add_column("read")
    table.add_column("median ms", justify="right")
    for name, value in figures.items():
        table.add_row(name.removesuffix("_ms"), f"{value:,.1f}")
    console.print(table)
    console.print(f"usage of the week: {report.jobs:,} jobs, ${report.billed:,.2f} billed, ${report.used:,.2f} used")
    print(json.dumps({"queued": args.queued, "finished": args.finished, "nodes": args.nodes, **figures}))


if __name__ == "__main__":
    main()
