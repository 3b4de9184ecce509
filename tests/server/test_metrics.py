"""/metrics as Prometheus reads it, from corral's server app on a real store, over HTTP."""

from __future__ import annotations

from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from corral.core.events import EVENT_KINDS
from tests.support import served_app


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = httpx.get(f"{url}/metrics", timeout=10)
    assert response.status_code == 200
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def test_every_event_kind_is_counted_from_zero_so_increase_sees_the_first(tmp_path: Path) -> None:
    """`increase(corral_events_total{kind="capacity.unavailable"}[15m]) > 0` (the operator guide's
    alert) sees nothing of a series whose first sample is already 1: each kind is exported at 0
    before its first event, so the first capacity error after a start is an increase."""
    with served_app(tmp_path) as (url, store):
        first = scrape(url)
        for kind in EVENT_KINDS:
            assert first[("corral_events_total", (("kind", kind),))] == 0, kind
        store.add_event(1000.0, "capacity.unavailable", "small: InsufficientInstanceCapacity")
        second = scrape(url)
        assert second[("corral_events_total", (("kind", "capacity.unavailable"),))] == 1
        assert second[("corral_events_total", (("kind", "node.down"),))] == 0


def test_the_server_names_its_version_and_exports_no_created_series(tmp_path: Path) -> None:
    """A `*_created` series stood beside every counter and histogram (the time it was made): about
    55 series no alert reads. `corral_build_info` says which corral answers, as exporters do."""
    import platform

    import corral

    with served_app(tmp_path) as (url, _store):
        samples = scrape(url)
    assert not [name for name, _ in samples if name.endswith("_created")]
    build = (("python", platform.python_version()), ("version", corral.__version__))
    assert samples[("corral_build_info", build)] == 1
