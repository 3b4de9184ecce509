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
