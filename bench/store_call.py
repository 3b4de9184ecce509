"""What one small store call costs a corral process in CPU: every API request, agent ping and pass
makes several, so on a busy or small host this is what a corral between passes spends its CPU on.

Builds a SQLite store (or --url: it migrates the schema the URL reaches, so give a PostgreSQL URL
a schema of its own, `options=-csearch_path=NAME`, never a database's `public`) and times
--repeat times a small read (the held jobs' count) and a small write (an event), in CPU and wall
time, and prints the medians. Prints a table, then one JSON object of the figures as the last line.

    .venv/bin/python bench/store_call.py [--repeat 500] [--url URL]
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
from rich.table import Table

from corral.store import Store

NOW = 1_800_000_000.0


def medians_ms(action: Callable[[], object], repeat: int) -> tuple[float, float]:
    """(CPU, wall) of one call, each a median over `repeat` calls, in ms."""
    cpu, wall = [], []
    for _ in range(repeat):
        cpu_start, wall_start = time.process_time(), time.perf_counter()
        action()
        cpu.append((time.process_time() - cpu_start) * 1000)
        wall.append((time.perf_counter() - wall_start) * 1000)
    return statistics.median(cpu), statistics.median(wall)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=500)
    parser.add_argument("--url", help="a store URL (default: a new SQLite file)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(args.url or f"sqlite:///{Path(tmp) / 'corral.db'}")
        store.migrate()
        try:
            read = medians_ms(store.held_count, args.repeat)
            write = medians_ms(lambda: store.add_event(NOW, "bench.call", "a small write"), args.repeat)
        finally:
            store.close()
    table = Table(title=f"one store call, median of {args.repeat}")
    for column in ("call", "CPU ms", "wall ms"):
        table.add_column(column, justify="left" if column == "call" else "right")
    table.add_row("read (held jobs' count)", f"{read[0]:.2f}", f"{read[1]:.2f}")
    table.add_row("write (an event)", f"{write[0]:.2f}", f"{write[1]:.2f}")
    Console().print(table)
    figures = {
        "store": "postgresql" if args.url and not args.url.startswith("sqlite") else "sqlite",
        "repeat": args.repeat,
        "read_cpu_ms": round(read[0], 3),
        "read_wall_ms": round(read[1], 3),
        "write_cpu_ms": round(write[0], 3),
        "write_wall_ms": round(write[1], 3),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
