"""A workload: the jobs a simulation replays, each with its submit time and recorded run time."""

from __future__ import annotations

import gzip
import io
import math
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from corral.core.dependency import Dependency
from corral.core.model import InstanceType, Job, Resources
from corral.jobspec import JobRequest

SWF_COMMAND = ["swf-job"]  # shared by every SWF job: the simulator never runs it
# The longest time a workload may give (a submit time, a run time, a time limit...): 100 years in
# seconds. Beyond it a value is a mistake, and one near the float range would overflow to infinity
# in the simulation's sums.
MAX_SECONDS = 100 * 365.25 * 86400


class WorkloadError(ValueError):
    """A workload that cannot be read; the message names the file and line."""


@dataclass(slots=True)
class SimJob:
    """One job of a workload. `vcpus`, `ram_mib`, `gpus` and `scratch_mib` are per node of a gang of
    `nodes`. SWF jobs also keep `procs` and `ram_per_proc` so that `shape_gangs` can fit them to a
    config's instance types; JSON Lines jobs are taken as written (`procs` is 0)."""

    id: int
    submit: float
    run: float  # recorded run time; <= 0 means the job never started
    vcpus: float = 1.0
    ram_mib: int = 1024
    gpus: int = 0
    scratch_mib: int = 0
    nodes: int = 1
    time_limit: float | None = None
    exit_code: int = 0
    cancel_at: float | None = None  # the user asks to cancel at this time, whatever the job is doing
    cancel_on_end: bool = False  # the run ended by the user cancelling it (SWF status 5)
    priority: int = 1
    user: str = ""
    name: str = ""
    procs: int = 0
    vcpus_per_proc: float = 1.0
    ram_per_proc: float = 0.0  # MiB
    request: JobRequest | None = None
    quirks: tuple[str, ...] = ()  # what the mapping filled in or fixed for this job (see ReadStats.quirks)
    # Slurm's --dependency on other jobs of the workload, by their simulation ids (`id`); each job
    # it names arrives before this one.
    dependency: Dependency | None = None
    # A task of a job array (a JSON Lines job with `array`): its array's id (the first task's
    # simulation id) and its task id.
    array_job_id: int | None = None
    array_task_id: int | None = None

    @property
    def resources(self) -> Resources:
        return Resources(self.vcpus, self.ram_mib, self.scratch_mib, self.gpus)

    def to_job(self) -> Job:
        if self.request is not None:
            job = self.request.to_job(self.id, self.submit, self.array_job_id, self.array_task_id)
        else:
            job = Job(
                id=self.id,
                command=SWF_COMMAND,
                resources=self.resources,
                name=self.name,
                node_count=self.nodes,
                priority=self.priority,
                time_limit=self.time_limit,
                user=self.user,
                submitted_at=self.submit,
            )
        job.resources = self.resources
        job.node_count = self.nodes
        job.dependency = self.dependency
        return job


@dataclass(slots=True)
class ReadStats:
    lines: int = 0
    jobs: int = 0
    skipped: int = 0  # bad lines skipped under --skip-bad-lines
    errors: list[str] = field(default_factory=list)  # the first few skipped lines' messages
    # What the mapping had to fill in or fix: the jobs' `quirks` counted (over the jobs replayed,
    # with a limit), and SWF partial-execution records that belong to no job read.
    quirks: Counter[str] = field(default_factory=Counter)

    def skip(self, message: str) -> None:
        self.skipped += 1
        if len(self.errors) < 20:
            self.errors.append(message)


@dataclass(slots=True)
class Workload:
    jobs: list[SimJob]  # sorted by submit time, then id
    source: str
    format: str
    stats: ReadStats

    def keep_first(self, limit: int) -> None:
        """Replay only the first `limit` jobs (by submit time): the quirk counts become theirs."""
        if limit < len(self.jobs):
            self.jobs = self.jobs[:limit]
            self.stats.quirks = count_quirks(self.jobs)


def count_quirks(jobs: list[SimJob]) -> Counter[str]:
    return Counter(quirk for job in jobs for quirk in job.quirks)


def open_text(path: Path) -> io.TextIOBase:
    """The file as text, gunzipped if it starts with the gzip magic bytes (whatever its name)."""
    try:
        with path.open("rb") as raw:
            magic = raw.read(2)
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read: {exc.strerror}") from exc
    # utf-8-sig: a byte-order mark (some Windows editors write one) is no part of the first line.
    if magic == b"\x1f\x8b":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8-sig", errors="replace")
    return io.TextIOWrapper(path.open("rb"), encoding="utf-8-sig", errors="replace")


def numbered_lines(path: Path) -> Iterator[tuple[int, str]]:
    with open_text(path) as text:
        try:
            yield from enumerate(text, start=1)
        except (OSError, EOFError) as exc:
            raise WorkloadError(f"{path}: cannot read: {exc}") from exc


def shape_gangs(jobs: list[SimJob], types: list[InstanceType], counts: Mapping[str, int] | None = None) -> int:
    """Fit each SWF job to the instance types: one node if some type holds it, else a gang of the
    fewest nodes of one type (ties go to the cheaper gang), processors spread evenly. `counts`: a
    fixed fleet's nodes per type; a type with fewer nodes than its gang needs is passed over (if
    every type is, the fewest nodes are taken all the same, and the core reports the job). Jobs
    that not even one processor's share fits are left as one node; the core reports them
    unplaceable. Returns how many jobs became gangs."""
    gangs = 0
    cache: dict[tuple[int, float, float, int], tuple[float, int, int]] = {}
    for job in jobs:
        if job.procs <= 0:
            continue
        key = (job.procs, job.vcpus_per_proc, job.ram_per_proc, job.gpus)
        shape = cache.get(key)
        if shape is None:
            shape = cache[key] = _shape(job.procs, job.vcpus_per_proc, job.ram_per_proc, job.gpus, types, counts)
        job.vcpus, job.ram_mib, job.nodes = shape
        gangs += job.nodes > 1
    return gangs


def _shape(
    procs: int,
    vcpus_per_proc: float,
    ram_per_proc: float,
    gpus: int,
    types: list[InstanceType],
    counts: Mapping[str, int] | None = None,
) -> tuple[float, int, int]:
    def request(per_node: int) -> tuple[float, int]:
        return per_node * vcpus_per_proc, max(1, math.ceil(per_node * ram_per_proc))

    whole = request(procs)
    if not types or any(_fits(whole, gpus, t) for t in types):
        return whole[0], whole[1], 1
    # (nodes, cost per hour) of the best gang: of a type with enough nodes, and of any type.
    best: tuple[int, float] | None = None
    best_any: tuple[int, float] | None = None
    for t in types:
        if not _fits(request(1), gpus, t):
            continue
        # Lower bound from the vcpu and RAM ratios, then step up until the per-node share fits
        # (rounding processors up can overshoot the bound by a little).
        n = max(1, math.ceil(procs * vcpus_per_proc / t.vcpus), math.ceil(procs * ram_per_proc / t.ram_mib))
        while not _fits(request(math.ceil(procs / n)), gpus, t):
            n += 1
        n = math.ceil(procs / math.ceil(procs / n))  # same per-node share on as few nodes as possible
        candidate = (n, n * t.price_per_hour)
        if best_any is None or candidate < best_any:
            best_any = candidate
        if (counts is None or counts.get(t.name, 0) >= n) and (best is None or candidate < best):
            best = candidate
    chosen = best or best_any
    if chosen is None:
        return whole[0], whole[1], 1
    n = chosen[0]
    per_node = request(math.ceil(procs / n))
    return per_node[0], per_node[1], n


def _fits(request: tuple[float, int], gpus: int, t: InstanceType) -> bool:
    return request[0] <= t.vcpus + 1e-9 and request[1] <= t.ram_mib and gpus <= t.gpus
