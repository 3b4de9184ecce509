"""`corral backoff clear` against corral's server app: an operator who fixed what failed an instance
type (the AMI, a quota, a security group) ends its back-off now, through the real CLI."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from corral.core.snapshot import BootFailures
from corral.store import Store
from tests.server.cli import corral, corral_json
from tests.support import served_app, utc

# corral's default config: c5.large, m5.large, m5.xlarge, r5.xlarge.
NEVER_PAIRED = "instance i-0abc (node n-1) did not pair within boot_grace 10m; c5.large backed off for 40m"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Store]]:
    with served_app(tmp_path) as served:
        yield served


def back_off(store: Store) -> tuple[float, float]:
    """c5.large: its third failed boot in a row; m5.large: out of capacity. Their ends."""
    now = time.time()
    failed, full = now + 2400, now + 300
    store.set_unavailable("c5.large", failed, NEVER_PAIRED, now, "type.boot_failed", BootFailures(3, now), "n-1")
    store.set_unavailable("m5.large", full, "InsufficientInstanceCapacity in us-east-1a", now)
    return failed, full


def local(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


def backed_off(url: str) -> list[str]:
    return [b["instance_type"] for b in corral_json(url, "status")["backoffs"]]


def test_an_operator_clears_a_back_off_and_the_type_is_no_longer_backed_off(served: tuple[str, Store]) -> None:
    url, store = served
    failed, _ = back_off(store)
    status = corral(url, "status").stdout
    assert (
        "c5.large for " in status and "fixed what failed it? `corral backoff clear TYPE` tries it again now" in status
    )
    assert {b["instance_type"]: b["boot_failures"] for b in corral_json(url, "status")["backoffs"]} == {
        "m5.large": 0,
        "c5.large": 3,
    }

    cleared = corral(url, "backoff", "clear", "c5.large")

    assert (
        cleared.stdout == f"c5.large: back-off cleared (was until {local(failed)}; 3 failed boots in a row forgotten)\n"
    )
    assert backed_off(url) == ["m5.large"]
    # Its failed boots in a row are forgotten too: its next failure backs it off as a first one.
    assert store.load_snapshot("d", [], observing_since=0.0).boot_failures == {}
    [event] = corral_json(url, "events", "--kind", "type.backoff_cleared")
    assert event["message"].startswith(f"c5.large: back-off cleared by an operator (was until {utc(failed)}, ")
    assert event["message"].endswith(" more; 3 failed boots in a row)")
    assert "c5.large: back-off cleared by an operator" in corral(url, "events", "--kind", "type.").stdout


def test_a_type_not_backed_off_or_not_configured_is_named_and_nothing_is_cleared(
    served: tuple[str, Store],
) -> None:
    url, store = served
    back_off(store)

    not_backed_off = corral(url, "backoff", "clear", "c5.large", "m5.xlarge", "r5.xlarge", check=False)
    assert not_backed_off.returncode == 1 and not_backed_off.stdout == ""
    assert (
        not_backed_off.stderr == "error: m5.xlarge, r5.xlarge are not backed off (backed off now: c5.large, m5.large)\n"
    )

    typo = corral(url, "backoff", "clear", "c5.large", "c5.larg", check=False)
    assert typo.returncode == 1 and typo.stdout == ""
    assert typo.stderr == (
        "error: c5.larg: not an instance type of corral's config (c5.large, m5.large, m5.xlarge, r5.xlarge)\n"
    )

    assert sorted(backed_off(url)) == ["c5.large", "m5.large"]
    assert corral_json(url, "events", "--kind", "type.backoff_cleared") == []
    assert store.load_snapshot("d", [], observing_since=0.0).boot_failures["c5.large"].count == 3


def test_clear_all_ends_every_back_off_and_then_finds_none(served: tuple[str, Store]) -> None:
    url, store = served
    failed, full = back_off(store)

    cleared = corral_json(url, "backoff", "clear", "--all")

    assert [(c["instance_type"], c["until"], c["boot_failures"]) for c in cleared["cleared"]] == [
        ("c5.large", failed, 3),
        ("m5.large", full, 0),
    ]
    assert cleared["cleared"][1]["reason"] == "InsufficientInstanceCapacity in us-east-1a"
    assert backed_off(url) == []
    assert len(corral_json(url, "events", "--kind", "type.backoff_cleared")) == 2
    assert corral(url, "backoff", "clear", "--all").stdout == "no instance type was backed off\n"
    assert corral(url, "backoff", "clear", "m5.large", check=False).stderr == (
        "error: m5.large is not backed off (no instance type is backed off now)\n"
    )


def test_clear_takes_types_or_all_and_the_api_token(served: tuple[str, Store]) -> None:
    url, store = served
    back_off(store)
    neither = corral(url, "backoff", "clear", check=False)
    assert neither.returncode == 1 and "name the instance types whose back-off ends, or give --all" in neither.stderr
    both = corral(url, "backoff", "clear", "c5.large", "--all", check=False)
    assert both.returncode == 1 and "give instance types or --all, not both" in both.stderr

    # As every operator call: no token, or another, is refused, and nothing is cleared.
    assert httpx.post(f"{url}/api/backoffs/clear", json={"all": True}).status_code == 401
    wrong = httpx.post(f"{url}/api/backoffs/clear", json={"all": True}, headers={"Authorization": "Bearer x"})
    assert wrong.status_code == 401
    refused = httpx.post(
        f"{url}/api/backoffs/clear",
        json={"all": True, "instance_types": ["c5.large"]},
        headers={"Authorization": "Bearer t"},
    )
    assert refused.status_code == 422 and "name instance types, or all, not both" in str(refused.json()["detail"])
    assert sorted(backed_off(url)) == ["c5.large", "m5.large"]
