"""Node slots for a placer whose fleet changes a node at a time (the simulator's).

A placer's arrays have one position per node of the list it is handed, so every node that comes
or goes moves the others, and a fleet of a thousand nodes with instances booting and draining all
the time had its facts, arrays and ledger made again at a fifth of its passes. A roster instead
gives every node the kept index files a slot, in filing order (the order of the index's lists),
and keeps it there: a new node takes the next free slot, a node that changes state is read again
in place, a node that is gone leaves a dead slot. Nodes that take no work (booting, draining,
down, gone, free slots) are masked out by the state filter, and the fleet-wide scales (the
largest RAM, platform versions, hardware range) are taken over the nodes that do (`listed`), so
a placement over the slots is the one over the index's schedulable list, node for node and tie
for tie. When the free slots run out, or dead slots fill half of them, the roster is made again.

Explanations are not the same over slots (the state filter would count the other nodes), so a
placer that explains uses the list it is handed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from corral.core.index import SCHEDULABLE, SnapshotIndex
from corral.core.model import ZERO, Node, NodeState, Resources
from corral.placement.arrays import Bools, FleetFacts
from corral.placement.settings import PlacementSettings

FREE = Node("", "", ZERO, 0.0, NodeState.GONE)  # a slot no node has taken yet


@dataclass(slots=True)
class RosterChange:
    """What changed in the slots since the last pass: slots that took a new node, whether any
    node's facts changed, whether any of those takes or took work (`relisted`: else nothing a
    placement reads changed), and whether some node takes work now that took none."""

    filled: list[int] = field(default_factory=list)
    changed: bool = False
    relisted: bool = False
    grew: bool = False


class Roster:
    """The slots, their nodes, and the FleetFacts over them (see the module docstring)."""

    def __init__(self, index: SnapshotIndex, settings: PlacementSettings, now: float) -> None:
        filed = list(index.nodes.values())
        self.nodes: list[Node] = filed + [FREE] * (len(filed) + 16)  # room to grow to twice the fleet
        self.taken = len(filed)  # slots given out so far; the rest are free
        self.dead = 0
        self.states = [node.state for node in self.nodes]
        self.listed: Bools = np.array([state in SCHEDULABLE for state in self.states], dtype=bool)
        self.facts = FleetFacts(self.nodes, settings, now)
        self.facts.index.pop("", None)  # free slots are nobody's
        self.facts.derive(self.listed)
        self.used_at = [node.used_at for node in self.nodes]
        self.used: list[Resources] = [node.used for node in self.nodes]
        # The index's filing number of each slot's node: a node dropped and filed again between
        # two passes has another, and belongs in a new slot.
        self.filing = [index.node_order[node.id] for node in filed] + [-1] * (len(self.nodes) - len(filed))
        self.index = index
        self._seen = index.node_journal.end
        self._reshaped = index.reshaped

    def update(self, index: SnapshotIndex, now: float) -> RosterChange | None:
        """Read the nodes the index filed since the last call into their slots; None when the
        roster must be made again (another index, a node reshaped, a reservation ended, the
        journal gone, no free slot left, too many dead ones)."""
        changes = index.node_journal.since(self._seen) if index is self.index else None
        if changes is None or index.reshaped != self._reshaped or not self.facts.valid_at(now):
            return None
        self._seen = index.node_journal.end
        change = RosterChange()
        facts, slot_of = self.facts, self.facts.index
        measured = False
        for node_id in dict.fromkeys(changes):
            node = index.nodes.get(node_id)
            slot = slot_of.get(node_id)
            if slot is not None and node is not None and index.node_order[node_id] != self.filing[slot]:
                change.relisted |= self._kill(slot, node_id)  # dropped and filed again: a new node
                change.changed = True
                slot = None
            if slot is None:
                if node is None:
                    continue  # came and went between two passes
                if self.taken == len(self.nodes):
                    return None
                slot, self.taken = self.taken, self.taken + 1
                self.filing[slot] = index.node_order[node_id]
                change.filled.append(slot)
            elif node is None:
                change.relisted |= self._kill(slot, node_id)
                change.changed = True
                continue
            was, state = self.states[slot], node.state
            self.nodes[slot] = node
            self.used_at[slot] = node.used_at
            if node.used is not self.used[slot]:
                if not measured:  # a new list: the engine finds measurements by comparing lists
                    self.used, measured = list(self.used), True
                self.used[slot] = node.used
            if slot in change.filled or (state is not was and not (state in SCHEDULABLE and was in SCHEDULABLE)):
                facts.put(slot, node)
                self.states[slot] = state
                listed = state in SCHEDULABLE
                change.grew |= listed and not self.listed[slot]
                change.relisted |= listed or bool(self.listed[slot])
                self.listed[slot] = listed
                change.changed = True
            elif state is not was:
                self.states[slot] = state  # between idle and busy: the facts read them alike
        if 2 * self.dead > len(self.nodes):
            return None
        if change.relisted:  # what depends on the whole fleet is over the nodes that take work
            facts.derive(self.listed)
        return change

    def _kill(self, slot: int, node_id: str) -> bool:
        """The slot's node is gone: a dead slot, taking no work. Filed again, the node is a new
        one (the index lists it last, as it does a new one) and takes a new slot. True if it took
        work until now."""
        was_listed = bool(self.listed[slot])
        del self.facts.index[node_id]
        self.listed[slot] = self.facts.schedulable[slot] = False
        self.facts.why_unschedulable[slot] = NodeState.GONE.value
        self.states[slot] = NodeState.GONE
        self.dead += 1
        return was_listed
