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
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from corral.core.model import Resources

GroupBy = Literal["user", "tag", "job"]
NO_USER = "(no user)"
UNTAGGED = "(untagged)"


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


@dataclass(slots=True)
class UsageRow:
    key: str  # a user, a tag or a job id
    jobs: int = 0
    vcpu_hours: float = 0.0
    gpu_hours: float = 0.0
    cost: float = 0.0  # the attempts' share of what their nodes billed


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
    jobs: int  # distinct jobs that ran in the window (a job under several tags counts once)

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
        for key in _keys(attempt, by):
            row = rows.setdefault(key, UsageRow(key))
            jobs_of.setdefault(key, set()).add(attempt.job_id)
            row.vcpu_hours += seconds * attempt.request.vcpus * node_count / 3600.0
            row.gpu_hours += seconds * attempt.request.gpus * node_count / 3600.0
            row.cost += cost
    for key, row in rows.items():
        row.jobs = len(jobs_of[key])
    ordered = sorted(rows.values(), key=lambda row: (-row.cost, -row.vcpu_hours, row.key))
    return Usage(since, until, by, ordered, [types[name] for name in sorted(types)], len(job_ids))


def _keys(attempt: AttemptSpan, by: GroupBy) -> Sequence[str]:
    if by == "user":
        return (attempt.user or NO_USER,)
    if by == "tag":
        return attempt.tags or (UNTAGGED,)
    return (str(attempt.job_id),)
