"""What other users of the machine can read of a corral's data directory: nothing. The store holds
every job's command and environment (where users pass their credentials), `logs/` every job's
output, `token` the API token; a shared research cluster's head node has many users."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from tests.e2e.conftest import Corral, wait_until


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_data_directory_open_to_others_is_closed_at_start_and_says_so(corral: Corral) -> None:
    os.chmod(corral.home, 0o755)  # as every corral before made it, and as mkdir does
    token = corral.home / "token"
    token.write_text("a-token-restored-from-a-backup\n")
    os.chmod(token, 0o644)
    corral.start()
    corral.cli("submit", "--env", "API_KEY=hunter2", "--", "echo", "done")
    wait_until(lambda: corral.jobs()[1]["state"] == "complete", 60, "the job to complete")
    assert mode(corral.home) == 0o750  # others: nothing; the group the operator gave it keeps it
    assert mode(token) == 0o600
    log = corral.server_log()
    assert f"{corral.home} was open to every user of this machine (mode 0755)" in log, log
    assert f"{token} was readable by others than its owner (mode 0644); it is 0600 now" in log, log


def test_a_new_data_directory_is_its_owners_alone(tmp_path: Path) -> None:
    from corral.serve import private_home

    home = tmp_path / "deep" / "corral"
    assert private_home(home) == []
    assert mode(home) == 0o700
    assert private_home(home) == []  # as it was: nothing to say


def test_a_tls_key_every_user_may_read_is_said_at_start_and_left_as_it_is(tmp_path: Path) -> None:
    """corral never said so: anyone on the machine could read the key and pose as the server."""
    from corral.serve import readable_tls_key

    key = tmp_path / "server-key.pem"
    key.write_text("-----BEGIN PRIVATE KEY-----\n")
    os.chmod(key, 0o644)
    assert readable_tls_key(key) == (
        f"server.tls_key {key} is readable by every user of this machine (mode 0644): whoever reads it can pose as"
        f" this server to the CLI and the agents, and read the tokens they send; chmod o-r {key}"
    )
    assert mode(key) == 0o644  # the operator's file
    os.chmod(key, 0o640)  # (Debian's ssl-cert group)
    assert readable_tls_key(key) is None
    assert readable_tls_key(None) is None
