"""The log store (corral.server.logstore) on its own: an attempt's output, and the stderr of a job
that keeps it apart (separate_stderr), each kept, bounded and removed as the other."""

from __future__ import annotations

from pathlib import Path

from corral.server.logstore import LogStore, cut_note


def test_the_stderr_is_a_stream_of_its_own_beside_the_output(tmp_path: Path) -> None:
    logs = LogStore(tmp_path)
    logs.write(4, 9, 0, b"out\n")
    logs.write(4, 9, 0, b"err\n", "stderr")
    logs.write(4, 9, 4, b"err2\n", "stderr")
    assert logs.path(4, 9).name == "9.log" and logs.path(4, 9, "stderr").name == "9.err"
    assert b"".join(logs.chunks(4, 9)) == b"out\n"
    assert b"".join(logs.chunks(4, 9, 0, "stderr")) == b"err\nerr2\n"
    assert b"".join(logs.chunks(4, 9, 4, "stderr")) == b"err2\n"
    assert (logs.size(4, 9), logs.size(4, 9, "stderr")) == (4, 9)
    assert logs.size(4, 8, "stderr") == 0 and list(logs.chunks(4, 8, 0, "stderr")) == []


def test_each_stream_is_cut_at_max_bytes_on_its_own_with_the_same_note(tmp_path: Path) -> None:
    logs = LogStore(tmp_path, max_bytes=10)
    assert logs.write(1, 1, 0, b"e" * 8, "stderr") is False
    assert logs.write(1, 1, 8, b"e" * 8, "stderr") is True  # this one reached the limit
    assert logs.write(1, 1, 16, b"e" * 8, "stderr") is False  # past it: taken and dropped
    assert logs.write(1, 1, 0, b"o" * 6) is False  # the output has its own 10 bytes
    assert logs.path(1, 1, "stderr").read_bytes() == b"e" * 10 + cut_note(10)
    assert logs.path(1, 1).read_bytes() == b"o" * 6


def test_retention_removes_both_streams_of_a_job(tmp_path: Path) -> None:
    logs = LogStore(tmp_path)
    logs.write(1, 1, 0, b"out")
    logs.write(1, 1, 0, b"err", "stderr")
    logs.write(2, 2, 0, b"other")
    assert logs.job_ids() == [1, 2]
    logs.remove([1])
    assert logs.job_ids() == [2]
    assert not logs.path(1, 1).exists() and not logs.path(1, 1, "stderr").exists()
