"""The config file: defaults, validation naming the key, and a reference that cannot drift."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.config import ConfigError, load_config, reference_markdown

ROOT = Path(__file__).resolve().parents[1]


def test_an_empty_config_is_a_working_one(tmp_path: Path) -> None:
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    config = load_config(empty, home=tmp_path)
    assert config.server.host == "127.0.0.1"
    assert config.store_url == f"sqlite:///{tmp_path / 'corral.db'}"
    assert config.instance_types


def test_durations_and_sizes_are_read_as_people_write_them(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "policy:\n  lifecycle:\n    idle_grace: 1h30m\ninstance_types:\n"
        "  - {name: big, vcpus: 8, ram: 1.5TiB, price_per_hour: 1}\n"
    )
    config = load_config(path)
    assert config.policy.lifecycle.idle_grace == 5400
    assert config.instance_types[0].ram == 1536 * 1024


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "[policy.retry]\nbackoff_factor = 0.5\n",
            "policy.retry.backoff_factor: Input should be greater than or equal to 1",
        ),
        (
            '[[instance_types]]\nname = "a"\nvcpus = 1\nram = "1GiB"\nprice_per_hour = 1\n' * 2,
            "instance_types: instance type names must be unique; repeated: a",
        ),
        ("[loop]\ninterval = [1]\n", "loop.interval: not a duration: [1]"),
        ("policy = 3\n", "policy: Input should be a valid dictionary"),
        ("[server\n", "not valid TOML"),
    ],
)
def test_a_bad_value_is_named_by_its_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert message in str(error.value)
    assert str(path) in str(error.value)


def test_the_shipped_examples_are_valid() -> None:
    for path in sorted((ROOT / "examples").glob("*.toml")):
        load_config(path)


def test_the_config_reference_in_docs_is_current() -> None:
    """Regenerate with `corral config reference > docs/config-reference.md`."""
    assert (ROOT / "docs" / "config-reference.md").read_text() == reference_markdown()
