"""`corral events` and GET /api/events on a long history: a window of time, pages back, and a
listing cut at its limit that says so."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import insert

from corral.store import Store, schema
from tests.server.cli import corral, corral_json
from tests.support import served_app

HOUR = 3600.0


@pytest.fixture
def history(tmp_path: Path) -> Iterator[tuple[str, Store, float]]:
    """250 node.down events, one an hour, the last an hour ago; and the time of the first."""
    with served_app(tmp_path) as (url, store):
        first = time.time() - 250 * HOUR
        rows = [
            {"at": first + i * HOUR, "kind": "node.down", "node_id": f"n{i}", "message": f"event {i}"}
            for i in range(250)
        ]
        with store.write() as conn:  # (one transaction: 250 of them take seconds)
            conn.execute(insert(schema.events), rows)
        yield url, store, first


def test_a_listing_cut_at_its_limit_says_so_and_pages_back(history: tuple[str, Store, float]) -> None:
    url, store, _first = history
    shown = corral(url, "events")
    # The newest 200 of 250, and a word that there are older ones, with how to see them.
    assert "event 249" in shown.stdout and "event 50 " in shown.stdout and "event 49 " not in shown.stdout
    newest = corral_json(url, "events")
    assert [e["message"] for e in newest] == [f"event {i}" for i in range(50, 250)]
    assert f"older ones: --before {newest[0]['id']}" in shown.stderr
    # With --json too, on stderr: stdout alone read as the whole.
    assert f"older ones: --before {newest[0]['id']}" in corral(url, "events", "--json").stderr
    older = corral_json(url, "events", "--before", str(newest[0]["id"]))
    assert [e["message"] for e in older] == [f"event {i}" for i in range(50)]
    # The whole of what matches: no word of more.
    assert "older ones" not in corral(url, "events", "--before", str(newest[0]["id"])).stderr
    assert "older ones" not in corral(url, "events", "--limit", "250").stderr


def test_events_in_a_window_of_time(history: tuple[str, Store, float]) -> None:
    url, _store, first = history
    # The first three hours of the history, as ISO 8601 local times (sacct -S/-E).
    start, end = (time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(first + t)) for t in (0, 3 * HOUR))
    window = corral_json(url, "events", "--since", start, "--until", end)
    assert [e["message"] for e in window] == ["event 0", "event 1", "event 2"]
    # A time ago: the last 10 hours and a half hold the last 10 events.
    recent = corral_json(url, "events", "--since", "10h30m")
    assert [e["message"] for e in recent] == [f"event {i}" for i in range(240, 250)]
    token = {"Authorization": "Bearer t"}
    api = httpx.get(f"{url}/api/events", params={"since": first, "until": first + 2 * HOUR}, headers=token)
    assert [e["message"] for e in api.json()] == ["event 0", "event 1"]
    backwards = httpx.get(f"{url}/api/events", params={"since": first + 2 * HOUR, "until": first}, headers=token)
    assert backwards.status_code == 422 and "since" in backwards.json()["detail"][0]
    bad = corral(url, "events", "--since", "last tuesday", check=False)
    assert bad.returncode == 1 and "--since: 'last tuesday' is neither a time ago" in bad.stderr


def test_a_follower_reads_every_event_once_a_page_at_a_time_with_after(history: tuple[str, Store, float]) -> None:
    """A workflow engine follows what happened to its jobs from the event log rather than listing
    thousands of jobs at each poll; /api/events gave only the newest `limit` of what matched (since
    a time too), so a follower that fell behind by more than a page skipped the events between."""
    url, store, _first = history
    token = {"Authorization": "Bearer t"}
    seen: list[str] = []
    after = 0
    with httpx.Client(base_url=url, headers=token) as client:

        def follow() -> None:
            nonlocal after
            while page := client.get("/api/events", params={"after": after, "limit": 100}).json():
                assert [e["id"] for e in page] == sorted(e["id"] for e in page) and page[0]["id"] > after
                seen.extend(e["message"] for e in page)
                after = page[-1]["id"]

        follow()
        assert seen == [f"event {i}" for i in range(250)]
        store.add_event(time.time(), "node.down", "event 250", node_id="n250")
        follow()
        assert seen[250:] == ["event 250"]
        refused = client.get("/api/events", params={"after": "x"})
        assert refused.status_code == 422 and "after" in refused.text
    # The CLI follows the same way, and says where the next page starts.
    cut = corral(url, "events", "--after", "0", "--limit", "2")
    assert "event 0" in cut.stdout and "event 1 " in cut.stdout and "event 2 " not in cut.stdout
    assert "newer ones: --after" in cut.stderr
