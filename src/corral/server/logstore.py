"""Job output, one file per attempt under CORRAL_HOME/logs/<job id>/<attempt id>.log.

Chunks arrive with their byte offset, so a chunk the agent sends twice lands in the same place."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path

CHUNK = 1024 * 1024  # bytes of output read at a time to be sent


def cut_note(limit: int) -> bytes:
    """The line that ends an output cut at `limit` bytes."""
    return (
        f"\n[corral: this attempt's output was cut here, at {limit:,} bytes (server.max_output);"
        " the rest was not kept]\n"
    ).encode()


class LogGap(ValueError):
    """A chunk that starts past the end of what is stored: it would leave a hole (and a sparse file
    as large as any offset asked for)."""


class LogStore:
    """`max_bytes`: the most of an attempt's output kept (None: all of it). What comes past it is
    dropped and the file ends with a line that says so (CUT_NOTE): one job printing without end
    would otherwise fill the disk the store and every other job's output share."""

    def __init__(self, root: Path, max_bytes: int | None = None) -> None:
        self.root = root
        self.max_bytes = max_bytes

    def path(self, job_id: int, attempt_id: int) -> Path:
        return self.root / str(job_id) / f"{attempt_id}.log"

    def job_ids(self) -> list[int]:
        """The jobs whose output is stored, ascending."""
        try:
            with os.scandir(self.root) as entries:
                return sorted(int(e.name) for e in entries if e.name.isdigit() and e.is_dir(follow_symlinks=False))
        except FileNotFoundError:
            return []

    def remove(self, job_ids: Iterable[int]) -> None:
        """Delete these jobs' output (retention)."""
        for job_id in job_ids:
            shutil.rmtree(self.root / str(job_id), ignore_errors=True)

    def size(self, job_id: int, attempt_id: int) -> int:
        """Bytes of the attempt's output stored (0 for none)."""
        try:
            return self.path(job_id, attempt_id).stat().st_size
        except FileNotFoundError:
            return 0

    def write(self, job_id: int, attempt_id: int, offset: int, data: bytes) -> bool:
        """Store a chunk at its offset. True when this chunk is the one that reached max_bytes
        (the output is cut from here on); a chunk past it is accepted and dropped, so that the
        agent, which sends it all, moves on."""
        path = self.path(job_id, attempt_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        size = path.stat().st_size if path.exists() else 0
        limit = self.max_bytes
        cut_already = limit is not None and size > limit
        if offset > size and not cut_already:
            raise LogGap(f"offset {offset} is past the end of the output stored ({size} bytes)")
        cut = limit is not None and offset + len(data) > limit
        with open(path, "r+b" if path.exists() else "wb") as handle:
            handle.seek(offset)
            if not cut:
                handle.write(data)
                return False
            assert limit is not None
            handle.write(data[: max(0, limit - offset)])
            handle.seek(limit)
            handle.write(cut_note(limit))
            handle.truncate()
        return not cut_already

    def chunks(self, job_id: int, attempt_id: int, offset: int = 0) -> Iterator[bytes]:
        """The output stored from byte `offset` on, CHUNK bytes at a time, up to its end as it is
        then (none past its end; none for an attempt with no output stored)."""
        try:
            with open(self.path(job_id, attempt_id), "rb") as handle:
                handle.seek(offset)
                while chunk := handle.read(CHUNK):
                    yield chunk
        except FileNotFoundError:  # (only open raises it)
            return
