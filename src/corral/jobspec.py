"""What a user submits: the job request, validated by pydantic.

One schema serves `corral submit`, the HTTP API, job files (JSON Lines or YAML) and the
simulator's JSON Lines workloads. Unknown fields are errors, so a typo never silently drops a
constraint.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import re
import time
from datetime import datetime, timedelta, timezone
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import to_jsonable_python

from corral.core import dependency as dependencies
from corral.core import job_array
from corral.core.model import NODE_FAILURE_ACTIONS, GiB, Job, LocalityHints, OnNodeFailure, Resources
from corral.core.signals import parse_job_signal
from corral.core.units import Duration, Float, Int, SizeMiB

MAX_PRIORITY = 1_000_000
DEFAULT_PRIORITY = 1  # a job's, unless it says; a user submits at most at it (an admin above)
# The longest job name the store keeps (jobs.name is VARCHAR(200): PostgreSQL refuses a longer one,
# which reached the user as "Internal Server Error"; SQLite kept it whole).
MAX_NAME = 200
# The longest user a job names: a user's name (corral users add), as jobs.user_name keeps it, by
# which a user's open jobs are counted at each submission (policy.users.max_submitted_jobs).
MAX_USER = 64
# The longest tag: job_tags.tag keeps each, indexed, by which `corral jobs --tag` finds a tag's jobs
# (a btree entry has a size limit on PostgreSQL: about 2,700 bytes).
MAX_TAG = 200
# What exec takes on Linux, where the agent starts a job: one argument or NAME=value of at most
# MAX_ARG_STRLEN (32 pages), and all of them, with the node's own variables, within ARG_MAX (2 MiB
# under the usual 8 MiB stack limit). A job past either is refused at submission, where it was
# stored whole (the store and every pass's memory holding it) only to fail on its node with exit 126
# "Argument list too long".
MAX_EXEC_STRING = 128 * 1024 - 1
MAX_EXEC_TOTAL = 1024 * 1024
# The rest of a job's text (tags, traits, locality, its dependency, ...): stored with it, held by
# every pass and shown to every user; far more than any job needs.
MAX_OTHER_TEXT = 64 * 1024
# A batch script's text (sbatch's model: the script is copied at submission and travels with the job), as Slurm's
# default max_script_size. Bounded on its own, not with the other text: a script of a few hundred
# lines is ordinary, and no pass reads it (the job built for placement holds only that it has one).
MAX_SCRIPT = 4 * 1024 * 1024
# The copies of a script an array's submission stores: each task's spec holds the whole script, so a
# thousand-task array of a 4 MiB script would be 4 GiB of the store.
MAX_SCRIPT_COPIES = 64 * 1024 * 1024


def script_problem(text: str) -> str | None:
    """What makes `text` no batch script corral runs (None: it is one), as sbatch refuses it: the
    node execs the file, so it needs an interpreter line; a DOS line break makes that line name
    `/bin/sh\\r`, which no node has."""
    if not text.startswith("#!"):
        return (
            "not a batch script: its first line must start with #! and an interpreter's path (e.g. #!/bin/bash),"
            " as sbatch requires"
        )
    if len(text) * 4 > MAX_SCRIPT and (size := len(text.encode())) > MAX_SCRIPT:
        return script_too_large(size)
    if "\0" in text:
        return "a NUL byte: a batch script is text"
    if "\r\n" in text:
        return "DOS line breaks (\\r\\n), as sbatch refuses: the interpreter's line would end in \\r (dos2unix)"
    return None


def script_too_large(size: int) -> str:
    return f"{size:,} bytes; a batch script has at most {MAX_SCRIPT:,} (4 MiB, Slurm's default max_script_size)"


def script_name_problem(name: str) -> str | None:
    """What makes `name` no name for a script's file in its attempt's directory (None: it is one)."""
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        return f"a script's command names its file, a name without '/' (e.g. job.sh), not {name!r}"
    return None


def to_epoch(value: Any) -> Any:
    """A time as epoch seconds: a datetime, or an ISO 8601 string (other values are left as they are)."""
    if isinstance(value, bool):
        raise ValueError(f"not a time: {str(value).lower()} (use ISO 8601, e.g. 2026-11-21T14:00:00+00:00)")
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError as exc:
            raise ValueError(f"not a time: {value!r} (use ISO 8601, e.g. 2026-11-21T14:00:00+00:00)") from exc
    if isinstance(value, datetime):
        return _epoch_seconds(value)
    return value


def _epoch_seconds(moment: datetime) -> float:
    """Any datetime, 0001-01-01 included: a time long past means no wait (as Slurm's --begin and
    LSF's -b take one), not an error."""
    try:
        return moment.timestamp()
    except (ValueError, OverflowError, OSError):
        # A local time the C library cannot convert (its probes step out of years 1..9999): one
        # that far away is taken in the zone's standard time.
        standard = timezone(timedelta(seconds=-time.timezone))
        return moment.replace(tzinfo=standard).timestamp()


EpochSeconds = Annotated[float, BeforeValidator(to_epoch)]


LOCALITY_TAG = "tag:"  # as corral.placement.locality reads it (TAG_PREFIX), without importing numpy here


def is_locality_entry(entry: str) -> bool:
    """What a near or far entry can name: a job id ("123"), or every job with a tag ("tag:web")."""
    if entry.startswith(LOCALITY_TAG):
        return len(entry) > len(LOCALITY_TAG)
    return entry.isascii() and entry.isdigit()


# The validation context of a spec read back from the store (`JobRequest.stored`).
_STORED = {"stored": True}


def _checked_locality_entry(entry: str, info: ValidationInfo) -> str:
    # Refused where a job is submitted; a stored spec is read as it was stored: a job submitted
    # before entries were checked must still load (placement lists such an entry as not understood).
    if not is_locality_entry(entry) and not (info.context and info.context.get("stored")):
        raise ValueError(f"not a job id or tag:NAME: {entry!r}")
    return entry


LocalityEntry = Annotated[str, AfterValidator(_checked_locality_entry)]


DEPENDENCY_ENTRY = re.compile(r"\s*@?[0-9]+(_([0-9]+|\*))?\s*")


def _dependency_entry(entry: object) -> bool:
    """A job id of the mapping form: a whole number, or its text, or an array's task or whole
    array as text, or a job of the same submission by its place (`@0`, `@0_3`, `@0_*`): no
    separator that would make it more than one condition."""
    if isinstance(entry, int):
        return not isinstance(entry, bool)
    return isinstance(entry, str) and DEPENDENCY_ENTRY.fullmatch(entry) is not None


def dependency_text(value: Any) -> Any:
    """A dependency as stored: Slurm's text in canonical form ("afterok:12:13,afterany:14"), from
    that text (any spacing, case, order or repeats) or from the structured form, a mapping of kind
    to job ids ({"afterok": [12, 13], "afterany": 14}; an array's task or the whole array as in the
    text, "12_3", "12_*") with "satisfy": "any" for Slurm's `?`, read as the text it stands for.
    None (or an empty text or mapping) is no dependency."""
    if value is None:
        return None
    if isinstance(value, str):
        parsed = dependencies.parse(value)
    elif isinstance(value, dict):
        kinds = dict(value)
        satisfy = kinds.pop("satisfy", "all")
        if satisfy not in ("all", "any"):
            raise ValueError(f"satisfy: {satisfy!r} is not 'all' (every condition, Slurm's ',') or 'any' ('?')")
        parts = []
        for kind, listed in kinds.items():
            entries = listed if isinstance(listed, list) else [listed]
            if not all(_dependency_entry(e) for e in entries):
                raise ValueError(
                    f"{kind}: job ids are whole numbers or an array's tasks (12_3, 12_*), or jobs of the same"
                    f" submission (@0), not {listed!r}"
                )
            ids = [str(e).strip() for e in entries]
            if satisfy == "any":  # each id a condition of its own: `afterok:12:13` means both
                parts += [f"{kind}:{job_id}" for job_id in ids]
            elif ids:
                parts.append(":".join([str(kind), *ids]))
        joined = (dependencies.ANY_OF if satisfy == "any" else dependencies.ALL_OF).join(parts)
        parsed = dependencies.parse(joined)
    else:
        raise ValueError("a dependency is Slurm's text (afterok:12:13,afterany:14) or a mapping of kind to job ids")
    return None if parsed is None else str(parsed)


def array_text(value: Any) -> Any:
    """A job array's spec as stored: Slurm's text in canonical form ("0-3,7%2"), from any spacing,
    order or repeats. None (or an empty text) is no array."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError("an array is Slurm's --array text, e.g. '0-99%10', '1,3,5-7' or '0-99:4'")
    if not value.strip():
        return None
    return str(job_array.parse(value))


def signal_spec_text(value: Any) -> Any:
    """sbatch's --signal as stored: its canonical text ("B:USR1@60", the default time made
    explicit) from any of sbatch's spellings (SIGUSR1, usr1, 10). None (or an empty text) is none."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"a signal is sbatch's --signal text, e.g. 'USR1@120' or 'B:USR1', not {value!r}")
    if not value.strip():
        return None
    return str(parse_job_signal(value))


def _is_image_name(value: str) -> bool:
    # The engine would read a leading '-' as an option, and a name with spaces is none.
    return bool(value) and not value.startswith("-") and not any(c.isspace() or c == "\0" for c in value)


class LocalitySpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    near: list[LocalityEntry] = Field(default_factory=list, description="job ids or 'tag:NAME'")
    far: list[LocalityEntry] = Field(default_factory=list, description="job ids or 'tag:NAME'")
    strict: bool = False
    level: Literal["server", "rack"] = "server"


def _at_most(what: str, value: str, limit: int) -> None:
    if len(value) > limit:
        raise ValueError(f"a {what} has at most {limit} characters, not {len(value)}")


class JobRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    command: list[str] = Field(description="argv; run without a shell", json_schema_extra={"minItems": 1})
    image: str | None = Field(
        None, description="a container image to run the command in ([containers]: podman or docker); none: on the node"
    )
    chdir: str | None = Field(
        None,
        description="the directory the command runs in, an absolute path on the node (sbatch --chdir, e.g. a shared"
        " file system's); none: the attempt's own directory under the agent's work dir",
    )
    separate_stderr: bool = Field(
        False,
        description="keep the command's stderr apart from its output, as sbatch --error does (corral logs --stderr,"
        " ?stream=stderr); false: both in one output, as Slurm's --output alone",
    )
    script: str | None = Field(
        None,
        description="a batch script's text, run as the job (sbatch's script, copied at submission): the command is"
        f" then its file's name and its arguments (job.sh ARG...); it starts with #!; at most {MAX_SCRIPT:,} bytes",
    )
    name: str = ""
    env: dict[str, str] = Field(default_factory=dict)
    vcpus: Float = Field(1.0, gt=0)
    ram: SizeMiB = Field(1 * GiB, description="per node, e.g. '4GiB'")
    scratch: SizeMiB = 0
    gpus: Int = Field(0, ge=0)
    nodes: Int = Field(1, ge=1, le=10_000, description="a gang of this many nodes")
    # Strict: a file's false (YAML's no) would be taken for 0, which cancels.
    priority: int = Field(DEFAULT_PRIORITY, ge=0, le=MAX_PRIORITY, strict=True, description="0 cancels")
    not_before: EpochSeconds | None = None
    time_limit: Duration | None = Field(
        None, description="a longer run is ended (TIMEOUT); 0 = no limit, as Slurm's --time=0"
    )
    signal: Annotated[str | None, BeforeValidator(signal_spec_text)] = Field(
        None,
        description="sbatch's --signal, [B:]SIG[@TIME]: send SIG (USR1, SIGUSR1 or 10) TIME seconds (default 60)"
        " before the time limit, once, to checkpoint; to the job's process group, or with B: to its main process"
        " alone (a container's main process either way). Sent only to a job with a time limit",
    )
    max_retries: Int = Field(0, ge=0, le=100)
    tags: list[str] = Field(default_factory=list)
    locality: LocalitySpec | None = None
    traits: dict[str, str | list[str]] = Field(default_factory=dict)
    user: str = ""
    forbidden_traits: dict[str, str | list[str]] = Field(
        default_factory=dict, description="node attribute values the job must not run on; '*' forbids the key"
    )
    min_platform: str | None = Field(None, description="lowest node platform version accepted")
    cpu_capped: bool = Field(False, description="capped and uncapped jobs do not share a node")
    exclusive: bool = Field(
        False, description="runs alone on each of its nodes, as Slurm's --exclusive: no other job shares them"
    )
    reservation: str = Field("", description="admin reservation whose nodes the job may use")
    on_node_failure: OnNodeFailure | None = Field(
        None,
        description="what the loss of a node it runs on does to the job: requeue, cancel or hold"
        " (seed 002 §5.4.6); unset: policy.retry.on_node_failure",
    )

    hold: bool = Field(
        False, description="queued held (sbatch --hold): not placed until corral release; an array's every task"
    )

    dependency: Annotated[str | None, BeforeValidator(dependency_text)] = Field(
        None,
        description="Slurm's --dependency: after, afterany, afterok, afternotok with job ids, ',' = all"
        " must hold, '?' = any (afterok:12:13,afterany:14; an array whole as its id or 12_*, a task as 12_3);"
        " or a mapping {afterok: [12, 13]}. An earlier job of the same submission by its place, from 0:"
        " afterok:@0 (stored as its job id)",
    )

    array: Annotated[str | None, BeforeValidator(array_text)] = Field(
        None,
        description="Slurm's --array: one job per task id, 0-99, 1,3,5-7, 0-99:4 (ids 0 to"
        f" {job_array.MAX_TASK_ID}); '%N' at the end runs at most N at once (0-99%10)",
    )

    @field_validator("command", mode="before")
    @classmethod
    def _command_is_a_list(cls, value: Any) -> Any:
        # "command": "echo hi" in a job file was refused as "Input should be a valid list", which says
        # neither what a list is here nor that no shell runs it.
        if isinstance(value, str):
            as_shell = json.dumps(["sh", "-c", value])
            raise ValueError(
                f"an argument list, not a string: run it through a shell with {as_shell}, or give its words"
            )
        return value

    @field_validator("command")
    @classmethod
    def _command_not_empty(cls, value: list[str]) -> list[str]:
        if not value or not value[0].strip():
            # A program name of spaces is no program: it would only fail on the node (exit 127).
            raise ValueError("the command is empty")
        return value

    @field_validator("command")
    @classmethod
    def _command_execable(cls, value: list[str], info: ValidationInfo) -> list[str]:
        # No exec takes a NUL byte (a job stored before this was refused still loads: its attempt fails).
        for i, argument in enumerate(value):
            if "\0" in argument and not (info.context and info.context.get("stored")):
                raise ValueError(f"argument {i} has a NUL byte: {argument!r}")
        return value

    @model_validator(mode="after")
    def _within_exec_limits(self, info: ValidationInfo) -> JobRequest:
        if info.context and info.context.get("stored"):
            return self
        if self.image is not None and (wild := [name for name in self.env if name.endswith("*")]):
            # The agent passes a container its variables by name (--env NAME), and podman reads a
            # name ending in * as "every variable of mine starting so": the agent's own environment.
            raise ValueError(
                f"env: {wild[0]!r}: podman reads a name ending in * as a wildcard; not in a job with an image"
            )
        # Counted in characters first, which take 1 to 4 bytes each: a job far within the limits
        # (all but a few) is not measured further.
        exec_chars = sum(map(len, self.command)) + sum(len(name) + len(text) + 1 for name, text in self.env.items())
        if exec_chars * 4 > MAX_EXEC_STRING:
            self._measure_exec_text()
        fields = self._other_text()
        other = "".join(word for words in fields.values() for word in words)
        if "\0" in self.name + other:
            # PostgreSQL stores no NUL (the submission was a 500), nor does an environment carry one
            # (a trigger's CORRAL_EVENT_MESSAGE: its command never ran).
            named = {"name": [self.name], **fields}
            where = next(field for field, words in named.items() if any("\0" in word for word in words))
            raise ValueError(f"{where}: a NUL byte, which no name or value here may hold")
        if len(other) * 4 > MAX_OTHER_TEXT and (size := len(other.encode())) > MAX_OTHER_TEXT:
            raise ValueError(
                f"tags, traits, locality and the job's other fields but its command and environment have {size:,}"
                f" bytes; at most {MAX_OTHER_TEXT:,}"
            )
        return self

    @field_validator("script")
    @classmethod
    def _a_batch_script(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and not (info.context and info.context.get("stored")):
            problem = script_problem(value)
            if problem is not None:
                raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _script_named_by_its_command(self, info: ValidationInfo) -> JobRequest:
        # The agent writes the script to a file of this name in the attempt's directory: a path
        # would put it elsewhere, or nowhere.
        if self.script is not None and not (info.context and info.context.get("stored")):
            problem = script_name_problem(self.command[0])
            if problem is not None:
                raise ValueError(f"command.0: {problem}")
            tasks = len(job_array.parse(self.array).task_ids) if self.array else 1
            if tasks > 1 and (copies := tasks * len(self.script.encode())) > MAX_SCRIPT_COPIES:
                raise ValueError(
                    f"script: {len(self.script.encode()):,} bytes for each of {tasks:,} tasks is {copies:,} bytes"
                    f" stored (each task keeps its copy); at most {MAX_SCRIPT_COPIES:,} (64 MiB) a submission:"
                    " keep the data in a file the script reads"
                )
        return self

    def _measure_exec_text(self) -> None:
        sizes = [(f"command.{i}", len(argument.encode())) for i, argument in enumerate(self.command)]
        sizes += [(f"env.{name}", len(name.encode()) + 1 + len(text.encode())) for name, text in self.env.items()]
        for where, size in sizes:
            if size > MAX_EXEC_STRING:
                raise ValueError(
                    f"{where}: {size:,} bytes; exec takes at most {MAX_EXEC_STRING:,} in one argument or NAME=value"
                    " (the job would fail on its node: Argument list too long): pass large data in a file"
                )
        total = sum(size + 1 for _, size in sizes)
        if total > MAX_EXEC_TOTAL:
            raise ValueError(
                f"the command and environment have {total:,} bytes; at most {MAX_EXEC_TOTAL:,} (exec's limit on a"
                " node, its own variables included, is about 2 MiB: the job would fail there with Argument list too"
                " long): pass large data in a file"
            )

    def _other_text(self) -> dict[str, list[str]]:
        """The job's text but its name, command and environment, by field."""
        fields = {
            "tags": list(self.tags),
            "reservation": [self.reservation],
            "user": [self.user],
            "min_platform": [self.min_platform or ""],
            "image": [self.image or ""],
            "chdir": [self.chdir or ""],
            "dependency": [self.dependency or ""],
            "array": [self.array or ""],
            "locality": [*self.locality.near, *self.locality.far] if self.locality is not None else [],
        }
        for name, traits in (("traits", self.traits), ("forbidden_traits", self.forbidden_traits)):
            fields[name] = [
                word
                for key, wanted in traits.items()
                for word in (key, *([wanted] if isinstance(wanted, str) else wanted))
            ]
        return fields

    @field_validator("env")
    @classmethod
    def _env_execable(cls, value: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        # What no exec takes: the agent could not start the job (its environment is the process's).
        if info.context and info.context.get("stored"):
            return value
        for name, text in value.items():
            if not name or "=" in name or "\0" in name:
                raise ValueError(f"an environment variable's name has no '=' or NUL byte and is not empty: {name!r}")
            if "\0" in text:
                raise ValueError(f"{name}: a value has no NUL byte")
        return value

    @field_validator("name", "user")
    @classmethod
    def _fits(cls, value: str, info: ValidationInfo) -> str:
        # A job stored before these were checked still loads (SQLite kept a longer name; a longer
        # user's jobs.user_name was cut to fit by migration 0019).
        if not (info.context and info.context.get("stored")):
            _at_most(info.field_name or "", value, MAX_NAME if info.field_name == "name" else MAX_USER)
        return value

    @field_validator("image")
    @classmethod
    def _an_image_name(cls, value: str | None) -> str | None:
        if value is not None and not _is_image_name(value):
            raise ValueError(f"not an image name: {value!r} (e.g. docker.io/library/python:3.12)")
        return value

    @field_validator("chdir")
    @classmethod
    def _an_absolute_directory(cls, value: str | None) -> str | None:
        # A relative path would be read from a directory the user never sees (the attempt's own, or
        # corral's Slurm work dir), not from where `corral submit` ran: refused, as a path that
        # could only be wrong on the node.
        if value is not None and not value.startswith("/"):
            raise ValueError(f"not an absolute path: {value!r} (the directory on the node, e.g. /shared/project/run42)")
        return value

    @field_validator("tags")
    @classmethod
    def _tags_named(cls, value: list[str], info: ValidationInfo) -> list[str]:
        # An empty tag matches no `tag:` hint and reads as nothing in a listing (stored jobs keep theirs).
        for tag in value:
            if not tag.strip() and not (info.context and info.context.get("stored")):
                raise ValueError(f"a tag must have a name, not {tag!r}")
            if not (info.context and info.context.get("stored")):
                _at_most("tag", tag, MAX_TAG)
        return value

    @field_validator("traits", "forbidden_traits")
    @classmethod
    def _traits_named(cls, value: dict[str, str | list[str]], info: ValidationInfo) -> dict[str, str | list[str]]:
        # A blank key or value matches no node attribute: the job could never be placed (or, as a
        # forbidden trait, forbids nothing), and waited with "needs accel= (0 of 3 have it)".
        if info.context and info.context.get("stored"):
            return value
        for key, wanted in value.items():
            if not key.strip():
                raise ValueError(f"a trait must have a name, not {key!r}")
            values = [wanted] if isinstance(wanted, str) else wanted
            if not values or any(not v.strip() for v in values):
                raise ValueError(f"{key}: no value, not {wanted!r} (give one, or '*' for any value)")
        return value

    @field_validator("time_limit")
    @classmethod
    def _zero_is_no_limit(cls, value: float | None) -> float | None:
        # Slurm's --time=0 asks for no limit; read as a limit, it would end the job at once.
        return None if value == 0 else value

    @field_validator("ram")
    @classmethod
    def _ram_positive(cls, value: int) -> int:
        if value <= 0:
            raise ValueError("RAM must be more than 0")
        return value

    def without_defaults(self) -> dict[str, Any]:
        """The request as JSON with only what differs from a field's default (a locality's too),
        which the model reads back as the same request: what a client sends. A server from before
        a field existed refuses it as unknown, even at the default it would have taken anyway
        (chdir, separate_stderr)."""
        return spec_without_defaults(self.model_dump(mode="json"), type(self))

    @classmethod
    def stored(cls, spec: Any) -> JobRequest:
        """A spec as the store holds it, validated as at submission but for what submission
        refuses only since some jobs were stored (a locality entry that is neither form)."""
        return cls.model_validate(spec, context=_STORED)

    def to_dependency(self) -> dependencies.Dependency | None:
        return dependencies.parse(self.dependency) if self.dependency else None

    def to_array(self) -> job_array.ArraySpec | None:
        return job_array.parse(self.array) if self.array else None

    def to_job(
        self, job_id: int, submitted_at: float, array_job_id: int | None = None, array_task_id: int | None = None
    ) -> Job:
        """The job; a task of an array given its array's id and its own task id."""
        spec = self.to_array() if array_task_id is not None else None
        task = None
        if spec is not None and array_task_id is not None:
            task = spec.task(array_job_id or job_id, array_task_id)
        return Job(
            id=job_id,
            command=list(self.command),
            resources=Resources(self.vcpus, self.ram, self.scratch, self.gpus),
            name=self.name,
            env=dict(self.env),
            chdir=self.chdir,
            separate_stderr=self.separate_stderr,
            batch_script=self.script is not None,
            node_count=self.nodes,
            priority=self.priority,
            not_before=self.not_before,
            time_limit=self.time_limit,
            signal=parse_job_signal(self.signal) if self.signal else None,
            max_retries=self.max_retries,
            tags=tuple(self.tags),
            locality=(
                LocalityHints(
                    tuple(self.locality.near), tuple(self.locality.far), self.locality.strict, self.locality.level
                )
                if self.locality
                else None
            ),
            traits=dict(self.traits),
            user=self.user,
            submitted_at=submitted_at,
            forbidden_traits=dict(self.forbidden_traits),
            min_platform=self.min_platform,
            cpu_capped=self.cpu_capped,
            exclusive=self.exclusive,
            reservation=self.reservation,
            on_node_failure=self.on_node_failure,
            dependency=self.to_dependency(),
            array=task,
            array_throttle=spec.throttle if spec is not None else None,
        )


@functools.cache
def _json_defaults(model: type[BaseModel]) -> dict[str, Any]:
    """Each field's default as a JSON dump writes it, of the fields that have one."""
    return {
        name: to_jsonable_python(field.get_default(call_default_factory=True))
        for name, field in model.model_fields.items()
        if not field.is_required()
    }


def _at_no_default(values: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in values.items() if name not in defaults or value != defaults[name]}


def spec_without_defaults(spec: dict[str, Any], model: type[JobRequest] = JobRequest) -> dict[str, Any]:
    """A spec as `model_dump(mode="json")` of a `model` writes it, without the fields at their
    defaults (a locality's too): its request's `without_defaults()`, from a dump at hand. A
    submission's key is hashed so, by which a field added with a default leaves the hash of a
    request that does not use it as it was."""
    kept = _at_no_default(spec, _json_defaults(model))
    if isinstance(kept.get("locality"), dict):
        kept["locality"] = _at_no_default(kept["locality"], _json_defaults(LocalitySpec))
    return kept


# The fields `_fast_job` reads: a spec stored by this version holds every one, as
# `model_dump(mode="json")` wrote it. Written out, not taken from the model: a field added to the
# model and not to `_fast_job` would be dropped from every job it builds (the model's own default
# in its place), where a spec with a key not listed here goes to the model, slower but right
# (tests/test_jobspec_stored.py holds the two lists equal).
STORED_FIELDS = frozenset(
    {
        *("array", "chdir", "command", "cpu_capped", "dependency", "env", "exclusive", "forbidden_traits", "gpus"),
        *("hold", "image", "locality", "max_retries", "min_platform", "name", "nodes", "not_before"),
        *("on_node_failure", "priority", "ram", "reservation", "scratch", "script", "separate_stderr", "signal"),
        *("tags", "time_limit", "traits", "user", "vcpus"),
    }
)
# The fields that came after others were stored (a spec stored before one has none of it, which is
# its default): every job queued at an upgrade's restart is built on the fast path as before rather
# than through the model. `script` came in one release; `exclusive` and `signal` in the next.
_ADDED_LATER = ("script", "exclusive", "signal")
# A spec stored before `script`: what the servers that hashed submissions whole knew.
FIELDS_BEFORE_SCRIPT = STORED_FIELDS - frozenset(_ADDED_LATER)
_FAST_KEYS = tuple(
    STORED_FIELDS - frozenset(left_out)
    for count in range(len(_ADDED_LATER) + 1)
    for left_out in itertools.combinations(_ADDED_LATER, count)
)
_LOCALITY_FIELDS = frozenset(LocalitySpec.model_fields)
# The largest int that goes through a float unchanged (sizes are read as floats, then rounded).
_EXACT_IN_FLOAT = 2**53


def job_from_stored(
    spec: Any, job_id: int, submitted_at: float, array_job_id: int | None = None, array_task_id: int | None = None
) -> Job:
    """`JobRequest.stored(spec).to_job(...)`, the same Job, without pydantic for a spec as this
    version stores it: a long queue's first snapshot built 100,000 jobs through the model, most of
    its read (bench/live_pass.py). The spec was validated at submission; each value is still
    checked for what the model's validation of a stored spec would take as it is, and any other
    spec (an older one without a newer field, a number stored as text, one the model refuses) is
    left to the model, which builds it or raises as before (tests/test_jobspec_stored.py)."""
    try:
        job = _fast_job(spec, job_id, submitted_at, array_job_id, array_task_id)
    except (TypeError, ValueError, KeyError, AttributeError):
        job = None
    if job is None:
        return JobRequest.stored(spec).to_job(job_id, submitted_at, array_job_id, array_task_id)
    return job


def _fast_job(
    spec: Any, job_id: int, submitted_at: float, array_job_id: int | None, array_task_id: int | None
) -> Job | None:
    """The job of a spec whose every value is what the model would keep unchanged; None for any other."""
    if type(spec) is not dict:
        return None
    keys = spec.keys()
    if not any(keys == fields for fields in _FAST_KEYS):
        return None
    script, signal = spec.get("script"), spec.get("signal")
    command, vcpus, ram, scratch = spec["command"], spec["vcpus"], spec["ram"], spec["scratch"]
    gpus, nodes, priority, max_retries = spec["gpus"], spec["nodes"], spec["priority"], spec["max_retries"]
    if (
        type(command) is not list
        or not command
        or not all(type(argument) is str for argument in command)
        or not command[0].strip()
        or type(vcpus) is not float
        or not (0 < vcpus < math.inf)
        or type(ram) is not int
        or not (0 < ram <= _EXACT_IN_FLOAT)
        or type(scratch) is not int
        or not (0 <= scratch <= _EXACT_IN_FLOAT)
        or type(gpus) is not int
        or gpus < 0
        or type(nodes) is not int
        or not (1 <= nodes <= 10_000)
        or type(priority) is not int
        or not (0 <= priority <= MAX_PRIORITY)
        or type(max_retries) is not int
        or not (0 <= max_retries <= 100)
    ):
        return None
    image, chdir, not_before, time_limit = spec["image"], spec["chdir"], spec["not_before"], spec["time_limit"]
    if (
        (image is not None and (type(image) is not str or not _is_image_name(image)))
        or (chdir is not None and (type(chdir) is not str or not chdir.startswith("/")))
        or (not_before is not None and (type(not_before) is not float or not math.isfinite(not_before)))
        # (0 is stored as None: no limit)
        or (time_limit is not None and (type(time_limit) is not float or not (0 < time_limit < math.inf)))
    ):
        return None
    texts = (spec["name"], spec["user"], spec["reservation"])
    min_platform, on_node_failure = spec["min_platform"], spec["on_node_failure"]
    if (
        not all(type(text) is str for text in texts)
        or (min_platform is not None and type(min_platform) is not str)
        or (on_node_failure is not None and on_node_failure not in NODE_FAILURE_ACTIONS)
        or type(spec["cpu_capped"]) is not bool
        or type(spec.get("exclusive", False)) is not bool
        or type(spec["hold"]) is not bool
        or type(spec["separate_stderr"]) is not bool
        or (script is not None and type(script) is not str)
        or (signal is not None and type(signal) is not str)
    ):
        return None
    env, tags = spec["env"], spec["tags"]
    if type(env) is not dict or not all(type(name) is str and type(text) is str for name, text in env.items()):
        return None
    if type(tags) is not list or not all(type(tag) is str for tag in tags):
        return None
    traits, forbidden_traits = _stored_traits(spec["traits"]), _stored_traits(spec["forbidden_traits"])
    if traits is None or forbidden_traits is None:
        return None
    locality = spec["locality"]
    hints = None
    if locality is not None:
        hints = _stored_locality(locality)
        if hints is None:
            return None
    # As the model reads them (their canonical text), then as to_job parses that text.
    dependency = spec["dependency"]
    array = spec["array"]
    if (dependency is not None and type(dependency) is not str) or (array is not None and type(array) is not str):
        return None
    dependency = dependency_text(dependency)
    array = array_text(array)
    array_spec = job_array.parse(array) if array and array_task_id is not None else None
    task = array_spec.task(array_job_id or job_id, array_task_id) if array_spec and array_task_id is not None else None
    return Job(
        id=job_id,
        command=list(command),
        resources=Resources(vcpus, ram, scratch, gpus),
        name=texts[0],
        env=dict(env),
        chdir=chdir,
        node_count=nodes,
        priority=priority,
        not_before=not_before,
        time_limit=time_limit,
        # (As the model reads it: the canonical text stored, parsed; a value it refuses raises ValueError.)
        signal=parse_job_signal(signal) if signal else None,
        max_retries=max_retries,
        tags=tuple(tags),
        locality=hints,
        traits=traits,
        user=texts[1],
        submitted_at=submitted_at,
        forbidden_traits=forbidden_traits,
        min_platform=min_platform,
        cpu_capped=spec["cpu_capped"],
        exclusive=spec.get("exclusive", False),
        separate_stderr=spec["separate_stderr"],
        batch_script=script is not None,
        reservation=texts[2],
        on_node_failure=on_node_failure,
        dependency=dependencies.parse(dependency) if dependency else None,
        array=task,
        array_throttle=array_spec.throttle if array_spec is not None else None,
    )


def _stored_traits(value: Any) -> dict[str, str | list[str]] | None:
    """A copy of traits as the model keeps them (each a text or a list of texts), None for other values."""
    if type(value) is not dict:
        return None
    traits: dict[str, str | list[str]] = {}
    for key, wanted in value.items():
        if type(key) is not str:
            return None
        if type(wanted) is str:
            traits[key] = wanted
        elif type(wanted) is list and all(type(word) is str for word in wanted):
            traits[key] = list(wanted)
        else:
            return None
    return traits


def _stored_locality(value: Any) -> LocalityHints | None:
    """Locality hints as the model reads them stored (any entry kept), None for other values."""
    if type(value) is not dict or value.keys() != _LOCALITY_FIELDS:
        return None
    near, far, strict, level = value["near"], value["far"], value["strict"], value["level"]
    if (
        type(near) is not list
        or type(far) is not list
        or not all(type(entry) is str for entry in (*near, *far))
        or type(strict) is not bool
        or level not in ("server", "rack")
    ):
        return None
    return LocalityHints(tuple(near), tuple(far), strict, level)


def describe_validation_errors(errors: Any) -> list[str]:
    """pydantic errors as lines that name the field: "jobs.0.ram: a size cannot be negative" (the API's
    422s, and a change of a stored job's spec)."""
    lines = []
    for item in errors:
        loc = [str(part) for part in item.get("loc", ()) if part not in ("body",)]
        message = str(item.get("msg", "invalid")).removeprefix("Value error, ")
        if item.get("type") == "extra_forbidden":
            message = "unknown field"
        lines.append(f"{'.'.join(loc) or 'body'}: {message}")
    return lines
