"""corral's configuration file (TOML or YAML), validated by pydantic.

Every key has a default, so an empty file (or none) is a working single-machine setup. A bad value
is reported with its key path and the reason: `policy.lifecycle.idle_grace: not a duration: 'soon'`.
"""

from __future__ import annotations

import ipaddress
import re
import tomllib
import types
import typing
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from corral.cloud.base import TAG_CLUSTER, TAG_INSTANCE_TYPE, TAG_NODE_ID, TAG_STORE
from corral.core import fairshare
from corral.core.batch import DEFAULT_NICE_BASE, NICE_LIMIT
from corral.core.health import parse_max_unhealthy
from corral.core.model import GiB, InstanceType
from corral.core.notify import NotifyRule, rule_names
from corral.core.settings import PolicySettings
from corral.core.units import Duration, Float, Int, SizeMiB
from corral.files import UnreadableFile, is_yaml, load_yaml, read_text, without_password
from corral.home import DEFAULT_PORT, default_home
from corral.sim.settings import SimSettings

_STAR_NOTE = "; or '*' for every type"
CORRAL_TAGS = (TAG_CLUSTER, TAG_NODE_ID, TAG_INSTANCE_TYPE, TAG_STORE)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class ServerConfig(_Strict):
    host: str = "127.0.0.1"
    port: Int = Field(DEFAULT_PORT, ge=0, le=65535, description="0 picks a free port")
    tls_cert: Path | None = Field(
        None, description="PEM certificate (with its chain) the server presents: with tls_key, it speaks HTTPS"
    )
    tls_key: Path | None = Field(None, description="the PEM private key of tls_cert")
    tls_ca: Path | None = Field(
        None,
        description="PEM CA bundle that clients (the CLI, loopback agents, EC2 agents unless cloud.ec2.server_ca"
        " is set) verify the server with; default: tls_cert itself, right for a self-signed certificate",
    )
    max_output: SizeMiB = Field(
        1024,
        ge=0,
        description="the most of one attempt's output the server keeps in logs/ (MiB, or e.g. '10GiB'): past it,"
        " the output ends with a line saying it was cut, and the rest is dropped (in front of Slurm, by the"
        " batch script on the node); 0: no limit",
    )

    @model_validator(mode="after")
    def _tls(self) -> ServerConfig:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key go together: give both, or neither")
        if self.tls_ca is not None and self.tls_cert is None:
            raise ValueError("tls_ca says how clients verify the server's certificate: give tls_cert and tls_key too")
        for name in ("tls_cert", "tls_key", "tls_ca"):
            path = getattr(self, name)
            if path is not None and not path.is_file():
                raise ValueError(f"{name}: {path} is not a file")
        return self

    @property
    def max_output_bytes(self) -> int | None:
        """max_output in bytes; None: no limit."""
        return self.max_output * 1024 * 1024 or None

    @property
    def ca_file(self) -> Path | None:
        """What clients verify the server with (None: it speaks plain HTTP), as an absolute path:
        they run in other directories (the CLI, an agent in its own)."""
        given = self.tls_ca or self.tls_cert
        return given.resolve() if given else None


class StoreConfig(_Strict):
    url: str | None = Field(None, description="SQLAlchemy URL; default sqlite:///CORRAL_HOME/corral.db")

    @field_validator("url")
    @classmethod
    def _url_has_a_driver(cls, value: str | None) -> str | None:
        """A URL SQLAlchemy cannot parse, or whose database or driver is not installed, would be a
        traceback at `corral run`; a config check names it."""
        if value is None:
            return value
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError, NoSuchModuleError

        try:
            make_url(value).get_dialect().import_dbapi()
        except (NoSuchModuleError, ImportError) as exc:  # NoSuchModuleError is an ArgumentError
            raise ValueError(f"no database driver for it is installed ({exc})") from None
        except ArgumentError:
            raise ValueError("not a database URL (e.g. postgresql+psycopg://user@host/db)") from None
        return value


class InstanceTypeConfig(_Strict):
    name: str = Field(min_length=1)
    vcpus: Float = Field(gt=0)
    ram: SizeMiB = Field(description="e.g. '8GiB'")
    price_per_hour: Float = Field(ge=0)
    scratch: SizeMiB = 100 * GiB
    gpus: Int = Field(0, ge=0)
    billing_granularity: Duration = Field(
        1.0,
        ge=0,
        description="the cloud bills the instance's time rounded up to this (EC2 Linux: '1s'; per-hour billing:"
        " '1h'; 0: exact)",
    )
    billing_minimum: Duration = Field(
        60.0,
        ge=0,
        description="each instance is billed at least this long from its start (EC2 Linux, on-demand and spot: '60s';"
        " 0: none); the bill, the simulator's cost and the billing window count it",
    )
    attributes: dict[str, str] = Field(default_factory=dict)
    max_instances: Int | None = Field(
        None,
        gt=0,
        description="live instances of this type (booting or running) at most, beside policy.boot.max_instances"
        " (an account's quota for the type, a team's budget; none: no cap of its own); a job that only this type"
        " holds waits once it is reached, one that another type holds boots the next cheapest",
    )

    @field_validator("ram")
    @classmethod
    def _positive_ram(cls, value: int) -> int:
        if value <= 0:
            raise ValueError("must be more than 0")
        return value

    def to_core(self) -> InstanceType:
        return InstanceType(
            name=self.name,
            vcpus=self.vcpus,
            ram_mib=self.ram,
            price_per_hour=self.price_per_hour,
            scratch_mib=self.scratch,
            gpus=self.gpus,
            billing_granularity=self.billing_granularity,
            billing_minimum=self.billing_minimum,
            attributes=tuple(sorted(self.attributes.items())),
            max_instances=self.max_instances,
        )


# Filters that keep a job off a node that cannot run it (not taking work; too small).
_ROOM_FILTERS = ("min-ram", "min-cpu", "min-disk", "gpus")


def _loopback(host: str) -> bool:
    """Whether `host` names this machine only (localhost, 127.0.0.0/8, ::1)."""
    if host.lower() in ("localhost", "localhost.localdomain") or host.lower().endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def filter_warnings(filters: list[str]) -> list[str]:
    """A list of filters that leaves out `state` or a resource filter: valid (a filter may be
    turned off), but jobs then go to booting, draining or down nodes, or beyond a node's room."""
    found = []
    if "state" not in filters:
        found.append(
            "policy.placement.filters leaves out state: jobs may be placed on nodes that are booting, draining,"
            " held or down"
        )
    room = [name for name in _ROOM_FILTERS if name not in filters]
    if room:
        found.append(
            f"policy.placement.filters leaves out {', '.join(room)}: jobs may be placed on nodes without room for"
            " them (policy.placement.overprovision lets requests pass capacity by a ratio)"
        )
    return found


_AWS_ID = r"[0-9a-f]{8}(?:[0-9a-f]{9})?"
_AMI = re.compile(rf"^ami-{_AWS_ID}$")  # image_id's pattern, and each of image_ids'


class RootVolumeConfig(_Strict):
    """The root EBS volume of every instance: sized by the driver to the AMI's root volume plus the
    instance type's scratch (unless the type's scratch is its own instance storage), deleted with
    the instance."""

    type: Literal["gp3", "gp2", "io1", "io2", "standard"] = Field("gp3", description="the EBS volume type")
    iops: Int | None = Field(
        None, ge=100, le=256000, description="provisioned IOPS: required for io1 and io2; gp3 default 3000"
    )
    throughput: Int | None = Field(None, ge=125, le=2000, description="gp3 only: MiB/s; default 125")
    encrypted: StrictBool = Field(
        True,
        description="encrypt the volume (the account's default EBS key unless kms_key_id); false: as EC2 would"
        " (encrypted if the AMI's snapshot is, or the account encrypts new volumes by default)",
    )
    kms_key_id: str | None = Field(
        None, min_length=1, description="the KMS key (id, ARN or alias) that encrypts it; needs encrypted = true"
    )

    @model_validator(mode="after")
    def _options_fit_the_type(self) -> RootVolumeConfig:
        # EC2 refuses these at RunInstances, for every boot: said at load time instead.
        if self.type in ("io1", "io2") and self.iops is None:
            raise ValueError(f"iops is required with type = {self.type!r}")
        if self.type in ("gp2", "standard") and self.iops is not None:
            raise ValueError(f"iops cannot be set with type = {self.type!r} (only gp3, io1, io2)")
        if self.type != "gp3" and self.throughput is not None:
            raise ValueError(f"throughput cannot be set with type = {self.type!r} (only gp3)")
        if self.kms_key_id is not None and not self.encrypted:
            raise ValueError("kms_key_id needs encrypted = true")
        return self


class Ec2Config(_Strict):
    """The `ec2` driver's settings (read only with `cloud.driver = "ec2"`). Credentials are not here:
    boto3 finds them as every AWS tool does (environment, `~/.aws`, the instance's own role)."""

    region: str | None = Field(None, description="AWS region, e.g. 'us-east-1'; default: the AWS SDK's (AWS_REGION)")
    endpoint_url: str | None = Field(None, description="EC2 endpoint URL: a VPC endpoint, or a moto server in tests")
    profile: str | None = Field(None, description="a named profile in ~/.aws/config; default: the SDK's credentials")
    image_id: str | None = Field(
        None,
        pattern=_AMI.pattern,
        description="the AMI instances boot (required unless image_ids names one for every instance type);"
        " see the operator guide",
    )
    image_ids: dict[str, str] = Field(
        default_factory=dict,
        description="per instance type name: the AMI it boots instead of image_id (a GPU type's with its drivers,"
        " an arm64 one for Graviton types)",
    )
    included_scratch: list[str] = Field(
        default_factory=list,
        description="instance types whose scratch is their own instance storage (c5d, m6id…): their root volume"
        " is not grown by their scratch (Arvados' IncludedScratch)",
    )
    root_volume: RootVolumeConfig = Field(default_factory=RootVolumeConfig)
    subnet_ids: list[str] = Field(
        default_factory=list,
        description="subnets to boot in (list one in each of several zones): each boot goes to the one with the"
        " fewest live instances of the cluster, and on insufficient capacity the next is tried; empty: the"
        " default VPC's choice",
    )
    security_group_ids: list[str] = Field(default_factory=list, description="security groups of every instance")
    key_name: str | None = Field(None, description="EC2 key pair name, for SSH to the instances")
    iam_instance_profile: str | None = Field(None, description="IAM instance profile: a name, or an ARN")
    tags: dict[str, str] = Field(default_factory=dict, description="extra tags on every instance and its volumes")
    market: dict[str, Literal["on-demand", "spot"]] = Field(
        default_factory=dict, description="per instance type name: 'spot' boots it as a spot instance, else on-demand"
    )
    server_url: str | None = Field(
        None, description="the URL the instances reach this server at (required; server.host must accept them)"
    )
    agent_command: list[str] = Field(
        default_factory=lambda: ["python3", "-m", "corral.agent"],
        min_length=1,
        description="how the AMI runs the corral agent (an argument list)",
    )
    agent_work_dir: str = Field("/var/lib/corral/agent", description="the agent's work dir on the instance")
    server_ca: Path | None = Field(
        None,
        description="PEM CA bundle the agents verify an https server_url with, written onto each instance;"
        " default: server.tls_ca (or tls_cert) when corral speaks HTTPS itself, else the AMI's trusted CAs",
    )
    retry_mode: Literal["standard", "adaptive"] = Field(
        "standard", description="botocore's retry mode for throttled and failed calls"
    )
    max_attempts: Int = Field(5, ge=1, le=20, description="tries of one call (botocore's back-off between)")

    @field_validator("subnet_ids", "security_group_ids")
    @classmethod
    def _aws_ids(cls, value: list[str], info: Any) -> list[str]:
        prefix = "subnet-" if info.field_name == "subnet_ids" else "sg-"
        bad = [v for v in value if not re.fullmatch(prefix + _AWS_ID, v)]
        if bad:
            raise ValueError(f"not {prefix}<hex id>: {', '.join(bad)}")
        return value

    @field_validator("image_ids")
    @classmethod
    def _ami_ids(cls, value: dict[str, str]) -> dict[str, str]:
        bad = [f"{name} = {ami!r}" for name, ami in value.items() if not _AMI.fullmatch(ami)]
        if bad:
            raise ValueError(f"not ami-<hex id>: {', '.join(bad)}")
        return value

    def image_for(self, instance_type: str) -> str | None:
        """The AMI an instance of this type boots: its own, else image_id."""
        return self.image_ids.get(instance_type, self.image_id)

    @field_validator("server_ca")
    @classmethod
    def _ca(cls, value: Path | None) -> Path | None:
        if value is None:
            return value
        try:
            text = value.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"{value} cannot be read: {getattr(exc, 'strerror', None) or exc}") from None
        if "-----BEGIN CERTIFICATE-----" not in text:
            raise ValueError(f"{value} holds no PEM certificate")
        if len(text) > 8192:
            raise ValueError(f"{value} is more than 8 KiB: EC2's user data holds 16 KiB in all")
        return value

    @field_validator("endpoint_url", "server_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"https?://[^\s/]+(/\S*)?", value):
            raise ValueError(f"not an http:// or https:// URL: {value!r}")
        return value

    @field_validator("tags")
    @classmethod
    def _tags(cls, value: dict[str, str]) -> dict[str, str]:
        for key, tag_value in value.items():
            if key in CORRAL_TAGS:
                raise ValueError(f"{key!r} is corral's own tag")
            if not key or len(key) > 128 or key.lower().startswith("aws:"):
                raise ValueError(f"{key!r}: a tag key has 1 to 128 characters and does not start with 'aws:'")
            if len(tag_value) > 256:
                raise ValueError(f"{key!r}: a tag value has at most 256 characters")
        if len(value) > 40:
            raise ValueError("at most 40 tags (EC2 allows 50, corral sets some of its own)")
        return value


class CloudConfig(_Strict):
    driver: Literal["loopback", "ec2"] = Field(
        "loopback", description="'loopback' (local agent processes) or 'ec2' (see cloud.ec2)"
    )
    cluster: str = Field("corral", description="tag value that marks this cluster's instances")
    ping_interval: Duration = Field(2.0, gt=0, description="how often agents ping the server")
    ec2: Ec2Config = Field(default_factory=Ec2Config)


class ContainersConfig(_Strict):
    """The container engine the agents run jobs with an image through (corral.agent.container):
    podman or docker, whose `run` takes the same options."""

    program: list[str] = Field(
        default_factory=lambda: ["podman"],
        description="the engine's program and its global options, an argument list: ['podman'], ['docker'],"
        " ['podman', '--runtime', 'runc']",
    )
    run_args: list[str] = Field(
        default_factory=list,
        description="more options for the engine's run, before the image: e.g. ['--network=none'],"
        " ['--gpus', 'all'], ['--pull=never']",
    )

    @field_validator("program")
    @classmethod
    def _a_program(cls, value: list[str]) -> list[str]:
        if not value or not value[0].strip():
            raise ValueError("the engine's program is empty (e.g. ['podman'])")
        return value


class HealthCheckConfig(_Strict):
    """Node health checks (Slurm's HealthCheckProgram; corral.core.health): the agents run `command`
    every `interval`; a node whose check fails is put in `category`."""

    command: list[str] = Field(
        default_factory=list,
        description="the check, an argument list run by each agent (e.g. ['/usr/sbin/nhc']); exit 0: healthy;"
        " empty: no check",
    )
    interval: Duration = Field(300.0, gt=0, description="HealthCheckInterval: seconds between two checks on a node")
    timeout: Duration = Field(60.0, gt=0, description="a check that has not exited by then has failed (and is killed)")
    category: str = Field(
        "software-failure",
        description="what a failed check makes the node: a *-failure category (shut down once empty and replaced)"
        " or a *-maintenance one (kept out of service)",
    )
    max_unhealthy: str = Field(
        "20%",
        description="failed checks take nodes out of service only while at most this many nodes fail theirs:"
        " a count ('3') or a share of the nodes in service ('20%', rounded up, so one node may always go);"
        " past it a failure is recorded and told but not acted on (a check failing everywhere is likelier"
        " the check's fault, or a shared file system's, than every node's)",
    )

    @field_validator("max_unhealthy", mode="before")
    @classmethod
    def _a_count_or_share(cls, value: object) -> str:
        return parse_max_unhealthy(value)

    @field_validator("category")
    @classmethod
    def _a_category_that_acts(cls, value: str) -> str:
        if not value.endswith(("-failure", "-maintenance")):
            raise ValueError(f"{value!r}: a *-failure or *-maintenance category (e.g. software-failure)")
        return value

    @field_validator("command")
    @classmethod
    def _a_program(cls, value: list[str]) -> list[str]:
        if value and not value[0].strip():
            raise ValueError("the command's program is empty")
        return value


class LoopConfig(_Strict):
    interval: Duration = Field(1.0, gt=0, description="seconds between reconcile passes (a submission wakes it early)")


class RetentionConfig(_Strict):
    """How long the store keeps what has ended (slurmdbd's PurgeJobAfter, PurgeEventAfter). Unset:
    kept for ever, as before; nothing is deleted unless asked for."""

    jobs_after: Duration | None = Field(
        None,
        gt=0,
        description="an ended job is deleted this long after it ended, with its attempts, dependency rows and output,"
        " e.g. '90d'; unset: kept for ever",
    )
    output_after: Duration | None = Field(
        None, gt=0, description="an ended job's output is deleted this long after it ended (sooner than the job)"
    )
    events_after: Duration | None = Field(
        None, gt=0, description="an event is deleted this long after it happened; unset: kept for ever"
    )
    interval: Duration = Field(3600.0, gt=0, description="how often the live loop deletes what is due")

    def enabled(self) -> bool:
        return any(v is not None for v in (self.jobs_after, self.output_after, self.events_after))

    @property
    def output_kept_for(self) -> float | None:
        """How long an ended job's output is kept: output_after, else as long as the job."""
        return self.output_after or self.jobs_after


class SlurmConfig(_Strict):
    """`executor = "slurm"`: corral dispatches to an existing Slurm cluster (docs/operator-guide.md)."""

    partition: str = Field("", description="sbatch --partition; empty: Slurm's default partition")
    account: str = Field("", description="sbatch --account; empty: none")
    extra_args: list[str] = Field(default_factory=list, description="more sbatch options, e.g. ['--qos=normal']")
    conf: str | None = Field(None, description="SLURM_CONF for the Slurm commands; default: Slurm's own")
    bin_dir: str = Field("", description="directory of sbatch, squeue, scontrol, scancel; empty: PATH")
    command_timeout: Duration = Field(30.0, gt=0, description="a Slurm command that takes longer has failed")
    max_pending: Int = Field(100, ge=1, description="this dispatcher's jobs waiting in Slurm's queue at most")
    nice_base: Int = Field(
        DEFAULT_NICE_BASE,
        ge=1,
        le=NICE_LIMIT,
        description="a job of priority P runs in Slurm with Nice = nice_base - P; negative Nice needs a privileged"
        " Slurm user: if corral's is not, set it to the highest priority in use",
    )
    output_dir: Path | None = Field(
        None, description="where jobs write output (nodes must see it); default CORRAL_HOME/logs, read live"
    )
    work_dir: Path | None = Field(None, description="the jobs' working directory; default CORRAL_HOME/slurm/work")


def _default_instance_types() -> list[InstanceTypeConfig]:
    # Sizes and on-demand list prices of a few AWS us-east-1 types (USD/hour, about 2024).
    return [
        InstanceTypeConfig(name="c5.large", vcpus=2, ram=4 * GiB, price_per_hour=0.085),
        InstanceTypeConfig(name="m5.large", vcpus=2, ram=8 * GiB, price_per_hour=0.096),
        InstanceTypeConfig(name="m5.xlarge", vcpus=4, ram=16 * GiB, price_per_hour=0.192),
        InstanceTypeConfig(name="r5.xlarge", vcpus=4, ram=32 * GiB, price_per_hour=0.252),
    ]


class Config(_Strict):
    home: Path = Field(default_factory=default_home)
    server: ServerConfig = Field(default_factory=ServerConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    cloud: CloudConfig = Field(default_factory=CloudConfig)
    loop: LoopConfig = Field(default_factory=LoopConfig)
    retention: RetentionConfig = Field(default_factory=RetentionConfig)
    health_check: HealthCheckConfig = Field(default_factory=HealthCheckConfig)
    containers: ContainersConfig = Field(default_factory=ContainersConfig)
    instance_types: list[InstanceTypeConfig] = Field(default_factory=_default_instance_types)
    executor: Literal["agent", "slurm"] = Field(
        "agent", description="how jobs run: 'agent' on the nodes corral boots, 'slurm' through sbatch (no cloud)"
    )
    slurm: SlurmConfig = Field(default_factory=SlurmConfig)
    policy: PolicySettings = Field(default_factory=PolicySettings)
    sim: SimSettings = Field(default_factory=SimSettings)
    notify: list[NotifyRule] = Field(
        default_factory=list, description="notifications and triggers: [[notify]] rules (see below)"
    )

    @field_validator("notify")
    @classmethod
    def _unique_rule_names(cls, value: list[NotifyRule]) -> list[NotifyRule]:
        names = rule_names(value)
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"notify rule names must be unique; repeated: {', '.join(dupes)}")
        return value

    @field_validator("instance_types")
    @classmethod
    def _unique_names(cls, value: list[InstanceTypeConfig]) -> list[InstanceTypeConfig]:
        names = [t.name for t in value]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"instance type names must be unique; repeated: {', '.join(dupes)}")
        return value

    def jobs_reach_the_data_directory(self) -> str | None:
        """Why users with tokens of their own can take the operator's, when they can: the loopback
        cloud runs every job as this corral's own user, on its machine (its agents' work dirs are
        in the data directory), so a job reads what corral reads. None under EC2 or Slurm."""
        if self.executor != "agent" or self.cloud.driver != "loopback":
            return None
        return (
            f"the loopback cloud runs every job as this corral's own user on this machine, where a job can read the"
            f" data directory {self.home}: its token (the operator's, an admin's) and the store (every job's"
            " environment), so a user's job can act as the operator; give users tokens of their own only with"
            ' cloud.driver = "ec2" (or in front of Slurm, the data directory on no file system the compute nodes mount)'
        )

    def warnings(self) -> list[str]:
        """What is valid but surely not meant: limits under which no instance type can ever boot,
        placement filters left out that keep jobs off nodes that cannot run them (with the agent
        executor; in front of Slurm corral boots and places nothing), a retention that forgets what
        fair share still counts."""
        return self._retention_warnings() + self._agent_warnings()

    def _retention_warnings(self) -> list[str]:
        retention = self.retention
        found: list[str] = []
        if retention.jobs_after is None:
            return found
        if retention.output_after is not None and retention.output_after >= retention.jobs_after:
            found.append(
                "retention.output_after is not shorter than retention.jobs_after: an ended job's output goes with"
                " the job at jobs_after"
            )
        queue = self.policy.placement.queue
        remembered = fairshare.FORGOTTEN_AFTER_HALF_LIVES * queue.fairshare.half_life
        if queue.reads_usage() and retention.jobs_after < remembered:
            found.append(
                f"retention.jobs_after ({retention.jobs_after / 86400:g} days) is shorter than fair share remembers"
                f" usage ({fairshare.FORGOTTEN_AFTER_HALF_LIVES} half-lives of"
                f" {queue.fairshare.half_life / 86400:g} days): after a restart, the usage of jobs deleted"
                " meanwhile no longer counts"
            )
        return found

    def _agent_warnings(self) -> list[str]:
        types = self.instance_types
        if self.executor != "agent":
            return []
        found = filter_warnings(self.policy.placement.filters) + self._ec2_warnings()
        if not types:
            return found
        boot = self.policy.boot
        cheapest = min(types, key=lambda t: t.price_per_hour)
        if boot.max_cost_per_hour is not None and boot.max_cost_per_hour < cheapest.price_per_hour:
            found.append(
                f"policy.boot.max_cost_per_hour (${boot.max_cost_per_hour:,.4g}/h) is below every instance type's"
                f" price (the cheapest, {cheapest.name}, costs ${cheapest.price_per_hour:,.4g}/h): nothing can boot"
            )
        smallest = min(types, key=lambda t: t.vcpus)
        if boot.max_vcpus is not None and boot.max_vcpus < smallest.vcpus:
            found.append(
                f"policy.boot.max_vcpus ({boot.max_vcpus:g}) is below every instance type's vCPUs (the smallest,"
                f" {smallest.name}, has {smallest.vcpus:g}): nothing can boot"
            )
        return found + self._type_cap_warnings()

    def _type_cap_warnings(self) -> list[str]:
        """An instance type's own max_instances that can never bind, and a floor the caps keep the
        fleet from."""
        found = []
        boot, floor = self.policy.boot, self.policy.lifecycle.min_instances
        for i, itype in enumerate(self.instance_types):
            if itype.max_instances is not None and itype.max_instances >= boot.max_instances > 0:
                found.append(
                    f"instance_types.{i}.max_instances ({itype.max_instances}, {itype.name}) is not below"
                    f" policy.boot.max_instances ({boot.max_instances}): it never limits anything"
                )
        caps = [t.max_instances for t in self.instance_types]
        if all(cap is not None for cap in caps) and floor > (most := sum(cap or 0 for cap in caps)):
            found.append(
                f"policy.lifecycle.min_instances ({floor}) is more than the instance types' max_instances allow"
                f" together ({most}): the fleet is never kept at its floor"
            )
        return found

    def _ec2_warnings(self) -> list[str]:
        """Where the EC2 instances' agents could not reach the server: each instance would boot, fail
        to pair, and be terminated after the boot grace, its type backed off, and the jobs wait."""
        if self.cloud.driver != "ec2" or self.cloud.ec2.server_url is None:
            return []
        found = []
        server, url = self.server, urlsplit(self.cloud.ec2.server_url)
        if _loopback(url.hostname or ""):
            found.append(
                f"cloud.ec2.server_url ({self.cloud.ec2.server_url}) names this machine by a loopback address: on an"
                " instance it is the instance itself, so no agent could pair; give the address the instances reach"
                " this server at (its VPC address or DNS name)"
            )
        if _loopback(server.host):
            found.append(
                f"server.host ({server.host}) takes connections from this machine only: the instances' agents could"
                ' not pair, unless a proxy at cloud.ec2.server_url forwards to it; set server.host = "0.0.0.0" (or'
                " this machine's VPC address) and let the instances' security group reach server.port"
            )
        if url.scheme == "http" and server.tls_cert is not None and (url.port or 80) == server.port:
            found.append(
                f"cloud.ec2.server_url ({self.cloud.ec2.server_url}) is http:// but server.port {server.port} speaks"
                " HTTPS (server.tls_cert): the agents could not pair; make it https://"
            )
        return found

    @model_validator(mode="after")
    def _consistent(self) -> Config:
        """What no one key says alone: the instance types the [sim] section names exist (outages,
        scheduled failures and waves may also say '*': a misspelt name would silently never match), and
        the timings and bounds of the fleet agree with each other."""
        names = {t.name for t in self.instance_types}
        known = ", ".join(sorted(names)) or "none configured"
        sim = self.sim
        # (key path under sim, the name given, whether '*' is allowed there)
        type_key = "instance_type"
        named: list[tuple[tuple[str | int, ...], str, bool]] = []
        named += [(("fleet", "nodes", i, type_key), n.instance_type, False) for i, n in enumerate(sim.fleet.nodes)]
        named += [
            (("capacity", "outages", i, type_key), o.instance_type, True) for i, o in enumerate(sim.capacity.outages)
        ]
        named += [
            (("failures", "schedule", i, type_key), f.instance_type, True) for i, f in enumerate(sim.failures.schedule)
        ]
        named += [
            (("failures", "per_instance_day_by_type", n), n, False) for n in sim.failures.per_instance_day_by_type
        ]
        named += [(("failures", "notice_by_type", n), n, False) for n in sim.failures.notice_by_type]
        named += [(("failures", "waves", i, type_key), w.instance_type, True) for i, w in enumerate(sim.failures.waves)]
        named += [(("failures", "waves_per_day_by_type", n), n, False) for n in sim.failures.waves_per_day_by_type]
        named += [(("boot_delay", "never_pairs_by_type", n), n, False) for n in sim.boot_delay.never_pairs_by_type]
        errors: list[InitErrorDetails] = []
        for path, name, star in named:
            if name not in names and not (star and name == "*"):
                message = f"{name!r} is not in instance_types ({known}{_STAR_NOTE if star else ''})"
                errors.append(_error("unknown_instance_type", ("sim", *path), name, message))
        lifecycle, boot = self.policy.lifecycle, self.policy.boot
        if lifecycle.ping_stale < 2 * self.cloud.ping_interval:
            # Seed 000's "down" is an agent gone silent: one missed or late ping must not be it, or
            # every node is declared down, its work requeued and its instance replaced, over and over.
            message = (
                f"{lifecycle.ping_stale:g} s is less than two of cloud.ping_interval ({self.cloud.ping_interval:g} s):"
                " every node would be declared down between its pings"
            )
            errors.append(_error("ping_stale", ("policy", "lifecycle", "ping_stale"), lifecycle.ping_stale, message))
        if lifecycle.min_instances > boot.max_instances:
            message = f"{lifecycle.min_instances} is more than policy.boot.max_instances ({boot.max_instances})"
            errors.append(
                _error("min_instances", ("policy", "lifecycle", "min_instances"), lifecycle.min_instances, message)
            )
        if self.executor == "agent" and not self.instance_types:
            message = "none are configured: corral runs work on instances of these types, so no job could ever run"
            errors.append(_error("no_instance_types", ("instance_types",), [], message))
        errors += self._ec2_errors(names, known)
        if errors:
            # A ValidationError raised here keeps each error's own key path (a ValueError would be
            # reported at the top level).
            raise ValidationError.from_exception_data(type(self).__name__, errors)
        return self

    def _ec2_errors(self, names: set[str], known: str) -> list[InitErrorDetails]:
        """What the ec2 driver cannot boot without, said at load time rather than at the first boot."""
        if self.cloud.driver != "ec2":
            return []
        ec2 = self.cloud.ec2
        errors = []
        where = ("cloud", "ec2")
        without_image = sorted(names - set(ec2.image_ids))
        if ec2.image_id is None and without_image:
            message = (
                "required with cloud.driver = 'ec2' unless image_ids names an AMI for every instance type"
                f" (none for {', '.join(without_image)})"
            )
            errors.append(_error("missing", (*where, "image_id"), None, message))
        if ec2.server_url is None:
            message = "required with cloud.driver = 'ec2': the URL the instances' agents reach this server at"
            errors.append(_error("missing", (*where, "server_url"), None, message))
        for key, named in (("market", list(ec2.market)), ("image_ids", list(ec2.image_ids))):
            for name in named:
                if name not in names:
                    message = f"{name!r} is not in instance_types ({known})"
                    errors.append(_error("unknown_instance_type", (*where, key, name), name, message))
        for index, name in enumerate(ec2.included_scratch):
            if name not in names:
                message = f"{name!r} is not in instance_types ({known})"
                errors.append(_error("unknown_instance_type", (*where, "included_scratch", index), name, message))
        return errors

    @property
    def store_url(self) -> str:
        return self.store.url or f"sqlite:///{self.home / 'corral.db'}"

    def core_instance_types(self) -> list[InstanceType]:
        return [t.to_core() for t in self.instance_types]


def _error(kind: str, loc: tuple[str | int, ...], value: Any, message: str) -> InitErrorDetails:
    # One placeholder for the whole message: a name with braces in it is no template.
    return InitErrorDetails(type=PydanticCustomError(kind, "{message}", {"message": message}), loc=loc, input=value)


class ConfigError(ValueError):
    """A config file that cannot be used; the message names the file, key and reason."""


def format_validation_error(error: ValidationError, source: str) -> str:
    lines = [f"{source}: invalid configuration"]
    for item in error.errors():
        key = ".".join(str(part) for part in item["loc"]) or "(top level)"
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = "unknown key"
        value = item.get("input")
        shown = (  # the value, unless the message already names it ("not a duration: '1 minute' (write ...)")
            item["type"] != "extra_forbidden" and not isinstance(value, dict) and repr(value) not in message
        )
        if isinstance(value, str):
            value = without_password(value)  # an error message is read, pasted, logged
        lines.append(f"  {key}: {message}" + (f" (got {value!r})" if shown else ""))
    return "\n".join(lines)


def read_config_data(path: Path) -> dict[str, Any]:
    try:
        text = read_text(path)
    except UnreadableFile as exc:
        raise ConfigError(str(exc)) from exc
    try:
        data = load_yaml(text) or {} if is_yaml(path) else tomllib.loads(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: not valid {'YAML' if is_yaml(path) else 'TOML'}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a table of keys")
    return data


def load_config(path: Path | None = None, **overrides: Any) -> Config:
    """The config from `path` (or defaults), with `overrides` on top (e.g. home=...)."""
    data: dict[str, Any] = read_config_data(path) if path else {}
    data.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, str(path) if path else "config")) from exc


def reference_markdown() -> str:
    """The configuration reference, generated from the models so it cannot drift from them."""
    lines = [
        "# Configuration reference",
        "",
        "Generated by `corral config reference` from the configuration models; every key has a default.",
        "A config file is TOML or YAML. Durations take seconds or `90s`, `5m`, `1h30m` (or Slurm's `1:30:00`,",
        "`2-12:00:00`; a bare number is seconds, not Slurm's minutes); sizes take MiB or",
        "`512MiB`, `4GiB` (units are binary, as Slurm reads them: `4G` and `4GB` are 4 GiB too). Numbers must",
        "be finite (no `nan` or `inf`), and `true` or `false` is no number (it is not read as 1 or 0).",
        "`corral config check FILE` validates a file and names any bad key.",
        "",
    ]

    def walk(model: type[BaseModel], prefix: str) -> None:
        rows = []
        nested = []
        for name, field in model.model_fields.items():
            annotation = field.annotation
            sub = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
            if sub is not None:
                nested.append((f"{prefix}{name}", sub))
                continue
            if field.default_factory is not None:
                default: Any = field.default_factory()  # type: ignore[call-arg]
            else:
                default = field.default
            if isinstance(default, list) and default and isinstance(default[0], BaseModel):
                default = f"{len(default)} entries (see below)"
            elif isinstance(default, Path):
                default = "CORRAL_HOME or ~/.local/share/corral"
            type_name = _type_name(annotation)
            rows.append(f"| `{prefix}{name}` | {type_name} | `{default}` | {field.description or ''} |")
        if rows:
            lines.extend(
                [
                    f"## `{prefix.rstrip('.') or '(top level)'}`",
                    "",
                    "| key | type | default | meaning |",
                    "| --- | --- | --- | --- |",
                    *rows,
                    "",
                ]
            )
        for name, sub in nested:
            walk(sub, name + ".")

    walk(Config, "")
    lines += _entry_table("## `instance_types` (a list; each entry)", [], InstanceTypeConfig)
    notify_intro = ["Notifications and triggers (seed 002 §5.4.3-5.4.4); see the operator guide.", ""]
    lines += [""] + _entry_table("## `notify` (a list of `[[notify]]` rules; each entry)", notify_intro, NotifyRule)
    return "\n".join(lines) + "\n"


def _entry_table(heading: str, intro: list[str], model: type[BaseModel]) -> list[str]:
    """The reference's table of the keys of one entry of a list (`[[instance_types]]`)."""
    lines = [heading, "", *intro, "| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    for name, field in model.model_fields.items():
        default = "required" if field.is_required() else field.get_default(call_default_factory=True)
        lines.append(f"| `{name}` | {_type_name(field.annotation)} | `{default}` | {field.description or ''} |")
    return lines


def _type_name(annotation: Any) -> str:
    """A readable type for the reference: `float or None`, `list[str]`, `'loopback' or 'ec2'`."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin is typing.Literal:
        return " or ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in args)
    if origin is not None:
        return f"{getattr(origin, '__name__', origin)}[{', '.join(_type_name(a) for a in args)}]"
    if annotation is type(None):
        return "None"
    return str(getattr(annotation, "__name__", annotation))
