"""corral.core.listing: when a running attempt that its node's agent does not list is lost."""

from __future__ import annotations

from corral.core.listing import Unlisted, lost, tally

INTERVAL = 2.0


def pings(*listings: tuple[float, set[int]], running: tuple[int, ...] = (7,)) -> dict[int, Unlisted]:
    """The tally after pings received at the given times, listing the given attempts."""
    unlisted: dict[int, Unlisted] = {}
    for at, listed in listings:
        unlisted = tally(unlisted, running, listed, at)
    return unlisted


def test_three_pings_in_a_row_over_two_intervals_lose_it() -> None:
    unlisted = pings((10, set()), (12, set()), (14, set()))
    assert unlisted == {7: Unlisted(10, 3)}
    assert lost(unlisted, 14, INTERVAL) == [7]


def test_two_pings_may_be_reports_crossing_and_lose_nothing() -> None:
    """A ping composed before the start, received after it: at most one in a row, as the agent
    pings one request at a time; two leave room for a late one."""
    unlisted = pings((10, set()), (30, set()))
    assert lost(unlisted, 30, INTERVAL) == []


def test_pings_quicker_than_the_grace_lose_nothing() -> None:
    unlisted = pings((10, set()), (10.5, set()), (11, set()), (11.5, set()), (12, set()))
    assert unlisted[7].pings == 5
    assert lost(unlisted, 13.9, INTERVAL) == []
    assert lost(unlisted, 14, INTERVAL) == [7]


def test_a_listing_starts_the_count_again() -> None:
    unlisted = pings((10, set()), (12, set()), (14, {7}), (16, set()), (18, set()))
    assert unlisted == {7: Unlisted(16, 2)}
    assert lost(unlisted, 18, INTERVAL) == []


def test_an_attempt_no_longer_running_is_no_longer_tallied() -> None:
    unlisted = pings((10, set()), (12, set()), running=(7, 8))
    assert tally(unlisted, [8], set(), 14) == {8: Unlisted(10, 3)}


def test_lost_ones_come_in_id_order() -> None:
    unlisted = pings((10, set()), (12, {5}), (14, {5}), (16, set()), running=(9, 5, 3))
    assert lost(unlisted, 16, INTERVAL) == [3, 9]
