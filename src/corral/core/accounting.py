"""Usage accounting: what the fleet billed in a window of time, and whose work it ran.

The answer to "what did last week cost, and on whom", as Slurm's sreport and sacct give it, plus
what a cloud adds: the part of the bill no job used (idle, booting, and the room left on busy
nodes). Pure: the store gives the node and attempt spans, the caller gives the window and `now`.

- A node's bill in the window is its price over the part of its life inside the window, plus its
  billing rounding (granularity, minimum) in the window where its life ends; a node still up is
  billed to `now`, rounding included, as a cloud has already committed it.
- An attempt is charged, on each node it ran on, the share of the node it occupied (the largest
  of its vcpus, RAM and GPUs over the node's) times the node's price, for its run inside the
  window (started to finished, as sacct's Elapsed). The same share is the simulator's packing
  bound's, so the two reports measure the same thing.
- What the fleet billed less what the attempts were charged is unattributed: idle nodes, boots,
  and room on busy nodes no job asked for.
- How much of what it asked for each group used, as seff says it of a job and XDMoD of many: CPU
  efficiency is the CPU time used over the CPU time asked (vcpus times run time), peak-RAM
  efficiency the peak RSS over the RAM asked, each summed over the attempts before dividing, so
  each attempt weighs what it reserved (vcpu-seconds; MiB-seconds), as on the bill: a week-long
  job over-asking counts for more than a minute-long one. Only attempts whose node said what they
  used count (a run before accounting, still running or whose sample was lost has no measurement,
  which is not 0%; in front of Slurm only the CPU time is measured, by corral's batch script); each
  group says how many of its attempts were measured.
  Both are of the node that runs the command, as the agent measures them: a gang's one node.
  CPU time is only known for a whole run: an attempt the window cuts is credited the part of it
  proportional to its run time inside (as if it used the CPU evenly), so the figure is
  approximate at the window's edges, exact for runs wholly inside.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

from corral.core.model import Resources

GroupBy = Literal["user", "tag", "job"]
NO_USER = "(no user)"
UNTAGGED = "(untagged)"
TOTAL = "(total)"  # the key of the report's total row


@dataclass(frozen=True, slots=True)
class NodeSpan:
    node_id: str
    instance_type: str
    price_per_hour: float
    billing_granularity: float
    billing_minimum: float
    capacity: Resources
    created_at: float
    gone_at: float | None  # None: still up


@dataclass(frozen=True, slots=True)
class AttemptSpan:
    job_id: int
    user: str
    tags: tuple[str, ...]
    node_ids: tuple[str, ...]  # a gang's nodes; each runs `request`
    request: Resources
    started_at: float
    finished_at: float | None  # None: still running
    # The nodes it ran on, as the job asked: node_ids lists them under the agent executor, but
    # in front of Slurm they are one entry ("slurm") whatever the gang's size.
    node_count: int
    # What the run used on the node that runs its command (None: not known; see the module's doc).
    cpu_seconds: float | None = None
    max_rss_mib: int | None = None


@dataclass(slots=True)
class UsageRow:
    key: str  # a user, a tag or a job id
    jobs: int = 0
    vcpu_hours: float = 0.0
    gpu_hours: float = 0.0
    cost: float = 0.0  # the attempts' share of what their nodes billed
    attempts: int = 0  # its runs in the window
    measured: int = 0  # of which their node said what they used
    # The sums efficiency divides, over the measured attempts, the window's part of each.
    cpu_seconds_used: float = 0.0
    cpu_seconds_asked: float = 0.0  # vcpus asked times run time
    ram_mib_seconds_used: float = 0.0  # peak RSS times run time
    ram_mib_seconds_asked: float = 0.0  # RAM asked times run time

    @property
    def cpu_hours(self) -> float:
        """The CPU time the measured attempts used in the window (pro-rated where the window cuts one)."""
        return self.cpu_seconds_used / 3600.0

    @property
    def cpu_efficiency(self) -> float | None:
        """CPU time used over CPU time asked; None: no attempt measured with a run time."""
        return self.cpu_seconds_used / self.cpu_seconds_asked if self.cpu_seconds_asked > 0 else None

    @property
    def ram_efficiency(self) -> float | None:
        """Peak RSS over RAM asked, each attempt weighed by the MiB-seconds it reserved; None: none measured."""
        return self.ram_mib_seconds_used / self.ram_mib_seconds_asked if self.ram_mib_seconds_asked > 0 else None

    def charge(self, vcpu_hours: float, gpu_hours: float, cost: float, measured: Measured | None) -> None:
        """Count one attempt's work in the window in this row."""
        self.vcpu_hours += vcpu_hours
        self.gpu_hours += gpu_hours
        self.cost += cost
        self.attempts += 1
        if measured is None:
            return
        self.measured += 1
        self.cpu_seconds_used += measured.cpu_seconds_used
        self.cpu_seconds_asked += measured.cpu_seconds_asked
        self.ram_mib_seconds_used += measured.ram_mib_seconds_used
        self.ram_mib_seconds_asked += measured.ram_mib_seconds_asked


class Measured(NamedTuple):
    """One attempt's part of its groups' efficiency sums, in the window. (A tuple: one is built
    per attempt of the window, and a tuple builds faster than a frozen dataclass.)"""

    cpu_seconds_used: float
    cpu_seconds_asked: float
    ram_mib_seconds_used: float
    ram_mib_seconds_asked: float


def measured_in_window(attempt: AttemptSpan, seconds: float) -> Measured | None:
    """What an attempt adds to its groups' efficiency for its `seconds` inside the window; None:
    its node did not say what it used (or it has not ended: a run's usage comes at its end)."""
    if attempt.finished_at is None or (attempt.cpu_seconds is None and attempt.max_rss_mib is None):
        return None
    cpu_used = cpu_asked = ram_used = ram_asked = 0.0
    ran = attempt.finished_at - attempt.started_at
    if attempt.cpu_seconds is not None and ran > 0:
        # Only the whole run's CPU time is known: the window's part of it, pro rata.
        cpu_used = attempt.cpu_seconds * seconds / ran
        cpu_asked = attempt.request.vcpus * seconds  # one node's: the gang's others are not measured
    if attempt.max_rss_mib is not None:
        ram_used = attempt.max_rss_mib * seconds
        ram_asked = attempt.request.ram_mib * seconds
    return Measured(cpu_used, cpu_asked, ram_used, ram_asked)


@dataclass(slots=True)
class TypeUsage:
    instance_type: str
    instances: int = 0
    instance_hours: float = 0.0
    billed: float = 0.0
    used: float = 0.0  # charged to attempts


@dataclass(slots=True)
class Usage:
    since: float
    until: float
    by: GroupBy
    rows: list[UsageRow]  # by cost, the largest first
    types: list[TypeUsage]  # by instance type name
    total: UsageRow  # all the work, each job and attempt once (a job under several tags too)

    @property
    def jobs(self) -> int:
        """Distinct jobs that ran in the window (a job under several tags counts once)."""
        return self.total.jobs

    @property
    def billed(self) -> float:
        return sum(t.billed for t in self.types)

    @property
    def used(self) -> float:
        return sum(t.used for t in self.types)

    @property
    def unattributed(self) -> float:
        return max(0.0, self.billed - self.used)


def billed_seconds(start: float, end: float, granularity: float, minimum: float) -> float:
    """Seconds a cloud bills for an instance up from `start` to `end`: rounded up to its
    granularity, and no less than its minimum."""
    used = max(0.0, end - start)
    if granularity > 0:
        used = math.ceil(used / granularity - 1e-9) * granularity
    return max(used, minimum)


def share(request: Resources, capacity: Resources) -> float:
    """The share of a node a request occupies: its largest fraction of vcpus, RAM or GPUs (a job
    using all of a node's RAM takes the node, however few vcpus it asks)."""
    fractions = [request.vcpus / capacity.vcpus if capacity.vcpus > 0 else 0.0]
    fractions.append(request.ram_mib / capacity.ram_mib if capacity.ram_mib > 0 else 0.0)
    if capacity.gpus > 0:
        fractions.append(request.gpus / capacity.gpus)
    return max(fractions)


def _overlap(start: float, end: float, since: float, until: float) -> float:
    return max(0.0, min(end, until) - max(start, since))


def usage(
    nodes: Iterable[NodeSpan],
    attempts: Iterable[AttemptSpan],
    since: float,
    until: float,
    now: float,
    by: GroupBy = "user",
) -> Usage:
    """The usage of [since, until): each group's work and its share of the bill, and each
    instance type's bill and the part of it jobs used. `until` past `now` is read as `now`."""
    until = min(until, now)
    by_node: dict[str, NodeSpan] = {}
    types: dict[str, TypeUsage] = {}
    for node in nodes:
        by_node[node.node_id] = node
        end = node.gone_at if node.gone_at is not None else now
        inside = _overlap(node.created_at, end, since, until)
        rounding = 0.0
        if since < end <= until:  # its life ends in the window (a live node's, so far, at `now`)
            lived = max(0.0, end - node.created_at)
            rounding = billed_seconds(node.created_at, end, node.billing_granularity, node.billing_minimum) - lived
        if inside <= 0 and rounding <= 0:
            continue
        kind = types.setdefault(node.instance_type, TypeUsage(node.instance_type))
        kind.instances += 1
        kind.instance_hours += inside / 3600.0
        kind.billed += (inside + rounding) * node.price_per_hour / 3600.0

    rows: dict[str, UsageRow] = {}
    jobs_of: dict[str, set[int]] = {}  # each row's jobs (a job runs more than once when retried)
    job_ids: set[int] = set()
    total = UsageRow(TOTAL)
    for attempt in attempts:
        end = attempt.finished_at if attempt.finished_at is not None else now
        seconds = _overlap(attempt.started_at, end, since, until)
        if seconds <= 0 and not since <= attempt.started_at < until:  # (a run too short to measure still ran)
            continue
        job_ids.add(attempt.job_id)
        cost = 0.0
        for node_id in attempt.node_ids:
            ran_on = by_node.get(node_id)
            if ran_on is None:  # not a node corral booted (a Slurm node): work, but no bill of corral's
                continue
            charged = seconds * ran_on.price_per_hour / 3600.0 * min(1.0, share(attempt.request, ran_on.capacity))
            cost += charged
            if ran_on.instance_type in types:
                types[ran_on.instance_type].used += charged
        node_count = attempt.node_count
        vcpu_hours = seconds * attempt.request.vcpus * node_count / 3600.0
        gpu_hours = seconds * attempt.request.gpus * node_count / 3600.0
        used = measured_in_window(attempt, seconds)
        for key in _keys(attempt, by):
            row = rows.get(key)
            if row is None:  # (not setdefault: a week's report is 100,000s of attempts in few rows)
                row = rows[key] = UsageRow(key)
                jobs_of[key] = set()
            jobs_of[key].add(attempt.job_id)
            row.charge(vcpu_hours, gpu_hours, cost, used)
        total.charge(vcpu_hours, gpu_hours, cost, used)  # once, a job under several tags too
    for key, row in rows.items():
        row.jobs = len(jobs_of[key])
    total.jobs = len(job_ids)
    ordered = sorted(rows.values(), key=lambda row: (-row.cost, -row.vcpu_hours, row.key))
    return Usage(since, until, by, ordered, [types[name] for name in sorted(types)], total)


def _keys(attempt: AttemptSpan, by: GroupBy) -> Sequence[str]:
    if by == "user":
        return (attempt.user or NO_USER,)
    if by == "tag":
        return attempt.tags or (UNTAGGED,)
    return (str(attempt.job_id),)
