"""The node credentials an agent keeps across its own restarts.

A boot token pairs once. What the server gives in exchange (the node secret) is all a restarted
agent has to prove it is that node's, so it is saved in the work dir, readable by the agent's user
only (0600), and replaced atomically (a crash while writing leaves the old file or the new one,
never half of one). An agent that starts with a file matching its --node-id and --server resumes
with it instead of pairing (docs/agent.md, "Restarts").
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

FILE_NAME = "credentials.json"


@dataclass(frozen=True, slots=True)
class Credentials:
    node_id: str
    server: str
    secret: str

    def matches(self, node_id: str, server: str) -> bool:
        return self.node_id == node_id and self.server.rstrip("/") == server.rstrip("/")


class CredentialsError(Exception):
    """The file is there but unusable; the message names it and what is wrong."""


def path_in(work_dir: Path) -> Path:
    return work_dir / FILE_NAME


def load(work_dir: Path) -> Credentials | None:
    """The saved credentials; None when there are none. CredentialsError for a file that cannot be
    read or used, or that others may read (a secret they may have copied)."""
    path = path_in(work_dir)
    try:
        mode = path.stat().st_mode
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CredentialsError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    if mode & 0o077:
        raise CredentialsError(f"{path}: others may read it (mode {mode & 0o777:04o}, must be 0600): not used")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise CredentialsError(f"{path}: not JSON ({exc})") from None
    fields = {name: data.get(name) if isinstance(data, dict) else None for name in ("node_id", "server", "secret")}
    wrong = [name for name, value in fields.items() if not isinstance(value, str) or not value]
    if wrong:
        raise CredentialsError(f"{path}: {', '.join(wrong)} missing or not a string")
    return Credentials(**fields)  # type: ignore[arg-type]


def save(work_dir: Path, credentials: Credentials) -> Path:
    """Write the file atomically, 0600 from its creation (never readable by others, not even for
    an instant), and make the rename durable: a machine that loses power just after pairing must
    not come back with a node whose secret is lost."""
    path = path_in(work_dir)
    tmp = path.with_name(f".{FILE_NAME}.{os.getpid()}.tmp")
    data = json.dumps({"node_id": credentials.node_id, "server": credentials.server, "secret": credentials.secret})
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(data + "\n")
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    directory = os.open(work_dir, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
    return path


def remove(work_dir: Path) -> None:
    """The server no longer knows the node: its secret is worth nothing any more."""
    with contextlib.suppress(FileNotFoundError):
        path_in(work_dir).unlink()
