"""What the agent pays to start an attempt, and what a running attempt holds, since each command
runs under its keeper (corral.agent.keeper), which lets a restarted agent re-adopt the run.

Starts --count attempts of `sleep 30` through the agent's Runner (the real code path: the keeper
is started and says whether the command started), times each start, then measures the keeper's
own RSS and the RSS the node reports for the running attempts (what a ping's `used.ram_mib`
carries). Prints a table, then one JSON object of the figures as the last line.

    .venv/bin/python bench/attempt_start.py [--count 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from corral.agent import sysinfo
from corral.agent.runner import AttemptSpec, Runner


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        runner = Runner(Path(work), kill_grace=0.1)
        starts = []
        keepers = []
        try:
            for attempt_id in range(1, args.count + 1):
                began = time.perf_counter()
                attempt = runner.start(AttemptSpec(attempt_id, 1, ["sleep", "30"], {}, ["n1"], {}))
                starts.append(time.perf_counter() - began)
                assert attempt is not None and not attempt.exited
                keepers.append(attempt.pid)
            time.sleep(0.5)
            keeper_rss = [stat.rss_bytes for pid in keepers if (stat := sysinfo.read_stat(pid)) is not None]
            _, node_ram_mib = runner.usage()
        finally:
            runner.terminate_all(grace=0.1)
    table = Table(title=f"starting {args.count} attempts of `sleep 30`")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_row("start, median", f"{statistics.median(starts) * 1000:.1f} ms")
    table.add_row("start, slowest", f"{max(starts) * 1000:.1f} ms")
    table.add_row("keeper RSS, median", f"{statistics.median(keeper_rss) / 2**20:.1f} MiB")
    table.add_row("ram_mib the node reports for them all", f"{node_ram_mib} MiB")
    Console().print(table)
    figures = {
        "count": args.count,
        "start_median_s": round(statistics.median(starts), 4),
        "start_max_s": round(max(starts), 4),
        "keeper_rss_median_mib": round(statistics.median(keeper_rss) / 2**20, 1),
        "node_ram_mib": node_ram_mib,
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
