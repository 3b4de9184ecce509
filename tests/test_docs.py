"""The names the documentation gives an operator exist: every `corral` command and option it shows,
every event kind, every configuration key. (docs/config-reference.md is checked in test_config.py.)"""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer

from corral.cli import app
from corral.config import reference_markdown
from corral.core.events import EVENT_KINDS
from corral.core.model import JobState, NodeState

ROOT = Path(__file__).resolve().parent.parent
DOCS = ["README.md", "docs/operator-guide.md", "docs/agent.md", "docs/placement.md", "docs/simulator.md"]
DOCS += ["examples/simulate/README.md"]
EVENT_PREFIXES = {kind.split(".")[0] for kind in EVENT_KINDS}


def code_of(path: str) -> list[str]:
    """The inline code spans and the lines of code blocks (less their `#` comments) of a document."""
    text = (ROOT / path).read_text()
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", text, re.S | re.M)
    lines = [line.split(" #")[0] for block in blocks for line in block.splitlines()]
    prose = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.S | re.M)
    return lines + re.findall(r"`([^`\n]+)`", prose)


def config_keys() -> set[str]:
    """Every key's dotted path, every section's, and the keys of a list's entries under its name."""
    keys: set[str] = set()
    section = ""
    for line in reference_markdown().splitlines():
        if heading := re.match(r"## `([a-z0-9_.]+)`", line):
            section = heading.group(1)
            keys.add(section)
        elif row := re.match(r"\| `([a-z0-9_.]+)` \|", line):
            keys.add(row.group(1) if "." in row.group(1) or section == "(top level)" else f"{section}.{row.group(1)}")
            keys.add(row.group(1))
    return keys


def test_every_event_kind_the_code_records_is_listed_and_every_listed_kind_is_recorded() -> None:
    """EVENT_KINDS is what `[[notify]] on` is checked against: a kind missing there could not be
    notified on, and one the code no longer records would let a rule on it pass and never fire."""
    written = {f"job.{state.value}" for state in JobState} | {f"node.{state.value}" for state in NodeState}
    pattern = re.compile(rf"({'|'.join(EVENT_PREFIXES)})\.[a-z_]+")
    for path in (ROOT / "src" / "corral").rglob("*.py"):
        if path.name == "events.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and pattern.fullmatch(node.value):
                written.add(node.value)
    assert written == set(EVENT_KINDS)


def test_the_operator_guide_lists_every_event_kind_as_the_code_describes_it() -> None:
    text = (ROOT / "docs" / "operator-guide.md").read_text()
    table = text.split("### Event kinds", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| `([a-z_.]+)` \| (.*) \|$", table, re.M))
    assert rows == EVENT_KINDS


@pytest.mark.parametrize("path", DOCS)
def test_every_dotted_name_the_docs_give_is_an_event_kind_or_a_config_key(path: str) -> None:
    keys = config_keys()
    top = {key.split(".")[0] for key in keys} | {key.split(".")[-2] for key in keys if "." in key}
    unknown = []
    for span in code_of(path):
        for name in re.findall(r"(?<![\w./-])([a-z_]+(?:\.[a-z0-9_]+)+)(?![\w/(-])", span):
            first = name.split(".")[0]
            if first not in EVENT_PREFIXES | top or name in {"retry.after_exit"}:  # a function of corral.core
                continue  # a module, a file or a function (corral.core.notify, server.json)
            if name.endswith((".json", ".jsonl", ".db", ".toml", ".py", ".md", ".log", ".pem", ".swf", ".sh")):
                continue
            kind = name in EVENT_KINDS or any(k.startswith(name + "_") for k in EVENT_KINDS)
            key = name in keys or any(k.endswith("." + name) for k in keys)
            if not (kind or key):
                unknown.append(name)
    assert unknown == [], f"{path} names no such event kind or config key: {sorted(set(unknown))}"


def cli_options() -> dict[tuple[str, ...], set[str]]:
    """Each command's words (("submit",), ("config", "check")) -> its option names."""
    found: dict[tuple[str, ...], set[str]] = {}

    def walk(command: Any, words: tuple[str, ...]) -> None:
        if words:
            found[words] = {o for p in command.params for o in [*getattr(p, "opts", []), *p.secondary_opts]}
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, (*words, name))

    walk(typer.main.get_command(app), ())
    return found


@pytest.mark.parametrize("path", DOCS)
def test_every_corral_command_and_option_the_docs_show_exists(path: str) -> None:
    commands = cli_options()
    wrong = []
    for span in code_of(path):
        for use in re.findall(r"(?:^|[\s(])corral ((?:[a-z]+)(?: [^`;|&)]*)?)", span):
            try:
                words = shlex.split(use)
            except ValueError:
                words = use.split()
            name = next((words[:n] for n in (2, 1) if tuple(words[:n]) in commands), None)
            if name is None:
                wrong.append(f"corral {words[0]}")
                continue
            for word in words[len(name) :]:
                if word == "--":
                    break  # the job's own command follows
                option = word.split("=")[0]
                if option.startswith("-") and option not in commands[tuple(name)]:
                    wrong.append(f"corral {' '.join(name)} {option}")
    assert wrong == [], f"{path} shows what the CLI does not have: {sorted(set(wrong))}"


def test_every_metric_the_operator_guide_names_is_exported() -> None:
    exported = exported_metric_names()
    named = set(re.findall(r"`(corral_[a-z_]+)", (ROOT / "docs" / "operator-guide.md").read_text()))
    assert named and named <= exported, sorted(named - exported)


def exported_metric_names() -> set[str]:
    from corral.server.metrics import Metrics

    families = list(Metrics().registry.collect())
    exported = {sample.name for family in families for sample in family.samples}
    # A labelled counter has no sample until its first increment: its name is the family's plus _total.
    return exported | {family.name + ("_total" if family.type == "counter" else "") for family in families}


def test_the_example_alert_rules_are_the_guides_and_name_only_metrics_corral_exports() -> None:
    """examples/corral-alerts.yml is what an operator loads into Prometheus: an alert on a metric
    corral does not export never fires, and Prometheus does not say so."""
    import yaml

    guide = (ROOT / "docs" / "operator-guide.md").read_text()
    block = guide.split("Alerts an operator would set", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    [group] = yaml.safe_load((ROOT / "examples" / "corral-alerts.yml").read_text())["groups"]
    assert group["rules"] == yaml.safe_load(block)
    named = {name for rule in group["rules"] for name in re.findall(r"\bcorral_[a-z_]+", rule["expr"])}
    assert named and named <= exported_metric_names(), sorted(named - exported_metric_names())


def test_the_example_systemd_unit_is_the_guides_and_runs_corral_with_options_it_has() -> None:
    guide = (ROOT / "docs" / "operator-guide.md").read_text()
    unit = (ROOT / "examples" / "corral.service").read_text()
    assert f"```ini\n{unit}```" in guide
    [start] = [line.split("=", 1)[1] for line in unit.splitlines() if line.startswith("ExecStart=")]
    program, command, *options = shlex.split(start)
    assert program.endswith("/corral") and command == "run"
    given = {word.split("=")[0] for word in options if word.startswith("-")}
    assert given <= cli_options()[("run",)], sorted(given - cli_options()[("run",)])


def test_every_agent_option_docs_agent_md_shows_exists_and_the_table_has_them_all() -> None:
    from corral.agent.cli import parser

    options = {o for action in parser()._actions for o in action.option_strings} - {"-h", "--help"}
    shown = {o for span in code_of("docs/agent.md") for o in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", span)}
    table = set(re.findall(r"^\| `(--[a-z-]+)` \|", (ROOT / "docs" / "agent.md").read_text(), re.M))
    assert shown <= options, sorted(shown - options)
    assert table == options


def toml_blocks() -> list[tuple[str, int, str]]:
    found = []
    for path in DOCS:
        text = (ROOT / path).read_text()
        for block in re.finditer(r"^```toml\n(.*?)^```", text, re.S | re.M):
            found.append((path, text[: block.start()].count("\n") + 1, block.group(1)))
    return found


@pytest.mark.parametrize("path,line,block", toml_blocks(), ids=lambda v: str(v).split("/")[-1][:30])
def test_every_toml_block_the_docs_show_is_a_config_corral_takes(
    path: str, line: int, block: str, tmp_path: Path
) -> None:
    """An operator pastes these into a config: each must load as it stands (a key renamed in the
    code but not in the guide would be refused as unknown)."""
    from corral.config import ConfigError, load_config

    config = tmp_path / "pasted.toml"
    config.write_text(block)
    try:
        load_config(config)
    except ConfigError as error:
        pytest.fail(f"{path}:{line}: {error}")


def test_every_argument_and_option_of_every_command_says_what_it_is_in_its_help() -> None:
    """`corral priority --help` listed its second argument as `value` with no word on it (is it the
    new priority, an increment?), `corral node --help` its node the same: each must explain itself."""
    silent = []

    def walk(command: Any, words: tuple[str, ...]) -> None:
        for param in command.params:
            if not getattr(param, "help", None) and param.name != "help":
                silent.append(f"corral {' '.join(words)} {param.name}")
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, (*words, name))

    walk(typer.main.get_command(app), ())
    assert silent == []
