"""The job request's own parsing (jobspec)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic import ValidationError

from corral.jobspec import MAX_NAME, MAX_SCRIPT, MAX_TAG, MAX_USER, JobRequest, describe_validation_errors, to_epoch
from corral.store import schema


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0001-01-01T00:00:00+00:00", -62135596800.0),
        ("0001-01-01T00:00:00+05:00", -62135596800.0 - 5 * 3600),
        ("9999-12-31T23:59:59-14:00", 253402300799.0 + 14 * 3600),
        ("1969-12-31T23:00:00+00:00", -3600.0),
    ],
)
def test_any_iso_time_is_epoch_seconds(text: str, seconds: float) -> None:
    assert to_epoch(text) == seconds


@pytest.mark.parametrize("text", ["0001-01-01", "0001-01-01T00:00:00", "9999-12-31T23:59:59"])
def test_a_local_time_at_the_ends_of_the_calendar_is_read(text: str) -> None:
    """A naive time is local; year 1 (and year 9999 east of Greenwich) is out of the C library's
    reach, and was 'not a time'."""
    seconds = to_epoch(text)
    assert math.isfinite(seconds) and (seconds < -6.2e10 if text.startswith("0001") else seconds > 2.5e11)
    assert JobRequest(command=["x"], not_before=text).not_before == seconds


def test_what_is_no_time_is_still_refused() -> None:
    for text in ("tomorrow", "2026-13-01", "0000-01-01"):
        with pytest.raises(ValueError, match=f"not a time: '{text}'"):
            to_epoch(text)


@pytest.mark.parametrize(("given", "limit"), [(0, None), ("0s", None), ("0", None), ("90s", 90.0), (None, None)])
def test_a_time_limit_of_zero_is_no_limit_as_in_slurm(given: object, limit: float | None) -> None:
    # Read as a limit, 0 would end the job as soon as it started (TIMEOUT).
    assert JobRequest(command=["true"], time_limit=given).time_limit == limit
    assert JobRequest(command=["true"], time_limit=given).to_job(1, 0.0).time_limit == limit


@pytest.mark.parametrize("entry", ["web", "tag:", "12a", "-3", " 7", "\u0663", ""])
def test_a_locality_entry_that_names_no_job_and_no_tag_is_refused_by_field_and_value(entry: str) -> None:
    with pytest.raises(ValidationError) as refused:
        JobRequest.model_validate({"command": ["x"], "locality": {"near": ["7"], "far": ["tag:web", entry]}})
    (error,) = refused.value.errors()
    assert error["loc"] == ("locality", "far", 1)
    assert error["msg"] == f"Value error, not a job id or tag:NAME: {entry!r}"


def test_a_stored_spec_with_such_an_entry_is_still_read() -> None:
    """Jobs stored before submission refused them must load (corral.store reads every spec back)."""
    spec = {"command": ["x"], "locality": {"near": ["web"], "far": ["tag:", "12"]}}
    hints = JobRequest.stored(spec).to_job(1, 0.0).locality
    assert hints is not None and (hints.near, hints.far) == (("web",), ("tag:", "12"))
    assert JobRequest.stored({"command": ["x"], "locality": {"near": ["007", "tag:db"]}}).locality is not None


def test_an_empty_tag_is_refused_by_field_but_a_stored_one_is_still_read() -> None:
    with pytest.raises(ValidationError) as refused:
        JobRequest.model_validate({"command": ["x"], "tags": ["web", " "]})
    (error,) = refused.value.errors()
    assert error["loc"] == ("tags",) and error["msg"] == "Value error, a tag must have a name, not ' '"
    assert JobRequest.stored({"command": ["x"], "tags": [""]}).tags == [""]


def test_a_name_longer_than_the_store_keeps_is_refused_but_a_stored_one_is_still_read() -> None:
    """jobs.name holds MAX_NAME characters: PostgreSQL refuses more (SQLite kept a longer one)."""
    with pytest.raises(ValidationError) as refused:
        JobRequest.model_validate({"command": ["x"], "name": "n" * (MAX_NAME + 1)})
    (error,) = refused.value.errors()
    assert error["loc"] == ("name",)
    assert error["msg"] == f"Value error, a name has at most {MAX_NAME} characters, not {MAX_NAME + 1}"
    assert JobRequest.stored({"command": ["x"], "name": "n" * 300}).name == "n" * 300
    assert getattr(schema.jobs.c.name.type, "length", None) == MAX_NAME


def test_a_user_longer_than_the_store_keeps_is_refused_but_a_stored_one_is_still_read() -> None:
    """jobs.user_name holds MAX_USER characters, a user's name (corral users add) at most."""
    with pytest.raises(ValidationError) as refused:
        JobRequest.model_validate({"command": ["x"], "user": "u" * (MAX_USER + 1)})
    (error,) = refused.value.errors()
    assert error["loc"] == ("user",)
    assert error["msg"] == f"Value error, a user has at most {MAX_USER} characters, not {MAX_USER + 1}"
    assert JobRequest.stored({"command": ["x"], "user": "u" * 300}).user == "u" * 300
    assert getattr(schema.jobs.c.user_name.type, "length", None) == MAX_USER


@pytest.mark.parametrize(
    ("traits", "says"),
    [
        ({"accel": []}, "accel: no value, not [] (give one, or '*' for any value)"),
        ({"accel": ""}, "accel: no value, not '' (give one, or '*' for any value)"),
        ({"zone": ["a", " "]}, "zone: no value, not ['a', ' '] (give one, or '*' for any value)"),
        ({"": "x"}, "a trait must have a name, not ''"),
    ],
)
def test_a_trait_without_a_name_or_value_is_refused_by_field(traits: dict[str, object], says: str) -> None:
    """Before, such a job was queued and could never be placed ("needs accel= (0 of 3 instance
    types have it)"); as a forbidden trait it forbade nothing."""
    for field in ("traits", "forbidden_traits"):
        with pytest.raises(ValidationError) as refused:
            JobRequest.model_validate({"command": ["x"], field: traits})
        (error,) = refused.value.errors()
        assert error["loc"] == (field,) and error["msg"] == f"Value error, {says}"
        assert getattr(JobRequest.stored({"command": ["x"], field: traits}), field) == traits


def test_an_array_is_stored_in_canonical_form_and_a_task_is_a_job_with_its_place() -> None:
    request = JobRequest(command=["x"], array=" 5-7, 1 %2")
    assert request.array == "1,5-7%2"
    task = request.to_job(12, 0.0, array_job_id=10, array_task_id=5)
    assert (str(task.array), task.array_throttle) == ("10_5", 2)
    assert task.array is not None
    assert (task.array.count, task.array.first, task.array.last) == (4, 1, 7)
    assert JobRequest(command=["x"], array="").array is None


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("0-5000", "'0-5000': task id 5000 is more than 1000"),
        ("3-1%2", "'3-1': the range runs backwards"),
        ("0-9%0", "the throttle %0 must be 1 to"),
        (7, "an array is Slurm's --array text"),
    ],
)
def test_a_bad_array_is_refused_by_field_and_value(given: object, says: str) -> None:
    with pytest.raises(ValidationError) as refused:
        JobRequest.model_validate({"command": ["x"], "array": given})
    (error,) = refused.value.errors()
    assert error["loc"] == ("array",)
    assert says in error["msg"]


NAMED = "an environment variable's name has no '=' or NUL byte and is not empty:"


@pytest.mark.parametrize(
    ("given", "loc", "says"),
    [
        (
            {"env": {"A=B": "x"}},
            ("env",),
            "an environment variable's name has no '=' or NUL byte and is not empty: 'A=B'",
        ),
        ({"env": {"": "x"}}, ("env",), "an environment variable's name has no '=' or NUL byte and is not empty: ''"),
        ({"env": {"A": "x\x00"}}, ("env",), "A: a value has no NUL byte"),
        ({"command": ["echo", "a\x00b"]}, ("command",), "argument 1 has a NUL byte: 'a\\x00b'"),
        ({"image": "alpine\x00"}, ("image",), "not an image name: 'alpine\\x00' (e.g. docker.io/library/python:3.12)"),
    ],
)
def test_what_no_process_can_be_given_is_refused_by_field(given: dict[str, object], loc: tuple[str], says: str) -> None:
    """No exec takes them: such a job was queued, and each node it was placed on lost its agent."""
    with pytest.raises(ValidationError) as refused:
        JobRequest.model_validate({"command": ["x"], **given})
    (error,) = refused.value.errors()
    assert error["loc"] == loc and error["msg"] == f"Value error, {says}"
    if loc != ("image",):  # a job stored before they were refused still loads (its attempt fails on the node)
        assert getattr(JobRequest.stored({"command": ["x"], **given}), loc[0]) == given[loc[0]]


@pytest.mark.parametrize(
    ("given", "field"),
    [
        ({"name": "a\x00b"}, "name"),
        ({"tags": ["ok", "x\x00"]}, "tags"),
        ({"reservation": "r\x00"}, "reservation"),
        ({"traits": {"rack": ["a", "b\x00"]}}, "traits"),
    ],
)
def test_a_nul_byte_in_a_jobs_name_or_other_text_is_refused_naming_the_field(
    given: dict[str, object], field: str
) -> None:
    """PostgreSQL stores no NUL: such a submission was an Internal Server Error there; on SQLite it
    was stored, and an event naming the job could never reach a [[notify]] command (no environment
    variable holds a NUL)."""
    with pytest.raises(ValidationError) as refused:
        JobRequest.model_validate({"command": ["x"], **given})
    (error,) = refused.value.errors()
    assert error["msg"] == f"Value error, {field}: a NUL byte, which no name or value here may hold"
    assert JobRequest.stored({"command": ["x"], **given}).model_dump(include=set(given)) == given


def test_a_variable_ending_in_a_star_is_refused_in_a_job_with_an_image() -> None:
    """The agent runs `podman run --env NAME ...`, and podman's `--env 'A*'` copies every variable of
    the agent's starting with A into the container: `*` alone, all of them."""
    with pytest.raises(ValidationError) as refused:
        JobRequest.model_validate({"command": ["env"], "image": "alpine", "env": {"OK": "1", "*": ""}})
    (error,) = refused.value.errors()
    assert (
        error["msg"]
        == "Value error, env: '*': podman reads a name ending in * as a wildcard; not in a job with an image"
    )
    assert JobRequest.model_validate({"command": ["env"], "env": {"*": ""}}).env == {"*": ""}  # (no engine reads it)


def test_a_command_given_as_one_string_is_refused_saying_how_to_write_it() -> None:
    """`"command": "echo hi"` in a job file was refused with pydantic's "Input should be a valid
    list", which said neither what list nor that no shell would split it."""
    with pytest.raises(ValidationError) as refused:
        JobRequest.model_validate({"command": "echo $HOME"})
    (error,) = refused.value.errors()
    assert error["loc"] == ("command",)
    assert error["msg"] == (
        'Value error, an argument list, not a string: run it through a shell with ["sh", "-c", "echo $HOME"],'
        " or give its words"
    )


def test_the_mapping_form_of_a_dependency_names_array_tasks_as_the_text_does() -> None:
    def stored(dependency: object) -> str | None:
        return JobRequest.model_validate({"command": ["x"], "dependency": dependency}).dependency

    # In YAML `afterok: ["12_3", "12_*", 5]`: the text Slurm users write, in the structured form.
    assert stored({"afterok": ["12_3", "12_*", 5], "afterany": "7"}) == stored("afterok:12_3:12_*:5,afterany:7")
    assert stored({"afternotok": ["12_3", 13], "satisfy": "any"}) == stored("afternotok:12_3?afternotok:13")
    assert stored({"afterok": []}) is None
    # A job of the same submission by its place, as in the text.
    assert stored({"afterok": ["@0", 12, "@1_3"], "afternotok": "@1_*"}) == "afterok:12:@0:@1_3,afternotok:@1_*"
    for bad in ("5,afterany:6", "12_x", True, 1.5, "5:6", "@0:@1", "@"):
        with pytest.raises(ValidationError, match="job ids are whole numbers or an array's tasks"):
            stored({"afterok": [bad]})


def test_a_tag_longer_than_the_store_keeps_is_refused_but_a_stored_one_is_still_read() -> None:
    """job_tags.tag holds MAX_TAG characters, indexed (PostgreSQL refuses a btree entry of more
    than about 2,700 bytes)."""
    with pytest.raises(ValidationError) as refused:
        JobRequest.model_validate({"command": ["x"], "tags": ["web", "t" * (MAX_TAG + 1)]})
    (error,) = refused.value.errors()
    assert error["loc"] == ("tags",)
    assert error["msg"] == f"Value error, a tag has at most {MAX_TAG} characters, not {MAX_TAG + 1}"
    assert JobRequest.stored({"command": ["x"], "tags": ["t" * 300]}).tags == ["t" * 300]
    assert getattr(schema.job_tags.c.tag.type, "length", None) == MAX_TAG


def test_separate_stderr_is_off_unless_asked_and_reaches_the_job() -> None:
    """A job's stderr kept apart (Slurm's --error): off by default, so a job stored before the field
    (its spec has none) and any other job keep one output, as before."""
    assert JobRequest(command=["true"]).separate_stderr is False
    assert JobRequest.stored({"command": ["true"]}).to_job(1, 0.0).separate_stderr is False
    asked = JobRequest.model_validate({"command": ["true"], "separate_stderr": True})
    assert asked.to_job(1, 0.0).separate_stderr is True
    assert JobRequest.stored(asked.model_dump(mode="json")).separate_stderr is True


def test_separate_stderr_must_be_a_boolean_named_in_the_error() -> None:
    with pytest.raises(ValidationError) as refused:
        JobRequest.model_validate({"command": ["true"], "separate_stderr": "sometimes"})
    assert describe_validation_errors(refused.value.errors()) == [
        "separate_stderr: Input should be a valid boolean, unable to interpret input"
    ]


@pytest.mark.parametrize(
    "fields",
    [
        {"command": ["true"]},
        {"command": ["true"], "vcpus": 1, "ram": "1GiB", "time_limit": 0, "locality": {"level": "server"}},
        {"command": ["a"], "vcpus": 0.5, "ram": "3GiB", "env": {"A": ""}, "tags": ["t"], "priority": 0},
        {"command": ["a"], "locality": {"near": ["1"], "strict": True}, "traits": {"k": ["a", "b"]}},
        {"command": ["a"], "separate_stderr": True, "chdir": "/srv", "hold": True, "dependency": {"afterok": [1]}},
        {"command": ["a"], "array": "0-3%2", "on_node_failure": "hold", "not_before": "2030-01-01T00:00:00+00:00"},
    ],
)
def test_a_request_without_its_defaults_is_read_back_as_the_same_request(fields: dict[str, object]) -> None:
    """What `corral submit` sends: only what differs from the defaults, which a server (of this
    version) reads as the request whole; nothing at a default, for a server from before it existed."""
    request = JobRequest.model_validate(fields)
    sent = request.without_defaults()
    assert JobRequest.model_validate(sent) == request
    assert sent == request.model_dump(mode="json", exclude_defaults=True)


def test_a_batch_script_is_checked_as_sbatch_checks_one_and_bounded_apart_from_the_other_text() -> None:
    text = "#!/bin/sh\n" + "# notes\n" * 20_000  # 160 KiB: past the 64 KiB of a job's other text
    request = JobRequest.model_validate({"command": ["job.sh", "a"], "script": text})
    JobRequest.model_validate({"command": ["job.sh"], "script": text, "array": "0-99"})  # 16 MiB of copies
    assert request.to_job(1, 0.0).batch_script and not JobRequest(command=["x"]).to_job(1, 0.0).batch_script
    refusals: list[tuple[dict[str, Any], str]] = [
        ({"script": "echo hi\n"}, "script: not a batch script: its first line must start with #!"),
        ({"script": "#!/bin/sh\r\necho hi\r\n"}, "script: DOS line breaks"),
        ({"script": "#!/bin/sh\n\0"}, "script: a NUL byte"),
        (
            {"script": "#!/bin/sh\n" + "x" * MAX_SCRIPT},
            f"script: {MAX_SCRIPT + 10:,} bytes; a batch script has at most",
        ),
        ({"command": ["bin/job.sh"], "script": "#!/bin/sh\n"}, "command.0: a script's command names its file"),
        # Each task of an array stores its copy: 100 KiB for each of 1,000 tasks is past 64 MiB.
        (
            {"script": "#!/bin/sh\n" + "#" * 100_000, "array": "0-999"},
            "script: 100,010 bytes for each of 1,000 tasks is 100,010,000 bytes stored",
        ),
    ]
    for change, said in refusals:
        with pytest.raises(ValidationError) as refused:
            JobRequest.model_validate({"command": ["job.sh"], **change})
        assert said in "\n".join(describe_validation_errors(refused.value.errors())), refused.value
