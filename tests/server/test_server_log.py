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


def test_a_message_of_several_lines_stays_one_log_line_whose_msg_reads_back_whole() -> None:
    """A database error's text has line breaks ("...\\n[SQL: ...]"): each became a line of its own
    with no ts or level, which a log shipper takes for records of their own. A message ending in a
    backslash escaped the closing quote, and the reader ran on into the next line."""
    error = 'connection to "db" failed\r\n[SQL: SELECT 1]\nC:\\'
    arguments = ("small", error)
    record = logging.LogRecord("corral.loop", logging.WARNING, __file__, 1, "cannot boot %s: %s", arguments, None)
    line = KeyValueFormatter().format(record)
    assert "\n" not in line and "\r" not in line
    found = re.fullmatch(r'ts=\S+ level=warning logger=corral\.loop msg="((?:[^"\\]|\\.)*)"', line)
    assert found, line
    # Read back as logfmt readers unescape it: the whole message, its quotes as the formatter gives them.
    unescaped = re.sub(r"\\(.)", lambda m: {"n": "\n", "r": "\r"}.get(m[1], m[1]), found[1])
    assert unescaped == "cannot boot small: " + error.replace('"', "'")
