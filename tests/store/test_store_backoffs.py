"""An operator's "try again now" (`corral backoff clear`): ending instance types' back-offs in the
store that every dispatcher reads, with their rows of failed boots."""

from __future__ import annotations

import pytest

from corral.core.snapshot import BootFailures
from corral.store import ClearedBackoff, NotBackedOff, Store
from tests.support import utc

from .storekit import NOW, SMALL, snapshot_of_tables

BROKEN_AMI = "instance i-0abc (node n-1) did not pair within boot_grace 10m; big backed off for 40m (3 failed boots)"


def back_off(store: Store) -> None:
    """big: its third failed boot in a row (40m); medium: out of capacity (5m); old: a back-off over."""
    store.set_unavailable("big", NOW + 2400, BROKEN_AMI, NOW, "type.boot_failed", BootFailures(3, NOW), "n-1")
    store.set_unavailable("medium", NOW + 300, "InsufficientInstanceCapacity", NOW)
    store.set_unavailable("old", NOW - 60, "no capacity", NOW - 360, "type.boot_failed", BootFailures(2, NOW - 360))


def test_clearing_a_type_ends_its_back_off_and_its_failed_boots_in_a_row(store: Store) -> None:
    back_off(store)

    cleared = store.clear_backoffs(["big"], NOW + 60)

    assert cleared == [ClearedBackoff("big", NOW + 2400, BROKEN_AMI, 3)]
    snapshot = store.load_snapshot("d", [SMALL], observing_since=NOW)
    assert snapshot.unavailable_types == {"medium": NOW + 300, "old": NOW - 60}
    # Its next failure is a first one again (capacity_backoff), not the fourth (1h).
    assert snapshot.boot_failures == {"old": BootFailures(2, NOW - 360)}
    assert [b["instance_type"] for b in store.backoffs_in_force(NOW + 60)] == ["medium"]
    [event] = store.list_events(kind="type.backoff_cleared")
    assert event["message"] == (
        f"big: back-off cleared by an operator (was until {utc(NOW + 2400)}, 39m more; 3 failed boots in a row)"
    )
    assert event["at"] == NOW + 60


def test_a_type_not_backed_off_is_named_and_nothing_is_cleared(store: Store) -> None:
    back_off(store)
    before = snapshot_of_tables(store)

    with pytest.raises(NotBackedOff) as refused:
        store.clear_backoffs(["big", "old", "small", "big"], NOW + 60)

    assert refused.value.names == ["old", "small"]  # old's back-off is over; small never had one
    assert str(refused.value) == "old, small are not backed off (backed off now: big, medium)"
    assert snapshot_of_tables(store) == before  # big's back-off, named with them, runs on


def test_clearing_every_type_ends_the_back_offs_in_force(store: Store) -> None:
    back_off(store)

    cleared = store.clear_backoffs(None, NOW + 60)

    assert [(c.instance_type, c.boot_failures) for c in cleared] == [("big", 3), ("medium", 0)]
    assert store.backoffs_in_force(NOW + 60) == []
    assert [e["message"] for e in store.list_events(kind="type.backoff_cleared")] == [
        f"big: back-off cleared by an operator (was until {utc(NOW + 2400)}, 39m more; 3 failed boots in a row)",
        f"medium: back-off cleared by an operator (was until {utc(NOW + 300)}, 4m more)",
    ]
    # Nothing left to clear: no error, nothing recorded.
    assert store.clear_backoffs(None, NOW + 61) == []
    with pytest.raises(NotBackedOff, match=r"^big is not backed off \(no instance type is backed off now\)$"):
        store.clear_backoffs(["big"], NOW + 61)
    assert len(store.list_events(kind="type.backoff_cleared")) == 2


def test_a_type_backed_off_again_after_a_clear_counts_its_failed_boots_from_one(store: Store) -> None:
    back_off(store)
    store.clear_backoffs(["big"], NOW + 60)
    store.set_unavailable("big", NOW + 420, "did not pair", NOW + 120, "type.boot_failed", BootFailures(1, NOW + 120))

    assert store.load_snapshot("d", [SMALL], observing_since=NOW).boot_failures["big"] == BootFailures(1, NOW + 120)
    assert [(b["instance_type"], b["boot_failures"]) for b in store.backoffs_in_force(NOW + 130)] == [
        ("medium", 0),
        ("big", 1),
    ]
