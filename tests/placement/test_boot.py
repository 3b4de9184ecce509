"""Ranking instance types as new empty nodes, with the placement engine's own filters and scorers."""

from __future__ import annotations

from placement_helpers import job

from corral.core.model import GiB, InstanceType
from corral.core.settings import PolicySettings
from corral.placement.boot import TypeRank, rank_instance_types
from corral.placement.settings import PlacementSettings

TYPES = [
    InstanceType("small", 2, 8 * GiB, 0.10),
    InstanceType("medium", 4, 16 * GiB, 0.20),
    InstanceType("large", 16, 64 * GiB, 0.60, attributes=(("zone", "b"),)),
    InstanceType("gpu", 8, 32 * GiB, 2.00, gpus=1),
]


def names(ranks: list[TypeRank]) -> list[str]:
    return [r.instance_type for r in ranks if r.fits]


def test_cheapest_per_job_first_and_misfits_last_with_reasons() -> None:
    ranks = rank_instance_types(job(1, 4, 12), TYPES)
    assert names(ranks) == ["large", "medium", "gpu"]  # large holds 4 copies: 0.15/job
    small = ranks[-1]
    assert small.instance_type == "small" and not small.fits
    assert small.reason == "INSUFFICIENT_RAM: needs 12 GiB RAM, the largest free is 8 GiB on new:small"


def test_weights_are_configurable_and_shared_with_policy_settings() -> None:
    tight = PlacementSettings(boot_weights={"pack": 1.0})
    assert names(rank_instance_types(job(1, 1, 6), TYPES, tight))[0] == "small"
    policy = PolicySettings.model_validate({"placement": {"boot_weights": {"spread": 1.0}}})
    assert names(rank_instance_types(job(1, 1, 6), TYPES, policy))[0] == "large"


def test_the_same_filters_apply_to_types() -> None:
    ranks = rank_instance_types(job(1, traits={"zone": "b"}), TYPES)
    assert names(ranks) == ["large"]
    assert names(rank_instance_types(job(1, gpus=1), TYPES)) == ["gpu"]
    assert names(rank_instance_types(job(1, forbidden_traits={"zone": "*"}, vcpus=16), TYPES)) == []


def test_types_in_capacity_back_off_do_not_fit_for_now() -> None:
    ranks = rank_instance_types(job(1, 4, 12), TYPES, now=100.0, unavailable={"large": 200.0, "medium": 50.0})
    assert names(ranks) == ["medium", "gpu"]
    large = next(r for r in ranks if r.instance_type == "large")
    assert large.reason.startswith("CAPACITY_BACKOFF")


def test_any_fits_agrees_with_the_ranking() -> None:
    from corral.placement.boot import TypeRanker
    from corral.placement.demand import Demand

    cases = [job(1, 4, 12), job(2, 1, 1, traits={"zone": "b"}), job(3, 1, 1, gpus=1), job(4, 64, 1)]
    for unavailable in ({}, {"gpu": 1e12}, {"large": 1e12, "medium": 1e12, "gpu": 1e12}):
        ranker = TypeRanker(TYPES, PlacementSettings(), now=0.0, unavailable=unavailable)
        for j in cases:
            demand = Demand.of(j)
            assert ranker.any_fits(demand) == any(r.fits for r in ranker.rank(demand)), (j.id, unavailable)
