"""true and false are no numbers: pydantic's lax mode read `max_instances = true` as 1 instance and
`"gpus": false` as none. Every number a user writes (a config, a job file, an API body) refuses them,
naming the key."""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from corral.config import Config, ConfigError, load_config
from corral.jobspec import JobRequest
from corral.server import models
from corral.workload.jsonl import SimJobRequest

ROOT = Path(__file__).resolve().parents[1]


def _api_bodies() -> list[type[BaseModel]]:
    """What the HTTP API and the agent protocol accept."""
    found: list[type[BaseModel]] = [models.SubmitBody, models.HoldBody, models.NodeAttributesBody]
    pending = list(models.Inbound.__subclasses__())
    while pending:
        model = pending.pop()
        found.append(model)
        pending += model.__subclasses__()
    return found


def _numeric_spots(model: type[BaseModel], seen: set[type[BaseModel]]) -> Iterator[tuple[type[BaseModel], str, Any]]:
    """(model, field, a boolean where a number goes) for every int or float a user can write in
    `model` and the models it holds: the field itself, or an entry of its list or dict."""
    if model in seen:
        return
    seen.add(model)
    for name, field in model.model_fields.items():
        for leaf, wrap in _leaves(field.annotation):
            if isinstance(leaf, type) and issubclass(leaf, BaseModel):
                yield from _numeric_spots(leaf, seen)
            elif leaf in (int, float):
                yield model, name, wrap(True)


def _leaves(annotation: Any) -> Iterator[tuple[Any, Any]]:
    """The types in an annotation, each with how a value of it sits in the field's value."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        yield from _leaves(args[0])
    elif origin in (typing.Union, types.UnionType):
        for arg in args:
            yield from _leaves(arg)
    elif origin is list:
        yield from ((leaf, lambda v, wrap=wrap: [wrap(v)]) for leaf, wrap in _leaves(args[0]))
    elif origin is dict:
        # 'cpu': a key every dict of numbers takes (overprovision knows only resources)
        yield from ((leaf, lambda v, wrap=wrap: {"cpu": wrap(v)}) for leaf, wrap in _leaves(args[1]))
    else:
        yield annotation, lambda v: v


ROOTS: list[type[BaseModel]] = [Config, JobRequest, SimJobRequest, *_api_bodies()]
SPOTS = sorted(
    {
        (model.__name__, name): (model, name, value)
        for root in ROOTS
        for model, name, value in _numeric_spots(root, set())
    }.items()
)


def test_the_numbers_are_found() -> None:
    names = {key for key, _ in SPOTS}
    assert {("BootSettings", "max_instances"), ("JobRequest", "vcpus"), ("CapacityIn", "gpus")} < names
    assert {("PlacementSettings", "weights"), ("CostSettings", "run_fractions"), ("NotifyRule", "threshold")} < names
    assert len(names) > 60


@pytest.mark.parametrize(("model", "name", "value"), [spot for _, spot in SPOTS], ids=[".".join(k) for k, _ in SPOTS])
def test_every_number_refuses_a_boolean(model: type[BaseModel], name: str, value: Any) -> None:
    with pytest.raises(ValidationError) as error:
        model.model_validate({name: value})
    at_field = [e for e in error.value.errors() if e["loc"][:1] == (name,) and e["type"] != "missing"]
    assert at_field, f"{model.__name__}.{name} took {value!r}: {error.value}"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[policy.boot]\nmax_instances = true\n", "policy.boot.max_instances: must be a number, not true (got True)"),
        ("[policy.retry]\nbackoff_factor = false\n", "policy.retry.backoff_factor: must be a number, not false"),
        ("[policy.placement.weights]\npack = true\n", "policy.placement.weights.pack: must be a number, not true"),
        (
            '[[instance_types]]\nname = "a"\nvcpus = true\nram = "4GiB"\nprice_per_hour = 1\n',
            "instance_types.0.vcpus: must be a number, not true",
        ),
        ('[[notify]]\non = ["node.down"]\nthreshold = true\n', "notify.0.threshold: must be a number, not true"),
        ("[server]\nport = true\n", "server.port: must be a number, not true"),
    ],
)
def test_a_boolean_in_a_config_is_an_error_naming_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "corral.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert message in str(error.value)


def test_yes_in_a_yaml_config_is_no_number(tmp_path: Path) -> None:
    path = tmp_path / "corral.yaml"
    path.write_text("policy:\n  lifecycle:\n    min_instances: yes\n")  # YAML 1.1: a boolean
    with pytest.raises(ConfigError, match=r"policy\.lifecycle\.min_instances: must be a number, not true"):
        load_config(path)


def test_strings_of_numbers_are_still_read(tmp_path: Path) -> None:
    """Only booleans are refused: a quoted number stays a number, as it was."""
    path = tmp_path / "corral.toml"
    path.write_text('[policy.boot]\nmax_instances = "3"\n')
    assert load_config(path).policy.boot.max_instances == 3
    job = JobRequest.model_validate(json.loads('{"command": ["x"], "vcpus": "2", "gpus": "1", "nodes": 2}'))
    assert (job.vcpus, job.gpus, job.nodes) == (2.0, 1, 2)
