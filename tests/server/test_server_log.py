"""The server's log lines, as a log shipper reads them."""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Iterator
from datetime import datetime

import pytest

from corral.serve import JsonFormatter, KeyValueFormatter


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


def test_json_logs_are_one_object_a_line_with_the_ids_as_fields_of_their_own() -> None:
    """A shipper that parses JSON (Elasticsearch, Loki's json stage) could not read the key=value
    lines, and a node's or job's id was only inside the message: selecting a node's lines meant a
    regular expression over every message."""
    error = 'no answer\n[SQL: SELECT 1]\n"quoted"'
    # As `log.warning(..., extra={...})` makes it.
    ids = {"node_id": "n-1a2b", "instance_type": "c5.large"}
    message, arguments = "boot of %s failed: %s", ("c5", error)
    record = logging.getLogger("corral.loop").makeRecord(
        "corral.loop", logging.WARNING, __file__, 1, message, arguments, None, extra=ids
    )
    line = JsonFormatter().format(record)
    assert "\n" not in line
    data = json.loads(line)
    assert data["level"] == "warning" and data["logger"] == "corral.loop"
    assert data["msg"] == f"boot of c5 failed: {error}"
    assert (data["node_id"], data["instance_type"]) == ("n-1a2b", "c5.large")
    assert datetime.fromisoformat(data["ts"]).timestamp() == pytest.approx(record.created, abs=0.001)
    # The same ids in the key=value lines, after the message.
    assert KeyValueFormatter().format(record).endswith(" node_id=n-1a2b instance_type=c5.large")


def test_a_log_level_or_format_corral_run_does_not_know_is_refused_naming_the_option() -> None:
    """Seen: `corral run --log-level verbose` ended in a traceback ('ValueError: Unknown level')."""
    from typer.testing import CliRunner

    from corral.cli import app

    for option, value in (("--log-level", "verbose"), ("--log-format", "yaml")):
        result = CliRunner().invoke(app, ["run", option, value])
        assert result.exit_code == 2, result.output
        assert f"{option} {value!r}: write one of" in result.output
        assert "Traceback" not in result.output
