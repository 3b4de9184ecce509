"""The engine of one pass: filters, then scorers, then the best node(s), then the capacity update.

Stages, in the order they run for a job:
1. static filters (their combined mask is cached per distinct set of constraints for the pass);
2. dynamic filters (capacity, job count, capness, exclusive), on arrays kept current by `commit`. Jobs of one
   request without locality hints share this work (`shared`): the filtered base sums are kept per
   request and caught up at the nodes commits changed since its last job;
3. locality hints: strict ones are a hard filter, soft ones narrow the survivors only when enough
   nodes remain (first dropping `near`, then everything), whatever their place in the filter list;
4. scores: the maintained per-node base (request-independent scorers) plus the job-dependent
   scorers, weighted; the best survivor wins, ties going to the lowest node index;
5. commit: the placed nodes' room, job counts and base scores are updated in place.

The configured filter order decides how an explanation reads (which filter "removed" which
nodes, and which one the one-line reason names); the survivors are the same in any order.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from corral.core.model import InstanceType, Resources
from corral.placement.arrays import EPSILON, MAX_OF, Bools, Floats, Ints, Load, NodeArrays
from corral.placement.availability import RESOURCES, Policy
from corral.placement.demand import Demand
from corral.placement.filters import FILTERS, RESOURCE_FILTERS, Filter
from corral.placement.lifetime import CostGate
from corral.placement.locality import LocalityIndex, Resolved
from corral.placement.scorers import NOISE_SLOTS, SCORERS, Index, PassScores, Scorer
from corral.placement.settings import SCORER_NAMES, PlacementSettings


@dataclass(slots=True)
class Evaluation:
    survivors: Bools | None  # None for a choice made from a shortlist (no mask over all nodes was built)
    counted: int | None  # None until needed: a one-node job without hints sees emptiness in its best score
    resolved: Resolved | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def count(self) -> int:
        if self.counted is None:
            assert self.survivors is not None
            self.counted = int(np.count_nonzero(self.survivors))
        return self.counted


@dataclass(slots=True)
class Shared:
    """The filter and ranking work that the jobs of one request share within a pass: every node's
    job-independent ranking sum (`Engine.base`), or -inf where a filter removes the node for this
    request, as of the engine's `seen`-th change. Only a commit changes a node's filters or sums,
    so `Engine.shared` brings it up to date from the nodes changed since."""

    masked: Floats
    seen: int
    static: Bools | None  # the request's static mask (None: every node passes)
    tests: list[tuple[int, float]]  # (resource, least room that fits) for each resource it asks for


@dataclass(slots=True)
class Misfit:
    """A request no node took: the explanation made then (at engine version `version`), whether
    it was a quick one, the change journal's position it holds as of (see `misfit`), and the
    request's room tests (`Engine._room_tests`, kept: a long queue's misfits are looked at again
    after every end of work)."""

    version: int
    explanation: dict[str, Any]
    quick: bool
    seen: int
    tests: list[tuple[int, float]]


@dataclass(slots=True)
class Choice:
    nodes: list[int]
    evaluation: Evaluation
    top: list[dict[str, Any]]


class Engine:
    def __init__(
        self,
        arrays: NodeArrays,
        settings: PlacementSettings,
        *,
        now: float,
        weights: Mapping[str, float] | None = None,
        locality: LocalityIndex | None = None,
        instance_types: Sequence[InstanceType] = (),
        free: MutableMapping[str, Resources] | None = None,
        filters: Sequence[str] | None = None,
    ) -> None:
        self.arrays = arrays
        self.settings = settings
        self.now = now
        self.filters: list[Filter] = [FILTERS[name] for name in (settings.filters if filters is None else filters)]
        self._static = [f for f in self.filters if f.static]
        self._dynamic_filters()
        self.locality_filter = any(f.name == "locality" for f in self.filters)
        chosen = settings.weights if weights is None else weights
        self.weights: list[tuple[Scorer, float]] = [
            (SCORERS[name], float(chosen[name])) for name in SCORER_NAMES if chosen.get(name, 0.0)
        ]
        self._based = [(sc, w) for sc, w in self.weights if sc.base is not None]
        self._job_scored = [(sc, w) for sc, w in self.weights if sc.base is None]
        self._noisy = any(sc.name == "random" for sc, _ in self.weights)
        self.scores = PassScores(arrays, settings, now)
        # For describing nodes: job-independent scores in one block, gathered with one index.
        self._names = [sc.name for sc, _ in self.weights]
        self._static_columns = [k for k, (sc, _) in enumerate(self.weights) if sc.static]
        self._job_columns = [(sc.name, w, sc.one) for sc, w in self.weights if not sc.static]
        self._array_columns = [(sc.name, sc) for sc, _ in self.weights if not sc.static and sc.one is None]
        self._room_based = [(sc, w) for sc, w in self._based if not sc.static]
        self._noise_weight = next((w for sc, w in self.weights if sc.name == "random"), 0.0)
        self._static_scores()
        self.base: Floats = self.base_scores(slice(None))
        self._renew_noise()
        self.locality = locality
        self.instance_types = list(instance_types)
        self.free = free
        self._all: Bools = np.ones(arrays.n, dtype=bool)
        self._minus_inf: Floats = np.full(arrays.n, -np.inf)  # np.where is faster with an array than a scalar
        self._static_cache: dict[tuple[object, ...], Bools] = {}
        # Requests ranked by the job-independent sums alone share their work (see `shared`).
        self._sharing = self.share_work and all(sc.name in ("random", "locality") for sc, _ in self._job_scored)
        self._shared: dict[tuple[object, ...], Shared] = {}
        self._scratch: Floats = np.empty(arrays.n)
        # Every node a commit changed, in order (a node once per change): what `shared` catches up on.
        self._changed: Ints = np.zeros(1024, dtype=np.int64)
        self._changes = 0
        self._committed: list[int] = []  # nodes committed to since the last renew
        # One-node requests the cost gate kept off every node they fit, by (request, time limit,
        # most a node may cost): the change journal's position then, and until when the nodes'
        # paid-through times stand (see `still_refused`).
        self._refused: dict[tuple[object, ...], tuple[int, float]] = {}
        # Bumped by every change to the node arrays, so an explanation made at a version holds
        # while it is current; requests that found no node, kept until something makes room.
        self.version = 0
        # Whether the last `renew` left every node's work figures and the instance types as the
        # last pass left them (its placements were carried out, and nothing else changed).
        self.as_left = False
        self.misfits: dict[tuple[object, ...], Misfit] = {}
        # Per change journal position, the most room of each resource on the nodes changed since
        # (as of `version`): what a kept misfit checks first (see `misfit`).
        self._peaks: dict[int, list[float]] = {}
        self._peaks_version = -1

    share_work = True  # off: every job filters and ranks all nodes (the tests compare the two)
    shared_max = 256  # requests whose shared work is kept (the least recently used goes first)
    changes_kept = 1 << 16  # past this many node changes, shared work is dropped rather than caught up

    def _dynamic_filters(self) -> None:
        # Dynamic filters that can never remove a node in this pass are skipped up front.
        self._dynamic = [
            (f, RESOURCE_FILTERS.get(f.name))
            for f in self.filters
            if not f.static and f.name != "locality" and not _inert(f.name, self.arrays)
        ]
        self._other_dynamic = [f for f, resource in self._dynamic if resource is None]

    def refleet(self, filled: list[int], grew: bool) -> None:
        """The nodes' facts changed (kept node slots, `corral.placement.roster`): nodes came into
        the slots `filled` or changed state. Everything worked out from the facts is worked out
        again, as a fresh engine would; `grew`: some node takes work now that took none."""
        self.arrays.refleet(filled)
        self.scores.refleet()
        self._dynamic_filters()
        self._static_scores()
        self.base = self.base_scores(slice(None))
        self._renew_noise()
        self._static_cache.clear()
        self._shared.clear()
        self._refused.clear()
        # The change journal starts again: misfits kept are those up to date with it, when
        # nothing that could make room happened.
        changes, self._changes = self._changes, 0
        self.version += 1
        self.as_left = False
        self.misfits = {} if grew else {k: replace(m, seen=0) for k, m in self.misfits.items() if m.seen == changes}

    @property
    def refleets(self) -> int:
        """Calls of `refleet` (the nodes' facts changed): its arrays count them."""
        return self.arrays.refleets

    def _static_scores(self) -> None:
        """The job-independent scores that do not follow the work on the nodes (platform, reboot,
        hardware, failures): their weighted sum (the block for describing nodes follows on use)."""
        self._static_rows: dict[int, tuple[dict[str, float], float]] = {}
        self._static_block_made: Floats | None = None
        self._static_base: Floats = np.zeros(self.arrays.n)
        for scorer, weight in self._based:
            if scorer.static:
                assert scorer.base is not None
                self._static_base = self._static_base + weight * scorer.base(self.scores, slice(None))

    @property
    def _static_block(self) -> Floats:
        """Every node's job-independent scores in one block, gathered with one index."""
        if self._static_block_made is None:
            every = slice(None)
            self._static_block_made = (
                np.stack(
                    [self.weights[k][0].exact(self.scores, _NO_DEMAND, every, None, 0.0) for k in self._static_columns],
                    1,
                )
                if self._static_columns
                else np.empty((self.arrays.n, 0))
            )
        return self._static_block_made

    def _renew_noise(self) -> None:
        # With the tie-break scorer on, a job's ranking sum is base + its slot's weighted noise,
        # made when a job of the slot first needs it in the pass.
        self._slot_noise: list[Floats | None] = [None] * NOISE_SLOTS

    def _noise_row(self, job_id: int) -> Floats:
        slot = self.scores.job_slot(job_id)
        row = self._slot_noise[slot]
        if row is None:
            row = self._slot_noise[slot] = self._noise_weight * (
                (self.scores.noise + self.scores.slot_offset(slot)) % 1.0
            )
        return row

    def renew(
        self,
        now: float,
        load: Load,
        refreshed: list[int],
        used: list[Resources],
        locality: LocalityIndex | None,
        instance_types: Sequence[InstanceType],
        started: bool,
    ) -> None:
        """Make this engine, kept from the last pass over the same nodes (the same FleetFacts),
        the one a fresh build would give for the pass at `now`: the nodes at `refreshed` take
        their work from `load` and their measurement from `used` (every node's; each node whose
        work or measurement changed since the last pass must be listed); the nodes this engine
        committed placements to since are refreshed too, whether or not those placements were
        carried out. Every array is refigured with the same operations as a fresh build, so the
        values are the same. The refreshed nodes whose figures changed go into the change
        journal, which is what kept misfits and shared work look at (a node whose placement was
        carried out as committed is already there). `started`: work started since the last pass
        (`WorkLedger.started`): its expected end moved from its assignment's time limit to its
        start's, which the cost gate's refusals count, though no figure here changed."""
        if started:
            self._refused.clear()
        committed, self._committed = set(self._committed), []
        where = sorted(committed.union(refreshed))
        same_types = list(instance_types) == self.instance_types
        if where or not same_types:
            self.version += 1
        self.now = self.arrays.now = now
        self.arrays.used = used
        self.as_left = same_types
        # The nodes placed on last pass: their room comes back if a placement was not carried out.
        # A node whose figures are as this engine left them keeps its base sum and needs no
        # catching up (its commit was noted in the change journal).
        changed = self.arrays.refresh(load, where, used) if where else []
        if changed:
            self.as_left = False
        if self.scores.renew(now):
            self._static_scores()
            self.base = self.base_scores(slice(None))
            self._shared.clear()
            self._refused.clear()
            if where:
                self.misfits.clear()  # the nodes that changed are not in the change journal
        elif changed:
            if len(changed) <= FEW_CHANGED:
                for i in changed:
                    self.base[i] = self._base_one(i)
            else:
                idx = np.array(changed, dtype=np.int64)
                self.base[idx] = self.base_scores(idx)
            self._note_changed(changed)
        self._renew_noise()
        self.locality = locality
        self.instance_types = list(instance_types)
        if self._changes > self.changes_kept:
            self._shared.clear()
            self._refused.clear()
            self.misfits.clear()
            self._changes = 0

    def misfit(self, demand: Demand) -> Misfit | None:
        """What was found when no node took this request (without locality hints), if no node
        changed since so that it fits there: it still finds none. Only a node whose room, job
        counts or measurement changed can newly pass the filters, and those are in the change
        journal (room freed on a node, not a whole fleet's worth, is the usual change)."""
        if demand.hints is not None:
            return None
        entry = self.misfits.get(demand.key)
        if entry is None or entry.seen == self._changes:
            return entry
        if not self._sharing or (
            self._may_fit_changed(entry.tests, entry.seen)
            and self.fits_on(demand, self._changed[entry.seen : self._changes])
        ):
            del self.misfits[demand.key]
            return None
        entry.seen = self._changes
        return entry

    def _may_fit_changed(self, tests: list[tuple[int, float]], since: int) -> bool:
        """False if no node changed since journal position `since` has the room a request needs
        of some resource (its room `tests`, against the most room any of them has): then no
        filter work is needed to know it fits none of them. Many kept misfits of a pass ask
        about the same nodes, so their peaks are worked out once."""
        if self._peaks_version != self.version:
            self._peaks.clear()
            self._peaks_version = self.version
        peak = self._peaks.get(since)
        if peak is None:
            changed = self._changed[since : self._changes]
            peak = self._peaks[since] = self.arrays.room[:, changed].max(axis=1).tolist()
        return all(peak[resource] >= least for resource, least in tests)

    def _room_tests(self, demand: Demand) -> list[tuple[int, float]]:
        """The resource filters' tests (`hard_mask`'s, inlined): (resource, least room that fits)
        for each resource the request asks for."""
        return [
            (int(resource), demand.amounts[resource] - EPSILON)
            for _, resource in self._dynamic
            if resource is not None and demand.amounts[resource] > 0
        ]

    def note_misfit(self, demand: Demand, explanation: dict[str, Any], quick: bool) -> None:
        """No node takes `demand` now, as `explanation` (made at this version) says."""
        # (One with a horizon is kept no longer than its pass: its key holds the pass's time.)
        if demand.hints is None and demand.horizon is None:
            self.misfits[demand.key] = Misfit(self.version, explanation, quick, self._changes, self._room_tests(demand))

    def _note_changed(self, nodes: Sequence[int]) -> None:
        """Nodes whose room, job counts or base sums changed: shared work catches up on them."""
        for i in nodes:
            if self._changes == len(self._changed):
                self._changed = np.concatenate([self._changed, self._changed])
            self._changed[self._changes] = i
            self._changes += 1

    # --- filtering ----------------------------------------------------------------------------

    def static_mask(self, demand: Demand) -> Bools:
        key = demand.static_key
        cached = self._static_cache.get(key)
        if cached is None:
            cached = self._all
            for f in self._static:
                m = f.mask(self.arrays, demand, None)
                if m is not None:
                    cached = cached & m
            self._static_cache[key] = cached
        return cached

    def static_mask_but_state(self, demand: Demand) -> Bools:
        """The static filters but the node state's: where a node that is not taking work now could
        take `demand` once it does (backfill's down nodes, seed 002 §5.4.5)."""
        return self._static_mask_but("state", demand)

    def static_mask_but_reservation(self, demand: Demand) -> Bools:
        """The static filters but the admin reservation's: where a node held by a reservation
        could take `demand` once the reservation ends (backfill's windows)."""
        return self._static_mask_but("reservation", demand)

    def _static_mask_but(self, name: str, demand: Demand) -> Bools:
        key = ("but", name, demand.static_key)
        cached = self._static_cache.get(key)
        if cached is None:
            cached = self._all
            for f in self._static:
                if f.name != name and (m := f.mask(self.arrays, demand, None)) is not None:
                    cached = cached & m
            self._static_cache[key] = cached
        return cached

    def hard_mask(self, demand: Demand, exclude: Bools | None = None) -> Bools:
        """Every filter but locality."""
        static = self.static_mask(demand)
        mask = None if static is self._all else static  # all-true: nothing to combine
        room = self.arrays.room
        for f, resource in self._dynamic:
            if resource is not None:  # the resource filters, inlined: they run for every job
                wanted = demand.amounts[resource]
                if wanted <= 0:
                    continue
                m = room[resource] >= wanted - EPSILON
            else:
                m = f.mask(self.arrays, demand, None)
                if m is None:
                    continue
            mask = m if mask is None else mask & m
        if exclude is not None:
            mask = ~exclude if mask is None else mask & ~exclude
        return self._all if mask is None else mask

    def resolve(self, demand: Demand) -> Resolved | None:
        if demand.hints is None or self.locality is None:
            return None
        return self.locality.resolve(demand.hints, self.arrays, demand.job_id)

    def evaluate(self, demand: Demand, exclude: Bools | None = None) -> Evaluation:
        mask = self.hard_mask(demand, exclude)
        need = demand.node_count
        resolved = self.resolve(demand)
        notes: list[str] = []
        if resolved is not None and (resolved.near.absent or resolved.far.absent or resolved.unknown):
            # A placed job's hints that constrained nothing: the user asked, and should see why.
            notes.extend(_ignored_entries(resolved))
        allowed = resolved.allowed() if resolved is not None and self.locality_filter else None
        if resolved is not None and allowed is not None:
            narrowed = mask & allowed
            if resolved.hints.strict or np.count_nonzero(narrowed) >= need:
                mask = narrowed
            else:
                far_only = mask & resolved.far_ok() if resolved.far.active and resolved.near.active else None
                if far_only is not None and np.count_nonzero(far_only) >= need:
                    mask = far_only
                    notes.append(
                        f"soft locality: 'near {', '.join(resolved.near.running)}' ignored, no node there has room"
                    )
                elif np.count_nonzero(mask) >= need:
                    if need == 1:
                        notes.append("soft locality: hints ignored, they would leave no node that fits")
                    else:  # (a gang: some may meet them, too few)
                        kept = int(np.count_nonzero(narrowed))
                        notes.append(
                            f"soft locality: hints ignored, they would leave {kept} of the {need} nodes the job needs"
                        )
        if resolved is None and need == 1:
            return Evaluation(mask, None, None, notes)  # an empty set shows in the best score
        return Evaluation(mask, int(np.count_nonzero(mask)), resolved, notes)

    # --- scoring ------------------------------------------------------------------------------

    def base_scores(self, idx: Index) -> Floats:
        """The job-independent part of the ranking sum: the static scorers' weighted sum (fixed
        for the pass), then the scorers that follow the node's free room."""
        total: Floats = np.array(self._static_base[idx], dtype=np.float64)
        for scorer, weight in self._room_based:
            assert scorer.base is not None
            total = total + weight * scorer.base(self.scores, idx)
        return total

    def _base_one(self, i: int) -> float:
        """`base_scores` at node i: the same operations in the same order, on one node's scalars."""
        total = float(self._static_base[i])
        for scorer, weight in self._room_based:
            if scorer.base_one is not None:
                total = total + weight * scorer.base_one(self.scores, i)
            else:
                assert scorer.base is not None
                total = total + weight * float(scorer.base(self.scores, i))
        return total

    def noise(self, demand: Demand) -> float:
        return self.scores.job_noise(demand.job_id) if self._noisy else 0.0

    def totals(self, demand: Demand, resolved: Resolved | None) -> Floats:
        """The weighted sum that ranks nodes. It equals the exact weighted sum up to a constant over
        nodes (the request part of pack / spread), which changes no ranking."""
        total = self.base + self._noise_row(demand.job_id) if self._noise_weight else self.base
        for scorer, weight in self._job_scored:
            if scorer.name != "random" and (scorer.name != "locality" or resolved is not None):
                total = total + weight * scorer.exact(self.scores, demand, slice(None), resolved, 0.0)
        return total

    def exact_scores(self, demand: Demand, idx: Ints, resolved: Resolved | None) -> dict[str, Floats]:
        noise = self.noise(demand)
        return {sc.name: sc.exact(self.scores, demand, idx, resolved, noise) for sc, _ in self.weights}

    def describe_nodes(
        self, demand: Demand, idx: Ints | list[int], resolved: Resolved | None, chosen: Sequence[int]
    ) -> list[dict[str, Any]]:
        """Per-scorer scores (exact, 0..1) and the weighted total of the given nodes."""
        noise = self.noise(demand)
        scores = self.scores
        nodes = idx if isinstance(idx, list) else idx.tolist()
        # Scorers without a one-node form are computed over the nodes at once.
        computed: dict[str, list[float]] = {}
        if self._array_columns:
            idx = np.array(nodes, dtype=np.int64)
            for name, scorer in self._array_columns:
                computed[name] = scorer.exact(scores, demand, idx, resolved, noise).tolist()
        ids = self.arrays.ids
        static_rows = self._static_rows
        job_columns = self._job_columns
        rows = []
        for k, i in enumerate(nodes):
            static = static_rows.get(i)
            if static is None:
                static = self._static_row(i)
            values = static[0].copy()  # every scorer's key, in order; the job's filled in below
            total = static[1]
            for name, weight, one in job_columns:
                value = one(scores, demand, i, resolved, noise) if one is not None else computed[name][k]
                values[name] = value
                total += weight * value
            rows.append({"node": ids[i], "score": total, "scores": values, "chosen": i in chosen})
        return rows

    def _static_row(self, i: int) -> tuple[dict[str, float], float]:
        """Node i's scores with its job-independent ones filled in, and their weighted sum (cached,
        since the same good nodes come up for job after job)."""
        row = dict.fromkeys(self._names, 0.0)
        total = 0.0
        for column, value in zip(self._static_columns, self._static_block[i].tolist(), strict=True):
            row[self._names[column]] = value
            total += self.weights[column][1] * value
        cached = self._static_rows[i] = (row, total)
        return cached

    # --- choosing and committing --------------------------------------------------------------

    def choose(self, demand: Demand, exclude: Bools | None = None, *, keep_top: bool = True) -> Choice | None:
        need = demand.node_count
        k = max(need, self.settings.explain_top) if keep_top else need
        if self.fitting_known(demand):
            evaluation = _SHARED
            masked = self.shared(demand)
            if exclude is not None:
                np.copyto(self._scratch, masked)
                masked = self._scratch
                masked[exclude] = -np.inf
            if not self._noise_weight:
                ranked = _best(masked.copy(), k)
            elif k == 1:
                ranked = self._ranked(masked, demand.job_id)
            else:
                # The same addition as in `totals` (and -inf stays -inf): the ranking sums.
                ranked = _best(np.add(masked, self._noise_row(demand.job_id), out=self._scratch), k)
        else:
            evaluation = self.evaluate(demand, exclude)
            if evaluation.counted is not None and evaluation.counted < need:
                return None
            assert evaluation.survivors is not None
            masked = np.where(evaluation.survivors, self.totals(demand, evaluation.resolved), self._minus_inf)
            ranked = _best(masked, k)
        if len(ranked) < need:
            return None
        nodes = ranked[:need]
        top = self.describe_nodes(demand, ranked, evaluation.resolved, nodes) if keep_top else []
        return Choice(nodes, evaluation, top)

    def _ranked(self, sums: Floats, job_id: int) -> list[int]:
        """`_best(sums + the job's tie-break noise, 1)` for job-independent ranking sums (-inf where
        filtered). The noise lies between 0 and its weight (of either sign), so it is added (the
        same addition as in `totals`) only where it can matter: at the nodes within twice the
        weight (and rounding) of the best sum."""
        best = float(MAX_OF(sums)) if len(sums) else -np.inf
        if best == -np.inf:
            return []
        reach = best - 2 * abs(self._noise_weight) - 4 * math.ulp(best)
        near = (sums >= reach).nonzero()[0]
        if len(near) == 1:
            return [int(near[0])]  # no tie to break
        if 4 * len(near) > len(sums):  # many equal sums (identical idle nodes): the pass's whole row
            noise = self._noise_row(job_id)[near]
        elif len(near) <= FEW_NEAR:
            # A handful (the usual case on a busy fleet): the same operations on Python floats,
            # node by node, the first largest kept as `_best` keeps it; NumPy's cost per call
            # is more than the arithmetic.
            scores, weight = self.scores, self._noise_weight
            offset = scores.slot_offset(scores.job_slot(job_id))
            chosen, top = -1, -math.inf
            for i, total, own in zip(near.tolist(), sums[near].tolist(), scores.noise_list(near), strict=True):
                value = total + weight * ((own + offset) % 1.0)
                if value > top:
                    chosen, top = i, value
            return [chosen]
        else:
            slot = self.scores.job_slot(job_id)
            noise = self._noise_weight * ((self.scores.noise_at(near) + self.scores.slot_offset(slot)) % 1.0)
        return [int(near[i]) for i in _best(sums[near] + noise, 1)]

    def still_refused(self, demand: Demand, gate: CostGate) -> bool:
        """Whether the cost gate still keeps a one-node request without hints off every node it
        fits, as it did when `note_refused` was last called for it, and some node fits: only the
        nodes changed since need a look. A node's expected extension only grows with time while
        its work is unchanged (work that starts moves its end later: `renew` forgets refusals
        then) and it is paid for up to the same time (an hourly-billed node's next hour makes it
        cheaper to keep), and a node it did not fit must have changed to fit now."""
        key = (demand.key, gate.limit(demand), gate.allowed(demand))
        refused = self._refused.get(key)
        if refused is None:
            return False
        since, holds_until = refused
        if gate.now > holds_until:
            return False
        if since == self._changes:
            return True  # no node changed since it was found so, when some node fit it
        masked = self.shared(demand)
        if not len(masked) or not MAX_OF(masked) > -np.inf:
            return False  # fits nowhere now: the full look says why
        changed = self._changed[since : self._changes]
        changed = changed[masked[changed] > -np.inf]  # those it fits (a node may be listed twice)
        # The few changed node by node on Python floats, the mask where that is too close to tell.
        verdicts = [gate.verdict(demand, i) for i in changed.tolist()] if len(changed) <= FEW_CHANGED else [None]
        if False in verdicts:
            return False
        if None in verdicts:
            costly = gate.exclude(demand, lambda: changed)
            if costly is None or not costly[changed].all():
                return False
        self._refused[key] = (self._changes, holds_until)
        return True

    def note_refused(self, demand: Demand, gate: CostGate) -> None:
        """The cost gate kept `demand` off every node it fits, as of now."""
        if demand.node_count == 1 and demand.hints is None and demand.horizon is None and self._sharing:
            key = (demand.key, gate.limit(demand), gate.allowed(demand))
            self._refused[key] = (self._changes, gate.paid_hours_end)

    def fitting_known(self, demand: Demand) -> bool:
        """Whether `demand` has shared filter work (no locality hints, no job-dependent scorers)."""
        return self._sharing and (demand.hints is None or self.locality is None)

    def fitting(self, demand: Demand) -> Ints | None:
        """The nodes that pass every filter for `demand`, from its shared work (None: it has none)."""
        if not self.fitting_known(demand):
            return None
        return (self.shared(demand) > -np.inf).nonzero()[0]

    def placeable(self, demand: Demand, exclude: Bools | None) -> tuple[bool, int]:
        """Whether `choose(demand, exclude)` would find nodes; if not, how many nodes pass every
        filter for `demand` (what `evaluate` counts). From its shared work, where it has some:
        counting what passes costs less than ranking it."""
        if self.fitting_known(demand):
            fits = self.shared(demand) > -np.inf
            fitting = int(np.count_nonzero(fits))
            outside = fitting if exclude is None else int(np.count_nonzero(fits & ~exclude))
            return outside >= demand.node_count, fitting
        if self.choose(demand, exclude, keep_top=False) is not None:
            return True, 0
        return False, self.evaluate(demand).count

    def fits_on(self, demand: Demand, nodes: Sequence[int] | Ints) -> bool:
        """Whether some of `nodes` passes every filter for `demand` now (it has shared work)."""
        return bool((self.shared(demand)[nodes] > -np.inf).any())

    # --- work shared by the jobs of one request -------------------------------------------------

    def shared(self, demand: Demand) -> Floats:
        """For a request without locality hints, when no scorer but the tie-break depends on the
        job: every node's base sum, -inf where the filters remove it (`hard_mask`). The jobs of
        the pass that make the same request share it: a commit changes only the nodes it places
        on (their room, job counts and base sums), so instead of filtering all nodes again for
        every job, the array is brought up to date at the nodes changed since its last use."""
        key = demand.key
        entry = self._shared.pop(key, None)  # put back below, as the most recently used
        if entry is None:
            if len(self._shared) >= self.shared_max:
                del self._shared[next(iter(self._shared))]
            static = self.static_mask(demand)
            tests = self._room_tests(demand)
            masked = np.where(self.hard_mask(demand), self.base, self._minus_inf)
            entry = Shared(masked, self._changes, None if static is self._all else static, tests)
        elif entry.seen != self._changes:
            if self._changes - entry.seen <= FEW_CHANGED:
                self._catch_up_few(demand, entry)  # the usual node or two a pass changes
            else:
                self._catch_up(demand, entry)
        self._shared[key] = entry
        return entry.masked

    def _catch_up(self, demand: Demand, entry: Shared) -> None:
        """`hard_mask` at the nodes changed since `entry` was last brought up to date, only."""
        changed = self._changed[entry.seen : self._changes]
        fits = None if entry.static is None else entry.static[changed]
        room = self.arrays.room
        for resource, least in entry.tests:
            m = room[resource][changed] >= least
            fits = m if fits is None else fits & m
        for f in self._other_dynamic:
            full = f.mask(self.arrays, demand, None)
            if full is not None:
                fits = full[changed] if fits is None else fits & full[changed]
        sums = self.base[changed]
        entry.masked[changed] = sums if fits is None else np.where(fits, sums, -np.inf)
        entry.seen = self._changes

    def _catch_up_few(self, demand: Demand, entry: Shared) -> None:
        """`_catch_up` node by node on NumPy scalars: cheaper than its array calls for so few."""
        room, base, masked, static = self.arrays.room, self.base, entry.masked, entry.static
        others = [m for f in self._other_dynamic if (m := f.mask(self.arrays, demand, None)) is not None]
        for i in self._changed[entry.seen : self._changes].tolist():
            fits = (
                (static is None or bool(static[i]))
                and all(room[resource, i] >= least for resource, least in entry.tests)
                and all(m[i] for m in others)
            )
            masked[i] = base[i] if fits else -np.inf
        entry.seen = self._changes

    def commit(self, demand: Demand, nodes: Sequence[int], tags: Sequence[str] = ()) -> None:
        a = self.arrays
        free = self.free
        for i in nodes:
            a.commit(i, demand.amounts, demand.capped, demand.exclusive)
            if free is not None:
                node_id = a.ids[i]
                free[node_id] = free[node_id] - demand.resources
            self.base[i] = self._base_one(i)
        self._note_changed(nodes)
        self._committed.extend(nodes)
        self.version += 1
        if self.locality is not None:
            self.locality.add(demand.job_id, tags, [a.ids[i] for i in nodes])


_SHARED = Evaluation(None, None)  # of every choice made from shared work: no mask, no notes; never changed
_NO_DEMAND = Demand(job_id=-1, resources=Resources(0.0, 0, 0, 0))  # static scorers ignore the job


def _ignored_entries(resolved: Resolved) -> list[str]:
    notes = []
    absent = resolved.near.absent + resolved.far.absent
    if absent:
        notes.append(f"locality: not running, so ignored: {', '.join(absent)}")
    if resolved.unknown:
        notes.append(f"locality: not understood, so ignored: {', '.join(resolved.unknown)} (use a job id or tag:NAME)")
    return notes


def _inert(name: str, arrays: NodeArrays) -> bool:
    if name == "max-jobs":
        return not arrays.has_job_limits
    if name == "overprovision":
        return not any(arrays.policy[r] is Policy.UTILIZED and arrays.ratio_set[r] for r in RESOURCES)
    if name == "reservation-start":
        return not arrays.has_upcoming
    return False


FEW_NEAR = 16  # up to this many nodes near the best sum, their tie-break noise is added one by one
FEW_CHANGED = 4  # up to this many nodes changed since shared work was last used, it catches up node by node


def _best(masked: Floats, k: int) -> list[int]:
    """Up to k entries above -inf, largest first, ties to the lower index. Overwrites `masked`."""
    if not len(masked):
        return []
    if k <= 8:
        # A few passes of argmax beat a partition of the whole array for the handful shown.
        found: list[int] = []
        for _ in range(k):
            i = int(masked.argmax())
            if masked[i] == -np.inf:
                break
            found.append(i)
            masked[i] = -np.inf
        return found
    candidates = (masked > -np.inf).nonzero()[0]
    k = min(k, len(candidates))
    values = masked[candidates]
    if len(candidates) > 4 * k:
        # Partition first so the sort is over a handful; widen by ties at the cut so none is lost.
        cut = np.partition(values, len(values) - k)[len(values) - k]
        keep = values >= cut
        candidates, values = candidates[keep], values[keep]
    order = np.lexsort((candidates, -values))[:k]
    result: list[int] = candidates[order].tolist()
    return result
