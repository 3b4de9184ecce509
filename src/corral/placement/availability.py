"""Node resource availability policies (seed 002, Moab §5.4.1 NODEAVAILABILITYPOLICY).

Per resource, the room a node has for a new job is judged by one of:
  DEDICATED - capacity (times the overprovision ratio) less what active jobs *requested*;
  UTILIZED  - capacity less what the agent *measured*, plus the requests of jobs assigned since that
              measurement (the seed's "artificially raise the node's load for one iteration": once
              the agent reports again the bump is replaced by what it measured);
  COMBINED  - both must fit (the default).
Written as in the seed: one token per resource, `POLICY[:RESOURCE]`, a bare policy sets the default
for every resource not named: "COMBINED", "DEDICATED:PROC COMBINED:MEM".
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum, StrEnum


class Resource(IntEnum):
    """Rows of the node arrays, in this order."""

    CPU = 0
    RAM = 1
    DISK = 2
    GPU = 3

    @property
    def label(self) -> str:
        return _LABELS[self]


_LABELS = {Resource.CPU: "cpu", Resource.RAM: "ram", Resource.DISK: "disk", Resource.GPU: "gpu"}
RESOURCES = tuple(Resource)

# Seed 002 names first; corral's own names and common synonyms are accepted too.
RESOURCE_NAMES: dict[str, Resource] = {
    "PROC": Resource.CPU,
    "PROCS": Resource.CPU,
    "CPU": Resource.CPU,
    "VCPU": Resource.CPU,
    "VCPUS": Resource.CPU,
    "MEM": Resource.RAM,
    "RAM": Resource.RAM,
    "DISK": Resource.DISK,
    "SCRATCH": Resource.DISK,
    "GPU": Resource.GPU,
    "GPUS": Resource.GPU,
}


class Policy(StrEnum):
    DEDICATED = "DEDICATED"
    UTILIZED = "UTILIZED"
    COMBINED = "COMBINED"


@dataclass(frozen=True, slots=True)
class AvailabilityPolicy:
    per_resource: tuple[Policy, Policy, Policy, Policy]  # indexed by Resource

    def __getitem__(self, resource: Resource) -> Policy:
        return self.per_resource[resource]

    def describe(self) -> str:
        """The canonical spelling, which `parse_availability` reads back to the same policy."""
        default = max(set(self.per_resource), key=self.per_resource.count)
        tokens = [default.value]
        tokens += [
            f"{p.value}:{_SEED_NAME[r]}" for r, p in zip(RESOURCES, self.per_resource, strict=True) if p != default
        ]
        return " ".join(tokens)


_SEED_NAME = {Resource.CPU: "PROC", Resource.RAM: "MEM", Resource.DISK: "DISK", Resource.GPU: "GPU"}
COMBINED_EVERYWHERE = AvailabilityPolicy((Policy.COMBINED,) * 4)


def parse_availability(text: str) -> AvailabilityPolicy:
    """`"DEDICATED:PROC COMBINED:MEM"` -> a policy per resource; unnamed resources take the bare
    policy if one is given, else COMBINED. Raises ValueError naming the bad token."""
    tokens = text.replace(",", " ").split()
    if not tokens:
        raise ValueError("availability policy is empty (write e.g. 'COMBINED' or 'DEDICATED:PROC COMBINED:MEM')")
    default: Policy | None = None
    chosen: dict[Resource, Policy] = {}
    for token in tokens:
        policy_text, _, resource_text = token.partition(":")
        try:
            policy = Policy(policy_text.upper())
        except ValueError:
            raise ValueError(
                f"unknown availability policy {policy_text!r} in {token!r} (use DEDICATED, UTILIZED or COMBINED)"
            ) from None
        if not resource_text:
            if default is not None and default != policy:
                raise ValueError(f"two default availability policies: {default.value} and {policy.value}")
            default = policy
            continue
        resource = RESOURCE_NAMES.get(resource_text.upper())
        if resource is None:
            known = ", ".join(sorted(RESOURCE_NAMES))
            raise ValueError(f"unknown resource {resource_text!r} in {token!r} (corral knows {known})")
        if resource in chosen and chosen[resource] != policy:
            raise ValueError(f"resource {resource_text} has two availability policies")
        chosen[resource] = policy
    fallback = default or Policy.COMBINED
    per = tuple(chosen.get(r, fallback) for r in RESOURCES)
    return AvailabilityPolicy((per[0], per[1], per[2], per[3]))
