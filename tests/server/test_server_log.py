"""The server's log lines, as a log shipper reads them."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from datetime import datetime

import pytest

from corral.serve import KeyValueFormatter


@pytest.fixture
def five_hours_behind_utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "EST5")  # POSIX: UTC-5, with no tz database needed
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.usefixtures("five_hours_behind_utc")
def test_a_log_line_says_its_time_with_its_offset() -> None:
    """On a host whose clock is not UTC, `ts=` is the moment it was: Loki or Vector reads a time
    without an offset as UTC, which put every line of a New York host five hours off."""
    record = logging.LogRecord("corral.loop", logging.INFO, __file__, 1, "a pass", None, None)
    record.created = 1_795_706_044.25  # 2026-11-26 15:14:04.250 UTC
    line = KeyValueFormatter().format(record)
    found = re.match(r"ts=(\S+) level=info logger=corral\.loop msg=\"a pass\"$", line)
    assert found, line
    assert found[1] == "2026-11-26T10:14:04.250-05:00"
    assert datetime.fromisoformat(found[1]).timestamp() == record.created
