"""Node health checks (corral.core.health): a failed check puts the node in the configured category
with the check's word, once; a pass takes back what a failed check set, and only that. Past the
budget of failing nodes (health_check.max_unhealthy) a failure is only recorded."""

from __future__ import annotations

import pytest

from corral.core.health import change, may_take_out, parse_max_unhealthy


def test_a_failure_sets_the_category_and_the_word_once() -> None:
    assert change({}, False, "disk /scratch full", "software-failure") == (
        {"health_check": "failed: disk /scratch full", "category": "software-failure"},
        [],
    )
    failed = {"health_check": "failed: disk /scratch full", "category": "software-failure"}
    assert change(failed, False, "disk /scratch full", "software-failure") is None  # nothing new
    assert change(failed, False, "no GPU", "software-failure") == (
        {"health_check": "failed: no GPU", "category": "software-failure"},
        [],
    )
    # An operator's category stays beside it.
    held = {"category": "hardware-maintenance"}
    assert change(held, False, "", "software-failure") == (
        {"health_check": "failed", "category": ["hardware-maintenance", "software-failure"]},
        [],
    )


def test_a_pass_takes_back_only_what_a_failure_set() -> None:
    assert change({}, True, "", "software-failure") is None  # healthy all along
    assert change({"category": "software-failure"}, True, "", "software-failure") is None  # an operator's
    failed = {"health_check": "failed: x", "category": "software-failure"}
    assert change(failed, True, "", "software-failure") == ({}, ["health_check", "category"])
    both: dict[str, str | list[str]] = {
        "health_check": "failed: x",
        "category": ["hardware-maintenance", "software-failure"],
    }
    assert change(both, True, "", "software-failure") == ({"category": "hardware-maintenance"}, ["health_check"])


def test_failures_past_the_budget_are_recorded_not_acted_on() -> None:
    assert change({}, False, "exit 1", "software-failure", may_act=False) == ({"health_check": "failed: exit 1"}, [])
    recorded = {"health_check": "failed: exit 1"}
    assert change(recorded, False, "exit 1", "software-failure", may_act=False) is None  # nothing new
    assert change(recorded, False, "exit 2", "software-failure", may_act=False) == (
        {"health_check": "failed: exit 2"},
        [],
    )
    # Once the budget lets it go, the node is taken out of service.
    assert change(recorded, False, "exit 1", "software-failure") == (
        {"health_check": "failed: exit 1", "category": "software-failure"},
        [],
    )
    assert change(recorded, True, "", "software-failure") == ({}, ["health_check", "category"])
    # A node already out of service for its check stays out whatever the budget says.
    out = {"health_check": "failed: exit 1", "category": "software-failure"}
    assert change(out, False, "exit 1", "software-failure", may_act=False) is None


@pytest.mark.parametrize(
    ("failing", "in_service", "max_unhealthy", "may"),
    [
        (1, 1, "20%", True),  # one node may always go: a one-node cluster keeps its check
        (2, 5, "20%", False),
        (2, 10, "20%", True),
        (3, 10, "20%", False),
        (3, 11, "20%", True),  # 20% of 11 rounds up to 3
        (3, 100, "3", True),
        (4, 100, "3", False),
        (10, 10, "100%", True),
        (3, 2, "100%", True),  # a stale count of the nodes in service never refuses under 100%
    ],
)
def test_the_budget_of_nodes_taken_out_for_failed_checks(
    failing: int, in_service: int, max_unhealthy: str, may: bool
) -> None:
    assert may_take_out(failing, in_service, max_unhealthy) is may


@pytest.mark.parametrize("bad", ["0", "0%", "101%", "x", "-1", "2.5", True])
def test_a_bad_budget_is_refused_with_its_value(bad: object) -> None:
    with pytest.raises(ValueError, match=repr(bad).replace(".", r"\.")):
        parse_max_unhealthy(bad)
