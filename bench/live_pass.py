"""How long the live control loop's pass (corral.loop.ControlLoop.run_pass) takes on a big
installation: --nodes live paired nodes, --queued queued jobs of mixed sizes, --running running
attempts, and a history of --ended ended jobs (one attempt and three events each).

Fills a store (SQLite in a temp dir, or PostgreSQL in a schema of its own at --pg-url, dropped
after), then times --passes passes: the first (every job built from its spec, every wait reason
written) and the steady ones after it. Between two passes, outside the timings, the bench plays
the agents: every node pings, the attempts placed last pass start, and --churn running attempts
exit, so that each steady pass places about --churn jobs, as an installation whose jobs end all
the time does. The cloud lists one instance per node (a cloud that boots nothing: the fleet is at
policy.boot.max_instances). Each pass is split into its steps: cloud sync (heartbeat and the
cloud's listing against the nodes), read (Store.load_snapshot), usage (fair share), decide (the
pure core), write (carrying the decisions out). Prints a table, then one JSON object of the
figures as the last line.

    .venv/bin/python bench/live_pass.py [--store sqlite|postgresql] [--nodes 1000] [--queued 100000]
        [--running 5000] [--ended 1000000] [--passes 10] [--churn 50] [--profile FILE]
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import gc
import json
import math
import random
import shutil
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import psycopg
from rich.console import Console
from rich.progress import track
from rich.table import Table
from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.engine import make_url

import corral.loop
from corral.cloud.base import TAG_NODE_ID, TAG_STORE, CloudError, CloudInstance, Ended
from corral.config import Config
from corral.core import retry
from corral.core.model import AttemptState, GiB, InstanceType, Job, JobState, NodeState
from corral.core.snapshot import JobOutcome
from corral.jobspec import JobRequest
from corral.loop import ControlLoop
from corral.store import Store, schema
from corral.store.store import token_hash

DAY = 86400.0
DISPATCHER = "d-bench"
NODE_VCPUS = 16
NODE_RAM = 64 * GiB
SIZES = (1, 2, 4, 8)  # the queued jobs' vcpus, in turn (4 GiB each)
PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
STEPS = ("sync", "read", "usage", "decide", "write")

P = ParamSpec("P")
R = TypeVar("R")


class ListedCloud:
    """A cloud whose listing is the fleet the bench paired: an instance per node. It boots nothing
    (the config's max_instances is the fleet) and terminates what it is asked to."""

    listing_lag = 0.0

    def __init__(self, store_id: str) -> None:
        self.store_id = store_id
        self.instances: dict[str, CloudInstance] = {}

    def add(self, node: dict[str, Any]) -> None:
        tags = {TAG_NODE_ID: node["id"], TAG_STORE: self.store_id}
        self.instances[node["instance_id"]] = CloudInstance(
            node["instance_id"], node["instance_type"], tags, node["created_at"]
        )

    def create(self, instance_type: InstanceType, node_id: str, boot_token: str, tags: dict[str, str]) -> CloudInstance:
        raise CloudError("the bench's cloud boots nothing")

    def list(self) -> list[CloudInstance]:
        return list(self.instances.values())

    def destroy(self, instance_id: str) -> None:
        self.instances.pop(instance_id, None)

    def destroy_many(self, instance_ids: Sequence[str]) -> dict[str, CloudError]:
        for instance_id in instance_ids:
            self.destroy(instance_id)
        return {}

    def check(self) -> str | None:
        return None

    def why_gone(self, instance_ids: Sequence[str]) -> dict[str, Ended]:
        return {}


def config_for(nodes: int) -> Config:
    return Config.model_validate(
        {
            "instance_types": [
                {"name": "m5.4xlarge", "vcpus": NODE_VCPUS, "ram": f"{NODE_RAM}MiB", "price_per_hour": 0.768}
            ],
            "policy": {"boot": {"max_instances": nodes}},
        }
    )


@contextmanager
def store_url(kind: str, pg_url: str) -> Iterator[str]:
    """A URL of an empty database: a SQLite file in a temp dir, or a PostgreSQL schema of the
    bench's own (never `public`), dropped afterwards."""
    if kind == "sqlite":
        with tempfile.TemporaryDirectory(prefix="livescale-", dir=_temp_root()) as tmp:
            yield f"sqlite:///{Path(tmp) / 'corral.db'}"
        return
    name = f"livescale_{uuid.uuid4().hex[:12]}"
    conninfo = make_url(pg_url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(conninfo, autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA "{name}"')
    try:
        yield (
            make_url(pg_url)
            .update_query_dict({"options": f"-csearch_path={name}"})
            .render_as_string(hide_password=False)
        )
    finally:
        with psycopg.connect(conninfo, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def _temp_root() -> str | None:
    root = Path("/tmp/livescale")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return str(root)


def fill(store: Store, args: argparse.Namespace, now: float) -> dict[str, float]:
    """The installation, as the API would have made it; the seconds each part took."""
    took: dict[str, float] = {}
    itype = config_for(args.nodes).core_instance_types()[0]

    # The nodes and the running attempts are written straight into the tables, with the columns
    # pairing (Store.create_node, set_instance_id, pair_node) and starting (claim, attempt_started)
    # set: one transaction each, they took minutes to fill on SQLite.
    started = time.perf_counter()
    with store.write() as conn:
        conn.execute(insert(schema.nodes), [_paired_node(n, itype, now) for n in range(args.nodes)])
    took["nodes_s"] = time.perf_counter() - started

    # Running attempts spread over the nodes, each node left with a vCPU or so free (the first pass
    # places the smallest queued jobs there).
    started = time.perf_counter()
    per_node = max(1, math.ceil(args.running / max(1, args.nodes)))
    vcpus = max(1, (NODE_VCPUS - 1) // per_node)
    running = [
        JobRequest(command=["sleep", "1d"], user=f"user{i % 20}", vcpus=vcpus, ram=vcpus * 4 * GiB)
        for i in range(args.running)
    ]
    ids: list[int] = []
    for start in range(0, len(running), 5000):
        ids += store.submit(running[start : start + 5000], now - 7200)
    with store.write() as conn:
        for start in range(0, len(ids), 5000):
            chunk = list(enumerate(ids))[start : start + 5000]
            conn.execute(
                update(schema.jobs)
                .where(schema.jobs.c.id == bindparam("job_id"))
                .values(
                    state=JobState.RUNNING.value,
                    claimed_by=DISPATCHER,
                    attempt_count=1,
                    node_id=bindparam("node"),
                    started_at=now - 3590,
                    updated_at=now - 3590,
                ),  # fmt: skip
                [{"job_id": job_id, "node": f"n-{i % args.nodes:05d}"} for i, job_id in chunk],
            )
            attempt = {"vcpus": float(vcpus), "ram_mib": vcpus * 4 * GiB, "scratch_mib": 0, "gpus": 0, "reason": ""}
            conn.execute(
                insert(schema.attempts),
                [
                    {
                        **attempt,
                        "job_id": job_id,
                        "node_id": f"n-{i % args.nodes:05d}",
                        "node_ids": [f"n-{i % args.nodes:05d}"],
                        "state": AttemptState.RUNNING.value,
                        "dispatcher_id": DISPATCHER,
                        "assigned_at": now - 3600,
                        "started_at": now - 3590,
                        "pid": i,
                    }  # fmt: skip
                    for i, job_id in chunk
                ],
            )
    took["running_s"] = time.perf_counter() - started

    started = time.perf_counter()
    for start in track(range(0, args.queued, 5000), description="queued jobs"):
        batch = [
            JobRequest(command=["true"], user=f"user{i % 20}", vcpus=SIZES[i % 4], ram=SIZES[i % 4] * 4 * GiB)
            for i in range(start, min(args.queued, start + 5000))
        ]
        store.submit(batch, now - 3600 + start / max(1, args.queued) * 3000)
    took["queued_s"] = time.perf_counter() - started

    started = time.perf_counter()
    fill_history(store, args.ended, args.nodes, now)
    took["ended_s"] = time.perf_counter() - started
    return took


def _paired_node(n: int, itype: InstanceType, now: float) -> dict[str, Any]:
    return {
        "id": f"n-{n:05d}", "instance_id": f"i-{n:08x}", "instance_type": itype.name, "state": NodeState.IDLE.value,
        "vcpus": itype.vcpus, "ram_mib": itype.ram_mib, "scratch_mib": itype.scratch_mib, "gpus": itype.gpus,
        "price_per_hour": itype.price_per_hour, "billing_granularity": itype.billing_granularity,
        "billing_minimum": itype.billing_minimum, "created_at": now - DAY, "paired_at": now - DAY + 120,
        "last_ping_at": now, "state_changed_at": now - DAY + 120, "attributes": dict(itype.attributes),
        "rack": "", "reason": "", "secret_hash": token_hash(f"secret-{n}"), "hostname": f"host-{n}",
        "dispatcher_id": DISPATCHER, "agent_version": "bench",
    }  # fmt: skip


def fill_history(store: Store, ended: int, nodes: int, now: float) -> None:
    """`ended` jobs that ran over the last 30 days, one attempt and three events each, written
    straight into the tables (the API would take hours)."""
    spec = JobRequest(command=["true"], user="done").model_dump(mode="json")
    span = 30 * DAY
    with store.write() as conn:
        for start in track(range(0, ended, 5000), description="ended jobs"):
            numbers = range(start, min(ended, start + 5000))
            at = [now - span + i / max(1, ended) * (span - 2 * DAY) for i in numbers]
            jobs = [_ended_job(spec, i, t) for i, t in zip(numbers, at, strict=True)]
            job_ids = [r[0] for r in conn.execute(insert(schema.jobs).returning(schema.jobs.c.id), jobs)]
            conn.execute(
                insert(schema.attempts),
                [_attempt(job_id, f"n-{i % nodes:05d}", t) for job_id, i, t in zip(job_ids, numbers, at, strict=True)],
            )
            events = []
            for job_id, i, t in zip(job_ids, numbers, at, strict=True):
                node_id = f"n-{i % nodes:05d}"
                events += [
                    {"at": t, "kind": "job.submitted", "job_id": job_id, "node_id": None, "message": "true"},
                    {"at": t + 1, "kind": "job.claimed", "job_id": job_id, "node_id": node_id, "message": "attempt"},
                    {"at": t + 600, "kind": "job.complete", "job_id": job_id, "node_id": node_id, "message": "exit 0"},
                ]
            conn.execute(insert(schema.events), events)


def _ended_job(spec: dict[str, Any], i: int, at: float) -> dict[str, Any]:
    return {
        "name": f"done-{i}", "state": JobState.COMPLETE.value, "priority": 1, "spec": spec, "submitted_at": at,
        "temp_failures": 0, "perm_failures": 0, "attempt_count": 1, "wait_reason": "", "unplaceable": False,
        "cancel_requested": False, "held": False, "started_at": at + 1, "finished_at": at + 600,
        "updated_at": at + 600, "exit_code": 0,
    }  # fmt: skip


def _attempt(job_id: int, node_id: str, at: float) -> dict[str, Any]:
    return {
        "job_id": job_id, "node_id": node_id, "node_ids": [node_id], "vcpus": 1.0, "ram_mib": 1024,
        "scratch_mib": 0, "gpus": 0, "state": AttemptState.EXITED.value, "dispatcher_id": DISPATCHER,
        "assigned_at": at + 1, "started_at": at + 1, "finished_at": at + 600, "exit_code": 0, "reason": "",
    }  # fmt: skip


def play_agents(store: Store, churn: int, rng: random.Random) -> None:
    """What the agents do between two passes: every node pings, the attempts placed start, and
    `churn` running attempts exit 0 (their jobs complete)."""
    now = time.time()
    attempts = schema.attempts
    with store.write() as conn:
        conn.execute(update(schema.nodes).where(schema.nodes.c.state != "gone").values(last_ping_at=now))
    with store.read() as conn:
        assigned = conn.execute(
            select(attempts.c.id, attempts.c.node_id).where(attempts.c.state == AttemptState.ASSIGNED.value)
        ).all()
        running = conn.execute(
            select(attempts.c.id, attempts.c.node_id).where(attempts.c.state == AttemptState.RUNNING.value)
        ).all()
    for attempt_id, node_id in assigned:
        store.attempt_started(attempt_id, node_id, 1, now)
    for attempt_id, node_id in rng.sample(running, min(churn, len(running))):
        store.finish_attempt(attempt_id, node_id, 0, now, functools.partial(exited, attempt_ids=(attempt_id,)))


def exited(job: Job, attempt_ids: tuple[int, ...]) -> JobOutcome:
    return retry.after_exit(job, 0, attempt_ids)


class StepTimes:
    """The seconds each step of the pass in flight took."""

    def __init__(self) -> None:
        self.current: dict[str, float] = {}

    def timed(self, step: str, call: Callable[P, R]) -> Callable[P, R]:
        def run(*args: P.args, **kwargs: P.kwargs) -> R:
            started = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                self.current[step] = self.current.get(step, 0.0) + time.perf_counter() - started

        return run


def instrument(loop: ControlLoop, steps: StepTimes, decide: bool = True) -> None:
    """Times the pass's steps where they are calls of their own (the bench only: the loop's code
    is run as it is)."""
    loop.sync_cloud = steps.timed("sync", loop.sync_cloud)  # type: ignore[method-assign]
    loop.store.load_snapshot = steps.timed("read", loop.store.load_snapshot)  # type: ignore[method-assign]
    loop.fill_usage = steps.timed("usage", loop.fill_usage)  # type: ignore[method-assign]
    loop.execute = steps.timed("write", loop.execute)  # type: ignore[method-assign]
    if decide:  # (the module's function: once a process)
        corral.loop.decide = steps.timed("decide", corral.loop.decide)


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--pg-url", default=PG_URL, help="the PostgreSQL server (a schema of the bench's own)")
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--queued", type=int, default=100_000)
    parser.add_argument("--running", type=int, default=5000)
    parser.add_argument("--ended", type=int, default=1_000_000)
    parser.add_argument("--passes", type=int, default=10, help="steady passes after the first")
    parser.add_argument("--churn", type=int, default=50, help="running attempts that exit between two passes")
    parser.add_argument("--save", help="SQLite: copy the filled store to this file (and its sizes beside it)")
    parser.add_argument("--load", help="SQLite: start from a store --save wrote instead of filling one")
    parser.add_argument(
        "--restart",
        action="store_true",
        help="after the passes, time the first pass of a new Store and ControlLoop over the same store, as"
        " after `corral run` restarts (its jobs already carry their wait reasons)",
    )
    parser.add_argument("--profile", help="write a cProfile of the steady passes here")
    parser.add_argument("--profile-first", help="write a cProfile of the first pass here")
    args = parser.parse_args()
    rng = random.Random(1)
    console = Console(stderr=True)
    with store_url(args.store, args.pg_url) as url:
        fill_took: dict[str, float] = {}
        if args.load:
            sizes = json.loads(Path(args.load + ".json").read_text())
            args.nodes, args.queued, args.running, args.ended = (
                sizes[k] for k in ("nodes", "queued", "running", "ended")
            )
            shutil.copyfile(args.load, make_url(url).database or "")
        store = Store(url)
        store.migrate()
        if not args.load:
            fill_took = fill(store, args, time.time())
        if args.save:
            with sqlite3.connect(make_url(url).database or "") as source, sqlite3.connect(args.save) as copy:
                source.backup(copy)
            sizes = {"nodes": args.nodes, "queued": args.queued, "running": args.running, "ended": args.ended}
            Path(args.save + ".json").write_text(json.dumps(sizes))
        cloud = ListedCloud(store.store_id())
        for node in store.node_rows(limit=None):
            cloud.add(node)
        console.print("filled: " + ", ".join(f"{k.removesuffix('_s')} {v:.0f} s" for k, v in fill_took.items()))
        loop = ControlLoop(store, cloud, config_for(args.nodes), DISPATCHER)
        steps = StepTimes()
        instrument(loop, steps)
        passes: list[dict[str, float]] = []
        placed: list[int] = []
        profiler = cProfile.Profile() if args.profile else None
        first_profiler = cProfile.Profile() if args.profile_first else None
        for number in range(args.passes + 1):
            play_agents(store, args.churn if number else 0, rng)
            steps.current = {}
            if profiler is not None and number:
                profiler.enable()
            if first_profiler is not None and not number:
                first_profiler.enable()
            started = time.perf_counter()
            report = loop.run_pass()
            total = time.perf_counter() - started
            if profiler is not None:
                profiler.disable()
            if first_profiler is not None:
                first_profiler.disable()
            passes.append({"total": total, **{step: steps.current.get(step, 0.0) for step in STEPS}})
            placed.append(len(report.decisions.placements))
            console.print(f"pass {number}: {total:.2f} s, {placed[-1]} placed")
        restarted: dict[str, float] = {}
        if args.restart:
            store.close()
            store = Store(url)  # nothing kept: no job built, no explanation known as written
            loop = ControlLoop(store, cloud, config_for(args.nodes), DISPATCHER)
            # The old loop's jobs gone, as from a new process (instrument's wrappers hold it in a cycle).
            gc.collect()
            instrument(loop, steps, decide=False)
            play_agents(store, args.churn, rng)
            steps.current = {}
            started = time.perf_counter()
            report = loop.run_pass()
            restarted = {"total": time.perf_counter() - started, **{s: steps.current.get(s, 0.0) for s in STEPS}}
            console.print(f"restarted: {restarted['total']:.2f} s, {len(report.decisions.placements)} placed")
        if profiler is not None:
            profiler.dump_stats(args.profile)
        if first_profiler is not None:
            first_profiler.dump_stats(args.profile_first)
        store.close()

    first, steady = passes[0], passes[1:]
    figures: dict[str, Any] = {
        "store": args.store,
        "nodes": args.nodes,
        "queued": args.queued,
        "running": args.running,
        "ended": args.ended,
        "churn": args.churn,
        "steady_passes": len(steady),
        "fill_s": {k: round(v, 1) for k, v in fill_took.items()},
        "first_placed": placed[0],
        "steady_placed_median": statistics.median(placed[1:]) if steady else 0,
    }
    for column in ("total", *STEPS):
        figures[f"first_{column}_ms"] = round(first[column] * 1000, 1)
        if steady:
            figures[f"steady_{column}_median_ms"] = round(statistics.median(p[column] for p in steady) * 1000, 1)
            figures[f"steady_{column}_p95_ms"] = round(p95([p[column] for p in steady]) * 1000, 1)
    for column, seconds in restarted.items():
        figures[f"restart_{column}_ms"] = round(seconds * 1000, 1)
    table = Table(
        title=f"Live pass, {args.store}: {args.nodes:,} nodes, {args.queued:,} queued, {args.running:,} running,"
        f" {args.ended:,} ended"
    )
    table.add_column("step")
    table.add_column("first pass, ms", justify="right")
    table.add_column("steady median, ms", justify="right")
    table.add_column("steady p95, ms", justify="right")
    for column in (*STEPS, "total"):
        table.add_row(
            column,
            f"{figures[f'first_{column}_ms']:,.0f}",
            f"{figures.get(f'steady_{column}_median_ms', 0):,.0f}",
            f"{figures.get(f'steady_{column}_p95_ms', 0):,.0f}",
        )
    Console().print(table)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
