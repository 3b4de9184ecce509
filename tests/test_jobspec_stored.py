"""The trusted fast path from a stored spec to a Job (`job_from_stored`) builds exactly the job the
model builds (`JobRequest.stored(spec).to_job(...)`), for every kind of spec, and leaves every
spec it does not recognise to the model, which builds it or refuses it as before."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from corral import jobspec
from corral.jobspec import STORED_FIELDS, JobRequest, job_from_stored

# One request per kind of spec a user submits (as the API, the CLI or a job file takes them).
REQUESTS: list[dict[str, Any]] = [
    {"command": ["true"]},
    {"command": ["sh", "-c", "echo hi"], "name": "hello", "user": "alice", "vcpus": 2.5, "ram": "4GiB"},
    {"command": ["python", "train.py"], "gpus": 2, "scratch": "100GiB", "vcpus": 8, "ram": "64GiB"},
    {"command": ["mpirun", "a.out"], "nodes": 4, "vcpus": 16, "cpu_capped": True, "time_limit": "2:00:00"},
    {"command": ["mpirun", "a.out"], "nodes": 2, "vcpus": 4, "exclusive": True},
    {"command": ["run"], "image": "docker.io/library/python:3.12", "env": {"A": "1", "B": "two words"}},
    {"command": ["make"], "chdir": "/shared/project/run42", "max_retries": 3, "priority": 50},
    {"command": ["nextflow-task"], "separate_stderr": True},
    {"command": ["train.sh"], "time_limit": "1h", "signal": "B:SIGUSR1@120"},
    {"command": ["train.sh"], "time_limit": 600, "signal": "10"},
    {"command": ["job.sh", "in.txt"], "script": "#!/bin/bash\n#SBATCH -c 2\nsrun hostname\n", "vcpus": 2},
    {"command": ["x"], "tags": ["web", "batch"], "locality": {"near": ["12", "tag:db"], "far": ["13"]}},
    {"command": ["x"], "locality": {"near": ["tag:db"], "strict": True, "level": "rack"}},
    {"command": ["x"], "traits": {"accel": "gpu", "zone": ["a", "b"]}, "forbidden_traits": {"spot": "*"}},
    {"command": ["x"], "min_platform": "2.1", "reservation": "maint", "on_node_failure": "CANCEL"},
    {"command": ["x"], "on_node_failure": "hold", "hold": True, "not_before": "2026-11-21T14:00:00+00:00"},
    {"command": ["x"], "not_before": 1_800_000_000, "time_limit": 0},
    {"command": ["x"], "dependency": "afterok:12:13,afterany:14"},
    {"command": ["x"], "dependency": {"afterok": [12, "13_*"], "satisfy": "any"}},
    {"command": ["x"], "dependency": "afternotok:7_3"},
    {"command": ["x"], "array": "0-99%10"},
    {"command": ["x"], "array": "1,3,5-7", "dependency": "afterany:9"},
    {"command": ["x"], "array": "0-99:4", "time_limit": "5m", "ram": 512},
]


def stored(request: dict[str, Any]) -> dict[str, Any]:
    """The spec as the store keeps and reads it back (JSON)."""
    return json.loads(json.dumps(JobRequest.model_validate(request).model_dump(mode="json")))


def both_ways(spec: Any, job_id: int, array_job_id: int | None = None, array_task_id: int | None = None) -> None:
    expected = JobRequest.stored(spec).to_job(job_id, 1_700_000_000.5, array_job_id, array_task_id)
    built = job_from_stored(spec, job_id, 1_700_000_000.5, array_job_id, array_task_id)
    assert built == expected
    assert type(built.resources.vcpus) is type(expected.resources.vcpus)
    assert built.command is not spec["command"] and built.env is not spec["env"]  # copies, as the model makes


@pytest.mark.parametrize("request_fields", REQUESTS, ids=range(len(REQUESTS)))
def test_a_stored_spec_builds_the_same_job_both_ways(request_fields: dict[str, Any]) -> None:
    spec = stored(request_fields)
    assert jobspec._fast_job(spec, 5, 1.0, None, None) is not None  # the fast path took it
    both_ways(spec, 5)
    if spec["array"]:
        for task_id in (0, 3, 7):
            both_ways(spec, 100 + task_id, 100, task_id)


def test_a_spec_stored_before_scripts_is_built_on_the_fast_path_as_no_script() -> None:
    """Every job queued when a store is upgraded has a spec without `script`: built fast, as before
    (through the model, a restart's first snapshot of a long queue took seconds more)."""
    # (Stored before `signal` too, which came later.)
    spec = {
        key: value
        for key, value in stored({"command": ["x"], "array": "0-3"}).items()
        if key not in ("script", "signal")
    }
    job = jobspec._fast_job(spec, 5, 1.0, 5, 2)
    assert job is not None and not job.batch_script
    both_ways(spec, 5, 5, 2)


def test_a_spec_stored_before_exclusive_is_built_on_the_fast_path_as_not_exclusive() -> None:
    """Every job queued when a store is upgraded has a spec without `exclusive` (with or without
    `script`): built fast, as a job that shares its nodes; a stored exclusive one keeps it."""
    whole = stored({"command": ["x"], "exclusive": True})
    assert jobspec._fast_job(whole, 5, 1.0, None, None) == JobRequest.stored(whole).to_job(5, 1.0)
    assert job_from_stored(whole, 5, 1.0).exclusive
    # (The stores upgraded lack signal too: both came in one release.)
    for left_out in (
        {"exclusive"},
        {"exclusive", "script"},
        {"exclusive", "signal"},
        {"exclusive", "signal", "script"},
    ):
        spec = {key: value for key, value in stored({"command": ["x"]}).items() if key not in left_out}
        job = jobspec._fast_job(spec, 5, 1.0, None, None)
        assert job is not None and not job.exclusive
        both_ways(spec, 5)


def test_a_spec_stored_before_signals_is_built_on_the_fast_path_as_no_signal() -> None:
    """As for `script`: every job queued at the upgrade that brought `signal` has a spec without it."""
    for before in (("signal",), ("signal", "script")):
        spec = {key: value for key, value in stored({"command": ["x"], "time_limit": 60}).items() if key not in before}
        job = jobspec._fast_job(spec, 5, 1.0, None, None)
        assert job is not None and job.signal is None
        both_ways(spec, 5)


def test_every_field_is_known_to_the_fast_path() -> None:
    # A field added to the model: read it in _fast_job and name it in STORED_FIELDS, or the jobs the
    # fast path builds lose it (separate_stderr, added beside the fast path, was dropped so).
    assert stored({"command": ["true"]}).keys() == STORED_FIELDS == set(JobRequest.model_fields)


@pytest.mark.parametrize(
    "change",
    [
        {"vcpus": 2},  # a whole number where the model stores a float
        {"ram": "4GiB"},  # a size as text (an older store)
        {"time_limit": 0.0},
        {"time_limit": "1h"},
        {"not_before": 1_800_000_000},
        {"on_node_failure": "CANCEL"},
        {"dependency": "afterok:13:12"},  # not in canonical order
        {"array": " 0-3 "},
        {"command": ["with\0nul"]},  # stored before NUL bytes were refused
        {"tags": [""]},
        {"locality": {"near": ["not-a-job"]}},  # stored before entries were checked
        {"traits": {"k": ["a", "b"]}},
        {"cpu_capped": 1},
        {"exclusive": 1},
        {"script": "no interpreter line, stored by a server that did not check"},
        {"signal": "usr1"},  # not in canonical form
    ],
)
def test_an_unusual_spec_builds_the_same_job(change: dict[str, Any]) -> None:
    spec = {**stored({"command": ["x"], "array": "0-9"}), **change}
    both_ways(spec, 5, 5, 2)
    older = {key: value for key, value in spec.items() if key not in ("hold", "array")}  # fields added later
    both_ways(older, 5)


@pytest.mark.parametrize(
    "change",
    [{"command": []}, {"ram": 0}, {"vcpus": -1.0}, {"image": "-v"}, {"chdir": "relative"}, {"dependency": "oops:1"}]
    + [{"script": 7}, {"signal": "R:USR1"}, {"signal": 10}],
)
def test_a_spec_the_model_refuses_is_refused_the_same(change: dict[str, Any]) -> None:
    spec = {**stored({"command": ["x"]}), **change}
    with pytest.raises(ValidationError) as by_model:
        JobRequest.stored(spec)
    with pytest.raises(ValidationError) as fast:
        job_from_stored(spec, 5, 1.0)
    assert fast.value.errors(include_context=False) == by_model.value.errors(include_context=False)
