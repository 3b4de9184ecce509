"""What an operator may set on a node (PATCH /api/nodes/NODE, `corral node`): times the engine reads."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from corral.server.models import NodeAttributesBody


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("1796083200", "1796083200"),
        ("2026-12-01T00:00:00+00:00", "1796083200"),
        # A fraction of a second was written with 6 significant digits (1.79608e+09): a time
        # 53 minutes away from the one given.
        ("2026-12-01T00:00:00.5+00:00", "1796083200.5"),
    ],
)
def test_a_time_is_stored_as_the_epoch_seconds_it_names(given: str, stored: str) -> None:
    assert NodeAttributesBody(set={"next_reboot": given}).set == {"next_reboot": stored}


def test_a_time_that_is_none_is_named_with_its_key() -> None:
    with pytest.raises(ValidationError, match="next_reboot: not a time: 'soon'"):
        NodeAttributesBody(set={"next_reboot": "soon"})


def test_a_drain_is_true_false_or_now_and_anything_else_is_refused_by_name() -> None:
    for value in ("true", "now", "NOW", "false"):
        assert NodeAttributesBody(set={"drain": value}).set == {"drain": value}
    with pytest.raises(ValidationError, match="drain: 'soon' is not true, false or now"):
        NodeAttributesBody(set={"drain": "soon"})
    with pytest.raises(ValidationError, match=r"drain: \['now', 'true'\] is not true, false or now"):
        NodeAttributesBody(set={"drain": ["now", "true"]})


def test_a_category_in_moabs_spelling_is_stored_as_corral_reads_it() -> None:
    """`corral node N category=HardwareFailure` (seed 002's Moab names it so) was stored as given: a
    category nothing reads, so the node went on taking work, unbroken, without a word."""
    assert NodeAttributesBody(set={"category": "HardwareFailure"}).set == {"category": "hardware-failure"}
    given = ["EmergencyMaintenance", "HWFailure", "storage_failure", "Site1", "gpu-failure"]
    stored = ["emergency-maintenance", "hw-failure", "storage-failure", "site1", "gpu-failure"]
    assert NodeAttributesBody(set={"category": given}).set == {"category": stored}


def test_blocking_categories_are_read_in_the_same_spelling() -> None:
    from corral.placement.settings import PlacementSettings

    settings = PlacementSettings.model_validate({"blocking_categories": ["Benchmark", "GridReservation"]})
    assert settings.blocking_categories == ["benchmark", "grid-reservation"]


def test_only_a_category_nothing_reads_is_warned_of() -> None:
    from corral.core import categories

    read = ["gpu-failure", "lustre-maintenance", "site3", "idle", "quarantine", "hardware-failure"]
    assert categories.unread(read, blocking=["quarantine"]) == []
    typo, unknown = categories.unread(["hardware-falure", "quarantine"], blocking=[])
    assert unknown.startswith("category 'quarantine' is not one corral reads: the node goes on taking work")
    assert typo.startswith("category 'hardware-falure' is not one corral reads (did you mean 'hardware-failure'?)")
    assert "the node goes on taking work" in typo
