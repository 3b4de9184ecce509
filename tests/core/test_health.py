"""Node health checks (corral.core.health): a failed check puts the node in the configured category
with the check's word, once; a pass takes back what a failed check set, and only that."""

from __future__ import annotations

from corral.core.health import change


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
