"""The cloud driver boundary: a Protocol and the typed errors every driver raises.

Drivers tag every instance they create (cluster, instance type, node id), so that after a restart
corral can find its instances again from the cloud alone (durable facts live in tags).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from corral.core.model import InstanceType

TAG_CLUSTER = "corral-cluster"
TAG_NODE_ID = "corral-node-id"
TAG_INSTANCE_TYPE = "corral-instance-type"
# The store whose dispatchers booted it (Store.store_id): two corrals on different stores that share
# a cloud account and `cloud.cluster` leave each other's instances alone instead of destroying them
# as orphans. Set by the loop through `create`'s tags.
TAG_STORE = "corral-store"


class CloudError(Exception):
    """Any failure of a cloud call."""


class InsufficientCapacity(CloudError):
    """The cloud has no capacity of this instance type right now (EC2's InsufficientInstanceCapacity)."""

    def __init__(self, instance_type: str, message: str = "") -> None:
        super().__init__(message or f"insufficient capacity for {instance_type}")
        self.instance_type = instance_type


class QuotaExceeded(CloudError):
    """An account limit (vCPU quota, instance limit) stops the request."""


class TypeUnusable(CloudError):
    """The cloud will not boot this instance type as configured (EC2 does not know its name, say).
    The type's fault, not the cloud's or the account's: it is backed off as a type without
    capacity is, and the other types boot on."""

    def __init__(self, instance_type: str, message: str) -> None:
        super().__init__(message)
        self.instance_type = instance_type


class ImageUnusable(TypeUnusable):
    """The image an instance type boots (its AMI) cannot be booted: missing, not shared with the
    account, not available, of a kind corral cannot use, or one the type cannot boot (another
    architecture). Backed off as any unusable type, under an event of its own."""


@dataclass(frozen=True, slots=True)
class Ended:
    """What the cloud says ended an instance that vanished from its listing (`why_gone`)."""

    reason: str  # in the cloud's words, for the node's events
    # An instance that ended in its launch for a reason the type's next one would meet too (EC2: a
    # KMS key the launch may not use, a volume limit, no capacity after all): the error a create
    # refused so would have raised, so that the type is backed off as then (TypeUnusable,
    # InsufficientCapacity), not booted again at every pass only to end the same way.
    launch_error: CloudError | None = None


class Throttled(CloudError):
    """The cloud asked us to slow down; the call may be retried later."""


@dataclass(slots=True)
class CloudInstance:
    id: str  # the cloud's instance id
    instance_type: str
    tags: dict[str, str] = field(default_factory=dict)
    created_at: float = 0.0
    state: str = "running"  # the cloud's own word; corral does not act on it (seed 000)
    # Where it runs, for the operator (`corral nodes`): EC2's availability zone, and "spot" or
    # "on-demand". Empty: the cloud has no such thing (loopback, sim) or did not say.
    zone: str = ""
    market: str = ""

    @property
    def node_id(self) -> str | None:
        return self.tags.get(TAG_NODE_ID)

    @property
    def store_id(self) -> str | None:
        """None: booted by a corral from before stores tagged their instances."""
        return self.tags.get(TAG_STORE)


def agent_options(
    server_url: str, node_id: str, instance_type: InstanceType, work_dir: str, ca_file: str | None = None
) -> list[str]:
    """The options of the agent an instance runs: where to pair (and, for an https server, the CA
    bundle it verifies the server with), as which node, and the capacity of its instance type.
    That capacity is the one the planner planned with, not what the machine reads (MemTotal is less
    than the type's nominal RAM, and a job sized to the type would then fit nowhere)."""
    return [
        *(["--ca", ca_file] if ca_file else []),
        "--server",
        server_url,
        "--node-id",
        node_id,
        "--vcpus",
        f"{instance_type.vcpus:g}",
        "--ram-mib",
        str(instance_type.ram_mib),
        "--scratch-mib",
        str(instance_type.scratch_mib),
        "--gpus",
        str(instance_type.gpus),
        "--work-dir",
        work_dir,
    ]


class CloudDriver(Protocol):
    # Seconds a new instance may take to show in `list` (EC2 lists one a while after RunInstances
    # returns it). After a restart, a booting node with no instance that long unlisted is a boot
    # a crash cut short before the cloud made its instance.
    listing_lag: float

    def create(self, instance_type: InstanceType, node_id: str, boot_token: str, tags: dict[str, str]) -> CloudInstance:
        """Start an instance that will run an agent which pairs using `boot_token`."""
        ...

    def list(self) -> list[CloudInstance]:
        """Every live instance carrying this cluster's tag."""
        ...

    def destroy(self, instance_id: str) -> None:
        """Terminate an instance; no error if it is already gone."""
        ...

    def destroy_many(self, instance_ids: Sequence[str]) -> dict[str, CloudError]:
        """Terminate these instances in as few calls as the cloud takes (EC2: up to 1,000 ids in one
        TerminateInstances): what the cloud said of each one it would not terminate, by id. Every
        other one is terminated (or was gone already), whatever the refused ones are: one refusal
        never keeps the rest running. Never raises CloudError."""
        ...

    def check(self) -> str | None:
        """What would make every call fail (credentials, a region), asked once at start: in words
        naming the setting to fix, or None. `corral run` refuses to start with it."""
        ...

    def why_gone(self, instance_ids: Sequence[str]) -> dict[str, Ended]:
        """What the cloud says ended each of these instances, which vanished from `list` (EC2's state
        reason), for the operator to read in its node's events; an instance it says nothing of is
        left out. Never raises."""
        ...


def destroy_each(destroy: Callable[[str], None], instance_ids: Sequence[str]) -> dict[str, CloudError]:
    """`destroy_many` for a cloud that terminates one instance per call (loopback, sim): each in
    turn, and the refusals by id."""
    refused: dict[str, CloudError] = {}
    for instance_id in dict.fromkeys(instance_ids):
        try:
            destroy(instance_id)
        except CloudError as exc:
            refused[instance_id] = exc
    return refused
