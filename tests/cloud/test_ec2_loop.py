"""corral's control loop (`corral.loop`) with the ec2 driver against a real moto server. The agent
never pairs on moto (its instances run nothing): the loop boots, tags and lists the instance, and
terminates it when its boot grace runs out, so that a broken node stops costing (seed 004)."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from corral.cloud.base import TAG_CLUSTER, TAG_INSTANCE_TYPE, TAG_NODE_ID
from corral.cloud.ec2 import Ec2Cloud
from corral.config import Config, Ec2Config
from corral.core.model import InstanceType, Resources
from corral.jobspec import JobRequest
from corral.loop import ControlLoop
from corral.store import Store
from tests.cloud.ec2_support import UNKNOWN_TYPE, WRONG_ARCHITECTURE, free_port, inject
from tests.server.cli import CORRAL
from tests.support import utc, wait_until

TYPES = [
    {"name": "c5.large", "vcpus": 2, "ram": "4GiB", "price_per_hour": 0.085},
    {"name": "m5.large", "vcpus": 2, "ram": "8GiB", "price_per_hour": 0.096},
]


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def make_loop(
    tmp_path: Path, settings: Ec2Config, cluster: str, **boot: object
) -> tuple[ControlLoop, Ec2Cloud, Store, Clock]:
    config = Config.model_validate(
        {
            "home": tmp_path,
            "cloud": {"driver": "ec2", "cluster": cluster, "ec2": settings.model_dump()},
            "instance_types": TYPES,
            "policy": {"lifecycle": {"boot_grace": "5m"}, "boot": {"max_instances": 2, **boot}},
        }
    )
    store = Store(f"sqlite:///{tmp_path / 'corral.db'}")
    store.migrate()
    cloud = Ec2Cloud(config.cloud.ec2, cluster, config.cloud.ec2.server_url or "")
    clock = Clock()
    return ControlLoop(store, cloud, config, "d-test", clock=clock), cloud, store, clock


def booted_for_a_job(
    tmp_path: Path, settings: Ec2Config, cluster: str
) -> tuple[ControlLoop, Ec2Cloud, Store, Clock, dict[str, Any]]:
    """A loop that has booted an instance for a queued job, and listed it: the loop, and its node."""
    loop, cloud, store, clock = make_loop(tmp_path, settings, cluster)
    store.submit([JobRequest(command=["true"], vcpus=2, ram="2GiB")], clock())
    loop.run_pass()
    clock.now += 1
    loop.run_pass()  # its listing shows the instance
    [node] = store.node_rows()
    return loop, cloud, store, clock, node


def tags_of(ec2: Any, instance_id: str) -> dict[str, str]:
    raw = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
    return {t["Key"]: t["Value"] for t in raw["Tags"]}


def state(ec2: Any, instance_id: str) -> str:
    raw = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
    return str(raw["State"]["Name"])


def test_a_pass_boots_an_instance_for_a_queued_job_and_a_never_pairing_one_is_terminated(
    tmp_path: Path, settings: Ec2Config, cluster: str, ec2: Any
) -> None:
    loop, cloud, store, clock = make_loop(tmp_path, settings, cluster)
    [job_id] = store.submit([JobRequest(command=["true"], vcpus=2, ram="2GiB")], clock())

    report = loop.run_pass()
    assert [b.instance_type for b in report.decisions.boots] == ["c5.large"]
    [node] = store.node_rows()
    assert node["state"] == "booting" and node["instance_id"].startswith("i-")
    first = node["instance_id"]
    tags = tags_of(ec2, first)
    assert (tags[TAG_CLUSTER], tags[TAG_NODE_ID], tags[TAG_INSTANCE_TYPE]) == (cluster, node["id"], "c5.large")
    assert tags["team"] == "research"

    # The next passes find it in the cloud's listing: the node lives on, nothing more is booted.
    clock.now += 60
    loop.run_pass()
    assert [i.id for i in cloud.list()] == [first]
    row = store.node_row(node["id"])
    assert row is not None and row["state"] == "booting"

    # Its agent never pairs (moto runs nothing): past boot_grace the instance is terminated.
    clock.now += 5 * 60
    loop.run_pass()
    assert state(ec2, first) in ("shutting-down", "terminated")
    row = store.node_row(node["id"])
    assert row is not None and row["state"] == "gone"
    assert first not in {i.id for i in cloud.list()}
    assert store.job_row(job_id)["state"] == "queued"  # waits for the instance booted in its place

    loop.shutdown_fleet("corral stopped")
    assert cloud.list() == []
    assert all(row["state"] == "gone" for row in store.node_rows(include_gone=True))


def test_an_instance_ec2_ended_says_why_in_its_nodes_events(
    tmp_path: Path, settings: Ec2Config, cluster: str, ec2: Any
) -> None:
    """An instance EC2 ends by itself (a spot reclaim, a KMS key it could not use, a terminate from
    the console) vanishes from the listing. Before, its node went down and gone saying only "instance
    i-… disappeared from the cloud": why was in the console alone, while corral booted the next one."""
    loop, cloud, store, clock, node = booted_for_a_job(tmp_path, settings, cluster)
    ec2.terminate_instances(InstanceIds=[node["instance_id"]])  # not corral's doing

    clock.now += 1
    loop.run_pass()
    [down] = store.list_events(kind="node.down")
    said = "terminated: Client.UserInitiatedShutdown: User initiated shutdown"  # EC2's StateReason, as moto gives it
    assert down["message"] == f"instance {node['instance_id']} disappeared from the cloud ({said})"
    gone = store.node_row(node["id"])
    assert gone is not None and gone["state"] == "gone" and said in gone["reason"]
    loop.shutdown_fleet("corral stopped")


def boot_token(ec2: Any, instance_id: str) -> str:
    """The boot token in an instance's user data: what its agent would pair with."""
    raw = ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")["UserData"]["Value"]
    found = re.search(r"CORRAL_BOOT_TOKEN=(\S+)", base64.b64decode(raw).decode())
    assert found is not None
    return found.group(1)


def test_a_type_whose_instances_never_pair_is_backed_off_and_boots_pause_while_every_type_fails(
    tmp_path: Path, settings: Ec2Config, cluster: str, ec2: Any
) -> None:
    """An AMI that boots but whose agent never comes up (a broken image, a user-data or agent install
    that fails, a security group in the way): moto runs nothing, so no instance ever pairs. Before,
    each instance was terminated at boot_grace and the next pass booted another of the same type for
    the same job, for ever, each billed for a whole boot grace, with no word but the node events.
    Now the type is backed off as after a capacity error (event type.boot_failed, `corral status`),
    the next type that fits boots, and with every type failing no boot is made until a back-off
    ends; each failed try in a row doubles the type's back-off, and a pairing of the type ends the row."""
    loop, cloud, store, clock = make_loop(tmp_path, settings, cluster, capacity_backoff="10m")
    start = clock.now
    [job_id] = store.submit([JobRequest(command=["true"], vcpus=2, ram="2GiB")], clock())

    loop.run_pass()
    [first] = cloud.list()
    [first_node] = store.node_rows()
    assert tags_of(ec2, first.id)[TAG_INSTANCE_TYPE] == "c5.large"

    # Past boot_grace: terminated as before, saying why, and c5.large is backed off for
    # capacity_backoff; the job's instance is the next type that fits, booted in the same pass.
    clock.now = start + 5 * 60
    loop.run_pass()
    assert state(ec2, first.id) in ("shutting-down", "terminated")
    shutdowns = store.list_events(node_id=first_node["id"], kind="node.shutting_down")
    assert [e["message"] for e in shutdowns] == [
        "its agent did not pair within boot_grace 5m (unpaired, open, boot exceeded, not idle)"
    ]
    [event] = store.list_events(kind="type.boot_failed")
    assert event["node_id"] == first_node["id"]
    assert event["message"] == (
        f"c5.large until {utc(clock.now + 600)}: instance {first.id} (node {first_node['id']}) did not pair"
        " within boot_grace 5m; c5.large backed off for 10m"
    )
    [backoff] = store.backoffs_in_force(clock.now)
    assert backoff["instance_type"] == "c5.large" and first.id in backoff["reason"]
    [second] = cloud.list()
    assert tags_of(ec2, second.id)[TAG_INSTANCE_TYPE] == "m5.large"

    # m5.large never pairs either: both types are backed off, and no boot is made until one's
    # back-off ends (before: one instance booted every boot_grace, for ever).
    clock.now = start + 10 * 60
    loop.run_pass()
    assert cloud.list() == []
    assert [b["instance_type"] for b in store.backoffs_in_force(clock.now)] == ["c5.large", "m5.large"]
    clock.now = start + 14 * 60
    report = loop.run_pass()
    assert report.decisions.boots == [] and cloud.list() == []
    job = store.job_row(job_id)
    assert job["state"] == "queued" and "backed off" in job["wait_reason"]

    # c5.large's back-off is over: it is tried again (its second try)...
    clock.now = start + 15 * 60
    loop.run_pass()
    [third] = cloud.list()
    assert tags_of(ec2, third.id)[TAG_INSTANCE_TYPE] == "c5.large"
    # ... which fails too: backed off twice as long, saying so; m5.large is back and boots.
    clock.now = start + 20 * 60
    loop.run_pass()
    again = [e for e in store.list_events(kind="type.boot_failed") if third.id in e["message"]]
    assert [e["message"].split(": ", 1)[1] for e in again] == [
        f"instance {third.id} (node {again[0]['node_id']}) did not pair within boot_grace 5m;"
        " c5.large backed off for 20m (2 failed boots of c5.large in a row)"
    ]
    [fourth] = cloud.list()
    assert tags_of(ec2, fourth.id)[TAG_INSTANCE_TYPE] == "m5.large"

    # This one's agent pairs (the AMI was mended): m5.large's row of failures ends, so its next
    # failure is a first one again (capacity_backoff, not 20m).
    [fourth_node] = [r for r in store.node_rows() if r["instance_id"] == fourth.id]
    assert store.pair_node(fourth_node["id"], boot_token(ec2, fourth.id), Resources(2, 4096), "ip-10-0-0-9", clock())
    clock.now += 1
    report = loop.run_pass()
    assert report.decisions.types_paired == ["m5.large"]
    assert store.load_snapshot("d-test", [], 0.0).boot_failures.keys() == {"c5.large"}

    loop.shutdown_fleet("corral stopped")
    assert cloud.list() == []


def test_an_insufficient_capacity_error_backs_the_type_off_and_another_type_is_booted(
    tmp_path: Path, settings: Ec2Config, cluster: str, ec2: Any
) -> None:
    """Seed 004: EC2 has no c5.large; corral stops asking for it for capacity_backoff and boots the
    next cheapest type that fits, instead of failing node after node of the same type."""
    loop, cloud, store, clock = make_loop(tmp_path, settings, cluster)
    ice = inject(
        cloud.client, "RunInstances", "InsufficientInstanceCapacity", when=lambda p: p["InstanceType"] == "c5.large"
    )
    store.submit([JobRequest(command=["true"], vcpus=2, ram="2GiB") for _ in range(2)], clock())

    first = loop.run_pass()
    assert [b.instance_type for b in first.decisions.boots] == ["c5.large", "c5.large"]
    assert len(ice.calls) == 1  # the pass's second boot of the type is not tried
    [event] = store.list_events(kind="capacity.unavailable")
    assert "c5.large" in event["message"]
    [failed] = store.node_rows(include_gone=True)
    assert failed["state"] == "gone" and "insufficient capacity for c5.large" in failed["reason"]
    assert cloud.list() == []

    clock.now += 1
    second = loop.run_pass()
    assert {b.instance_type for b in second.decisions.boots} == {"m5.large"}
    assert len(ice.calls) == 1
    listed = cloud.list()
    assert len(listed) == len(second.decisions.boots) >= 1
    assert {tags_of(ec2, i.id)[TAG_INSTANCE_TYPE] for i in listed} == {"m5.large"}

    loop.shutdown_fleet("corral stopped")
    assert cloud.list() == []
    assert all(state(ec2, i.id) in ("shutting-down", "terminated") for i in listed)


def test_a_quota_error_backs_the_type_off_like_a_capacity_error(
    tmp_path: Path, settings: Ec2Config, cluster: str, ec2: Any
) -> None:
    """Before, a vCPU quota error was tried again every pass, each time a failed node and its events."""
    loop, cloud, store, clock = make_loop(tmp_path, settings, cluster)
    quota = inject(cloud.client, "RunInstances", "VcpuLimitExceeded", when=lambda p: p["InstanceType"] == "c5.large")
    store.submit([JobRequest(command=["true"], vcpus=2, ram="2GiB")], clock())

    loop.run_pass()
    assert len(quota.calls) == 1
    [event] = store.list_events(kind="capacity.unavailable")
    assert "VcpuLimitExceeded" in event["message"]
    clock.now += 1
    second = loop.run_pass()
    assert [b.instance_type for b in second.decisions.boots] == ["m5.large"] and len(quota.calls) == 1
    loop.shutdown_fleet("corral stopped")


def test_a_cloud_error_pauses_boots_and_the_pause_doubles_until_a_boot_succeeds(
    tmp_path: Path, settings: Ec2Config, cluster: str, ec2: Any
) -> None:
    """An error that is no type's (a bad parameter, an image that is gone, throttling past botocore's
    retries) would fail every boot: one is tried, then none for loop.interval (1 s), then 2 s..."""
    loop, cloud, store, clock = make_loop(tmp_path, settings, cluster)
    broken = inject(cloud.client, "RunInstances", "InvalidParameterValue", times=2)
    store.submit([JobRequest(command=["true"], vcpus=2, ram="2GiB") for _ in range(2)], clock())

    loop.run_pass()
    assert len(broken.calls) == 1  # the pass's second boot is not tried
    [failed] = store.node_rows(include_gone=True)
    assert "InvalidParameterValue" in failed["reason"] and "no boot for 1 s" in failed["reason"]
    clock.now += 0.5
    loop.run_pass()
    assert len(broken.calls) == 1 and len(store.node_rows(include_gone=True)) == 1
    clock.now += 1
    loop.run_pass()
    assert len(broken.calls) == 2
    assert "no boot for 2 s" in max(store.node_rows(include_gone=True), key=lambda r: r["created_at"])["reason"]
    clock.now += 2.5
    loop.run_pass()  # the fault is over: boots go on
    assert len(cloud.list()) == 2
    loop.shutdown_fleet("corral stopped")


def test_an_unknown_ami_backs_its_type_off_and_the_other_types_boot_on(
    tmp_path: Path, settings: Ec2Config, cluster: str, ec2: Any
) -> None:
    """A wrong AMI is the config's fault, and one type's: the node is gone with a reason naming the
    AMI and the type, the type is backed off with an event of its own (not capacity.unavailable,
    which would hide the mistake among capacity errors), and the job boots another type that
    fits. Before, every boot of every type paused, and a GPU type's bad AMI stopped the CPU fleet."""
    missing = "ami-0123456789abcdef0"
    loop, cloud, store, clock = make_loop(
        tmp_path, settings.model_copy(update={"image_ids": {"c5.large": missing}}), cluster
    )
    store.submit([JobRequest(command=["true"], vcpus=2, ram="2GiB")], clock())

    loop.run_pass()
    [failed] = store.node_rows(include_gone=True)
    assert failed["state"] == "gone" and failed["instance_type"] == "c5.large"
    assert f"AMI {missing} of instance type c5.large does not exist" in failed["reason"]
    assert "no boot for" not in failed["reason"]
    assert store.list_events(kind="capacity.unavailable") == []
    [event] = store.list_events(kind="type.image_unusable")
    assert event["message"].startswith("c5.large until") and missing in event["message"]
    [backoff] = store.backoffs_in_force(clock())
    assert backoff["instance_type"] == "c5.large" and missing in backoff["reason"]

    clock.now += 1
    second = loop.run_pass()
    assert [b.instance_type for b in second.decisions.boots] == ["m5.large"]
    assert {tags_of(ec2, i.id)[TAG_INSTANCE_TYPE] for i in cloud.list()} == {"m5.large"}
    loop.shutdown_fleet("corral stopped")


@pytest.mark.parametrize(
    ("said", "kind", "names"),
    [
        (WRONG_ARCHITECTURE, "type.image_unusable", "The architecture 'arm64' of the specified instance type"),
        (UNKNOWN_TYPE, "type.unusable", "Invalid value 'c5.large' for InstanceType"),
    ],
    ids=["ami-of-another-architecture", "unknown-type-name"],
)
def test_a_type_ec2_refuses_as_configured_is_backed_off_and_the_other_types_boot_on(
    tmp_path: Path, settings: Ec2Config, cluster: str, ec2: Any, said: str, kind: str, names: str
) -> None:
    """EC2 answers a launch of one type with a 400 that names the type: a Graviton type left on the
    x86 image_id, or a typo in its name. That is the config's fault and the type's, as a missing
    AMI is. Before, it read as an account-wide error: every boot paused, and the type, never backed
    off, stayed the cheapest that fits, so each pass tried it again first: no instance of any type
    booted while the jobs waited."""
    loop, cloud, store, clock = make_loop(tmp_path, settings, cluster)
    refused = inject(
        cloud.client,
        "RunInstances",
        "InvalidParameterValue",
        when=lambda p: p["InstanceType"] == "c5.large",
        message=said,
    )
    [job_id] = store.submit([JobRequest(command=["true"], vcpus=2, ram="2GiB")], clock())

    loop.run_pass()
    [failed] = store.node_rows(include_gone=True)
    assert failed["state"] == "gone" and failed["instance_type"] == "c5.large"
    assert names in failed["reason"] and "no boot for" not in failed["reason"]
    [event] = store.list_events(kind=kind)
    assert event["message"].startswith("c5.large until") and names in event["message"]
    assert store.list_events(kind="capacity.unavailable") == []

    clock.now += 1
    second = loop.run_pass()
    assert [b.instance_type for b in second.decisions.boots] == ["m5.large"] and len(refused.calls) == 1
    assert {tags_of(ec2, i.id)[TAG_INSTANCE_TYPE] for i in cloud.list()} == {"m5.large"}
    assert store.job_row(job_id)["wait_reason"].startswith("waiting for an instance to boot")
    loop.shutdown_fleet("corral stopped")


def test_spot_launches_the_account_refuses_back_off_the_spot_type_and_on_demand_types_boot_on(
    tmp_path: Path, settings: Ec2Config, cluster: str, ec2: Any
) -> None:
    """EC2 launches spot instances through the account's spot service-linked role; with none, and
    corral's role not allowed to create it, each spot launch is refused with a 403. Before, that
    paused every boot, and the spot type, still the cheapest that fits, was tried first again after
    each pause: not one instance booted, on-demand ones included, while the jobs waited."""
    spot = settings.model_copy(update={"market": {"c5.large": "spot"}})
    loop, cloud, store, clock = make_loop(tmp_path, spot, cluster)
    refused = inject(
        cloud.client,
        "RunInstances",
        "AuthFailure.ServiceLinkedRoleCreationNotPermitted",
        when=lambda p: p.get("InstanceMarketOptions.MarketType") == "spot",
    )
    store.submit([JobRequest(command=["true"], vcpus=2, ram="2GiB")], clock())

    loop.run_pass()
    [failed] = store.node_rows(include_gone=True)
    assert failed["state"] == "gone" and failed["instance_type"] == "c5.large"
    assert "create-service-linked-role --aws-service-name spot.amazonaws.com" in failed["reason"]
    assert "no boot for" not in failed["reason"]
    [event] = store.list_events(kind="type.unusable")
    assert event["message"].startswith("c5.large until") and "spot service-linked role" in event["message"]

    clock.now += 1
    second = loop.run_pass()
    assert [b.instance_type for b in second.decisions.boots] == ["m5.large"] and len(refused.calls) == 1
    assert {tags_of(ec2, i.id)[TAG_INSTANCE_TYPE] for i in cloud.list()} == {"m5.large"}
    loop.shutdown_fleet("corral stopped")


def test_a_job_only_a_type_with_a_bad_ami_holds_waits_and_says_the_type_is_backed_off(
    tmp_path: Path, settings: Ec2Config, cluster: str, ec2: Any
) -> None:
    missing = "ami-0123456789abcdef0"
    loop, cloud, store, clock = make_loop(
        tmp_path, settings.model_copy(update={"image_ids": {"m5.large": missing}}), cluster
    )
    [job_id] = store.submit([JobRequest(command=["true"], vcpus=2, ram="6GiB")], clock())  # only m5.large holds it
    loop.run_pass()
    clock.now += 1
    second = loop.run_pass()
    assert second.decisions.boots == [] and cloud.list() == []
    reason = store.job_row(job_id)["wait_reason"]
    assert reason == "instance types that fit are backed off for now: m5.large (corral status says why)"


def test_two_corrals_on_different_stores_with_one_cluster_name_leave_each_others_instances_alone(
    tmp_path: Path, settings: Ec2Config, cluster: str, ec2: Any
) -> None:
    """Both kept the default-like cluster name. Each instance carries its store's id
    (`corral-store`), so the other corral records it once and does not terminate it as an orphan;
    an instance of its own store with no node is still an orphan."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    loop_a, cloud_a, store_a, clock_a = make_loop(tmp_path / "a", settings, cluster)
    loop_b, _, store_b, clock_b = make_loop(tmp_path / "b", settings, cluster)
    assert store_a.store_id() != store_b.store_id() and store_a.store_id() == loop_a.store_id
    store_a.submit([JobRequest(command=["true"], vcpus=2, ram="2GiB")], clock_a())
    loop_a.run_pass()
    [node] = store_a.node_rows()
    theirs = node["instance_id"]
    assert tags_of(ec2, theirs)["corral-store"] == store_a.store_id()

    for _ in range(2):
        clock_b.now += 10
        loop_b.run_pass()
    assert state(ec2, theirs) in ("pending", "running")
    assert store_b.list_events(kind="node.orphan") == []
    [foreign] = [e["message"] for e in store_b.list_events(kind="cloud.foreign")]
    assert foreign.startswith(f"instance {theirs} carries cloud.cluster {cluster!r} but was booted by another")
    assert store_b.node_rows() == []  # nothing booted, nothing adopted

    # A's own view is unchanged: its node lives on; an instance of its store that it has no node for
    # (its record lost) is an orphan to it.
    stray = cloud_a.create(
        node_type(loop_a), "n-stray", "a-boot-token-of-24-chars", {"corral-store": store_a.store_id()}
    )
    clock_a.now += 10
    loop_a.run_pass()
    assert state(ec2, stray.id) in ("shutting-down", "terminated")
    row = store_a.node_row(node["id"])
    assert row is not None and row["state"] == "booting"
    loop_a.shutdown_fleet("done")


def node_type(loop: ControlLoop) -> InstanceType:
    return loop.instance_types["c5.large"]


@pytest.mark.timeout(60)  # a `corral run` that does not refuse would serve until stopped
def test_corral_run_refuses_to_start_on_credentials_ec2_will_not_take_and_says_what_to_set(
    tmp_path: Path, settings: Ec2Config, cluster: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, `corral run` started as if all were well, and its log said "cloud list failed: ec2:
    Unable to locate credentials" every second and "boot failed" for each boot, while jobs waited;
    a missing region said "You must specify a region", naming no setting."""
    from corral.serve import serve

    # Credentials EC2 refuses, or that may not list instances: EC2's own words, and where they came from.
    loop, cloud, _, _ = make_loop(tmp_path, settings, cluster)
    refused = "AWS was not able to validate the provided access credentials"
    inject(cloud.client, "DescribeInstances", "AuthFailure", times=1, message=refused)
    assert loop.check_settings() == (
        f"cloud.ec2: EC2 in us-east-1 refuses corral's credentials (the AWS SDK's defaults): AuthFailure: {refused}"
    )
    denied = "You are not authorized to perform this operation. User: arn:aws:iam::123456789012:user/corral is not"
    inject(cloud.client, "DescribeInstances", "UnauthorizedOperation", times=1, message=denied)
    assert f"UnauthorizedOperation: {denied}" in (loop.check_settings() or "")
    assert loop.check_settings() is None  # EC2 takes them

    # `corral run` (serve) makes that check before it serves, and stops with its words.
    def config(ec2: Ec2Config, home: str) -> Config:
        return Config.model_validate(
            {
                "home": tmp_path / home,
                "server": {"host": "127.0.0.1", "port": 0},
                "cloud": {"driver": "ec2", "cluster": cluster, "ec2": ec2.model_dump()},
                "instance_types": TYPES,
            }
        )

    with monkeypatch.context() as env:
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"):
            env.delenv(name, raising=False)
        with pytest.raises(SystemExit) as stopped:
            serve(config(settings, "a"))
    assert str(stopped.value.code) == (
        "error: cloud.ec2: no AWS credentials (the AWS SDK's defaults): export AWS_ACCESS_KEY_ID and"
        " AWS_SECRET_ACCESS_KEY, name a profile of ~/.aws with cloud.ec2.profile, or run corral where an"
        " instance role gives them"
    )

    with monkeypatch.context() as env:
        env.delenv("AWS_DEFAULT_REGION")
        env.delenv("AWS_REGION", raising=False)
        with pytest.raises(SystemExit) as stopped:
            serve(config(settings.model_copy(update={"region": None}), "b"))
    assert str(stopped.value.code).startswith("error: cloud.ec2.region is not set")


def test_an_instance_ec2_would_not_terminate_stays_listed_shutting_down_until_it_is_gone(
    tmp_path: Path, settings: Ec2Config, cluster: str, ec2: Any
) -> None:
    """TerminateInstances refused (corral's role lacks it, or its tag condition does not match):
    before, the node was marked gone anyway, `corral nodes` showed nothing while the instance ran
    and billed, and every pass after recorded it as an orphan "destroyed" (it was not), events
    without end. Now the node stays shutting_down, says why once, and each pass tries again until
    EC2 terminates it."""
    loop, cloud, store, clock = make_loop(tmp_path, settings, cluster)
    store.submit([JobRequest(command=["true"], vcpus=2, ram="2GiB")], clock())
    loop.run_pass()
    [node] = store.node_rows()
    instance_id = node["instance_id"]
    denied = (
        "You are not authorized to perform this operation. User: arn:aws:sts::123456789012:assumed-role/corral/x"
        " is not authorized to perform: ec2:TerminateInstances on resource: arn:aws:ec2:us-east-1:123456789012:"
        f"instance/{instance_id} because no identity-based policy allows the ec2:TerminateInstances action"
    )
    refused = inject(cloud.client, "TerminateInstances", "UnauthorizedOperation", times=3, message=denied)

    clock.now += 5 * 60 + 1  # its agent never pairs: past boot_grace it is shut down
    loop.run_pass()
    assert len(refused.calls) == 1 and state(ec2, instance_id) == "running"
    row = store.node_row(node["id"])
    assert row is not None and row["state"] == "shutting_down"
    assert node["id"] in [n["id"] for n in store.node_rows()]  # `corral nodes` shows it, with its price
    [told] = [e for e in store.list_events(kind="node.shutting_down") if "ec2:TerminateInstances" in e["message"]]
    assert told["message"].startswith(f"terminating instance {instance_id} failed: ")
    assert "tried again each pass" in told["message"]

    for _ in range(2):  # tried again each pass, told once, and no orphan
        clock.now += 10
        loop.run_pass()
    assert len(refused.calls) == 3 and state(ec2, instance_id) == "running"
    assert len([e for e in store.list_events(kind="node.shutting_down") if "failed" in e["message"]]) == 1
    assert store.list_events(kind="node.orphan") == []

    clock.now += 10  # the role is fixed: the next pass terminates it
    loop.run_pass()
    assert state(ec2, instance_id) in ("shutting-down", "terminated")
    row = store.node_row(node["id"])
    assert row is not None and row["state"] == "gone"

    # An orphan (an instance of this store with no node) the cloud would not terminate: said once,
    # not "destroyed" at every pass.
    stray = cloud.create(node_type(loop), "n-stray", "a-boot-token-of-24-chars", {"corral-store": store.store_id()})
    inject(cloud.client, "TerminateInstances", "UnauthorizedOperation", times=2, message=denied)
    for _ in range(3):
        clock.now += 10
        loop.run_pass()
    [failed, destroyed] = [e["message"] for e in store.list_events(kind="node.orphan")]
    assert failed.startswith(
        f"instance {stray.id} has no live node record; terminating it failed: ec2 TerminateInstances:"
        " UnauthorizedOperation: You are not authorized"
    )
    assert destroyed == f"instance {stray.id} has no live node record; destroyed"
    assert state(ec2, stray.id) in ("shutting-down", "terminated")
    loop.shutdown_fleet("corral stopped")


@pytest.mark.timeout(120)
@contextmanager
def corral_run(tmp_path: Path, home: Path, config: Path) -> Iterator[Callable[..., str]]:
    """A real `corral run` of `config` in `home`, serving; yields a function that runs a corral
    command against it and returns its output. Stopped with SIGINT (a clean stop) at the end."""
    env = {**os.environ, "CORRAL_HOME": str(home), "COLUMNS": "250"}
    env.pop("CORRAL_URL", None)
    run = subprocess.Popen(
        [CORRAL, "run", "--config", str(config)],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=(tmp_path / "run.log").open("wb"),
        stderr=subprocess.STDOUT,
    )

    def corral(*args: str) -> str:
        done = subprocess.run([CORRAL, *args], env=env, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout

    try:
        wait_until(lambda: (home / "server.json").exists() or run.poll() is not None, 30, "corral run to serve")
        assert run.poll() is None, (tmp_path / "run.log").read_text()
        wait_until(lambda: subprocess.run([CORRAL, "status"], env=env, capture_output=True).returncode == 0, 30, "it")
        yield corral
    finally:
        run.send_signal(signal.SIGINT)
        run.wait(30)


def test_corral_status_says_boots_are_paused_and_why_while_ec2_refuses_every_boot(
    tmp_path: Path, moto_url: str, image_id: str, cluster: str
) -> None:
    """An instance profile that does not exist (a typo, or IAM not set up yet) fails every boot,
    whatever the type: corral pauses its boots. Before, `corral status` showed only the queue and an
    empty fleet, and the jobs said they were waiting for an instance to boot; what failed was only
    in the log and the events of nodes gone."""
    home = tmp_path / "home"
    config = tmp_path / "corral.toml"
    config.write_text(
        f"""
[server]
host = "127.0.0.1"
port = {free_port()}

[loop]
interval = "10m"  # a pass at each submission: the pause after the first failed boot lasts 10 minutes

[cloud]
driver = "ec2"
cluster = "{cluster}"

[cloud.ec2]
endpoint_url = "{moto_url}"
image_id = "{image_id}"
server_url = "http://10.0.0.5:8642"
iam_instance_profile = "corral-nodes-typo"

[[instance_types]]
name = "c5.large"
vcpus = 2
ram = "4GiB"
price_per_hour = 0.085
"""
    )
    with corral_run(tmp_path, home, config) as corral:
        corral("submit", "--", "true")
        wait_until(lambda: json.loads(corral("events", "--kind", "node.gone", "--json")), 30, "the failed boot")

        report = json.loads(corral("status", "--json"))
        assert report["boots_paused_until"] > report["now"]
        assert report["boots_paused_reason"].startswith("boot of c5.large failed: ec2 RunInstances: ")
        assert "corral-nodes-typo" in report["boots_paused_reason"]
        said = corral("status")
        assert re.search(r"boots paused +for \S+ more: boot of c5\.large failed: ec2 RunInstances: ", said), said
        token = (home / "token").read_text().strip()
        base = corral("dashboard").strip().split("/dashboard")[0]
        page = httpx.get(f"{base}/dashboard", cookies={"corral_token": token}, timeout=30).text
        assert "<th>boots paused</th><td>until " in page and "corral-nodes-typo" in page


def ended_in_launch(cloud: Ec2Cloud, instance_id: str, code: str, message: str) -> None:
    """EC2's answer for an instance it ended in its launch: moto ends an instance only when told
    to (Client.UserInitiatedShutdown), so its state reason is put into DescribeInstances' answer
    where botocore hands it over."""

    def answer(parsed: dict[str, Any], **_: Any) -> None:
        for reservation in parsed.get("Reservations", []):
            for raw in reservation.get("Instances", []):
                if raw["InstanceId"] == instance_id and raw["State"]["Name"] == "terminated":
                    raw["StateReason"] = {"Code": code, "Message": f"{code}: {message}"}

    cloud.client.meta.events.register("after-call.ec2.DescribeInstances", answer)


def test_a_type_whose_instances_ec2_ends_in_their_launch_is_backed_off(
    tmp_path: Path, settings: Ec2Config, cluster: str, ec2: Any
) -> None:
    """A KMS key EC2 may not use for the root volume (disabled, or the launch lacks kms:CreateGrant):
    RunInstances succeeds, and EC2 ends the instance while it is pending. Before, its node went
    down, the job waited on, and the next pass booted another of the type, which ended the same
    way, pass after pass; now the type is backed off as a type EC2 refuses is (type.unusable), and
    the next type that fits boots."""
    loop, cloud, store, clock, node = booted_for_a_job(tmp_path, settings, cluster)
    assert node["instance_type"] == "c5.large" and node["state"] == "booting"
    ended_in_launch(cloud, node["instance_id"], "Client.InvalidKMSKey.InvalidState", "The KMS key is disabled")
    ec2.terminate_instances(InstanceIds=[node["instance_id"]])

    clock.now += 1
    loop.run_pass()
    [event] = store.list_events(kind="type.unusable")
    assert "c5.large end in their launch" in event["message"] and "KMS key" in event["message"]
    assert [b["instance_type"] for b in store.backoffs_in_force(clock())] == ["c5.large"]
    clock.now += 1
    loop.run_pass()
    live = [n for n in store.node_rows() if n["state"] != "gone"]
    assert [n["instance_type"] for n in live] == ["m5.large"]
    loop.shutdown_fleet("corral stopped")


def test_an_instance_a_user_terminates_while_it_boots_backs_nothing_off(
    tmp_path: Path, settings: Ec2Config, cluster: str, ec2: Any
) -> None:
    loop, cloud, store, clock, node = booted_for_a_job(tmp_path, settings, cluster)
    ec2.terminate_instances(InstanceIds=[node["instance_id"]])
    clock.now += 1
    loop.run_pass()
    assert store.backoffs_in_force(clock()) == [] and store.list_events(kind="type.unusable") == []
    clock.now += 1
    loop.run_pass()
    live = [n for n in store.node_rows() if n["state"] != "gone"]
    assert [n["instance_type"] for n in live] == ["c5.large"]
    loop.shutdown_fleet("corral stopped")


def booted_nodes(loop: ControlLoop, store: Store, count: int, now: float) -> list[dict[str, Any]]:
    """`count` nodes of this loop's dispatcher, each with its instance booted on moto."""
    for n in range(count):
        node_id = f"n-{n:04x}"
        store.create_node(node_id, node_type(loop), f"boot-token-{n:04d}-of-24-chars", now, "test", "d-test")
        instance = loop.cloud.create(node_type(loop), node_id, f"boot-token-{n:04d}-of-24-chars", {})
        store.set_instance_id(node_id, instance.id)
    return store.node_rows()


def test_a_clean_stop_terminates_the_fleet_in_one_call_and_one_refused_instance_stops_no_other(
    tmp_path: Path, settings: Ec2Config, cluster: str, ec2: Any
) -> None:
    """A clean stop (Ctrl-C, systemd's stop) called TerminateInstances once per instance: a fleet of
    500 took minutes, past systemd's TimeoutStopSec, and what it did not reach billed on. Now the
    fleet goes in one call; an instance EC2 will not terminate (termination protection) is left
    shutting down, said once, and every other one is terminated."""
    loop, cloud, store, clock = make_loop(tmp_path, settings, cluster)
    nodes = booted_nodes(loop, store, 12, clock())
    protected = nodes[7]
    ec2.modify_instance_attribute(InstanceId=protected["instance_id"], DisableApiTermination={"Value": True})
    calls = inject(cloud.client, "TerminateInstances", "never", when=lambda params: False)

    loop.shutdown_fleet("corral stopped")

    # One call with every instance, which EC2 refuses for the protected one; one without it.
    assert len(calls.seen) == 2 and len(calls.seen[0]) - 2 == 12  # Action, Version, and 12 ids
    for node in nodes:
        row = store.node_row(node["id"])
        assert row is not None
        if node is protected:
            assert row["state"] == "shutting_down" and state(ec2, node["instance_id"]) == "running"
        else:
            assert row["state"] == "gone" and state(ec2, node["instance_id"]) in ("shutting-down", "terminated")
    [told] = [e["message"] for e in store.list_events(kind="node.shutting_down") if "failed" in e["message"]]
    assert told.startswith(f"terminating instance {protected['instance_id']} failed: ec2 TerminateInstances:")
    assert "may not be terminated" in told

    # The next corral finishes it once it may be terminated.
    ec2.modify_instance_attribute(InstanceId=protected["instance_id"], DisableApiTermination={"Value": False})
    restarted = ControlLoop(store, cloud, loop.config, "d-test", clock=clock)
    restarted.run_pass()
    row = store.node_row(protected["id"])
    assert row is not None and row["state"] == "gone"
    assert state(ec2, protected["instance_id"]) in ("shutting-down", "terminated")


def test_a_pass_terminates_its_shutdowns_and_the_orphans_together_and_names_an_untagged_orphan(
    tmp_path: Path, settings: Ec2Config, cluster: str, ec2: Any
) -> None:
    """The nodes a pass shuts down (an idle fleet past its boot grace here) and the orphans it
    finds were terminated one call each; now in one. An orphan without a node tag was logged as
    "(node None)"; it now says it carries no corral-node-id tag."""
    loop, cloud, store, clock = make_loop(tmp_path, settings, cluster)
    nodes = booted_nodes(loop, store, 6, clock())
    tagged = cloud.create(node_type(loop), "n-stray", "a-boot-token-of-24-chars", {"corral-store": store.store_id()})
    by_hand = ec2.run_instances(
        ImageId=settings.image_id,
        MinCount=1,
        MaxCount=1,
        InstanceType="t3.micro",
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": TAG_CLUSTER, "Value": cluster}]}],
    )["Instances"][0]["InstanceId"]
    calls = inject(cloud.client, "TerminateInstances", "never", when=lambda params: False)

    clock.now += 5 * 60 + 1  # no agent pairs on moto: past boot_grace each node is shut down
    loop.run_pass()

    assert [len(call) - 2 for call in calls.seen] == [2, 6]  # the orphans, then the pass's shutdowns
    for node in nodes:
        row = store.node_row(node["id"])
        assert row is not None and row["state"] == "gone"
    for instance_id in [tagged.id, by_hand, *(n["instance_id"] for n in nodes)]:
        assert state(ec2, instance_id) in ("shutting-down", "terminated")
    messages = sorted(e["message"] for e in store.list_events(kind="node.orphan"))
    assert messages == sorted(
        [
            f"instance {tagged.id} has no live node record; destroyed",
            f"instance {by_hand} (no {TAG_NODE_ID} tag) has no live node record; destroyed",
        ]
    )
    loop.shutdown_fleet("corral stopped")


@pytest.mark.timeout(120)
def test_corral_nodes_and_the_dashboard_show_each_instances_zone_and_market(
    tmp_path: Path, moto_url: str, image_id: str, subnet_ids: list[str], cluster: str, ec2: Any
) -> None:
    """An operator triaging a zone's outage or a wave of spot reclaims could not tell from `corral
    nodes` which zone a node ran in nor whether it was spot: both are now recorded at the boot
    (EC2's answer, the market it was launched as) and shown in the table, in --json and on the
    dashboard."""
    zone_of = {s["SubnetId"]: s["AvailabilityZone"] for s in ec2.describe_subnets(SubnetIds=subnet_ids)["Subnets"]}
    home = tmp_path / "home"
    config = tmp_path / "corral.toml"
    config.write_text(
        f"""
[server]
host = "127.0.0.1"
port = {free_port()}

[cloud]
driver = "ec2"
cluster = "{cluster}"

[cloud.ec2]
endpoint_url = "{moto_url}"
image_id = "{image_id}"
server_url = "http://10.0.0.5:8642"
subnet_ids = ["{subnet_ids[0]}"]
market = {{ "c5.large" = "spot" }}

[[instance_types]]
name = "c5.large"
vcpus = 2
ram = "4GiB"
price_per_hour = 0.03

[[instance_types]]
name = "m5.xlarge"
vcpus = 4
ram = "16GiB"
price_per_hour = 0.192
"""
    )
    with corral_run(tmp_path, home, config) as corral:
        corral("submit", "--vcpus", "2", "--", "true")
        corral("submit", "--vcpus", "4", "--", "true")

        def booted() -> list[dict[str, Any]]:
            rows = json.loads(corral("nodes", "--json"))
            return rows if len(rows) == 2 and all(row["instance_id"] for row in rows) else []

        nodes = {row["instance_type"]: row for row in wait_until(booted, 60, "both instances booted")}
        zone = zone_of[subnet_ids[0]]
        assert (nodes["c5.large"]["zone"], nodes["c5.large"]["market"]) == (zone, "spot")
        assert (nodes["m5.xlarge"]["zone"], nodes["m5.xlarge"]["market"]) == (zone, "on-demand")

        table = corral("nodes")
        assert re.search(r"\bzone\b.*\bmarket\b", table)
        assert re.search(rf"c5\.large\W+{zone}\W+spot\b", table), table
        assert re.search(rf"m5\.xlarge\W+{zone}\W+on-demand\b", table), table
        token = (home / "token").read_text().strip()
        base = corral("dashboard").strip().split("/dashboard")[0]
        page = httpx.get(f"{base}/dashboard", cookies={"corral_token": token}, timeout=30).text
        assert "<th>zone</th><th>market</th>" in page
        assert f"<td>c5.large</td><td>{zone}</td><td>spot</td>" in page
    assert Ec2Cloud(Ec2Config(region="us-east-1", endpoint_url=moto_url, image_id=image_id), cluster, "").list() == []


def test_a_node_booted_before_its_zone_was_recorded_gets_it_from_the_listing(
    tmp_path: Path, settings: Ec2Config, cluster: str, subnet_ids: list[str], ec2: Any
) -> None:
    """A node booted by a corral from before migration 0015 has no zone or market in the store: the
    pass's listing fills them in (`corral nodes` showed "-" for it for ever otherwise)."""
    spot = settings.model_copy(update={"market": {"c5.large": "spot"}, "subnet_ids": subnet_ids[1:2]})
    loop, cloud, store, clock = make_loop(tmp_path, spot, cluster)
    [node] = booted_nodes(loop, store, 1, clock())  # set_instance_id without a zone: as before 0015
    assert (node["zone"], node["market"]) == (None, None)
    listed = {inst.id: inst for inst in Ec2Cloud(spot, cluster, "").list()}[node["instance_id"]]
    zone = ec2.describe_subnets(SubnetIds=subnet_ids[1:2])["Subnets"][0]["AvailabilityZone"]
    assert (listed.zone, listed.market) == (zone, "spot")  # EC2's InstanceLifecycle

    loop.run_pass()

    row = store.node_row(node["id"])
    assert row is not None and (row["zone"], row["market"]) == (zone, "spot")
    loop.shutdown_fleet("corral stopped")
