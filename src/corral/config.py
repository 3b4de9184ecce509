"""corral's configuration file (TOML or YAML), validated by pydantic.

Every key has a default, so an empty file (or none) is a working single-machine setup. A bad value
is reported with its key path and the reason: `policy.lifecycle.idle_grace: not a duration: 'soon'`.
"""

from __future__ import annotations

import os
import tomllib
import types
import typing
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from corral.core.model import GiB, InstanceType
from corral.core.settings import Duration, PolicySettings, SizeMiB
from corral.sim.settings import SimSettings

DEFAULT_PORT = 8642
_STAR_NOTE = "; or '*' for every type"


def default_home() -> Path:
    """CORRAL_HOME, else ~/.local/share/corral."""
    env = os.environ.get("CORRAL_HOME")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".local" / "share" / "corral"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class ServerConfig(_Strict):
    host: str = "127.0.0.1"
    port: int = Field(DEFAULT_PORT, ge=0, le=65535, description="0 picks a free port")


class StoreConfig(_Strict):
    url: str | None = Field(None, description="SQLAlchemy URL; default sqlite:///CORRAL_HOME/corral.db")


class InstanceTypeConfig(_Strict):
    name: str = Field(min_length=1)
    vcpus: float = Field(gt=0)
    ram: SizeMiB = Field(description="e.g. '8GiB'")
    price_per_hour: float = Field(ge=0)
    scratch: SizeMiB = 100 * GiB
    gpus: int = Field(0, ge=0)
    billing_granularity: Duration = 1.0
    billing_minimum: Duration = 60.0
    attributes: dict[str, str] = Field(default_factory=dict)

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
        )


class CloudConfig(_Strict):
    driver: Literal["loopback"] = Field("loopback", description="the cloud driver; EC2 is a later issue")
    cluster: str = Field("corral", description="tag value that marks this cluster's instances")
    ping_interval: Duration = Field(2.0, gt=0, description="how often agents ping the server")


class LoopConfig(_Strict):
    interval: Duration = Field(1.0, gt=0, description="seconds between reconcile passes (a submission wakes it early)")


class SlurmConfig(_Strict):
    """`executor = "slurm"`: corral dispatches to an existing Slurm cluster (docs/operator-guide.md)."""

    partition: str = Field("", description="sbatch --partition; empty: Slurm's default partition")
    account: str = Field("", description="sbatch --account; empty: none")
    extra_args: list[str] = Field(default_factory=list, description="more sbatch options, e.g. ['--qos=normal']")
    conf: str | None = Field(None, description="SLURM_CONF for the Slurm commands; default: Slurm's own")
    bin_dir: str = Field("", description="directory of sbatch, squeue, scontrol, scancel; empty: PATH")
    command_timeout: Duration = Field(30.0, gt=0, description="a Slurm command that takes longer has failed")
    max_pending: int = Field(100, ge=1, description="this dispatcher's jobs waiting in Slurm's queue at most")
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
    instance_types: list[InstanceTypeConfig] = Field(default_factory=_default_instance_types)
    executor: Literal["agent", "slurm"] = Field(
        "agent", description="how jobs run: 'agent' on the nodes corral boots, 'slurm' through sbatch (no cloud)"
    )
    slurm: SlurmConfig = Field(default_factory=SlurmConfig)
    policy: PolicySettings = Field(default_factory=PolicySettings)
    sim: SimSettings = Field(default_factory=SimSettings)

    @field_validator("instance_types")
    @classmethod
    def _unique_names(cls, value: list[InstanceTypeConfig]) -> list[InstanceTypeConfig]:
        names = [t.name for t in value]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"instance type names must be unique; repeated: {', '.join(dupes)}")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Config:
        """What no one key says alone: the instance types the [sim] section names exist (outages
        and scheduled failures may also say '*': a misspelt name would silently never match), and
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
        if errors:
            # A ValidationError raised here keeps each error's own key path (a ValueError would be
            # reported at the top level).
            raise ValidationError.from_exception_data(type(self).__name__, errors)
        return self

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
        shown = (  # the value, unless the message already starts with it
            item["type"] != "extra_forbidden" and not isinstance(value, dict) and not message.startswith(repr(value))
        )
        lines.append(f"  {key}: {message}" + (f" (got {value!r})" if shown else ""))
    return "\n".join(lines)


def read_config_data(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    try:
        data = yaml.safe_load(text) or {} if path.suffix in (".yaml", ".yml") else tomllib.loads(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: not valid {'YAML' if path.suffix in ('.yaml', '.yml') else 'TOML'}: {exc}") from exc
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
        "A config file is TOML or YAML. Durations take seconds or `90s`, `5m`, `1h30m`; sizes take MiB or",
        "`512MiB`, `4GiB`. Numbers must be finite (no `nan` or `inf`). `corral config check FILE` validates a",
        "file and names any bad key.",
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
    lines.extend(
        [
            "## `instance_types` (a list; each entry)",
            "",
            "| key | type | default | meaning |",
            "| --- | --- | --- | --- |",
        ]
    )
    for name, field in InstanceTypeConfig.model_fields.items():
        default = "required" if field.is_required() else field.get_default(call_default_factory=True)
        type_name = _type_name(field.annotation)
        lines.append(f"| `{name}` | {type_name} | `{default}` | {field.description or ''} |")
    return "\n".join(lines) + "\n"


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
