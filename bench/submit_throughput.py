"""Submission throughput and submit-to-running latency of a real `corral run` on SQLite.

Starts corral (server + control loop + loopback cloud) in a temporary data directory, then:
1. latency: with one idle node and an empty queue, submits a job and reads, from the job record,
   the time from submission to the agent's start report; repeated --latency-runs times;
2. bulk: submits --bulk-jobs jobs through the HTTP API in batches of --batch, and reports jobs/s.
Prints a table, then one JSON object of the figures as the last line.

    .venv/bin/python bench/submit_throughput.py [--bulk-jobs 20000] [--batch 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
from rich.console import Console
from rich.table import Table

CONFIG = """
[cloud]
ping_interval = "1s"
[[instance_types]]
name = "m5.large"
vcpus = 2
ram = "8GiB"
price_per_hour = 0.096
[policy.lifecycle]
idle_grace = "30m"
[policy.boot]
max_instances = 1
"""


T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(predicate: Callable[[], T | None], timeout: float, what: str) -> T:
    """The predicate's first truthy value; exit naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise SystemExit(f"timed out waiting for {what}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bulk-jobs", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--latency-runs", type=int, default=20)
    args = parser.parse_args()
    console = Console(stderr=True)

    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        config = Path(tmp) / "bench.toml"
        config.write_text(CONFIG)
        port = free_port()
        env = dict(os.environ, CORRAL_HOME=str(home))
        corral = str(Path(sys.executable).parent / "corral")
        server = subprocess.Popen(
            [corral, "run", "--config", str(config), "--port", str(port), "--log-level", "WARNING"],
            env=env,
            stdin=subprocess.DEVNULL,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            wait_for(lambda: (home / "token").exists() and _up(base), 30, "corral to start")
            token = (home / "token").read_text().strip()
            http = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=120)

            def submit(jobs: list[dict[str, object]]) -> list[int]:
                response = http.post("/api/jobs", json={"jobs": jobs})
                response.raise_for_status()
                return list(response.json()["ids"])

            def job(job_id: int) -> dict[str, Any]:
                return dict(http.get(f"/api/jobs/{job_id}").json())

            console.print("warming up: booting one loopback node")
            (warm,) = submit([{"command": ["true"]}])
            wait_for(lambda: job(warm)["state"] == "complete", 60, "the warm-up job")

            latencies = []
            for _ in range(args.latency_runs):
                (job_id,) = submit([{"command": ["true"]}])

                def started_record(job_id: int = job_id) -> dict[str, Any] | None:
                    record = job(job_id)
                    return record if record["started_at"] else None

                def complete(job_id: int = job_id) -> bool:
                    return job(job_id)["state"] == "complete"

                record = wait_for(started_record, 30, "the job to start")
                latencies.append(float(record["started_at"]) - float(record["submitted_at"]))
                wait_for(complete, 30, "the job to finish")

            console.print(f"bulk: {args.bulk_jobs} jobs in batches of {args.batch}")
            payload: list[dict[str, object]] = [
                {"command": ["true"], "name": f"bulk-{i}", "ram": "256MiB"} for i in range(args.batch)
            ]
            started = time.perf_counter()
            submitted = 0
            while submitted < args.bulk_jobs:
                submitted += len(submit(payload[: min(args.batch, args.bulk_jobs - submitted)]))
            bulk_seconds = time.perf_counter() - started
        finally:
            server.send_signal(signal.SIGINT)
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                server.kill()

    latencies.sort()
    figures = {
        "bulk_jobs": submitted,
        "bulk_batch": args.batch,
        "bulk_seconds": round(bulk_seconds, 3),
        "submissions_per_second": round(submitted / bulk_seconds, 1),
        "latency_runs": len(latencies),
        "submit_to_running_median_s": round(statistics.median(latencies), 4),
        "submit_to_running_p95_s": round(latencies[int(0.95 * (len(latencies) - 1))], 4),
        "submit_to_running_max_s": round(latencies[-1], 4),
    }
    table = Table(title="corral submission (SQLite, loopback cloud)")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_column("target", justify="right")
    table.add_row("bulk submissions/s", f"{figures['submissions_per_second']:,.0f}", ">= 1,000")
    table.add_row("submit -> running, median", f"{figures['submit_to_running_median_s'] * 1000:.0f} ms", "")
    table.add_row("submit -> running, p95", f"{figures['submit_to_running_p95_s'] * 1000:.0f} ms", "")
    table.add_row("submit -> running, max", f"{figures['submit_to_running_max_s'] * 1000:.0f} ms", "<= 1 s")
    Console().print(table)
    print(json.dumps(figures))


def _up(base: str) -> bool:
    try:
        return httpx.get(f"{base}/api/health", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


if __name__ == "__main__":
    main()
