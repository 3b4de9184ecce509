"""The API token, as the operator guide tells an operator to rotate it: a restart with --keep-fleet
and without the old `token` file makes a new one, which the CLI reads, while the old one is refused
and the running work goes on."""

from __future__ import annotations

import signal
import subprocess

from tests.e2e.conftest import CORRAL, Corral, wait_until


def test_an_empty_token_file_is_refused_at_start_naming_it(corral: Corral) -> None:
    """Seen: with `token` emptied (a rotation done by truncating it), `corral run` started with a
    token no client can send, and every CLI command said only 'no API token'."""
    token = corral.home / "token"
    token.write_text("\n")
    command = [CORRAL, "run", "--config", str(corral.config), "--port", str(corral.port)]
    refused = subprocess.run(command, env=corral.env, capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr, refused.stderr
    assert f"error: {token}: the API token is empty" in refused.stderr, refused.stderr
    assert "remove the file and corral run makes a new one" in refused.stderr
    assert token.read_text() == "\n"  # the operator's file is theirs to fix


def test_rotating_the_token_with_keep_fleet_keeps_the_running_work(corral: Corral) -> None:
    corral.start("--keep-fleet")
    job = corral.cli("submit", "--", "sh", "-c", "sleep 4; echo survived").stdout.strip()
    wait_until(lambda: corral.jobs()[int(job)]["state"] == "running", 60, "the job to run")
    old = (corral.home / "token").read_text().strip()

    corral.stop(signal.SIGTERM)
    (corral.home / "token").unlink()
    corral.start("--keep-fleet")

    new = (corral.home / "token").read_text().strip()
    assert new and new != old
    refused = subprocess.run(
        [CORRAL, "jobs"], env={**corral.env, "CORRAL_TOKEN": old}, capture_output=True, text=True, timeout=60
    )
    assert refused.returncode != 0 and "wrong API token" in refused.stderr, refused.stderr
    wait_until(lambda: corral.jobs()[int(job)]["state"] == "complete", 60, "the job to complete")
    assert corral.jobs()[int(job)]["attempts"] == 1  # the same run: not requeued by the restart
    assert corral.cli("logs", job).stdout == "survived\n"
