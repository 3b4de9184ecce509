"""What policy.users.max_submitted_jobs costs a submission when its user has many open jobs: before
each submission the server counts the user's open jobs (Store.open_jobs_of), in the store, then
queues the job (Store.submit).

Builds a SQLite store (or --url) holding --open queued jobs of one user and --others of 20 other
users, then times --repeat times the count of that user's open jobs and the submission of one more
job of theirs, and prints the medians. Prints a table, then one JSON object of the figures as the
last line.

    .venv/bin/python bench/submit_limit.py [--open 100000] [--others 10000] [--url URL]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.progress import track
from rich.table import Table

from corral.jobspec import JobRequest
from corral.store import Store

NOW = 1_800_000_000.0
USER = "alice"
BATCH = 5000


def build(store: Store, open_jobs: int, others: int) -> None:
    for start in track(range(0, open_jobs, BATCH), description=f"{USER}'s jobs", console=Console(stderr=True)):
        count = min(BATCH, open_jobs - start)
        store.submit([JobRequest(command=["true"], user=USER) for _ in range(count)], NOW - 3600 + start)
    for start in range(0, others, BATCH):
        count = min(BATCH, others - start)
        store.submit([JobRequest(command=["true"], user=f"user{i % 20}") for i in range(count)], NOW - 3600)


def timed_ms(action: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--open", type=int, default=100_000, help=f"{USER}'s open (queued) jobs")
    parser.add_argument("--others", type=int, default=10_000, help="other users' open jobs")
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--url", help="a store URL (default: a new SQLite file)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(args.url or f"sqlite:///{Path(tmp) / 'corral.db'}")
        store.migrate()
        build(store, args.open, args.others)
        counted = store.open_jobs_of([USER])[USER]
        count_ms = timed_ms(lambda: store.open_jobs_of([USER]), args.repeat)
        one_job = [JobRequest(command=["true"], user=USER)]
        submit_ms = timed_ms(lambda: store.submit(one_job, NOW), args.repeat)
        store.engine.dispose()
    figures = {
        "open_jobs_of_user": args.open,
        "other_open_jobs": args.others,
        "counted": counted,
        "repeat": args.repeat,
        "count_median_ms": round(count_ms, 2),
        "submit_one_median_ms": round(submit_ms, 2),
        "submission_store_ms": round(count_ms + submit_ms, 2),
    }
    table = Table(title=f"One submission of a user with {args.open:,} open jobs ({args.others:,} of others)")
    table.add_column("step (median of each)")
    table.add_column("ms", justify="right")
    table.add_row("count the user's open jobs (Store.open_jobs_of)", f"{count_ms:,.2f}")
    table.add_row("queue one job (Store.submit)", f"{submit_ms:,.2f}")
    table.add_row("a submission's store work with the limit set", f"{count_ms + submit_ms:,.2f}")
    Console().print(table)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
