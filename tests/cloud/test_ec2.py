"""The ec2 driver through boto3 against a real moto server; capacity, quota and throttling errors,
which moto cannot produce, injected at botocore's HTTP boundary."""

from __future__ import annotations

import base64
import json
import logging
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from corral.cloud import ec2 as ec2_module
from corral.cloud.base import (
    TAG_CLUSTER,
    TAG_INSTANCE_TYPE,
    TAG_NODE_ID,
    CloudDriver,
    CloudError,
    Ended,
    ImageUnusable,
    InsufficientCapacity,
    QuotaExceeded,
    Throttled,
    TypeUnusable,
)
from corral.cloud.ec2 import AGENT_CA_FILE, AGENT_ENV_FILE, Ec2Cloud, agent_user_data
from corral.config import Config, ConfigError, Ec2Config, RootVolumeConfig, load_config
from corral.core.model import InstanceType
from tests.cloud.ec2_support import UNKNOWN_TYPE, WRONG_ARCHITECTURE, free_port, inject
from tests.server.cli import CORRAL

C5 = InstanceType(name="c5.large", vcpus=2, ram_mib=4096, price_per_hour=0.085, scratch_mib=8192)
M5 = InstanceType(name="m5.large", vcpus=2, ram_mib=8192, price_per_hour=0.096)
TOKEN = "AbCdEfGhIjKlMnOpQrStUvWx-_0123456789"


def described(ec2: Any, instance_id: str) -> dict[str, Any]:
    raw: dict[str, Any] = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
    return raw


def state(ec2: Any, instance_id: str) -> str:
    return str(described(ec2, instance_id)["State"]["Name"])


def user_data(ec2: Any, instance_id: str) -> str:
    attribute = ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
    return base64.b64decode(attribute["UserData"]["Value"]).decode()


def test_create_tags_the_instance_and_gives_the_agent_its_server_and_token(
    settings: Ec2Config, cluster: str, ec2: Any, image_id: str
) -> None:
    cloud: CloudDriver = Ec2Cloud(settings, cluster, settings.server_url or "")
    instance = cloud.create(C5, "n-0001", TOKEN, {"owner": "me"})

    assert instance.id.startswith("i-") and instance.node_id == "n-0001" and instance.instance_type == "c5.large"
    expected = {
        "Name": f"corral-{cluster}-n-0001",
        "team": "research",
        "owner": "me",
        TAG_CLUSTER: cluster,
        TAG_NODE_ID: "n-0001",
        TAG_INSTANCE_TYPE: "c5.large",
    }
    assert instance.tags == expected
    raw = described(ec2, instance.id)
    assert {t["Key"]: t["Value"] for t in raw["Tags"]} == expected
    assert (raw["InstanceType"], raw["ImageId"]) == ("c5.large", image_id)
    assert abs(instance.created_at - time.time()) < 300

    document = user_data(ec2, instance.id)
    assert document.startswith("#cloud-config\n")
    parsed = yaml.safe_load(document)
    [env_file] = parsed["write_files"]
    assert env_file == {
        "path": AGENT_ENV_FILE,
        "owner": "root:root",
        "permissions": "0600",
        "content": f"CORRAL_BOOT_TOKEN={TOKEN}\n",
    }
    [argv] = parsed["runcmd"]
    assert TOKEN not in " ".join(argv)  # never in a process's argument list
    # systemd starts an agent that died again (it resumes the node with its saved credentials), but
    # not one whose pairing was refused or whose node the server forgot (exit 2 or 3).
    assert argv[: argv.index("--")] == [
        "systemd-run",
        "--unit=corral-agent",
        f"--property=EnvironmentFile={AGENT_ENV_FILE}",
        "--property=Restart=on-failure",
        "--property=RestartSec=5s",
        "--property=RestartPreventExitStatus=2 3",
        "--property=KillMode=process",  # the runs' keepers outlive a dead agent, for the next to re-adopt
    ]
    agent = argv[argv.index("--") + 1 :]
    assert agent[:3] == ["python3", "-m", "corral.agent"]
    flags = dict(zip(agent[3::2], agent[4::2], strict=True))
    assert flags == {
        "--server": "http://10.0.0.5:8642",
        "--node-id": "n-0001",
        "--vcpus": "2",
        "--ram-mib": "4096",
        "--scratch-mib": "8192",
        "--gpus": "0",
        "--work-dir": "/var/lib/corral/agent",
        "--imds": "http://169.254.169.254",  # asked for spot interruption notices
    }

    [listed] = cloud.list()
    assert (listed.id, listed.instance_type, listed.tags) == (instance.id, "c5.large", expected)
    assert listed.state in ("pending", "running")


def test_the_boot_token_is_not_in_botocores_debug_log(
    settings: Ec2Config, cluster: str, ec2: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # `corral run --log-level debug` turns botocore's debug log on, which logs each request's
    # parameters: RunInstances' UserData, whose base64 decodes to the boot token.
    caplog.set_level(logging.DEBUG)
    instance = Ec2Cloud(settings, cluster, settings.server_url or "").create(C5, "n-0001", TOKEN, {})
    logged = caplog.text
    [request] = [r.getMessage() for r in caplog.records if "OperationModel(name=RunInstances)" in r.getMessage()]
    caplog.set_level(logging.WARNING)  # the test's own read of the user data below is logged, too

    sent = ec2.describe_instance_attribute(InstanceId=instance.id, Attribute="userData")["UserData"]["Value"]
    assert TOKEN in base64.b64decode(sent).decode()
    assert sent[:40] not in logged and TOKEN not in logged
    assert "'ImageId': " in request and "'UserData': '<redacted by corral: " in request  # the rest is logged


def test_user_data_is_built_as_data_whatever_the_values() -> None:
    settings = Ec2Config(image_id="ami-12345678", agent_command=["/opt/corral venv/bin/python", "-m", "corral.agent"])
    hostile = "http://h/$(reboot);'\"`id`\n#"
    document = yaml.safe_load(agent_user_data(settings, hostile, "n-x; rm -rf /", TOKEN, C5))
    [argv] = document["runcmd"]
    assert argv[argv.index("--server") + 1] == hostile
    assert argv[argv.index("--node-id") + 1] == "n-x; rm -rf /"
    assert argv[argv.index("--") + 1] == "/opt/corral venv/bin/python"
    # The token is written to a systemd environment file: only characters that need no quoting there.
    for bad in ("tok en-0123456789abcdef", "x\nCORRAL_SERVER=http://evil-0123456789", "short"):
        with pytest.raises(CloudError, match="boot token"):
            agent_user_data(settings, "http://h", "n-1", bad, C5)


def test_a_ca_bundle_is_written_onto_the_instance_and_the_agent_verifies_the_server_with_it(tmp_path: Path) -> None:
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    settings = Ec2Config(image_id="ami-12345678")
    document = yaml.safe_load(agent_user_data(settings, "https://10.0.0.5:8642", "n-1", TOKEN, C5, pem))
    [token_file, ca_file] = document["write_files"]
    assert (ca_file["path"], ca_file["permissions"], ca_file["content"]) == (AGENT_CA_FILE, "0644", pem)
    assert token_file["permissions"] == "0600"
    [argv] = document["runcmd"]
    assert argv[argv.index("--ca") + 1] == AGENT_CA_FILE
    plain = yaml.safe_load(agent_user_data(settings, "https://10.0.0.5:8642", "n-1", TOKEN, C5))
    assert len(plain["write_files"]) == 1 and "--ca" not in plain["runcmd"][0]

    # server_ca must be a readable PEM file of at most 8 KiB (user data holds 16 KiB in all).
    not_pem = tmp_path / "ca.txt"
    not_pem.write_text("hello")
    with pytest.raises(ValueError, match=f"server_ca\n.*{not_pem} holds no PEM certificate"):
        Ec2Config(image_id="ami-12345678", server_ca=not_pem)
    with pytest.raises(ValueError, match="cannot be read"):
        Ec2Config(image_id="ami-12345678", server_ca=tmp_path / "missing.pem")


def test_list_sees_only_this_clusters_live_instances_and_destroy_is_idempotent(
    settings: Ec2Config, cluster: str, ec2: Any
) -> None:
    mine = Ec2Cloud(settings, cluster, "http://10.0.0.5:8642")
    other = Ec2Cloud(settings, cluster + "-other", "http://10.0.0.5:8642")
    a = mine.create(C5, "n-a", TOKEN, {})
    b = mine.create(M5, "n-b", TOKEN, {})
    theirs = other.create(C5, "n-c", TOKEN, {})
    # An instance with no cluster tag at all, started by hand.
    untagged = ec2.run_instances(ImageId=settings.image_id, MinCount=1, MaxCount=1, InstanceType="t3.micro")

    assert {i.id for i in mine.list()} == {a.id, b.id}
    assert [i.id for i in other.list()] == [theirs.id]

    mine.destroy(a.id)
    assert state(ec2, a.id) in ("shutting-down", "terminated")
    assert [i.id for i in mine.list()] == [b.id]
    mine.destroy(a.id)  # already terminated: no error
    mine.destroy("i-0123456789abcdef0")  # never existed: no error (InvalidInstanceID.NotFound)
    # A stopped instance still costs (its volumes): it is listed, so corral can destroy it.
    ec2.stop_instances(InstanceIds=[b.id])
    assert [i.id for i in Ec2Cloud(settings, cluster, "").list()] == [b.id]
    assert state(ec2, untagged["Instances"][0]["InstanceId"]) in ("pending", "running")
    for instance in (b, theirs):
        mine.destroy(instance.id)


def test_list_reads_every_page_and_needs_nothing_but_the_tags(settings: Ec2Config, cluster: str) -> None:
    """After a restart, corral finds its instances from the cloud alone."""
    booted = Ec2Cloud(settings, cluster, "http://10.0.0.5:8642")
    created = {booted.create(C5, f"n-{i}", TOKEN, {}).id: f"n-{i}" for i in range(7)}

    restarted = Ec2Cloud(settings, cluster, "http://10.0.0.5:8642", page_size=5)
    pages = inject(restarted.client, "DescribeInstances", "never", when=lambda params: False)
    listed = restarted.list()
    assert {i.id: i.node_id for i in listed} == created
    assert len(pages.seen) == 2 and "NextToken" in pages.seen[1]
    for instance_id in created:
        restarted.destroy(instance_id)


def test_why_gone_gives_ec2s_reason_for_each_ended_instance_it_knows(
    settings: Ec2Config, cluster: str, ec2: Any
) -> None:
    cloud = Ec2Cloud(settings, cluster, "http://h:1")
    ended, running = (cloud.create(C5, f"n-{n}", TOKEN, {}) for n in range(2))
    ec2.terminate_instances(InstanceIds=[ended.id])
    unknown = "i-0123456789abcdef0"  # EC2 forgets an ended instance after about an hour
    said = cloud.why_gone([ended.id, running.id, unknown])
    assert said == {ended.id: Ended("terminated: Client.UserInitiatedShutdown: User initiated shutdown")}
    assert said[ended.id].launch_error is None  # a terminate from outside is not the type's fault
    assert cloud.why_gone([]) == {}
    cloud.destroy(running.id)


def test_an_instance_describe_does_not_show_yet_is_listed_from_memory(
    settings: Ec2Config, cluster: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EC2 is eventually consistent: right after RunInstances, DescribeInstances may not show the
    instance. The loop would take it for vanished (and its node for gone), then destroy it as an
    orphan once it shows."""
    cloud = Ec2Cloud(settings, cluster, "http://10.0.0.5:8642")
    instance = cloud.create(C5, "n-1", TOKEN, {})

    def not_yet(parsed: dict[str, Any], **_: Any) -> None:
        parsed["Reservations"] = []

    cloud.client.meta.events.register("after-call.ec2.DescribeInstances", not_yet)
    assert [i.id for i in cloud.list()] == [instance.id]
    monkeypatch.setattr(ec2_module, "LIST_GRACE", 0.0)
    assert cloud.list() == []  # past the grace, what EC2 says goes
    cloud.client.meta.events.unregister("after-call.ec2.DescribeInstances", not_yet)
    cloud.destroy(instance.id)


def test_spot_market_per_instance_type(settings: Ec2Config, cluster: str, ec2: Any) -> None:
    cloud = Ec2Cloud(settings.model_copy(update={"market": {"c5.large": "spot"}}), cluster, "http://h:1")
    spot = cloud.create(C5, "n-1", TOKEN, {})
    on_demand = cloud.create(M5, "n-2", TOKEN, {})
    assert described(ec2, spot.id).get("InstanceLifecycle") == "spot"
    assert "InstanceLifecycle" not in described(ec2, on_demand.id)
    for instance in (spot, on_demand):
        cloud.destroy(instance.id)


def short_of_c5_large_in(subnet: str, settings: Ec2Config, cluster: str, subnet_ids: list[str]) -> tuple[Ec2Cloud, Any]:
    """A driver over `subnet_ids` whose RunInstances of a c5.large in `subnet` EC2 answers with
    InsufficientInstanceCapacity; the injection records the calls it answered."""
    cloud = Ec2Cloud(settings.model_copy(update={"subnet_ids": subnet_ids}), cluster, "http://h:1")
    ice = inject(
        cloud.client,
        "RunInstances",
        "InsufficientInstanceCapacity",
        when=lambda p: p["InstanceType"] == "c5.large" and p.get("SubnetId") == subnet,
    )
    return cloud, ice


def test_insufficient_capacity_tries_the_next_subnet_then_raises_for_the_type(
    settings: Ec2Config, cluster: str, ec2: Any, subnet_ids: list[str]
) -> None:
    first, second = subnet_ids
    cloud, ice = short_of_c5_large_in(first, settings, cluster, subnet_ids)
    instance = cloud.create(C5, "n-1", TOKEN, {})
    assert described(ec2, instance.id)["SubnetId"] == second
    # One call in the short subnet: botocore does not retry EC2's HTTP 500 for a capacity error.
    assert [p["SubnetId"] for p in ice.calls] == [first]

    everywhere = inject(cloud.client, "RunInstances", "InsufficientInstanceCapacity", when=lambda p: True)
    with pytest.raises(InsufficientCapacity) as raised:
        cloud.create(M5, "n-2", TOKEN, {})
    assert raised.value.instance_type == "m5.large"
    assert "We currently do not have sufficient m5.large capacity" in str(raised.value)
    assert [p["SubnetId"] for p in everywhere.calls] == [first, second]
    assert {i.node_id for i in cloud.list()} == {"n-1"}
    cloud.destroy(instance.id)


def test_a_subnet_short_of_a_type_is_tried_last_for_that_type_and_first_for_others(
    settings: Ec2Config, cluster: str, ec2: Any, subnet_ids: list[str]
) -> None:
    """Before, each boot of a type one zone had no capacity for asked that zone first again (one
    more RunInstances call, and its wait, per boot), for as long as the shortage lasted."""
    first, second = subnet_ids
    cloud, ice = short_of_c5_large_in(first, settings, cluster, subnet_ids)
    booted = [cloud.create(C5, f"n-{n}", TOKEN, {}) for n in range(2)]
    assert [described(ec2, i.id)["SubnetId"] for i in booted] == [second, second]
    assert len(ice.calls) == 1  # the second boot went to the second subnet at once
    other = cloud.create(M5, "n-2", TOKEN, {})  # the first subnet is short of c5.large only
    assert described(ec2, other.id)["SubnetId"] == first

    # Once it has capacity again (past SHORT_SUBNET_FOR, or a boot there), it is the first subnet again.
    cloud._short = {key: when - ec2_module.SHORT_SUBNET_FOR - 1 for key, when in cloud._short.items()}
    assert cloud.subnets_in_turn("c5.large") == [first, second]
    for instance in [*booted, other]:
        cloud.destroy(instance.id)


def test_quota_throttling_and_other_errors_map_to_corrals_types(settings: Ec2Config, cluster: str) -> None:
    cloud = Ec2Cloud(settings.model_copy(update={"max_attempts": 3}), cluster, "http://h:1")
    quota = inject(cloud.client, "RunInstances", "VcpuLimitExceeded", times=1)
    with pytest.raises(QuotaExceeded, match="VcpuLimitExceeded: You have requested more vCPU capacity"):
        cloud.create(C5, "n-1", TOKEN, {})
    assert len(quota.calls) == 1

    # Throttling is retried by botocore (standard mode, up to max_attempts), then raised as Throttled.
    throttled = inject(cloud.client, "DescribeInstances", "RequestLimitExceeded", times=3)
    with pytest.raises(Throttled, match="RequestLimitExceeded"):
        cloud.list()
    assert len(throttled.calls) == 3
    # Once, then through: the caller never sees it.
    once = inject(cloud.client, "TerminateInstances", "RequestLimitExceeded", times=1)
    cloud.destroy("i-0123456789abcdef0")
    assert len(once.calls) == 1 and len(once.seen) == 2

    inject(cloud.client, "RunInstances", "InvalidParameterValue", when=lambda p: p["InstanceType"] == "m5.large")
    with pytest.raises(CloudError, match="RunInstances: InvalidParameterValue: Value") as raised:
        cloud.create(M5, "n-2", TOKEN, {})
    assert type(raised.value) is CloudError
    assert cloud.list() == []


def test_a_refusal_that_names_the_instance_type_is_that_types_error(
    settings: Ec2Config, cluster: str, image_id: str
) -> None:
    """The loop backs off the type of an ImageUnusable or TypeUnusable and lets the others boot; a
    plain CloudError pauses every boot."""
    cloud = Ec2Cloud(settings, cluster, "http://h:1")
    refusals = [
        ("InvalidParameterValue", WRONG_ARCHITECTURE, ImageUnusable, f"AMI {image_id} of instance type c5.large: "),
        (
            "InvalidParameterCombination",
            "Enhanced networking with the Elastic Network Adapter (ENA) is required for the '{type}' instance type."
            " Ensure that you are using an AMI that is enabled for ENA.",
            ImageUnusable,
            f"AMI {image_id} of instance type c5.large: .*ENA",
        ),
        ("InvalidParameterValue", UNKNOWN_TYPE, TypeUnusable, "instance type c5.large: .*Invalid value 'c5.large'"),
    ]
    for code, message, kind, words in refusals:
        refused = inject(cloud.client, "RunInstances", code, times=1, message=message)
        with pytest.raises(kind, match=words) as raised:
            cloud.create(C5, "n-1", TOKEN, {})
        assert raised.value.instance_type == "c5.large" and len(refused.calls) == 1
    assert cloud.list() == []


def test_an_unreachable_endpoint_is_a_cloud_error(settings: Ec2Config) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    cloud = Ec2Cloud(settings.model_copy(update={"endpoint_url": dead, "max_attempts": 1}), "c", "http://h:1")
    with pytest.raises(CloudError, match="ec2: Could not connect"):
        cloud.list()
    with pytest.raises(CloudError, match="ec2: Could not connect"):
        cloud.create(C5, "n-1", TOKEN, {})


def test_corral_config_check_warns_of_a_server_the_instances_cannot_reach(tmp_path: Path) -> None:
    """Before, `corral config check` said OK to a config whose agents could never pair: corral run
    booted instance after instance, each terminated after boot_grace and its type backed off, while
    the jobs waited; the log said only that the instances did not pair."""
    ec2 = '[cloud]\ndriver = "ec2"\n[cloud.ec2]\nimage_id = "ami-12345678"\n'
    path = tmp_path / "corral.toml"
    path.write_text(ec2 + 'server_url = "http://localhost:8642"\n')  # server.host left 127.0.0.1
    env = {**os.environ, "CORRAL_HOME": str(tmp_path / "home"), "COLUMNS": "300"}
    command = [CORRAL, "config", "check", str(path)]
    checked = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    assert checked.returncode == 0
    said = " ".join(checked.stdout.split())
    assert "warning: cloud.ec2.server_url (http://localhost:8642) names this machine by a loopback address" in said
    assert "warning: server.host (127.0.0.1) takes connections from this machine only" in said
    assert 'set server.host = "0.0.0.0"' in said

    path.write_text('[server]\nhost = "::1"\n' + ec2 + 'server_url = "http://[::1]:8642"\n')
    assert len(load_config(path).warnings()) == 2
    cert = tmp_path / "server.pem"
    cert.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    tls = f'[server]\nhost = "0.0.0.0"\nport = 8642\ntls_cert = "{cert}"\ntls_key = "{cert}"\n'
    path.write_text(tls + ec2 + 'server_url = "http://10.0.1.10:8642"\n')
    [plain_to_tls] = load_config(path).warnings()
    assert "is http:// but server.port 8642 speaks HTTPS" in plain_to_tls

    # Where the instances can reach it, nothing is said.
    path.write_text(tls + ec2 + 'server_url = "https://10.0.1.10:8642"\n')
    assert load_config(path).warnings() == []
    path.write_text('[server]\nhost = "0.0.0.0"\n' + ec2 + 'server_url = "http://corral.internal:8642"\n')
    assert load_config(path).warnings() == []


def test_the_config_asks_for_what_ec2_cannot_boot_without(tmp_path: Path) -> None:
    path = tmp_path / "corral.toml"
    path.write_text(
        '[cloud]\ndriver = "ec2"\n[cloud.ec2]\nsubnet_ids = ["subnet-1234", "subnet-0123456789abcdef0"]\n'
        'market = { "p5.48xlarge" = "spot" }\ntags = { "corral-cluster" = "x" }\nserver_url = "ftp://x"\n'
    )
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    message = str(raised.value)
    assert "cloud.ec2.subnet_ids: not subnet-<hex id>: subnet-1234" in message
    assert "cloud.ec2.tags: 'corral-cluster' is corral's own tag" in message
    assert "cloud.ec2.server_url: not an http:// or https:// URL" in message

    path.write_text('[cloud]\ndriver = "ec2"\n[cloud.ec2]\nmarket = { "p5.48xlarge" = "spot" }\n')
    message = str(pytest.raises(ConfigError, load_config, path).value)
    assert "cloud.ec2.image_id: required with cloud.driver = 'ec2'" in message
    assert "cloud.ec2.server_url: required with cloud.driver = 'ec2'" in message
    assert "cloud.ec2.market.p5.48xlarge: 'p5.48xlarge' is not in instance_types" in message
    # Not read unless the driver is ec2.
    assert Config.model_validate({"cloud": {"ec2": {"region": "eu-west-1"}}}).cloud.driver == "loopback"


def test_the_example_config_is_valid_and_builds_the_driver() -> None:
    from corral.serve import make_cloud

    example = Path(__file__).resolve().parents[2] / "examples" / "ec2.toml"
    config = load_config(example)
    assert config.cloud.driver == "ec2" and config.cloud.ec2.image_id
    cloud = make_cloud(config, "http://127.0.0.1:8642")
    assert isinstance(cloud, Ec2Cloud) and cloud.server_url == config.cloud.ec2.server_url


# ---- the AMI and the scratch disk of each instance type ------------------------------------------

C5D = InstanceType(name="c5d.large", vcpus=2, ram_mib=4096, price_per_hour=0.096, scratch_mib=50 * 1024)
ODD = InstanceType(name="m5.2xlarge", vcpus=8, ram_mib=32768, price_per_hour=0.384, scratch_mib=1500)


def root_volume(ec2: Any, instance_id: str) -> dict[str, Any]:
    """The volume EC2 attached at the instance's root device, with the mapping's DeleteOnTermination."""
    raw = described(ec2, instance_id)
    [mapping] = [m for m in raw["BlockDeviceMappings"] if m["DeviceName"] == raw["RootDeviceName"]]
    [volume] = ec2.describe_volumes(VolumeIds=[mapping["Ebs"]["VolumeId"]])["Volumes"]
    return {**volume, "DeleteOnTermination": mapping["Ebs"]["DeleteOnTermination"]}


def image_root_gib(ec2: Any, image_id: str) -> int:
    [image] = ec2.describe_images(ImageIds=[image_id])["Images"]
    [root] = [m for m in image["BlockDeviceMappings"] if m["DeviceName"] == image["RootDeviceName"]]
    return int(root["Ebs"]["VolumeSize"])


@pytest.fixture(scope="session")
def arm_image_id(ec2: Any, image_id: str) -> str:
    arm = [i["ImageId"] for i in ec2.describe_images(Filters=[{"Name": "architecture", "Values": ["arm64"]}])["Images"]]
    assert arm and arm[0] != image_id
    return str(arm[0])


def test_each_instance_type_boots_its_own_ami_else_image_id(
    settings: Ec2Config, cluster: str, ec2: Any, image_id: str, arm_image_id: str
) -> None:
    cloud = Ec2Cloud(settings.model_copy(update={"image_ids": {"m5.large": arm_image_id}}), cluster, "http://h:1")
    own = cloud.create(M5, "n-1", TOKEN, {})
    fallback = cloud.create(C5, "n-2", TOKEN, {})
    assert described(ec2, own.id)["ImageId"] == arm_image_id
    assert described(ec2, fallback.id)["ImageId"] == image_id
    for instance in (own, fallback):
        cloud.destroy(instance.id)


def test_the_root_volume_is_the_amis_root_plus_the_types_scratch(
    settings: Ec2Config, cluster: str, ec2: Any, image_id: str, arm_image_id: str
) -> None:
    """A job placed by the type's scratch finds that much disk: the root volume is grown by it."""
    cloud = Ec2Cloud(settings.model_copy(update={"image_ids": {"m5.large": arm_image_id}}), cluster, "http://h:1")
    describes = inject(cloud.client, "DescribeImages", "never", when=lambda params: False)
    c5 = cloud.create(C5, "n-1", TOKEN, {})  # 8 GiB of scratch
    m5 = cloud.create(M5, "n-2", TOKEN, {})  # 100 GiB, the default
    odd = cloud.create(ODD, "n-3", TOKEN, {})  # 1500 MiB: rounded up to whole GiB, so the promise holds
    again = cloud.create(C5, "n-4", TOKEN, {})

    base = image_root_gib(ec2, image_id)
    volume = root_volume(ec2, c5.id)
    # Encrypted unless the config says otherwise, as Karpenter's default root volumes are: a job's
    # data on its scratch is not left readable from a snapshot of the disk.
    assert (volume["Size"], volume["VolumeType"], volume["Encrypted"]) == (base + 8, "gp3", True)
    assert volume["DeleteOnTermination"] is True  # nothing is left behind to pay for
    assert root_volume(ec2, m5.id)["Size"] == image_root_gib(ec2, arm_image_id) + 100
    assert root_volume(ec2, odd.id)["Size"] == base + 2
    assert root_volume(ec2, again.id)["Size"] == base + 8
    # One DescribeImages per AMI, whatever the number of boots.
    assert sorted(p["ImageId.1"] for p in describes.seen) == sorted([image_id, arm_image_id])
    for instance in (c5, m5, odd, again):
        cloud.destroy(instance.id)

    # encrypted = false leaves it to EC2 (the AMI's snapshot, the account's encryption by default).
    plain = RootVolumeConfig(encrypted=False)
    left = Ec2Cloud(settings.model_copy(update={"root_volume": plain}), cluster, "http://h:1")
    sent = inject(left.client, "RunInstances", "never", when=lambda params: False)
    unencrypted = left.create(C5, "n-5", TOKEN, {})
    assert not any("Encrypted" in key for key in sent.seen[0])
    assert root_volume(ec2, unencrypted.id)["Encrypted"] is False
    left.destroy(unencrypted.id)


def test_an_included_scratch_type_gets_no_added_volume_and_the_volume_options_are_sent(
    settings: Ec2Config, cluster: str, ec2: Any, image_id: str
) -> None:
    root = {"type": "gp3", "iops": 6000, "throughput": 500, "encrypted": True, "kms_key_id": "alias/corral-scratch"}
    configured = settings.model_copy(
        update={"included_scratch": ["c5d.large"], "root_volume": RootVolumeConfig.model_validate(root)}
    )
    cloud = Ec2Cloud(configured, cluster, "http://h:1")
    runs = inject(cloud.client, "RunInstances", "never", when=lambda params: False)
    included = cloud.create(C5D, "n-1", TOKEN, {})
    added = cloud.create(C5, "n-2", TOKEN, {})

    base = image_root_gib(ec2, image_id)
    volume = root_volume(ec2, included.id)
    assert volume["Size"] == base  # its 50 GiB of scratch is its own NVMe disk
    assert (volume["Encrypted"], volume["KmsKeyId"], volume["DeleteOnTermination"]) == (
        True,
        "alias/corral-scratch",
        True,
    )
    assert root_volume(ec2, added.id)["Size"] == base + 8
    # moto keeps no IOPS or throughput of a launch's mapping: read them from the request sent.
    sent = runs.seen[-1]
    assert (sent["BlockDeviceMapping.1.Ebs.Iops"], sent["BlockDeviceMapping.1.Ebs.Throughput"]) == ("6000", "500")
    for instance in (included, added):
        cloud.destroy(instance.id)


def test_an_ami_that_is_not_there_is_an_error_naming_it_and_the_type_not_a_capacity_error(
    settings: Ec2Config, cluster: str, ec2: Any, image_id: str, subnet_ids: list[str]
) -> None:
    missing = "ami-0123456789abcdef0"
    instance = ec2.run_instances(ImageId=image_id, MinCount=1, MaxCount=1)["Instances"][0]
    deregistered = ec2.create_image(InstanceId=instance["InstanceId"], Name=f"{cluster}-gone")["ImageId"]
    ec2.deregister_image(ImageId=deregistered)
    ec2.terminate_instances(InstanceIds=[instance["InstanceId"]])
    [instance_store] = [
        i["ImageId"]
        for i in ec2.describe_images(Filters=[{"Name": "root-device-type", "Values": ["instance-store"]}])["Images"]
    ]
    images = {"m5.large": missing, "c5.large": deregistered, "c5d.large": instance_store}
    cloud = Ec2Cloud(settings.model_copy(update={"image_ids": images, "subnet_ids": subnet_ids}), cluster, "http://h:1")

    for itype, message in (
        (M5, f"AMI {missing} of instance type m5.large does not exist or is not shared with this account"),
        (C5, f"AMI {deregistered} of instance type c5.large does not exist or is not shared with this account"),
        (C5D, f"AMI {instance_store} of instance type c5d.large is instance-store-backed"),
    ):
        with pytest.raises(ImageUnusable, match=message) as raised:
            cloud.create(itype, "n-1", TOKEN, {})
        assert raised.value.instance_type == itype.name  # the type's fault: the loop backs that type off
        assert itype is not M5 or "InvalidAMIID.NotFound" in str(raised.value)  # and EC2's own words
    assert cloud.list() == []

    # A failure is not remembered: an AMI shared after it is used by the next boot.
    fixed = Ec2Cloud(settings, cluster, "http://h:1")
    inject(fixed.client, "DescribeImages", "InvalidAMIID.NotFound", times=1)
    with pytest.raises(ImageUnusable, match=f"AMI {image_id} of instance type c5.large does not exist"):
        fixed.create(C5, "n-2", TOKEN, {})
    fixed.create(C5, "n-3", TOKEN, {})

    # An AMI deregistered after it was read: RunInstances says so, in one subnet, and it is read again.
    gone = inject(fixed.client, "RunInstances", "InvalidAMIID.NotFound", times=1)
    describes = inject(fixed.client, "DescribeImages", "never", when=lambda params: False)
    with pytest.raises(ImageUnusable, match=f"AMI {image_id} of instance type c5.large: .*InvalidAMIID.NotFound"):
        fixed.create(C5, "n-4", TOKEN, {})
    assert len(gone.calls) == 1 and describes.seen == []
    fixed.create(C5, "n-5", TOKEN, {})
    assert len(describes.seen) == 1
    assert len(fixed.list()) == 2
    for listed in fixed.list():
        fixed.destroy(listed.id)


def test_the_config_names_a_bad_ami_or_volume_setting(tmp_path: Path) -> None:
    path = tmp_path / "corral.toml"
    head = '[cloud]\ndriver = "ec2"\n[cloud.ec2]\nserver_url = "http://10.0.0.5:8642"\n'
    g5 = '"g5.xlarge" = "ami-0123456789abcdef0"'
    path.write_text(head + f'image_ids = {{ "c5.large" = "ami-12345678", "m5.large" = "ami-xyz", {g5} }}\n')
    message = str(pytest.raises(ConfigError, load_config, path).value)
    assert "cloud.ec2.image_ids: not ami-<hex id>: m5.large = 'ami-xyz'" in message
    path.write_text(head + f'image_ids = {{ "c5.large" = "ami-12345678", {g5} }}\nincluded_scratch = ["c5d.large"]\n')
    message = str(pytest.raises(ConfigError, load_config, path).value)
    assert "cloud.ec2.image_ids.g5.xlarge: 'g5.xlarge' is not in instance_types (c5.large, m5.large" in message
    assert "cloud.ec2.included_scratch.0: 'c5d.large' is not in instance_types" in message
    # image_id may be left out only when every type has an AMI of its own; the rest are named.
    assert "cloud.ec2.image_id: required with cloud.driver = 'ec2' unless image_ids names an AMI" in message
    assert "(none for m5.large, m5.xlarge, r5.xlarge)" in message

    every_type = ", ".join(
        f'"{t}" = "ami-1234567{n}"' for n, t in enumerate(["c5.large", "m5.large", "m5.xlarge", "r5.xlarge"])
    )
    path.write_text(head + f"image_ids = {{ {every_type} }}\n")
    ec2 = load_config(path).cloud.ec2
    assert ec2.image_id is None and ec2.image_for("r5.xlarge") == "ami-12345673"

    for volume, error in (
        ('type = "io2"', "iops is required with type = 'io2'"),
        ('type = "gp2"\niops = 3000', "iops cannot be set with type = 'gp2'"),
        ('type = "io1"\niops = 3000\nthroughput = 250', "throughput cannot be set with type = 'io1'"),
        ('encrypted = false\nkms_key_id = "alias/x"', "kms_key_id needs encrypted = true"),
        ('type = "st1"', "cloud.ec2.root_volume.type: Input should be 'gp3', 'gp2', 'io1', 'io2' or 'standard'"),
        ("encrypted = 1", "cloud.ec2.root_volume.encrypted: Input should be a valid boolean"),
    ):
        path.write_text(head + f'image_id = "ami-12345678"\n[cloud.ec2.root_volume]\n{volume}\n')
        assert error in str(pytest.raises(ConfigError, load_config, path).value), volume


def test_boots_spread_over_the_subnets_by_the_live_instances_in_each(
    settings: Ec2Config, cluster: str, ec2: Any, subnet_ids: list[str]
) -> None:
    first, second = subnet_ids
    zone = {s["SubnetId"]: s["AvailabilityZone"] for s in ec2.describe_subnets(SubnetIds=subnet_ids)["Subnets"]}
    spread = settings.model_copy(update={"subnet_ids": subnet_ids})
    cloud = Ec2Cloud(spread, cluster, "http://h:1")
    booted = [cloud.create(C5, f"n-{n}", TOKEN, {}) for n in range(4)]
    subnets = [described(ec2, i.id)["SubnetId"] for i in booted]
    assert subnets == [first, second, first, second]
    assert len({zone[s] for s in subnets}) == 2  # one zone's outage takes half the fleet, not all of it

    # The two in the first subnet end; the next boots fill it again.
    cloud.destroy(booted[0].id)
    cloud.destroy(booted[2].id)
    refill = cloud.create(C5, "n-4", TOKEN, {})
    assert described(ec2, refill.id)["SubnetId"] == first

    # A restarted corral counts what the listing shows in each subnet: the first has one, the second none.
    cloud.destroy(booted[1].id)
    cloud.destroy(booted[3].id)
    restarted = Ec2Cloud(spread, cluster, "http://h:1")
    assert {i.node_id for i in restarted.list()} == {"n-4"}
    assert described(ec2, restarted.create(C5, "n-5", TOKEN, {}).id)["SubnetId"] == second
    for instance in restarted.list():
        restarted.destroy(instance.id)


def test_the_operator_guides_iam_policy_allows_every_ec2_call_the_driver_makes(
    settings: Ec2Config, cluster: str
) -> None:
    """The guide's policy is what an operator pastes into IAM: a call the driver makes that it does
    not allow fails only in production, at the first boot or the first ended instance."""
    guide = (Path(__file__).resolve().parents[2] / "docs" / "operator-guide.md").read_text()
    start = guide.index("```json", guide.index("**IAM.**")) + len("```json")
    policy = json.loads(guide[start : guide.index("```", start)])
    allowed: set[str] = set()
    for statement in policy["Statement"]:
        actions = statement["Action"]
        allowed.update([actions] if isinstance(actions, str) else actions)

    cloud = Ec2Cloud(settings.model_copy(update={"market": {"c5.large": "spot"}}), cluster, "http://h:1")
    called: set[str] = set()
    cloud.client.meta.events.register("before-call.ec2", lambda model, **_: called.add(f"ec2:{model.name}"))
    assert cloud.check() is None
    spot, plain = cloud.create(C5, "n-1", TOKEN, {}), cloud.create(M5, "n-2", TOKEN, {})
    cloud.list()
    cloud.destroy(spot.id)
    cloud.why_gone([spot.id])
    cloud.destroy(plain.id)

    assert called == {"ec2:DescribeInstances", "ec2:DescribeImages", "ec2:RunInstances", "ec2:TerminateInstances"}
    assert called <= allowed
    # Tags are set at launch (TagSpecifications), which EC2 authorizes as CreateTags on RunInstances.
    assert "ec2:CreateTags" in allowed and "iam:PassRole" in allowed


def test_destroy_many_terminates_in_one_call_and_leaves_out_only_what_ec2_refuses(
    settings: Ec2Config, cluster: str, ec2: Any
) -> None:
    """TerminateInstances takes up to 1,000 ids; EC2 refuses the whole call for one instance it will
    not terminate (here: termination protection, moto's own refusal) and terminates none of the
    others. destroy_many terminates the others and names the one with EC2's words."""
    cloud = Ec2Cloud(settings, cluster, "http://10.0.0.5:8642")
    instances = [cloud.create(C5, f"n-{i}", TOKEN, {}) for i in range(6)]
    protected = instances[3].id
    ec2.modify_instance_attribute(InstanceId=protected, DisableApiTermination={"Value": True})
    calls = inject(cloud.client, "TerminateInstances", "never", when=lambda params: False)

    refused = cloud.destroy_many([i.id for i in instances] + ["i-0123456789abcdef0"])  # and one long gone

    assert list(refused) == [protected]
    assert isinstance(refused[protected], CloudError)
    assert f"The instance '{protected}' may not be terminated" in str(refused[protected])
    for instance in instances:
        expected = ("running",) if instance.id == protected else ("shutting-down", "terminated")
        assert state(ec2, instance.id) in expected
    # One call, then again without the id EC2 named as unknown, then without the protected one.
    assert len(calls.seen) == 3
    assert cloud.destroy_many([]) == {}

    ec2.modify_instance_attribute(InstanceId=protected, DisableApiTermination={"Value": False})
    assert cloud.destroy_many([protected]) == {}
    assert state(ec2, protected) in ("shutting-down", "terminated")


def test_destroy_many_halves_a_call_whose_refusal_names_no_instance_and_sends_at_most_1000_ids(
    settings: Ec2Config, cluster: str
) -> None:
    """An IAM condition that refuses one instance may say so without naming it (EC2's encoded
    authorization message): the call is halved until the refused instance is alone. The ids go
    1,000 a call, EC2's most."""
    cloud = Ec2Cloud(settings, cluster, "http://10.0.0.5:8642")
    instances = [cloud.create(C5, f"n-{i}", TOKEN, {}) for i in range(8)]
    denied = instances[5].id
    encoded = "You are not authorized to perform this operation. Encoded authorization failure message: AbC123"
    refusal = inject(
        cloud.client,
        "TerminateInstances",
        "UnauthorizedOperation",
        when=lambda params: denied in params.values(),
        message=encoded,
    )

    refused = cloud.destroy_many([i.id for i in instances])

    assert list(refused) == [denied] and "Encoded authorization failure message" in str(refused[denied])
    assert [i.id for i in cloud.list()] == [denied]
    assert len(refusal.seen) <= 1 + 2 * 3  # halved down to one of 8: at most three levels of two calls

    impatient = Ec2Cloud(settings.model_copy(update={"max_attempts": 1}), cluster, "http://10.0.0.5:8642")
    throttled = inject(impatient.client, "TerminateInstances", "RequestLimitExceeded")
    refused = impatient.destroy_many([denied, "i-0123456789abcdef0"])
    # A throttle is the whole call's: no halving into it, both ids refused with it.
    assert set(refused) == {denied, "i-0123456789abcdef0"} and all(isinstance(e, Throttled) for e in refused.values())
    assert len(throttled.calls) == 1
    assert Ec2Cloud(settings, cluster, "").destroy_many([denied]) == {}

    sent: list[int] = []
    original = cloud.client.terminate_instances
    cloud.client.terminate_instances = lambda InstanceIds: sent.append(len(InstanceIds))  # noqa: N803
    try:
        assert cloud.destroy_many([f"i-{n:017x}" for n in range(2500)]) == {}
    finally:
        cloud.client.terminate_instances = original
    assert sent == [1000, 1000, 500]
