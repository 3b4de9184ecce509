"""Job output, one file per attempt under CORRAL_HOME/logs/<job id>/<attempt id>.log, and for a job
that asked for its stderr apart (separate_stderr, Slurm's --error) its stderr in <attempt id>.err.

Chunks arrive with their byte offset, so a chunk the agent sends twice lands in the same place."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Literal

# An attempt's streams: its output (stdout, and stderr too unless the job asked for it apart) and
# its stderr apart. Each is kept, and bounded by max_bytes, on its own.
Stream = Literal["output", "stderr"]
STREAMS: tuple[Stream, ...] = ("output", "stderr")
SUFFIXES: dict[Stream, str] = {"output": ".log", "stderr": ".err"}

CHUNK = 1024 * 1024  # bytes of output read at a time to be sent


def cut_note(limit: int) -> bytes:
    """The line that ends an output cut at `limit` bytes (a stderr kept apart too: the stream it
    ends says which)."""
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

    def path(self, job_id: int, attempt_id: int, stream: Stream = "output") -> Path:
        return self.root / str(job_id) / f"{attempt_id}{SUFFIXES[stream]}"

    def job_ids(self) -> list[int]:
        """The jobs whose output is stored, ascending."""
        try:
            with os.scandir(self.root) as entries:
                return sorted(int(e.name) for e in entries if e.name.isdigit() and e.is_dir(follow_symlinks=False))
        except FileNotFoundError:
            return []

    def remove(self, job_ids: Iterable[int]) -> None:
        """Delete these jobs' output, both streams (retention)."""
        for job_id in job_ids:
            shutil.rmtree(self.root / str(job_id), ignore_errors=True)

    def size(self, job_id: int, attempt_id: int, stream: Stream = "output") -> int:
        """Bytes of the attempt's output (or stderr) stored (0 for none)."""
        try:
            return self.path(job_id, attempt_id, stream).stat().st_size
        except FileNotFoundError:
            return 0

    def write(self, job_id: int, attempt_id: int, offset: int, data: bytes, stream: Stream = "output") -> bool:
        """Store a chunk of a stream at its offset. True when this chunk is the one that reached
        max_bytes (the stream is cut from here on); a chunk past it is accepted and dropped, so that
        the agent, which sends it all, moves on."""
        path = self.path(job_id, attempt_id, stream)
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

    def chunks(self, job_id: int, attempt_id: int, offset: int = 0, stream: Stream = "output") -> Iterator[bytes]:
        """The stream stored from byte `offset` on, CHUNK bytes at a time, up to its end as it is
        then (none past its end; none for an attempt with none stored)."""
        try:
            with open(self.path(job_id, attempt_id, stream), "rb") as handle:
                handle.seek(offset)
                while chunk := handle.read(CHUNK):
                    yield chunk
        except FileNotFoundError:  # (only open raises it)
            return
