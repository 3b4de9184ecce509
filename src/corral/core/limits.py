"""Fleet limits beyond the instance count: `policy.boot.max_vcpus` (Karpenter's NodePool
`limits.cpu`) and `policy.boot.max_cost_per_hour` (a spend cap: the list prices of the instances
booting and running). With types from 2 to 96 vCPUs, `max_instances` alone says little of what
the fleet may cost; these say it in vCPUs and in dollars.

A boot that would take the fleet past a limit is not made: the job waits ("max_cost_per_hour
($20.00/h) reached"), and, as with max_instances, the placer takes its capacity as bounded (it gets
a backfill reservation on the running nodes). A gang that would pass a limit on its own, with no
other instance up, never boots: said plainly, as for a gang larger than max_instances. Nodes
gone, down or retiring this pass count for nothing, as for max_instances; a node still shutting
down (its terminate refused by the cloud) counts, as it bills.

Pure: the caller gives the live nodes' totals.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from corral.core.model import InstanceType, Node

# Float sums of prices and vCPUs: a boot that lands on the cap exactly is allowed.
_SLACK = 1e-9


@dataclass(frozen=True, slots=True)
class LiveFleet:
    """What the live instances hold: their vCPUs and their price per hour."""

    vcpus: float = 0.0
    cost_per_hour: float = 0.0

    @classmethod
    def of(cls, nodes: Iterable[Node]) -> LiveFleet:
        vcpus = cost = 0.0
        for node in nodes:
            vcpus += node.capacity.vcpus
            cost += node.price_per_hour
        return cls(vcpus, cost)

    def plus(self, itype: InstanceType, count: int) -> LiveFleet:
        """The fleet with `count` more instances of `itype`."""
        return LiveFleet(self.vcpus + count * itype.vcpus, self.cost_per_hour + count * itype.price_per_hour)


@dataclass(frozen=True, slots=True)
class SpendLimits:
    max_vcpus: float | None = None
    max_cost_per_hour: float | None = None

    @property
    def any(self) -> bool:
        return self.max_vcpus is not None or self.max_cost_per_hour is not None

    def refuses(self, fleet: LiveFleet, itype: InstanceType, count: int) -> str | None:
        """Why `count` more instances of `itype` would take the fleet past a limit, or None."""
        return self._past(fleet.vcpus + count * itype.vcpus, fleet.cost_per_hour + count * itype.price_per_hour)

    def never(self, itype: InstanceType, count: int) -> str | None:
        """Why `count` instances of `itype` pass a limit on their own, or None."""
        return self._past(count * itype.vcpus, count * itype.price_per_hour)

    def _past(self, vcpus: float, cost_per_hour: float) -> str | None:
        if self.max_vcpus is not None and vcpus > self.max_vcpus + _SLACK:
            return f"max_vcpus ({self.max_vcpus:g})"
        if self.max_cost_per_hour is not None and cost_per_hour > self.max_cost_per_hour + _SLACK:
            return f"max_cost_per_hour (${self.max_cost_per_hour:,.2f}/h)"
        return None
