"""What users write (a job's name, tags, command) reaches other users' terminals through the CLI's
listings: its control characters are written out, never sent to the terminal as they are."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from typer.testing import CliRunner

from corral.cli import app
from tests.support import served_app

# Clears the screen, and (OSC 52) puts 'echo pwned' in the clipboard of a terminal that allows it.
NAME = "x\x1b]52;c;ZWNobyBwd25lZA==\x07\x1b[2J\x9b2Jy"
SHOWN = "x\\x1b]52;c;ZWNobyBwd25lZA==\\x07\\x1b[2J\\x9b2Jy"


def test_a_jobs_control_characters_are_written_out_in_the_listings(tmp_path: Path) -> None:
    with served_app(tmp_path) as (url, _):
        job = {"command": ["true", NAME], "name": NAME, "tags": [NAME], "not_before": 4_000_000_000}
        answer = httpx.post(f"{url}/api/jobs", json={"jobs": [job]}, headers={"Authorization": "Bearer t"})
        assert answer.status_code == 201, answer.text
        env = {"CORRAL_URL": url, "CORRAL_TOKEN": "t", "COLUMNS": "400"}
        for command in (["jobs"], ["job", "1"], ["queue"], ["events"], ["jobs", "--json"], ["cancel", "--name", NAME]):
            shown = CliRunner().invoke(app, command, env=env)
            assert shown.exit_code == 0, shown.output
            assert not set(shown.output) & {"\x1b", "\x07", "\x9b"}, (command, shown.output)
        [listed] = json.loads(CliRunner().invoke(app, ["jobs", "--json"], env=env).output)
        assert (listed["name"], listed["tags"], listed["command"]) == (SHOWN, [SHOWN], ["true", SHOWN])
        assert SHOWN in CliRunner().invoke(app, ["job", "1"], env=env).output


def test_a_nul_character_in_a_filter_is_refused_naming_it(tmp_path: Path) -> None:
    """Nothing stored holds a NUL (submissions refuse it); PostgreSQL takes none in a text, and a
    listing filtered by one was a 500 with SQLAlchemy's traceback."""
    with served_app(tmp_path) as (url, _):
        token = {"Authorization": "Bearer t"}
        for path, params, named in (
            ("/api/jobs", {"name": "a\x00b", "state": "queued"}, "query.name"),
            ("/api/events", {"kind": "job.\x00"}, "query.kind"),
            ("/api/nodes/n%00", {}, "path"),
        ):
            answer = httpx.get(f"{url}{path}", params=params, headers=token)
            assert answer.status_code == 422, (path, answer.text)
            assert answer.json()["detail"] == [f"{named}: a NUL character is not allowed"]
