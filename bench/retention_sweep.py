"""What a retention sweep (`[retention] jobs_after`) costs the live loop on a large store: each
batch of ended jobs deleted is one transaction run after a pass, so its time is added to that
pass's.

Builds a SQLite store (or --url) as bench/status_queries.py does (--queued queued jobs and
--finished jobs that ran, one attempt each), counts what a sweep would delete as `corral retention`
does (Store.purgeable, timed), then sweeps every finished job out in batches of
corral.retention.JOB_BATCH, timing each. Prints a table, then one JSON object of the figures as
the last line.

    .venv/bin/python bench/retention_sweep.py [--queued 10000] [--finished 200000] [--url URL]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from corral.retention import JOB_BATCH
from corral.store import Store
from status_queries import NOW, build


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queued", type=int, default=10_000)
    parser.add_argument("--finished", type=int, default=200_000)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--url", help="a store URL (default: a new SQLite file)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        database = Path(tmp) / "corral.db"
        store = Store(args.url or f"sqlite:///{database}")
        store.migrate()
        build(store, args.queued, args.finished, args.nodes)
        size_before = database.stat().st_size if database.exists() else 0
        started = time.perf_counter()
        counted = store.purgeable(NOW, NOW)
        preview_ms = (time.perf_counter() - started) * 1000
        batches: list[float] = []
        deleted = 0
        after_id = 0
        with Progress(console=Console(stderr=True)) as progress:
            task = progress.add_task("sweeping", total=args.finished)
            while True:
                started = time.perf_counter()
                ids, after_id = store.purge_jobs(NOW, JOB_BATCH, NOW, after_id)
                batches.append((time.perf_counter() - started) * 1000)
                deleted += len(ids)
                progress.update(task, completed=deleted)
                if after_id == 0:
                    break
        store.engine.dispose()
    figures = {
        "finished_jobs": args.finished,
        "queued_jobs": args.queued,
        "deleted": deleted,
        "preview_counted": counted.jobs,
        "preview_ms": round(preview_ms, 1),
        "batch_size": JOB_BATCH,
        "batches": len(batches),
        "batch_median_ms": round(statistics.median(batches), 1),
        "batch_max_ms": round(max(batches), 1),
        "sweep_total_s": round(sum(batches) / 1000, 2),
        "store_mib_before": round(size_before / 2**20, 1),
    }
    table = Table(title=f"Sweeping {args.finished:,} ended jobs ({args.queued:,} queued)")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_row("jobs deleted", f"{deleted:,}")
    table.add_row("counted before by corral retention", f"{counted.jobs:,}")
    table.add_row("that count (Store.purgeable), ms", f"{figures['preview_ms']:,}")
    table.add_row(f"batches of {JOB_BATCH:,}", f"{len(batches):,}")
    table.add_row("one batch (median), ms", f"{figures['batch_median_ms']:,}")
    table.add_row("one batch (slowest), ms", f"{figures['batch_max_ms']:,}")
    table.add_row("whole sweep, s", f"{figures['sweep_total_s']:,}")
    table.add_row("store before, MiB", f"{figures['store_mib_before']:,}")
    Console().print(table)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
