"""The config file: defaults, validation naming the key, and a reference that cannot drift."""

from __future__ import annotations

import math
import re
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from corral.config import Config, ConfigError, load_config, reference_markdown
from corral.core.units import parse_duration, parse_size
from corral.jobspec import JobRequest

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
        # Settings that each pass alone but make no sense together, or at zero (found running them:
        # a ping_stale under the ping interval declared every node down between its pings, and
        # requeued its work and replaced its instance, over and over).
        (
            '[cloud]\nping_interval = "20s"\n[policy.lifecycle]\nping_stale = "8s"\n',
            "policy.lifecycle.ping_stale: 8 s is less than two of cloud.ping_interval (20 s)",
        ),
        (
            "[policy.lifecycle]\nmin_instances = 5\n[policy.boot]\nmax_instances = 2\n",
            "policy.lifecycle.min_instances: 5 is more than policy.boot.max_instances (2)",
        ),
        ("[policy.lifecycle]\nboot_grace = 0\n", "policy.lifecycle.boot_grace: Input should be greater than 0"),
        ("[policy.dispatch]\nstart_timeout = 0\n", "policy.dispatch.start_timeout: Input should be greater than 0"),
        ("[loop]\ninterval = 0\n", "loop.interval: Input should be greater than 0"),
        (
            '[health_check]\ncommand = ["nhc"]\ncategory = "broken"\n',
            "health_check.category: 'broken': a *-failure or *-maintenance category",
        ),
        ('[health_check]\ncommand = [" "]\n', "health_check.command: the command's program is empty"),
        (
            '[policy.retry]\non_node_failure = "notify"\n',
            "policy.retry.on_node_failure: 'notify' is not offered: a lost node is shut down",
        ),
        ('[policy.retry]\non_node_failure = "park"\n', "policy.retry.on_node_failure: unknown action 'park'"),
        # A typo in a rule's kinds passed the check, and the rule never fired: no event has that kind.
        (
            '[[notify]]\non = ["node.", "node.dwn"]\n',
            "notify.0.on: 'node.dwn' matches no event kind corral records (did you mean 'node.down'?)",
        ),
        ("[cloud]\nping_interval = 0\n", "cloud.ping_interval: Input should be greater than 0"),
        # nan and inf, in lists and tables too
        ("[policy.placement.weights]\npack = nan\n", "policy.placement.weights.pack: Input should be a finite number"),
        ("[policy.placement.boot_weights]\nprice = inf\n", "policy.placement.boot_weights.price: Input should be a"),
        ("[policy.placement.overprovision]\ncpu = inf\n", "policy.placement.overprovision.cpu: Input should be a"),
        (
            "[policy.placement.cost]\nrun_fractions = [0.5, nan]\n",
            "policy.placement.cost.run_fractions.1: Input should be a finite number",
        ),
        (
            '[[instance_types]]\nname = "a"\nvcpus = 2\nram = "4GiB"\nprice_per_hour = nan\n',
            "instance_types.0.price_per_hour: Input should be a finite number (got nan)",
        ),
        (
            '[[instance_types]]\nname = "a"\nvcpus = inf\nram = "4GiB"\nprice_per_hour = 1\n',
            "instance_types.0.vcpus: Input should be a finite number (got inf)",
        ),
        (
            '[[instance_types]]\nname = "a"\nvcpus = 2\nram = inf\nprice_per_hour = 1\n',
            "instance_types.0.ram: inf is not a finite size",
        ),
        (
            '[[instance_types]]\nname = "a"\nvcpus = 2\nram = "4GiB"\nprice_per_hour = 1\n'
            'billing_granularity = "inf"\n',
            "instance_types.0.billing_granularity: 'inf' is not a finite duration",
        ),
        (
            '[[instance_types]]\nname = "a"\nvcpus = 2\nram = "4GiB"\nprice_per_hour = 1\nbilling_minimum = -60\n',
            "instance_types.0.billing_minimum: a duration cannot be negative (got -60)",
        ),
        (
            "[policy.boot]\ninterruption_backoff = -300\n",
            "policy.boot.interruption_backoff: a duration cannot be negative",
        ),
        ("[[sim.capacity.outages]]\nstart = 0\nend = inf\n", "sim.capacity.outages.0.end: inf is not a finite"),
        ("[[sim.failures.schedule]]\nat = nan\n", "sim.failures.schedule.0.at: nan is not a finite duration"),
        ('[policy.lifecycle]\nidle_grace = "1e999"\n', "policy.lifecycle.idle_grace: '1e999' is not a finite"),
        (f'[policy.lifecycle]\nidle_grace = "{"9" * 400}d"\n', "9d' is not a finite duration"),
    ],
)
def test_a_bad_value_is_named_by_its_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert message in str(error.value)
    assert str(path) in str(error.value)


def test_a_bad_value_the_message_names_is_not_named_again_after_it(tmp_path: Path) -> None:
    """It read "not a duration: '1 minute' (write seconds, ...) (got '1 minute')"."""
    path = tmp_path / "c.toml"
    path.write_text('[policy.lifecycle]\nidle_grace = "1 minute"\n')
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert str(error.value).splitlines()[1] == (
        "  policy.lifecycle.idle_grace: not a duration: '1 minute' (write seconds, or e.g. '90s', '5m', '1h30m',"
        " or as Slurm's --time '1:30:00', '2-12:00:00')"
    )


def test_a_config_that_is_not_utf8_names_its_line_and_a_byte_order_mark_is_no_part_of_it(tmp_path: Path) -> None:
    path = tmp_path / "latin.toml"
    path.write_bytes(b'[cloud]\ncluster = "caf\xe9"\n')
    with pytest.raises(ConfigError, match=r"latin\.toml: line 2: not UTF-8 text"):
        load_config(path)
    for name in ("bom.toml", "bom.yaml"):
        marked = tmp_path / name
        marked.write_bytes(
            b"\xef\xbb\xbf" + (b'[cloud]\ncluster = "x"\n' if name.endswith(".toml") else b"cloud:\n  cluster: x\n")
        )
        assert load_config(marked).cloud.cluster == "x"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("nope://x", "store.url: no database driver for it is installed"),
        ("mysql://u@h/db", "store.url: no database driver for it is installed (No module named 'MySQLdb')"),
        ("not a url", "store.url: not a database URL"),
    ],
)
def test_a_store_url_corral_cannot_use_is_named(tmp_path: Path, url: str, message: str) -> None:
    path = tmp_path / "store.toml"
    path.write_text(f'[store]\nurl = "{url}"\n')
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(path)


def test_no_instance_types_is_an_error_unless_slurm_runs_the_work(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("instance_types = []\n")
    with pytest.raises(ConfigError, match="instance_types: none are configured"):
        load_config(path)
    path.write_text('executor = "slurm"\ninstance_types = []\n')
    assert load_config(path).instance_types == []


def test_a_config_error_shows_no_password_of_a_url(tmp_path: Path) -> None:
    path = tmp_path / "store.toml"
    path.write_text('[store]\nurl = "mysqlx://corral:s3cret@db.example/corral"\n')
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert "s3cret" not in str(error.value)
    assert "'mysqlx://corral:***@db.example/corral'" in str(error.value)


def test_config_check_and_show_print_no_password_of_the_store_url(tmp_path: Path) -> None:
    # What an operator pastes into a ticket or a chat to say which store corral uses.
    from typer.testing import CliRunner

    from corral.cli import app

    path = tmp_path / "store.toml"
    path.write_text('[store]\nurl = "postgresql://corral:s3cret@db.example:5432/corral"\n')
    for command in ("check", "show"):
        result = CliRunner().invoke(app, ["config", command, str(path)])
        assert result.exit_code == 0, result.output
        assert "s3cret" not in result.output
        assert "postgresql://corral:***@db.example:5432/corral" in result.output


@pytest.mark.parametrize("path", sorted((ROOT / "examples").rglob("*.toml")), ids=lambda p: p.name)
def test_the_shipped_example_configs_are_valid_and_warn_of_nothing(path: Path) -> None:
    """README and the docs tell an operator to run each (`corral run --config`, `corral simulate`):
    the simulator's too (examples/simulate/ and its folders), which a glob of examples/ missed."""
    assert load_config(path).warnings() == []


def test_the_shipped_example_job_file_submits_every_line() -> None:
    from corral.cli import read_job_file

    path = ROOT / "examples" / "jobs.jsonl"
    requests, places = read_job_file(path)
    assert len(requests) == len([line for line in path.read_text().splitlines() if line.strip()])
    assert places[0] == "line 1"


def test_the_config_reference_in_docs_is_current() -> None:
    """Regenerate with `corral config reference > docs/config-reference.md`."""
    assert (ROOT / "docs" / "config-reference.md").read_text() == reference_markdown()


def _numeric_keys(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    """The dotted key of every int or float setting in `model`'s sections (not in list entries)."""

    def leaves(annotation: Any) -> set[Any]:
        origin, args = typing.get_origin(annotation), typing.get_args(annotation)
        if origin is typing.Annotated:
            return leaves(args[0])
        if origin in (typing.Union, types.UnionType):
            return set().union(*(leaves(a) for a in args))
        return {annotation}

    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from _numeric_keys(annotation, f"{prefix}{name}.")
        elif leaves(annotation) & {int, float}:
            yield f"{prefix}{name}"


NUMERIC_KEYS = sorted(_numeric_keys(Config))


def test_the_numeric_keys_are_found() -> None:
    assert {"sim.tick", "policy.lifecycle.idle_grace", "policy.placement.cost.max_extension"} < set(NUMERIC_KEYS)
    assert {"sim.boot_delay.sigma", "sim.capacity.outages_per_day", "sim.failures.per_instance_day"} < set(NUMERIC_KEYS)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", '"nan"', '"inf"'])
@pytest.mark.parametrize("key", NUMERIC_KEYS)
def test_no_number_in_a_config_may_be_nan_or_infinite(tmp_path: Path, key: str, value: str) -> None:
    """A TOML nan or inf, or the string "nan" or "inf", is an error naming the key, in every
    section: `sim.tick = inf` crashed a replay, `idle_grace = nan` never drained a node."""
    section, name = key.rsplit(".", 1)
    path = tmp_path / "c.toml"
    path.write_text(f"[{section}]\n{name} = {value}\n")
    with pytest.raises(ConfigError) as error:
        load_config(path)
    lines = [line for line in str(error.value).splitlines() if line.startswith(f"  {key}: ")]
    assert len(lines) == 1 and value.strip('"-') in lines[0], str(error.value)


def test_nan_and_inf_in_yaml_are_errors_too(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("policy:\n  lifecycle: {idle_grace: .nan}\n  placement: {cost: {max_extension: .inf}}\n")
    with pytest.raises(ConfigError, match=r"policy\.lifecycle\.idle_grace: nan is not a finite duration"):
        load_config(path)
    path.write_text("policy:\n  placement: {cost: {max_extension: .inf}}\n")
    with pytest.raises(ConfigError, match=r"policy\.placement\.cost\.max_extension: Input should be a finite number"):
        load_config(path)


def test_a_key_given_twice_in_a_yaml_config_is_an_error_naming_both_lines(tmp_path: Path) -> None:
    """PyYAML keeps the last of two: the first idle_grace was silently not the one in force."""
    path = tmp_path / "c.YAML"  # a suffix in capitals is YAML too
    path.write_text("policy:\n  lifecycle:\n    idle_grace: 5m\n    min_instances: 1\n    idle_grace: 1h\n")
    with pytest.raises(ConfigError, match=r"(?s)key 'idle_grace' is given twice \(first on line 3\).*line 5"):
        load_config(path)
    path.write_text("base: &base {idle_grace: 5m}\npolicy:\n  lifecycle:\n    <<: *base\n    idle_grace: 1h\n")
    with pytest.raises(ConfigError, match="base: unknown key"):  # a merge key may be overridden
        load_config(path)


@pytest.mark.parametrize(
    "slurm,seconds",
    [("1:30", 90), ("1:30:00", 5400), ("2-00:00:00", 172800), ("2-12", 216000), ("1-2:30", 95400), ("0:00:00", 0)],
)
def test_a_duration_in_slurms_time_format_means_what_it_meant_to_sbatch(slurm: str, seconds: float) -> None:
    """A limit copied from an sbatch script (`--time=1:30:00`) was refused as not a duration."""
    assert parse_duration(slurm) == seconds
    assert (JobRequest(command=["true"], time_limit=slurm).time_limit or 0) == seconds  # 0: no limit


def test_a_bare_number_stays_seconds_and_a_form_neither_reads_names_both() -> None:
    assert parse_duration("90") == 90  # Slurm's bare minutes would silently change every config
    with pytest.raises(ValueError, match=r"not a duration: '1:2:3:4' \(write seconds, .* '1:30:00'"):
        parse_duration("1:2:3:4")


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, "nan", "inf", "Infinity", "1e999", 10**400])
def test_durations_and_sizes_are_finite(value: object) -> None:
    with pytest.raises(ValueError, match="not a finite duration"):
        parse_duration(value)
    if not isinstance(value, str):  # a size string must have the shape of one ("nan" is just not a size)
        with pytest.raises(ValueError, match="not a finite size"):
            parse_size(value)


def test_limits_under_which_nothing_can_boot_are_warned_of() -> None:
    types = [{"name": "small", "vcpus": 2, "ram": "4GiB", "price_per_hour": 0.1}]
    fine = Config.model_validate({"instance_types": types, "policy": {"boot": {"max_cost_per_hour": 0.1}}})
    assert fine.warnings() == []
    starved = Config.model_validate(
        {"instance_types": types, "policy": {"boot": {"max_cost_per_hour": 0.05, "max_vcpus": 1}}}
    )
    assert starved.warnings() == [
        "policy.boot.max_cost_per_hour ($0.05/h) is below every instance type's price (the cheapest, small,"
        " costs $0.1/h): nothing can boot",
        "policy.boot.max_vcpus (1) is below every instance type's vCPUs (the smallest, small, has 2): nothing can boot",
    ]
    # In front of Slurm corral boots nothing: no warning.
    starved.executor = "slurm"
    assert starved.warnings() == []


def test_placement_filters_left_out_that_keep_jobs_off_nodes_that_cannot_run_them_are_warned_of() -> None:
    """Before, `filters = ["traits", "min-ram"]` (written, say, to reorder an explanation) was taken
    silently: jobs went to booting nodes and to nodes without the vcpus they asked for."""
    placement = {"filters": ["traits", "min-ram"]}
    assert Config.model_validate({"policy": {"placement": placement}}).warnings() == [
        "policy.placement.filters leaves out state: jobs may be placed on nodes that are booting, draining, held"
        " or down",
        "policy.placement.filters leaves out min-cpu, min-disk, gpus: jobs may be placed on nodes without room for"
        " them (policy.placement.overprovision lets requests pass capacity by a ratio)",
    ]
    assert (
        Config.model_validate(
            {"policy": {"placement": {"filters": ["min-ram", "min-cpu", "state", "gpus", "min-disk"]}}}
        ).warnings()
        == []
    )


def test_an_instance_types_own_cap_is_a_positive_count_and_one_that_cannot_bind_is_warned_of() -> None:
    gpu = {"name": "g5.xlarge", "vcpus": 4, "ram": "16GiB", "price_per_hour": 1.0, "gpus": 1}
    cpu = {"name": "c5.large", "vcpus": 2, "ram": "4GiB", "price_per_hour": 0.1}
    fine = Config.model_validate({"instance_types": [{**gpu, "max_instances": 4}, cpu]})
    assert fine.core_instance_types()[0].max_instances == 4 and fine.core_instance_types()[1].max_instances is None
    assert fine.warnings() == []
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match=r"instance_types\.0\.max_instances"):
            Config.model_validate({"instance_types": [{**gpu, "max_instances": bad}, cpu]})
    loose = Config.model_validate(
        {
            "instance_types": [{**gpu, "max_instances": 8}, {**cpu, "max_instances": 1}],
            "policy": {"boot": {"max_instances": 8}, "lifecycle": {"min_instances": 8}},
        }
    )
    assert loose.warnings() == [
        "instance_types.0.max_instances (8, g5.xlarge) is not below policy.boot.max_instances (8): it never limits"
        " anything"
    ]
    loose.policy.lifecycle.min_instances = 8
    loose.instance_types[0].max_instances = 4
    assert loose.warnings() == [
        "policy.lifecycle.min_instances (8) is more than the instance types' max_instances allow together (5): the"
        " fleet is never kept at its floor"
    ]
