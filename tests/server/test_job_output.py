"""A job's output read through the API (`corral logs`), at corral's server app over real HTTP: a
large output is sent as it is read from its file, not held whole in the server's memory first."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from corral.config import Config
from corral.core.model import GiB, InstanceType, Resources
from corral.jobspec import JobRequest
from corral.store import Store
from tests.server.cli import corral
from tests.support import served_app

TOKEN = {"Authorization": "Bearer t"}
MiB = 1024 * 1024
SIZE = 64 * MiB


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Store]]:
    with served_app(tmp_path) as served:
        yield served


def test_a_large_output_is_sent_without_being_held_in_memory(served: tuple[str, Store], tmp_path: Path) -> None:
    """It was read whole (with --all, every attempt's, joined into one more copy): a job that had
    printed some gigabytes, asked for by `corral logs`, took that much of the server's memory, or
    all of it."""
    url, store = served
    store.create_node("n-1", InstanceType("small", 2, 4 * GiB, 0.10), "boot", 1000.0, "test")
    [job_id] = store.submit([JobRequest(command=["true"])], 1000.0)
    attempt_id = store.claim(job_id, "d-test", ["n-1"], Resources(1, GiB), 1000.0)
    output = tmp_path / "logs" / str(job_id) / f"{attempt_id}.log"
    output.parent.mkdir(parents=True)
    with output.open("wb") as file:
        for i in range(SIZE // MiB):
            file.write(bytes([ord("a") + i % 26]) * MiB)
    tracemalloc.start()  # the server runs in this process (a thread): its allocations are traced
    try:
        for params in ({}, {"all_attempts": "true"}, {"offset": str(SIZE - MiB - 1)}):
            received, last = 0, b""
            tracemalloc.reset_peak()
            with httpx.stream("GET", f"{url}/api/jobs/{job_id}/logs", params=params, headers=TOKEN) as answer:
                assert answer.status_code == 200
                for chunk in answer.iter_raw():
                    received += len(chunk)
                    last = (last + chunk)[-2:]
            peak = tracemalloc.get_traced_memory()[1]
            header = len(f"==> attempt {attempt_id} on n-1 (assigned) <==\n") if params.get("all_attempts") else 0
            assert received == header + (MiB + 1 if "offset" in params else SIZE), params
            assert last == b"ll", params  # the last MiB is 'l's: sent to the end
            assert peak < SIZE // 4, f"{params}: {peak / MiB:.0f} MiB held"
    finally:
        tracemalloc.stop()


def test_an_attempt_the_job_does_not_have_is_refused_with_the_attempts_it_has(served: tuple[str, Store]) -> None:
    """Attempt ids count over the whole store: `corral logs 7 --attempt 1`, the natural guess for a
    job's first attempt, answered "job 7 has no attempt 1" and no more."""
    url, store = served
    store.create_node("n-1", InstanceType("small", 2, 4 * GiB, 0.10), "boot", 1000.0, "test")
    first, job_id = store.submit([JobRequest(command=["true"]), JobRequest(command=["true"])], 1000.0)
    store.claim(first, "d-test", ["n-1"], Resources(1, GiB), 1000.0)
    attempt_id = store.claim(job_id, "d-test", ["n-1"], Resources(1, GiB), 1000.0)
    for follow in ([], ["--follow"]):
        refused = corral(url, "logs", str(job_id), "--attempt", "1", *follow, check=False)
        assert refused.returncode == 1
        assert refused.stderr == (
            f"error: job {job_id} has no attempt 1 (its attempts: {attempt_id}; as corral job {job_id} lists them)\n"
        ), follow


def test_a_jobs_stderr_kept_apart_is_stored_and_read_as_a_stream_of_its_own(tmp_path: Path) -> None:
    """Both went to one output: a workflow engine (Nextflow's .command.err, CWL's `stderr:`) could
    not read a job's stderr apart. A job with separate_stderr has its agent send it as the stream
    "stderr", kept and bounded by server.max_output on its own; `corral logs --stderr` and
    `?stream=stderr` read it. A job without it says so, where an empty answer would read as "it
    wrote nothing to stderr"."""
    config = Config.model_validate({"server": {"max_output": "1MiB"}})
    with served_app(tmp_path, config) as (url, store):
        store.create_node("n-1", InstanceType("small", 2, 4 * GiB, 0.10), "boot", 1000.0, "test")
        secret = store.pair_node("n-1", "boot", Resources(2, 4 * GiB), "host-1", 1000.0)
        apart, mixed = store.submit(
            [JobRequest(command=["true"], separate_stderr=True), JobRequest(command=["true"])], 1000.0
        )
        attempt_id = store.claim(apart, "d-test", ["n-1"], Resources(1, GiB), 1000.0)
        store.claim(mixed, "d-test", ["n-1"], Resources(1, GiB), 1000.0)
        node = {"Authorization": f"Bearer {secret}"}
        log = f"{url}/api/agent/attempts/{attempt_id}/log"
        assert httpx.post(log, params={"offset": 0}, content=b"out\n", headers=node).status_code == 200
        assert (
            httpx.post(log, params={"offset": 0, "stream": "stderr"}, content=b"err\n", headers=node).status_code == 200
        )
        refused = httpx.post(log, params={"offset": 0, "stream": "bogus"}, content=b"x", headers=node)
        assert refused.status_code == 422 and "stream" in refused.text

        logs = f"{url}/api/jobs/{apart}/logs"
        assert httpx.get(logs, headers=TOKEN).content == b"out\n"
        assert httpx.get(logs, params={"stream": "stderr"}, headers=TOKEN).content == b"err\n"
        assert httpx.get(logs, params={"stream": "stderr", "offset": 1}, headers=TOKEN).content == b"rr\n"
        assert corral(url, "logs", str(apart), "--stderr").stdout == "err\n"
        assert corral(url, "logs", str(apart)).stdout == "out\n"
        assert "stderr     kept apart (corral logs --stderr)" in corral(url, "job", str(apart)).stdout
        assert corral(url, "job", str(apart), "--json", check=False).stdout.count('"separate_stderr": true') == 1

        # Bounded on its own: the stderr is cut at the limit, the output is not touched.
        chunk = b"e" * (256 * 1024)
        for offset in range(len(b"err\n"), 2 * MiB, len(chunk)):
            answer = httpx.post(log, params={"offset": offset, "stream": "stderr"}, content=chunk, headers=node)
            assert answer.status_code == 200
        stderr = httpx.get(logs, params={"stream": "stderr"}, headers=TOKEN).content
        note = f"\n[corral: this attempt's output was cut here, at {MiB:,} bytes (server.max_output);"
        assert len(stderr) > MiB and stderr[MiB:].decode().startswith(note)
        assert httpx.get(logs, headers=TOKEN).content == b"out\n"

        said = (
            f"job {mixed} keeps its stderr in its output (read that); a job submitted with separate_stderr"
            " (corral submit --separate-stderr) keeps it apart"
        )
        answer = httpx.get(f"{url}/api/jobs/{mixed}/logs", params={"stream": "stderr"}, headers=TOKEN)
        assert answer.status_code == 409 and answer.json()["detail"] == said
        for follow in ([], ["--follow"]):
            refused_cli = corral(url, "logs", str(mixed), "--stderr", *follow, check=False)
            assert refused_cli.returncode == 1 and refused_cli.stderr == f"error: {said}\n", follow
