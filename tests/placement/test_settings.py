"""Placement settings: the seed's availability syntax, and clear errors for what is not understood."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from corral.core.settings import PolicySettings
from corral.placement.availability import Policy, Resource, parse_availability
from corral.placement.settings import FILTER_NAMES, PlacementSettings, coerce


def test_seed_002_example_parses_per_resource() -> None:
    policy = parse_availability("DEDICATED:PROC COMBINED:MEM COMBINED:DISK")
    assert policy[Resource.CPU] is Policy.DEDICATED
    assert policy[Resource.RAM] is Policy.COMBINED
    assert policy[Resource.DISK] is Policy.COMBINED
    assert policy[Resource.GPU] is Policy.COMBINED  # unnamed resources take the default, COMBINED


def test_bare_policy_is_the_default_for_unnamed_resources() -> None:
    policy = parse_availability("UTILIZED DEDICATED:GPU")
    assert [policy[r] for r in Resource] == [Policy.UTILIZED, Policy.UTILIZED, Policy.UTILIZED, Policy.DEDICATED]


def test_canonical_spelling_round_trips() -> None:
    for text in ("COMBINED", "DEDICATED:PROC COMBINED:MEM", "utilized:mem", "DEDICATED DEDICATED:CPU UTILIZED:RAM"):
        policy = parse_availability(text)
        assert parse_availability(policy.describe()) == policy


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("DEDICATE:PROC", "unknown availability policy 'DEDICATE'"),
        ("COMBINED:SWAP", "unknown resource 'SWAP'"),
        ("", "empty"),
        ("DEDICATED:PROC UTILIZED:CPU", "two availability policies"),
    ],
)
def test_bad_availability_is_a_clear_error(text: str, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        PlacementSettings(availability=text)


def test_unknown_filter_or_scorer_is_an_error_naming_the_known_ones() -> None:
    with pytest.raises(ValidationError, match="unknown filter 'min-mem'.*min-ram"):
        PlacementSettings(filters=["min-mem"])
    with pytest.raises(ValidationError, match="unknown scorer 'packing'"):
        PlacementSettings(weights={"packing": 1.0})
    with pytest.raises(ValidationError, match="Extra inputs"):
        PlacementSettings.model_validate({"filter": []})


def test_overprovision_accepts_seed_and_corral_resource_names() -> None:
    settings = PlacementSettings(overprovision={"PROC": 4, "ram": 1.5})
    assert settings.overprovision == {"cpu": 4.0, "ram": 1.5}
    with pytest.raises(ValidationError, match="unknown resource"):
        PlacementSettings(overprovision={"swap": 2})


def test_defaults_and_coercion_from_policy_settings() -> None:
    assert PlacementSettings().filters == list(FILTER_NAMES)
    assert PlacementSettings().availability == "COMBINED"
    policy = PolicySettings.model_validate(
        {"placement": {"availability": "DEDICATED:PROC", "queue": {"backfill": "none"}}}
    )
    placement = coerce(policy)
    assert placement.availability_policy()[Resource.CPU] is Policy.DEDICATED
    assert placement.queue.backfill == "none"
    assert coerce(None) == PlacementSettings()
    assert coerce({"queue": {"default_time_limit": "1h"}}).queue.default_time_limit == 3600.0
