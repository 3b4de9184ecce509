"""Locality hints (seed 003): place a job near to or away from other jobs, named by job id or by
`tag:NAME` (every job carrying that tag, e.g. the members of a service), at server or rack level.

- A target that is not running anywhere constrains nothing (the first member of a service has no
  one to be near); the explanation lists such targets.
- `far` wins over `near`: a node that is near one target and hosts (or shares a rack with) a far
  target is out.
- Soft hints (the default) are dropped when they would leave too few nodes: first `near` is
  relaxed, then `far`; the explanation says which. `strict` hints are a hard filter.
- The soft-locality scorer grades what the filter cannot: at server level, a node in the same rack
  as a near target scores 0.5 (as does, inversely, one in the rack of a far target).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

import numpy as np

from corral.core.model import Attempt, Job, LocalityHints, Node
from corral.placement.arrays import Bools, Floats, Ints, NodeArrays, rack_key
from corral.placement.demand import Hints

TAG_PREFIX = "tag:"


@dataclass(slots=True)
class Targets:
    """Where the targets of one side (near or far) run."""

    nodes: Bools  # nodes hosting a target
    racks: Bools  # nodes in a rack that hosts a target
    running: list[str] = field(default_factory=list)  # target names with work somewhere
    absent: list[str] = field(default_factory=list)  # target names not running anywhere

    @property
    def active(self) -> bool:
        return bool(self.running)


@dataclass(slots=True)
class Resolved:
    hints: Hints
    near: Targets
    far: Targets
    unknown: list[str]  # entries that are neither a job id nor `tag:NAME`
    _score: Floats | None = field(default=None, init=False, repr=False)  # computed once per job

    def far_ok(self) -> Bools:
        side = self.far.racks if self.hints.level == "rack" else self.far.nodes
        result: Bools = ~side
        return result

    def near_ok(self) -> Bools:
        side = self.near.racks if self.hints.level == "rack" else self.near.nodes
        return side

    def allowed(self) -> Bools | None:
        """The hard (strict) form: None when the hints constrain nothing."""
        if self.far.active and self.near.active:
            result: Bools = self.near_ok() & self.far_ok()
            return result
        if self.far.active:
            return self.far_ok()
        if self.near.active:
            return self.near_ok()
        return None

    def score(self) -> Floats | None:
        """0..1 per node; None when no hint is active (every node would score the same).

        Near: 1 on a target's server, 0.5 in its rack (server level), else 0; far the reverse; with
        both, their mean. A node hosting a target is always in that target's rack, so at server
        level "rack + server" counts 0, 1 or 2 halves."""
        if self._score is None and (self.near.active or self.far.active):
            near = self._graded(self.near) if self.near.active else None
            far = self._graded(self.far) if self.far.active else None
            if near is not None and far is not None:
                self._score = (near - far + 1.0) * 0.5
            elif near is not None:
                self._score = near
            elif far is not None:
                self._score = 1.0 - far
        return self._score

    def _graded(self, side: Targets) -> Floats:
        if self.hints.level == "rack":
            return side.racks.astype(np.float64)
        result: Floats = np.add(side.racks, side.nodes, dtype=np.float64) * 0.5
        return result


@dataclass(slots=True)
class _Entry:
    """Where the jobs named by one entry ("123" or "tag:web") run, over one pass's node arrays."""

    node_ids: set[str]  # every node hosting one of them, schedulable or not
    nodes: Bools  # the same, over the arrays' nodes
    racks: Bools  # nodes sharing a rack with one of them
    rack_codes: set[int]  # their racks (codes over the arrays' racks)


class LocalityIndex:
    """Which nodes and racks each job runs on, and which jobs carry each tag. Kept current within a
    pass, so a job placed early in the pass counts as a target for jobs placed after it.

    Each entry a job names is resolved once into node and rack masks, which `add` then keeps
    current, so a job with hints costs a few array operations however large the tagged group."""

    def __init__(self, jobs: Iterable[Job], attempts: Iterable[Attempt], all_nodes: Iterable[Node]) -> None:
        # Indexed on first use: most passes place no job with hints, and need none of it.
        self._sources: tuple[Iterable[Job], Iterable[Attempt], Iterable[Node]] | None = (jobs, attempts, all_nodes)
        self._added: list[tuple[int, list[str], list[str]]] = []
        self._rack_of: dict[str, str] = {}
        self.job_nodes: dict[int, list[str]] = {}
        self.tag_jobs: dict[str, set[int]] = {}
        self._arrays: NodeArrays | None = None
        self._entries: dict[str, _Entry] = {}
        # Over `_arrays`, built when first needed: each node id's rack code (-1: a rack no node of
        # the arrays is in), and each rack's nodes.
        self._rack_code: dict[str, int] = {}
        self._rack_members: list[Ints] | None = None

    def _index(self) -> None:
        if self._sources is None:
            return
        jobs, attempts, all_nodes = self._sources
        self._sources = None
        self._rack_of = {node.id: rack_key(node) for node in all_nodes}
        for job in jobs:
            for tag in job.tags:
                self.tag_jobs.setdefault(tag, set()).add(job.id)
        for attempt in attempts:
            if attempt.state.active:
                self.job_nodes.setdefault(attempt.job_id, []).extend(attempt.node_ids)
        added, self._added = self._added, []
        for job_id, tags, node_ids in added:
            self.add(job_id, tags, node_ids)

    def add(self, job_id: int, tags: Sequence[str], node_ids: Sequence[str]) -> None:
        """Job `job_id` (tagged `tags`) now runs on `node_ids`: called for every placement."""
        if self._sources is not None:
            self._added.append((job_id, list(tags), list(node_ids)))
            return
        listed = self.job_nodes.get(job_id)
        if listed is None:
            self.job_nodes[job_id] = list(node_ids)
        else:
            listed.extend(node_ids)
        tag_jobs = self.tag_jobs
        for tag in tags:
            tagged = tag_jobs.get(tag)
            if tagged is None:
                tag_jobs[tag] = {job_id}
            else:
                tagged.add(job_id)
        entries = self._entries
        if not entries:
            return
        cached = entries.get(str(job_id))
        if cached is not None:
            self._extend(cached, node_ids)
        for tag in tags:
            cached = entries.get(TAG_PREFIX + tag)
            if cached is not None:
                self._extend(cached, node_ids)

    def resolve(self, hints: Hints, arrays: NodeArrays, self_id: int) -> Resolved:
        self._index()
        if self._arrays is not arrays:
            self._arrays, self._entries = arrays, {}
            self._rack_code, self._rack_members = {}, None
        unknown: list[str] = []
        near = self._side(hints.near, arrays, self_id, unknown)
        far = self._side(hints.far, arrays, self_id, unknown)
        return Resolved(hints, near, far, unknown)

    def _side(self, names: tuple[str, ...], arrays: NodeArrays, self_id: int, unknown: list[str]) -> Targets:
        running: list[str] = []
        absent: list[str] = []
        nodes: Bools | None = None
        racks: Bools | None = None
        for name in names:
            entry = self._entry(name, arrays, self_id)
            if entry is None:
                unknown.append(name)
                continue
            if not entry.node_ids:
                absent.append(name)
                continue
            running.append(name)
            nodes = entry.nodes if nodes is None else nodes | entry.nodes
            racks = entry.racks if racks is None else racks | entry.racks
        if nodes is None or racks is None:
            nodes = racks = np.zeros(arrays.n, dtype=bool)
        return Targets(nodes, racks, running, absent)

    def _entry(self, name: str, arrays: NodeArrays, self_id: int) -> _Entry | None:
        job_ids = self._jobs_named(name)
        if job_ids is None:
            return None
        if self_id in job_ids and self.job_nodes.get(self_id):
            # The job itself already runs somewhere (rare for a queued job): its own nodes are not
            # targets, so this entry is resolved afresh rather than from the shared cache.
            entry = _Entry(set(), np.zeros(arrays.n, dtype=bool), np.zeros(arrays.n, dtype=bool), set())
            self._extend(entry, [n for j in job_ids - {self_id} for n in self.job_nodes.get(j, ())])
            return entry
        key = name if name.startswith(TAG_PREFIX) else str(int(name))  # "007" and "7" are one job
        cached = self._entries.get(key)
        if cached is None:
            cached = _Entry(set(), np.zeros(arrays.n, dtype=bool), np.zeros(arrays.n, dtype=bool), set())
            self._extend(cached, [n for j in job_ids for n in self.job_nodes.get(j, ())])
            self._entries[key] = cached
        return cached

    def _extend(self, entry: _Entry, node_ids: Iterable[str]) -> None:
        arrays = self._arrays
        assert arrays is not None
        codes = self._rack_code
        for node_id in node_ids:
            if node_id in entry.node_ids:
                continue
            entry.node_ids.add(node_id)
            i = arrays.index.get(node_id)
            if i is not None:
                entry.nodes[i] = True
            code = codes.get(node_id)
            if code is None:
                code = codes[node_id] = arrays.rack_codes.get(self._rack_of.get(node_id, f"node:{node_id}"), -1)
            if code >= 0 and code not in entry.rack_codes:
                # Every placement of a tagged job lands here: marking the rack's few nodes costs
                # less than rebuilding the mask over all nodes when a job with hints reads it.
                entry.rack_codes.add(code)
                entry.racks[self._members()[code]] = True

    def _members(self) -> list[Ints]:
        """Each rack's nodes over `_arrays`, by rack code."""
        if self._rack_members is None:
            arrays = self._arrays
            assert arrays is not None
            order = np.argsort(arrays.rack, kind="stable")
            counts = np.bincount(arrays.rack, minlength=len(arrays.rack_names))
            self._rack_members = np.split(order, np.cumsum(counts)[:-1])
        return self._rack_members

    def _jobs_named(self, entry: str) -> set[int] | None:
        if entry.startswith(TAG_PREFIX):
            return self.tag_jobs.get(entry[len(TAG_PREFIX) :], set())
        try:
            return {int(entry)}
        except ValueError:
            return None


def pinned_to_running(
    hints: LocalityHints | None, running_ids: AbstractSet[int], running_tags: AbstractSet[str]
) -> bool:
    """Strict `near` hints with a target running (`running_ids`: jobs with work on nodes;
    `running_tags`: their tags): only nodes that host a target, or share its rack, may take the
    job, and a new instance does neither (it runs nothing yet, and has no rack), so booting one
    cannot help it."""
    if hints is None or not hints.strict or not hints.near:
        return False
    for name in hints.near:
        if name.startswith(TAG_PREFIX):
            if name[len(TAG_PREFIX) :] in running_tags:
                return True
        else:
            try:
                if int(name) in running_ids:
                    return True
            except ValueError:
                continue
    return False
