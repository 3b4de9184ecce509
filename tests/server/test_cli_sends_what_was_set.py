"""`corral` sends a server only what the user set: a server from before a field existed refuses it
as unknown (its models forbid extras), so a CLI that sent every field at its default failed every
`corral submit` to an older server once a field was added (chdir, then separate_stderr), the user
having used none of it. What the server receives is read through a real TCP proxy between the real
`corral` command and a served app; the jobs it stores are those it stored when every field was
sent."""

from __future__ import annotations

import getpass
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from corral.jobspec import JobRequest
from corral.store import Store
from tests.server.cli import corral
from tests.support import http_proxy, served_app


@contextmanager
def recording_proxy(backend: str) -> Iterator[tuple[str, list[Any]]]:
    """A proxy to `backend` that keeps the JSON body of each request it forwards: its address, and
    the bodies, in order."""
    bodies: list[Any] = []

    def answer(asked: bytes, forward: Callable[[bytes], bytes]) -> bytes:
        body = asked.partition(b"\r\n\r\n")[2]
        if body:
            bodies.append(json.loads(body))
        return forward(asked)

    with http_proxy(backend, answer) as address:
        yield address, bodies


def test_a_submission_sends_only_what_differs_from_the_defaults(tmp_path: Path) -> None:
    # A job file as an older CLI's `model_dump` wrote one: every field, each at its default.
    spelled_out = JobRequest(command=["true"]).model_dump(mode="json")
    job_file = tmp_path / "jobs.jsonl"
    job_file.write_text(json.dumps(spelled_out) + "\n" + json.dumps({"command": ["b"], "gpus": 1}) + "\n")
    with served_app(tmp_path) as (url, _), recording_proxy(url) as (proxied, bodies):
        corral(proxied, "submit", "--", "true")
        corral(proxied, "submit", "--vcpus", "1", "--ram", "1024MiB", "--priority", "1", "--", "true")
        corral(proxied, "submit", "--separate-stderr", "--near", "tag:web", "--", "true")
        corral(proxied, "submit", "-f", str(job_file))
        corral(proxied, "submit", "--exclusive", "--", "true")
        corral(proxied, "cancel", "--user", "nobody")
    submitted = [body["jobs"] for body in bodies[:5]]
    assert submitted == [
        [{"command": ["true"]}],
        [{"command": ["true"]}],  # (the defaults, given as options)
        [{"command": ["true"], "separate_stderr": True, "locality": {"near": ["tag:web"]}}],
        [{"command": ["true"]}, {"command": ["b"], "gpus": 1}],
        [{"command": ["true"], "exclusive": True}],  # (a job not exclusive sends no `exclusive`)
    ]
    assert all(len(body["key"]) >= 16 for body in bodies[:5])
    assert bodies[5] == {"user": "nobody"}  # (no tag or array filter, which servers before them refused)


def stored_specs(store: Store) -> list[dict[str, Any]]:
    return [row["spec"] for row in store.list_job_rows()]


def as_stored(fields: dict[str, Any]) -> dict[str, Any]:
    """A job's spec as the server stored it when the CLI sent every field: the request, whole,
    under the operator's token owned by the submitting login."""
    return JobRequest.model_validate({"user": getpass.getuser(), **fields}).model_dump(mode="json")


def test_every_kind_of_submission_stores_the_same_jobs_as_when_every_field_was_sent(tmp_path: Path) -> None:
    everything = [
        *("--name", "all", "--image", "docker.io/library/python:3.12", "--chdir", "/srv/run", "--separate-stderr"),
        *("-e", "A=1", "--vcpus", "2", "--ram", "2GiB", "--scratch", "1GiB", "--gpus", "1", "--nodes", "2"),
        *("--not-before", "2030-01-01T00:00:00+00:00", "--time-limit", "2h", "--max-retries", "3", "--tag", "t"),
        *("--near", "tag:t", "--far", "1", "--strict-locality", "--locality-level", "rack", "--trait", "zone=a"),
        *("--forbid", "capacity=spot", "--min-platform", "2", "--cpu-capped", "--on-node-failure", "hold"),
        *("--hold", "--dependency", "afterok:1", "--user", "ann", "--exclusive"),
    ]
    job_file = tmp_path / "jobs.yaml"
    job_file.write_text(
        "- {command: [a], locality: {near: ['tag:x'], strict: false, level: server}, chdir: null}\n"
        "- {command: [b], dependency: 'afterok:@0', separate_stderr: false, array: '0-1'}\n"
    )
    with served_app(tmp_path) as (url, store):
        corral(url, "submit", "--", "true")
        corral(url, "submit", *everything, "--", "sh", "-c", "echo $A")
        corral(url, "submit", "--array", "0-2%2", "--", "true")
        corral(url, "submit", "-f", str(job_file))
        specs = stored_specs(store)
    array = as_stored({"command": ["true"], "array": "0-2%2"})
    from_file = [
        as_stored({"command": ["a"], "locality": {"near": ["tag:x"]}}),
        as_stored({"command": ["b"], "dependency": "afterok:6", "array": "0-1"}),  # @0: the file's first job, 6
    ]
    assert specs == [
        as_stored({"command": ["true"]}),
        as_stored(
            {
                "command": ["sh", "-c", "echo $A"],
                **{"name": "all", "image": "docker.io/library/python:3.12", "chdir": "/srv/run"},
                **{"separate_stderr": True, "env": {"A": "1"}, "vcpus": 2.0, "ram": 2048, "scratch": 1024},
                **{"gpus": 1, "nodes": 2, "not_before": 1893456000.0, "time_limit": 7200.0, "max_retries": 3},
                **{"tags": ["t"], "locality": {"near": ["tag:t"], "far": ["1"], "strict": True, "level": "rack"}},
                **{"traits": {"zone": "a"}, "forbidden_traits": {"capacity": "spot"}, "min_platform": "2"},
                **{"cpu_capped": True, "on_node_failure": "hold", "hold": True, "dependency": "afterok:1"},
                "user": "ann",
                "exclusive": True,
            }
        ),
        array,
        array,
        array,
        from_file[0],
        from_file[1],
        from_file[1],
    ]
