"""What stopping a loopback fleet costs (a clean stop of `corral run`, `make run`'s Ctrl-C): each
instance's init SIGTERMed and waited for in turn (one `destroy_grace` per instance at worst, as
before) against all of them SIGTERMed at once and waited for together (now).

Boots --instances loopback instances (real agent processes under their inits, pointed at an
address nothing listens on, so they keep retrying to pair, as agents whose server went away do),
stops them one at a time, boots as many again and stops them in one `destroy_many`. With
--hung N, the agents of N instances of each fleet are SIGSTOPped first: they cannot act on the
SIGTERM, so each costs the whole grace (5 s) before its SIGKILL. Prints a table, then one JSON
object of the figures as the last line.

    .venv/bin/python bench/loopback_stop.py [--instances 20] [--hung 2]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from corral.cloud.loopback import LoopbackCloud
from corral.core.model import InstanceType

SMALL = InstanceType(name="t.small", vcpus=2, ram_mib=2048, price_per_hour=0.01, scratch_mib=4096)


def unused_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def boot(cloud: LoopbackCloud, count: int, hung: int, prefix: str) -> list[str]:
    ids = [cloud.create(SMALL, f"{prefix}{n}", "unused-token", {}).id for n in range(count)]
    for instance_id in ids[:hung]:
        record = json.loads((cloud.root / instance_id / "instance.json").read_text())
        init = int(record["pid"])
        deadline = time.monotonic() + 30
        while not (agents := Path(f"/proc/{init}/task/{init}/children").read_text().split()):
            if time.monotonic() > deadline:
                raise SystemExit(f"the agent of {instance_id} did not start")
            time.sleep(0.05)
        os.kill(int(agents[0]), signal.SIGSTOP)
    return ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=int, default=20)
    parser.add_argument("--hung", type=int, default=2, help="instances of each fleet whose agent is SIGSTOPped")
    args = parser.parse_args()
    console = Console(stderr=True)
    with tempfile.TemporaryDirectory() as home:
        cloud = LoopbackCloud(Path(home), unused_url(), "bench")
        with console.status(f"booting {args.instances} instances"):
            ids = boot(cloud, args.instances, args.hung, "one-")
        with console.status("stopping them one at a time"):
            started = time.perf_counter()
            for instance_id in ids:
                cloud.destroy_many([instance_id])
            one_at_a_time = time.perf_counter() - started
        with console.status(f"booting {args.instances} instances"):
            ids = boot(cloud, args.instances, args.hung, "all-")
        with console.status("stopping them together"):
            started = time.perf_counter()
            cloud.destroy_many(ids)
            together = time.perf_counter() - started
        left = len(cloud.list())
    table = Table(title=f"Stopping {args.instances} loopback instances, {args.hung} hung")
    table.add_column("how")
    table.add_column("seconds", justify="right")
    table.add_row("one at a time (before)", f"{one_at_a_time:.2f}")
    table.add_row("all at once (destroy_many)", f"{together:.2f}")
    Console().print(table)
    figures = {
        "instances": args.instances,
        "hung": args.hung,
        "one_at_a_time_s": round(one_at_a_time, 3),
        "together_s": round(together, 3),
        "left_running": left,
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
