"""What a clean stop (Ctrl-C, systemd's stop) and an orphan sweep cost on a large EC2 fleet, with
TerminateInstances once per instance (as before) and in batches of up to 1,000 (now).

Starts a moto server, boots --instances instances on it (one RunInstances, with corral's tags) with
a node each in a SQLite store, then times `ControlLoop.shutdown_fleet` (every node marked shutting
down, its instance terminated, the node marked gone); then boots as many orphans (this store's
tags, no node) and times the pass's `sync_cloud`, which terminates them. Each both ways: the
driver's `destroy_many` one call per instance (the loop's calls before batching), and batched.
moto answers a call in milliseconds where EC2 takes tens to hundreds, so the calls saved count for
more against EC2 than here. Prints a table, then one JSON object of the figures as the last line.

    .venv/bin/python bench/fleet_stop.py [--instances 500]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from corral.cloud.base import TAG_CLUSTER, TAG_INSTANCE_TYPE, TAG_NODE_ID, TAG_STORE, CloudError
from corral.cloud.ec2 import Ec2Cloud
from corral.config import Config
from corral.loop import ControlLoop
from corral.store import Store

REGION = "us-east-1"
TYPE = {"name": "c5.large", "vcpus": 2, "ram": "4GiB", "price_per_hour": 0.085}


class OneCallPerInstance(Ec2Cloud):
    """The driver as the loop used it before batching: one TerminateInstances per instance."""

    def destroy_many(self, instance_ids: Sequence[str]) -> dict[str, CloudError]:
        refused: dict[str, CloudError] = {}
        for instance_id in instance_ids:
            refused.update(super().destroy_many([instance_id]))
        return refused


@contextmanager
def moto_server(log: Path) -> Iterator[str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    url = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(url + "/moto-api/", timeout=1).close()
                break
            except (urllib.error.URLError, OSError):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the moto server did not start: {log.read_text()[-2000:]}") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def make_loop(home: Path, url: str, image_id: str, cluster: str, batched: bool) -> ControlLoop:
    ec2 = {"region": REGION, "endpoint_url": url, "image_id": image_id, "server_url": "http://10.0.0.5:8642"}
    config = Config.model_validate(
        {"home": home, "cloud": {"driver": "ec2", "cluster": cluster, "ec2": ec2}, "instance_types": [TYPE]}
    )
    store = Store(f"sqlite:///{home / 'corral.db'}")
    store.migrate()
    driver = Ec2Cloud if batched else OneCallPerInstance
    cloud = driver(config.cloud.ec2, cluster, "http://10.0.0.5:8642")
    return ControlLoop(store, cloud, config, "d-bench")


def launch(loop: ControlLoop, image_id: str, count: int, with_nodes: bool) -> list[str]:
    """`count` instances of the loop's cluster and store in one RunInstances; with a node each."""
    cloud = loop.cloud
    assert isinstance(cloud, Ec2Cloud)
    tags = {TAG_CLUSTER: cloud.cluster, TAG_STORE: loop.store_id, TAG_INSTANCE_TYPE: TYPE["name"]}
    if with_nodes:
        tags[TAG_NODE_ID] = "n-bench"  # the listing is not read by a stop; the store's rows are
    raw = cloud.client.run_instances(
        ImageId=image_id,
        InstanceType=TYPE["name"],
        MinCount=count,
        MaxCount=count,
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}],
    )
    ids = [str(i["InstanceId"]) for i in raw["Instances"]]
    if with_nodes:
        itype = loop.instance_types[str(TYPE["name"])]
        now = time.time()
        for n, instance_id in enumerate(ids):
            node_id = f"n-{n:05x}"
            loop.store.create_node(node_id, itype, f"boot-token-{n:05d}", now, "bench", loop.dispatcher_id)
            loop.store.set_instance_id(node_id, instance_id)
    return ids


def measure(url: str, image_id: str, count: int, batched: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        cluster = f"bench-{'batch' if batched else 'one'}-{os.getpid()}"
        loop = make_loop(home, url, image_id, cluster, batched)
        cloud = loop.cloud
        assert isinstance(cloud, Ec2Cloud)
        calls: list[int] = []
        cloud.client.meta.events.register("before-call.ec2.TerminateInstances", lambda **_: calls.append(1))
        launch(loop, image_id, count, with_nodes=True)
        started = time.perf_counter()
        loop.shutdown_fleet("corral stopped")
        stop_s = time.perf_counter() - started
        stop_calls = len(calls)
        left = [row["id"] for row in loop.store.node_rows()]
        assert not left, f"{len(left)} nodes left after the stop"

        sweeper = make_loop(home, url, image_id, cluster, batched)
        sweeper_cloud = sweeper.cloud
        assert isinstance(sweeper_cloud, Ec2Cloud)
        calls.clear()
        sweeper_cloud.client.meta.events.register("before-call.ec2.TerminateInstances", lambda **_: calls.append(1))
        launch(sweeper, image_id, count, with_nodes=False)
        started = time.perf_counter()
        sweeper.sync_cloud(time.time())
        sweep_s = time.perf_counter() - started
        assert sweeper_cloud.list() == [], "orphans left after the sweep"
        return {"stop_s": stop_s, "stop_calls": stop_calls, "sweep_s": sweep_s, "sweep_calls": len(calls)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=int, default=500)
    args = parser.parse_args()
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        os.environ.pop(name, None)
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION=REGION,
        AWS_EC2_METADATA_DISABLED="true", AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull,
    )  # fmt: skip
    console = Console(stderr=True)
    with tempfile.TemporaryDirectory() as tmp, moto_server(Path(tmp) / "moto.log") as url:
        import boto3

        image_id = str(
            boto3.client("ec2", region_name=REGION, endpoint_url=url).describe_images()["Images"][0]["ImageId"]
        )
        with console.status(f"one call per instance, {args.instances} instances"):
            before = measure(url, image_id, args.instances, batched=False)
        with console.status(f"batched, {args.instances} instances"):
            after = measure(url, image_id, args.instances, batched=True)
    table = Table(title=f"{args.instances} EC2 instances on moto: TerminateInstances one per instance, and batched")
    table.add_column("")
    table.add_column("one call per instance (before)", justify="right")
    table.add_column("batched (now)", justify="right")
    table.add_row("clean stop (shutdown_fleet)", f"{before['stop_s']:.2f} s", f"{after['stop_s']:.2f} s")
    table.add_row("  TerminateInstances calls", str(before["stop_calls"]), str(after["stop_calls"]))
    table.add_row("orphan sweep (sync_cloud)", f"{before['sweep_s']:.2f} s", f"{after['sweep_s']:.2f} s")
    table.add_row("  TerminateInstances calls", str(before["sweep_calls"]), str(after["sweep_calls"]))
    Console().print(table)
    figures = {"instances": args.instances}
    figures.update({f"before_{key}": round(value, 3) for key, value in before.items()})
    figures.update({f"after_{key}": round(value, 3) for key, value in after.items()})
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
