"""The `ec2` cloud: every instance is an EC2 instance, reached through boto3.

- `create` is one RunInstances (MinCount = MaxCount = 1) with corral's tags on the instance and its
  volumes, in the configured subnet with the fewest live instances (the next on a capacity error).
  It boots the instance type's AMI (`image_ids`, else `image_id`), and its root EBS volume is the
  AMI's own root volume grown by the type's scratch, so that the scratch placement counts on is on
  the disk: the AMI's root device and size are read with DescribeImages, once per AMI. A type whose
  scratch is its own instance storage (`included_scratch`) keeps the AMI's root size. The
  instance learns where the server is and its one-time boot token from its user data:
  a cloud-init document built as data (YAML), never by pasting values into a shell script. The
  token goes to a root-only file that the agent's systemd unit reads as its environment, so it is
  in no process's argument list.
- `list` is DescribeInstances, filtered by the cluster tag and the live states, page by page.
- `destroy_many` is TerminateInstances, up to 1,000 instances a call; an instance that is already
  gone is no error, and one EC2 refuses to terminate is found (by the id EC2's message names, else
  by halving the call) and left out, so that the others are terminated.

botocore's errors are mapped to corral's typed ones (`error_from`). Throttled calls are retried by
botocore itself (its standard or adaptive retry mode), never by hand here. Capacity errors are not
retried: EC2 answers them with HTTP 500, which botocore would retry four times with back-off, each
retry spending the account's RunInstances rate, for an error that lasts minutes; corral answers them
by trying the next subnet, then by backing the type off (seed 004).
"""

from __future__ import annotations

import builtins
import logging
import math
import re
import secrets
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import boto3
import botocore.config
import botocore.exceptions
import yaml

from corral.cloud.base import (
    TAG_CLUSTER,
    TAG_INSTANCE_TYPE,
    TAG_NODE_ID,
    CloudError,
    CloudInstance,
    Ended,
    ImageUnusable,
    InsufficientCapacity,
    QuotaExceeded,
    Throttled,
    TypeUnusable,
    agent_options,
)
from corral.config import Ec2Config
from corral.core.model import InstanceType

log = logging.getLogger("corral.cloud.ec2")

LIVE_STATES = ("pending", "running", "stopping", "stopped")
# The capacity of this type is not to be had here now: the next subnet may have it, else back off.
CAPACITY_CODES = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientCapacity",
        "InsufficientHostCapacity",
        "Unsupported",  # the type is not offered in this subnet's zone
    }
)
# The next subnet may do, but no back-off of the type: the subnet, not the type, is short.
SUBNET_CODES = frozenset({"InsufficientFreeAddressesInSubnet"})
QUOTA_CODES = frozenset({"InstanceLimitExceeded", "VcpuLimitExceeded", "MaxSpotInstanceCountExceeded"})
THROTTLE_CODES = frozenset({"RequestLimitExceeded", "Throttling", "ThrottlingException", "RequestThrottled"})
NOT_FOUND = "InvalidInstanceID.NotFound"
# Credentials EC2 does not take, or that may not do what corral does: no call will succeed.
CREDENTIAL_CODES = frozenset(
    {
        "AuthFailure",
        "UnauthorizedOperation",
        "InvalidClientTokenId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "RequestExpired",
        "OptInRequired",
        "Blocked",
    }
)
# An AMI that does not exist, is not shared with the account, or is malformed: the config's fault,
# not the cloud's capacity (InvalidAMIID.NotFound, .Unavailable, .Malformed).
IMAGE_CODES_PREFIX = "InvalidAMIID."
# EC2 refuses one instance type as configured with these general codes, and says so by naming the
# type: "Invalid value 'c5.larg' for InstanceType." (a name it does not know); "The architecture
# 'arm64' of the specified instance type does not match the architecture 'x86_64' of the specified
# AMI." (a Graviton type left on an x86 AMI); "Enhanced networking with the Elastic Network Adapter
# (ENA) is required for the 'c6i.large' instance type." That type's fault, not the account's: it is
# backed off and the other types boot on (a refusal that names no type pauses every boot).
TYPE_REFUSED_CODES = frozenset({"InvalidParameterValue", "InvalidParameterCombination"})
# EC2 launches spot instances through the account's service-linked role AWSServiceRoleForEC2Spot,
# which the first spot launch creates, if the caller may (iam:CreateServiceLinkedRole). Without it
# every spot launch is refused, and no on-demand one: the spot types' fault, not the account's.
SPOT_ROLE_CODE = "AuthFailure.ServiceLinkedRoleCreationNotPermitted"
_NAMES_THE_TYPE = re.compile(r"\binstance ?type\b|\binstances of type\b", re.IGNORECASE)
# ...and of those, the ones where the type's AMI is what does not fit it.
_NAMES_THE_IMAGE = re.compile(
    r"\bAMI\b|\barchitecture\b|\bvirtualization\b|\bENA\b|Elastic Network Adapter", re.IGNORECASE
)

AGENT_ENV_FILE = "/etc/corral/agent.env"
AGENT_CA_FILE = "/etc/corral/server-ca.pem"  # the CA bundle the agent verifies an https server with
IMDS_URL = "http://169.254.169.254"  # the instance metadata service: the agent asks it for spot interruption notices
AGENT_UNIT = "corral-agent"
AGENT_RESTART_DELAY = "5s"  # systemd's RestartSec for the agent's unit
# The token is written to a systemd environment file: only characters that need no quoting there.
_TOKEN = re.compile(r"[A-Za-z0-9_-]{16,256}")
# DescribeInstances may not show an instance for a few seconds after RunInstances returned it (EC2's
# eventual consistency). Until then `list` reports it from memory, or the control loop would take
# it for vanished, forget its node, and then destroy it as an orphan once it shows.
LIST_GRACE = 120.0
# A subnet that had no capacity for a type is tried last for that type for this long (Karpenter keeps
# an offering, a type in a zone, out of its launches as long after a capacity error): each boot of
# the type would otherwise spend a RunInstances call, and its latency, on the short zone first.
SHORT_SUBNET_FOR = 180.0
# State reasons of an instance EC2 ended in its launch (pending, then terminated) for something the
# type's next instance meets too: its volumes' KMS key (a key disabled, or one the launch may not
# use: Client.InternalError, as EC2 documents it), a snapshot gone, the account's EBS volume limit.
# Without a back-off, the next pass booted another of the type, which ended the same way, pass after
# pass. (Client.UserInitiatedShutdown, a terminate from outside, and Server.SpotInstanceTermination,
# a reclaim, are not the type's fault.)
LAUNCH_REFUSED_REASONS = frozenset(
    {
        "Client.InternalError",
        "Client.InvalidKMSKey.InvalidState",
        "Client.InvalidSnapshot.NotFound",
        "Client.VolumeLimitExceeded",
    }
)
CAPACITY_REASON = "Server.InsufficientInstanceCapacity"
FILTER_VALUES = 200  # the most values EC2 takes in one filter of a Describe call
TERMINATE_BATCH = 1000  # the most instance ids EC2 takes in one TerminateInstances
_INSTANCE_ID = re.compile(r"\bi-[0-9a-f]{8,17}\b")
# Errors of a whole TerminateInstances call, not of one instance in it: halving the call to find the
# refused instance would only spend more calls into a throttle or on credentials EC2 refuses.
# (UnauthorizedOperation is not among them: an IAM condition on a tag refuses an instance at a time.)
WHOLE_CALL_CODES = THROTTLE_CODES | (CREDENTIAL_CODES - {"UnauthorizedOperation"})


class _WithoutUserData(logging.Filter):
    """Keeps the user data out of botocore's debug log. botocore.endpoint logs every request's
    parameters at DEBUG ("Making request for OperationModel(name=RunInstances) with params: …"),
    RunInstances' base64 UserData among them, and that decodes to the instance's boot token: with
    `corral run --log-level debug` anyone reading the log (or where it is shipped) could pair as the
    node before its agent does and be sent its jobs. The record keeps everything else."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any(_carries_user_data(arg) for arg in record.args):
            record.args = tuple(_without_user_data(arg) for arg in record.args)
        return True


def _carries_user_data(arg: object) -> bool:
    return isinstance(arg, dict) and isinstance(arg.get("body"), dict) and "UserData" in arg["body"]


def _without_user_data(arg: object) -> object:
    if not _carries_user_data(arg):
        return arg
    assert isinstance(arg, dict)
    said = f"<redacted by corral: {len(str(arg['body']['UserData']))} characters>"
    return {**arg, "body": {**arg["body"], "UserData": said}}


_BOTOCORE_REQUESTS = logging.getLogger("botocore.endpoint")
if not any(isinstance(known, _WithoutUserData) for known in _BOTOCORE_REQUESTS.filters):
    _BOTOCORE_REQUESTS.addFilter(_WithoutUserData())


def error_from(exc: Exception, instance_type: str = "") -> CloudError:
    """corral's typed error for a botocore error (ClientError by its code, the rest as CloudError)."""
    if not isinstance(exc, botocore.exceptions.ClientError):
        return CloudError(f"ec2: {exc}")
    code, said = _code(exc), _message(exc)
    operation = exc.operation_name
    if code in CAPACITY_CODES and instance_type:
        return InsufficientCapacity(instance_type, f"insufficient capacity for {instance_type}: {said}")
    if code in QUOTA_CODES:
        return QuotaExceeded(f"ec2 {operation}: {said}")
    if code in THROTTLE_CODES:
        return Throttled(f"ec2 {operation}: {said}")
    return CloudError(f"ec2 {operation}: {said}")


def agent_user_data(
    settings: Ec2Config,
    server_url: str,
    node_id: str,
    boot_token: str,
    instance_type: InstanceType,
    ca_pem: str | None = None,
) -> str:
    """The instance's cloud-init user data: write the boot token to a root-only environment file
    (and `ca_pem`, the CA bundle the agent verifies an https server with), then start the agent as
    a transient systemd unit that reads it. Built as a YAML document; the agent's command is an
    argument list, which cloud-init quotes itself."""
    if not _TOKEN.fullmatch(boot_token):
        raise CloudError("ec2: the boot token must be 16 to 256 URL-safe characters")
    ca_file = AGENT_CA_FILE if ca_pem else None
    options = agent_options(server_url, node_id, instance_type, settings.agent_work_dir, ca_file)
    argv = [*settings.agent_command, *options, "--imds", IMDS_URL]
    files: list[dict[str, str]] = [
        {
            "path": AGENT_ENV_FILE,
            "owner": "root:root",
            "permissions": "0600",
            "content": f"CORRAL_BOOT_TOKEN={boot_token}\n",
        }
    ]
    if ca_pem:
        files.append({"path": AGENT_CA_FILE, "owner": "root:root", "permissions": "0644", "content": ca_pem})
    document = {
        "write_files": files,
        # Restarted when it dies (a crash, the OOM killer): the agent saved the node's credentials
        # at pairing, so the new one resumes the node where the used token would be refused. Not
        # after 2 or 3 (pairing refused, the node forgotten): a new start would fail the same way.
        # KillMode=process: the runs' keepers (corral.agent.keeper) outlive the dead agent, and
        # the new one re-adopts them; a stop's SIGTERM goes to the agent, which stops its runs.
        "runcmd": [
            [
                "systemd-run",
                f"--unit={AGENT_UNIT}",
                f"--property=EnvironmentFile={AGENT_ENV_FILE}",
                "--property=Restart=on-failure",
                f"--property=RestartSec={AGENT_RESTART_DELAY}",
                "--property=RestartPreventExitStatus=2 3",
                "--property=KillMode=process",
                "--",
                *argv,
            ]
        ],
    }
    return "#cloud-config\n" + yaml.safe_dump(document, sort_keys=False, width=1 << 20)


@dataclass(frozen=True, slots=True)
class RootDevice:
    """An AMI's root volume, as DescribeImages tells it."""

    name: str  # e.g. /dev/xvda: the mapping that resizes the root volume must name it
    size_gib: int


def root_device_of(image: dict[str, Any], image_id: str, instance_type: str) -> RootDevice:
    """The root device of a DescribeImages entry, or ImageUnusable naming the AMI and the type."""
    where = f"ec2: AMI {image_id} of instance type {instance_type}"
    image_state = image.get("State", "available")
    if image_state != "available":
        raise ImageUnusable(instance_type, f"{where} is {image_state}, not available")
    if image.get("RootDeviceType", "ebs") != "ebs":
        # Its root is an instance-store disk: there is no EBS volume to grow by the scratch.
        kind = image.get("RootDeviceType")
        raise ImageUnusable(instance_type, f"{where} is {kind}-backed: corral needs an EBS-backed AMI")
    name = str(image.get("RootDeviceName") or "")
    for mapping in image.get("BlockDeviceMappings", []):
        size = mapping.get("Ebs", {}).get("VolumeSize")
        if mapping.get("DeviceName") == name and isinstance(size, int):
            return RootDevice(name, size)
    missing = f"{where}: DescribeImages shows no EBS volume for its root device {name or '(none)'}"
    raise ImageUnusable(instance_type, missing)


def scratch_gib(instance_type: InstanceType) -> int:
    """The type's scratch in whole GiB (EBS sizes are), rounded up so that the promise holds."""
    return math.ceil(instance_type.scratch_mib / 1024)


class Ec2Cloud:
    listing_lag = LIST_GRACE

    def __init__(
        self, settings: Ec2Config, cluster: str, server_url: str, page_size: int = 500, ca_pem: str | None = None
    ) -> None:
        self.settings = settings
        self.cluster = cluster
        self.server_url = server_url
        self.ca_pem = ca_pem  # what the agents verify an https server_url with (None: the AMI's CAs)
        self.page_size = page_size
        config = botocore.config.Config(
            retries={"mode": settings.retry_mode, "total_max_attempts": settings.max_attempts},
            connect_timeout=10,
            read_timeout=30,
            user_agent_extra="corral",
        )
        try:
            session = boto3.session.Session(profile_name=settings.profile, region_name=settings.region)
            self.client: Any = session.client("ec2", endpoint_url=settings.endpoint_url, config=config)
        except botocore.exceptions.NoRegionError as exc:
            message = (
                "cloud.ec2.region is not set, and the AWS SDK finds no region either (AWS_REGION,"
                " AWS_DEFAULT_REGION, the profile's region): set cloud.ec2.region"
            )
            raise CloudError(message) from exc
        except botocore.exceptions.ProfileNotFound as exc:
            message = f"cloud.ec2.profile {settings.profile!r} is no profile of ~/.aws/config or ~/.aws/credentials"
            raise CloudError(message) from exc
        except botocore.exceptions.BotoCoreError as exc:
            raise CloudError(f"cloud.ec2: cannot make an EC2 client: {exc}") from exc
        self.client.meta.events.register_first("needs-retry.ec2.RunInstances", _no_retry_on_capacity)
        self._recent: dict[str, tuple[CloudInstance, float]] = {}
        self._lock = threading.Lock()
        # An AMI's root device does not change: read once. Failures are not kept, so that an AMI
        # shared or fixed after a failed boot is used by the next boot without a restart.
        self._roots: dict[str, RootDevice] = {}
        # The subnet of each live instance of the cluster, as the last listing and this driver's
        # creations since say: a boot goes to the configured subnet with the fewest.
        self._subnet_of: dict[str, str] = {}
        # (instance type, subnet) -> when that subnet last had no capacity for the type (monotonic).
        self._short: dict[tuple[str, str], float] = {}

    def check(self) -> str | None:
        """What stops every call of this driver, asked once at start with one DescribeInstances (a
        permission corral needs anyway): no credentials, or credentials EC2 refuses. Said in words
        that name where to fix it, or None. Without it `corral run` started as if all were well,
        and said only "cloud list failed" and "boot failed" in its log, every pass. EC2 not
        answering (the network, a region that does not exist) is no verdict: logged, None."""
        region = self.client.meta.region_name
        where = f"cloud.ec2.profile {self.settings.profile!r}" if self.settings.profile else "the AWS SDK's defaults"
        try:
            self.client.describe_instances(
                Filters=[{"Name": f"tag:{TAG_CLUSTER}", "Values": [self.cluster]}], MaxResults=5
            )
        except botocore.exceptions.NoCredentialsError:
            return (
                f"cloud.ec2: no AWS credentials ({where}): export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY,"
                " name a profile of ~/.aws with cloud.ec2.profile, or run corral where an instance role gives them"
            )
        except botocore.exceptions.ClientError as exc:
            if _code(exc) in CREDENTIAL_CODES:
                return f"cloud.ec2: EC2 in {region} refuses corral's credentials ({where}): {_message(exc)}"
            log.warning("could not check the ec2 credentials with DescribeInstances: %s", error_from(exc))
        except botocore.exceptions.BotoCoreError as exc:
            log.warning(
                "could not check the ec2 credentials: %s (cloud.ec2.region %r, endpoint_url %r)",
                exc,
                region,
                self.settings.endpoint_url,
            )
        return None

    def image_for(self, instance_type: InstanceType) -> str:
        image_id = self.settings.image_for(instance_type.name)
        if image_id is None:
            message = f"ec2: no AMI for instance type {instance_type.name}: set image_id or image_ids"
            raise ImageUnusable(instance_type.name, message)
        return image_id

    def root_device(self, image_id: str, instance_type: InstanceType) -> RootDevice:
        with self._lock:
            known = self._roots.get(image_id)
        if known is not None:
            return known
        where = f"ec2: AMI {image_id} of instance type {instance_type.name}"
        try:
            images = self.client.describe_images(ImageIds=[image_id]).get("Images", [])
        except botocore.exceptions.ClientError as exc:
            if _code(exc).startswith(IMAGE_CODES_PREFIX):
                message = f"{where} does not exist or is not shared with this account: {_message(exc)}"
                raise ImageUnusable(instance_type.name, message) from exc
            raise error_from(exc) from exc
        except botocore.exceptions.BotoCoreError as exc:
            raise error_from(exc) from exc
        image = next((i for i in images if i.get("ImageId") == image_id), None)
        if image is None:  # a deregistered AMI is listed by no one, without an error
            raise ImageUnusable(instance_type.name, f"{where} does not exist or is not shared with this account")
        root = root_device_of(image, image_id, instance_type.name)
        with self._lock:
            self._roots[image_id] = root
        return root

    def block_device_mappings(self, image_id: str, instance_type: InstanceType) -> list[dict[str, Any]]:
        """The root volume: the AMI's own size plus the type's scratch, unless that scratch is the
        instance's own storage; deleted with the instance (nothing is left behind to pay for)."""
        root = self.root_device(image_id, instance_type)
        volume = self.settings.root_volume
        added = 0 if instance_type.name in self.settings.included_scratch else scratch_gib(instance_type)
        ebs: dict[str, Any] = {
            "VolumeSize": root.size_gib + added,
            "VolumeType": volume.type,
            "DeleteOnTermination": True,
        }
        if volume.iops is not None:
            ebs["Iops"] = volume.iops
        if volume.throughput is not None:
            ebs["Throughput"] = volume.throughput
        # encrypted = false: left out, so that an AMI whose snapshot is encrypted keeps its encryption.
        if volume.encrypted:
            ebs["Encrypted"] = True
        if volume.kms_key_id is not None:
            ebs["KmsKeyId"] = volume.kms_key_id
        return [{"DeviceName": root.name, "Ebs": ebs}]

    def create(self, instance_type: InstanceType, node_id: str, boot_token: str, tags: dict[str, str]) -> CloudInstance:
        all_tags = {"Name": f"corral-{self.cluster}-{node_id}", **self.settings.tags, **tags}
        all_tags.update({TAG_CLUSTER: self.cluster, TAG_NODE_ID: node_id, TAG_INSTANCE_TYPE: instance_type.name})
        tag_list = [{"Key": k, "Value": v} for k, v in all_tags.items()]
        image_id = self.image_for(instance_type)
        params: dict[str, Any] = {
            "ImageId": image_id,
            "InstanceType": instance_type.name,
            "MinCount": 1,
            "MaxCount": 1,
            "BlockDeviceMappings": self.block_device_mappings(image_id, instance_type),
            "UserData": agent_user_data(
                self.settings, self.server_url, node_id, boot_token, instance_type, self.ca_pem
            ),
            "TagSpecifications": [
                {"ResourceType": "instance", "Tags": tag_list},
                {"ResourceType": "volume", "Tags": tag_list},
            ],
            # An instance that powers itself off is gone, not stopped (a stopped one still pays for its disks).
            "InstanceInitiatedShutdownBehavior": "terminate",
            "MetadataOptions": {"HttpTokens": "required"},
        }
        if self.settings.security_group_ids:
            params["SecurityGroupIds"] = list(self.settings.security_group_ids)
        if self.settings.key_name:
            params["KeyName"] = self.settings.key_name
        if self.settings.iam_instance_profile:
            profile = self.settings.iam_instance_profile
            params["IamInstanceProfile"] = {"Arn": profile} if profile.startswith("arn:") else {"Name": profile}
        spot = self.settings.market.get(instance_type.name) == "spot"
        if spot:
            params["InstanceMarketOptions"] = {
                "MarketType": "spot",
                "SpotOptions": {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"},
            }
        # One token per call and subnet: botocore's retries of this call (a timeout, say) are then
        # answered with the instance already started instead of a second one.
        token = secrets.token_hex(8)
        last: CloudError | None = None
        for index, subnet in enumerate(self.subnets_in_turn(instance_type.name)):
            if subnet is not None:
                params["SubnetId"] = subnet
            params["ClientToken"] = f"corral-{node_id}-{index}-{token}"
            try:
                response = self.client.run_instances(**params)
            except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as exc:
                last = error_from(exc, instance_type.name)
                if isinstance(last, InsufficientCapacity) or _code(exc) in SUBNET_CODES:
                    if subnet is not None and isinstance(last, InsufficientCapacity):
                        with self._lock:
                            self._short[(instance_type.name, subnet)] = time.monotonic()
                    continue  # the next subnet (another zone) may have it
                if _code(exc).startswith(IMAGE_CODES_PREFIX):
                    with self._lock:
                        self._roots.pop(image_id, None)  # gone since it was read: read it again next time
                    message = f"ec2: AMI {image_id} of instance type {instance_type.name}: {last}"
                    raise ImageUnusable(instance_type.name, message) from exc
                if spot and _code(exc) == SPOT_ROLE_CODE:
                    # Before, this paused every boot, and the spot type, still the cheapest that fits,
                    # was tried first again after each pause: no on-demand instance booted either.
                    message = (
                        f"ec2: instance type {instance_type.name} boots as spot (cloud.ec2.market) and EC2 launches"
                        f" no spot instance for this account: {last}; create the spot service-linked role once"
                        " (aws iam create-service-linked-role --aws-service-name spot.amazonaws.com),"
                        " or allow corral iam:CreateServiceLinkedRole"
                    )
                    raise TypeUnusable(instance_type.name, message) from exc
                if _code(exc) in TYPE_REFUSED_CODES and _NAMES_THE_TYPE.search(_message(exc)):
                    if _NAMES_THE_IMAGE.search(_message(exc)):
                        message = f"ec2: AMI {image_id} of instance type {instance_type.name}: {last}"
                        raise ImageUnusable(instance_type.name, message) from exc
                    raise TypeUnusable(instance_type.name, f"ec2: instance type {instance_type.name}: {last}") from exc
                raise last from exc
            # RunInstances answers before the tags are on the instance: read it with the tags it was given.
            instance = _instance({**response["Instances"][0], "Tags": tag_list}, launched_if_unknown=time.time())
            instance.market = "spot" if spot else "on-demand"  # what it was launched as, whatever the answer says
            with self._lock:
                self._recent[instance.id] = (instance, time.monotonic())
                if subnet is not None:
                    self._subnet_of[instance.id] = subnet
                    self._short.pop((instance_type.name, subnet), None)
            return instance
        assert last is not None
        raise last

    def subnets_in_turn(self, instance_type: str) -> list[str | None]:
        """The configured subnets in the order a boot of `instance_type` tries them: the one with
        the fewest live instances of the cluster first (ties in the config's order), the others in
        case it has no capacity, and last those that had none for the type within SHORT_SUBNET_FOR.
        Tried always in the config's order, every instance went to the first subnet's zone while it
        had capacity, and one zone's outage took the whole fleet. [None]: no subnet configured, EC2
        picks one of the default VPC's."""
        if not self.settings.subnet_ids:
            return [None]
        now = time.monotonic()
        with self._lock:
            live = Counter(self._subnet_of.values())
            for key, when in list(self._short.items()):
                if now - when > SHORT_SUBNET_FOR:
                    del self._short[key]
            short = {subnet for (name, subnet) in self._short if name == instance_type}

        def turn(indexed: tuple[int, str]) -> tuple[bool, int, int]:
            index, subnet = indexed
            return subnet in short, live[subnet], index

        return [subnet for _, subnet in sorted(enumerate(self.settings.subnet_ids), key=turn)]

    def list(self) -> list[CloudInstance]:
        filters = [
            {"Name": f"tag:{TAG_CLUSTER}", "Values": [self.cluster]},
            {"Name": "instance-state-name", "Values": list(LIVE_STATES)},
        ]
        out: list[CloudInstance] = []
        subnet_of: dict[str, str] = {}
        try:
            pages = self.client.get_paginator("describe_instances").paginate(
                Filters=filters, PaginationConfig={"PageSize": self.page_size}
            )
            for page in pages:
                for reservation in page.get("Reservations", []):
                    for raw in reservation.get("Instances", []):
                        out.append(_instance(raw))
                        if raw.get("SubnetId"):
                            subnet_of[str(raw["InstanceId"])] = str(raw["SubnetId"])
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as exc:
            raise error_from(exc) from exc
        seen = {instance.id for instance in out}
        now = time.monotonic()
        with self._lock:
            for instance_id, (instance, created) in list(self._recent.items()):
                if instance_id in seen or now - created > LIST_GRACE:
                    del self._recent[instance_id]
                else:
                    out.append(instance)
                    if instance_id in self._subnet_of:
                        subnet_of[instance_id] = self._subnet_of[instance_id]
            self._subnet_of = subnet_of
        return out

    def why_gone(self, instance_ids: Sequence[str]) -> dict[str, Ended]:
        """EC2's state reasons of ended instances ("terminated: Client.InvalidKMSKey.InvalidState:
        The KMS key provided is in an incorrect state", "terminated: Server.SpotInstanceTermination:
        …"), by instance id: without them the operator read only that the instance disappeared, and
        had to find why in the console while corral booted the next one. Asked by filter, page by
        page, not by id: DescribeInstances refuses a list of ids if EC2 no longer knows one (about an
        hour after its end). An instance EC2 says nothing of is left out. One that ended in its launch
        for its type's configuration (LAUNCH_REFUSED_REASONS) or for capacity carries the error its
        RunInstances would have raised."""
        out: dict[str, Ended] = {}
        for start in range(0, len(instance_ids), FILTER_VALUES):
            chunk = list(instance_ids[start : start + FILTER_VALUES])
            try:
                pages = self.client.get_paginator("describe_instances").paginate(
                    Filters=[{"Name": "instance-id", "Values": chunk}], PaginationConfig={"PageSize": self.page_size}
                )
                for page in pages:
                    for reservation in page.get("Reservations", []):
                        for raw in reservation.get("Instances", []):
                            state = str(raw.get("State", {}).get("Name", ""))
                            reason = raw.get("StateReason", {})
                            said = str(reason.get("Message") or reason.get("Code") or "")
                            if said and state not in LIVE_STATES:
                                out[str(raw["InstanceId"])] = _ended(raw, f"{state}: {said}")
            except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as exc:
                log.info("could not read why instances %s ended: %s", ", ".join(chunk), error_from(exc))
        return out

    def destroy(self, instance_id: str) -> None:
        refused = self.destroy_many([instance_id])
        if instance_id in refused:
            raise refused[instance_id]

    def destroy_many(self, instance_ids: Sequence[str]) -> dict[str, CloudError]:
        """TerminateInstances, TERMINATE_BATCH instances a call. One call before each instance:
        a clean stop of 500 instances took minutes, past systemd's stop timeout, and what was left
        billed on."""
        ids = list(dict.fromkeys(instance_ids))
        with self._lock:
            for instance_id in ids:
                self._recent.pop(instance_id, None)
        refused: dict[str, CloudError] = {}
        for start in range(0, len(ids), TERMINATE_BATCH):
            self._terminate(ids[start : start + TERMINATE_BATCH], refused)
        with self._lock:
            for instance_id in ids:
                if instance_id not in refused:
                    self._subnet_of.pop(instance_id, None)  # a boot before the next listing may use its subnet
        return refused

    def _terminate(self, instance_ids: builtins.list[str], refused: dict[str, CloudError]) -> None:
        """One TerminateInstances of these instances, and what it refuses found out. EC2 refuses the
        whole call for one instance (an id it no longer knows, one protected from termination, one an
        IAM condition denies) and terminates none of the others, so: an instance EC2's message names
        is taken out of the call (already gone: done; else refused with that error) and the call made
        again; a refusal that names none is looked for by halving the call, down to one instance."""
        pending = instance_ids
        while pending:
            try:
                self.client.terminate_instances(InstanceIds=pending)
                return
            except botocore.exceptions.BotoCoreError as exc:  # no answer (the network, a timeout): all of them
                refused.update(dict.fromkeys(pending, error_from(exc)))
                return
            except botocore.exceptions.ClientError as exc:
                code, error = _code(exc), error_from(exc)
                if code in WHOLE_CALL_CODES:
                    refused.update(dict.fromkeys(pending, error))
                    return
                named = set(_INSTANCE_ID.findall(_message(exc))).intersection(pending)
                if not named and len(pending) == 1:
                    named = set(pending)
                if named:
                    if code != NOT_FOUND:
                        refused.update(dict.fromkeys(named, error))
                    pending = [instance_id for instance_id in pending if instance_id not in named]
                    continue
                half = len(pending) // 2
                self._terminate(pending[:half], refused)
                self._terminate(pending[half:], refused)
                return


def _ended(raw: dict[str, Any], said: str) -> Ended:
    """An ended instance's state reason, and the launch error it amounts to, if any."""
    code = str(raw.get("StateReason", {}).get("Code") or "")
    instance_type = str(raw.get("InstanceType") or "")
    if code in LAUNCH_REFUSED_REASONS:
        message = (
            f"ec2: instances of type {instance_type} end in their launch ({said}): check the KMS key of their"
            " volumes (cloud.ec2.root_volume.kms_key_id and the key's policy) and the account's EBS limits"
        )
        return Ended(said, TypeUnusable(instance_type, message))
    if code == CAPACITY_REASON:
        return Ended(said, InsufficientCapacity(instance_type, f"ec2: {instance_type} ended in its launch: {said}"))
    return Ended(said)


def _code(exc: Exception) -> str:
    if isinstance(exc, botocore.exceptions.ClientError):
        return str(exc.response.get("Error", {}).get("Code", ""))
    return ""


def _message(exc: botocore.exceptions.ClientError) -> str:
    """EC2's own words: `Code: Message`."""
    error = exc.response.get("Error", {})
    return f"{error.get('Code', '')}: {error.get('Message', '') or exc}"


def _instance(raw: dict[str, Any], launched_if_unknown: float = 0.0) -> CloudInstance:
    tags = {str(tag["Key"]): str(tag.get("Value", "")) for tag in raw.get("Tags", [])}
    launched = raw.get("LaunchTime")
    return CloudInstance(
        id=str(raw["InstanceId"]),
        instance_type=tags.get(TAG_INSTANCE_TYPE) or str(raw.get("InstanceType", "")),
        tags=tags,
        created_at=launched.timestamp() if launched is not None else launched_if_unknown,
        state=str(raw.get("State", {}).get("Name", "pending")),
        zone=str(raw.get("Placement", {}).get("AvailabilityZone") or ""),
        market="spot" if raw.get("InstanceLifecycle") == "spot" else "on-demand",
    )


def _no_retry_on_capacity(response: Any = None, **_: Any) -> None:
    """A `needs-retry` hook, run before botocore's retry handler: a capacity error is EC2's HTTP 500,
    which that handler takes for a passing server fault. Shown as the client error it is, it is not
    retried. Other errors, throttling above all, keep botocore's retries."""
    if not response:
        return
    http_response, parsed = response
    code = (parsed or {}).get("Error", {}).get("Code")
    if http_response is not None and (code in CAPACITY_CODES or code in SUBNET_CODES):
        http_response.status_code = 400
