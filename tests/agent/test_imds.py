"""The agent's question to EC2's metadata service: is this spot instance being taken back?"""

from __future__ import annotations

from corral.agent.imds import Imds, Notice
from tests.agent.fake_imds import fake_imds


def test_no_notice_until_the_cloud_gives_one_then_the_notice() -> None:
    with fake_imds() as (url, state):
        imds = Imds(url)
        assert imds.interruption() is None
        state.notice = {"action": "terminate", "time": "2026-11-26T06:30:00Z"}
        assert imds.interruption() == Notice("terminate", "2026-11-26T06:30:00Z")
        assert state.token_puts == 1  # one session token for both questions


def test_an_expired_token_is_replaced_and_an_unreachable_service_is_no_notice() -> None:
    with fake_imds() as (url, state):
        imds = Imds(url)
        assert imds.interruption() is None
        state.tokens.clear()  # the six-hour token ran out
        state.notice = {"action": "stop", "time": "2026-11-26T07:00:00Z"}
        assert imds.interruption() == Notice("stop", "2026-11-26T07:00:00Z")
        assert state.token_puts == 2
    assert Imds(url).interruption() is None  # the service is gone: nothing is said, nothing raised
