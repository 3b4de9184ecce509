"""The one architectural rule: the core and placement packages are pure, and the simulator drives
the core without the live shells. Checked on the source, so a violation fails before it ships."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "corral"

# Modules that do I/O or read a clock, and corral's own shells.
FORBIDDEN_IN_PURE = {
    "sqlalchemy",
    "alembic",
    "psycopg",
    "httpx",
    "requests",
    "urllib",
    "http",
    "socket",
    "subprocess",
    "asyncio",
    "threading",
    "multiprocessing",
    "time",
    "os",
    "shutil",
    "pathlib",
    "io",
    "random",
    "fastapi",
    "starlette",
    "uvicorn",
    "boto3",
    "corral.store",
    "corral.server",
    "corral.loop",
    "corral.serve",
    "corral.cli",
    "corral.agent",
    "corral.cloud",
    "corral.executor",
    "corral.sim",
    "corral.config",
}
FORBIDDEN_IN_SIM = {"corral.store", "corral.server", "corral.loop", "corral.serve", "sqlalchemy", "fastapi"}
FORBIDDEN_CALLS = {("datetime", "now"), ("datetime", "utcnow"), ("date", "today"), ("time", "time")}


def modules(package: str) -> list[Path]:
    return sorted((SRC / package).rglob("*.py"))


def imports_of(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def clock_calls(path: Path) -> list[str]:
    calls = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and (node.value.id, node.attr) in FORBIDDEN_CALLS
        ):
            calls.append(f"{node.value.id}.{node.attr}")
    return calls


def violates(name: str, forbidden: set[str]) -> bool:
    return any(name == bad or name.startswith(bad + ".") for bad in forbidden)


@pytest.mark.parametrize("package", ["core", "placement"])
def test_pure_packages_do_no_io_and_read_no_clock(package: str) -> None:
    files = modules(package)
    assert files, f"corral.{package} has no modules"
    problems = []
    for path in files:
        problems += [
            f"{path.relative_to(SRC)} imports {name}" for name in imports_of(path) if violates(name, FORBIDDEN_IN_PURE)
        ]
        problems += [f"{path.relative_to(SRC)} calls {call}" for call in clock_calls(path)]
    assert problems == []


def test_the_simulator_imports_no_store_or_server() -> None:
    problems = []
    for package in ("sim", "workload"):
        for path in modules(package):
            problems += [
                f"{path.relative_to(SRC)} imports {n}" for n in imports_of(path) if violates(n, FORBIDDEN_IN_SIM)
            ]
    assert problems == []


def test_the_guard_sees_a_violation() -> None:
    """The checks above would pass vacuously if the parser missed imports; show it does not."""
    sample = SRC.parent.parent / "tests" / "_sample_violation.py"
    sample.write_text("import time\nfrom sqlalchemy import select\nx = time.time()\n")
    try:
        assert {"time", "sqlalchemy"} <= imports_of(sample)
        assert clock_calls(sample) == ["time.time"]
    finally:
        sample.unlink()


def loaded_by(module: str, packages: tuple[str, ...]) -> list[str]:
    """Which of `packages` importing `module` loads, in a fresh interpreter."""
    probe = f"import sys, {module}; print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(packages)!r}))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120)
    return [name.strip(" '") for name in done.stdout.strip().strip("[]").split(",") if name.strip()]


def test_the_cli_loads_neither_matplotlib_nor_numpy_nor_sqlalchemy() -> None:
    """Every `corral` command pays its module's imports: matplotlib's take about a second, only
    `corral simulate --report` loads it; NumPy (the placement engine, the simulator) and SQLAlchemy
    (the store) take about half a second, and only `corral run` and `corral simulate` load them."""
    assert loaded_by("corral.cli", ("matplotlib", "numpy", "sqlalchemy")) == []


def test_the_agent_starts_without_numpy_or_the_config_models() -> None:
    """Every node starts an agent (and a loopback cloud one per instance): it loads neither NumPy nor
    pydantic, which the server's configuration and placement need and the agent does not."""
    assert loaded_by("corral.agent.cli", ("numpy", "pydantic", "sqlalchemy", "matplotlib")) == []


def test_the_cli_builds_no_settings_models_at_its_start() -> None:
    """The config and policy settings models (corral.config, corral.core.settings) took 0.5 s of
    every command's 0.85 s start on a slow host; only `corral run`, `corral simulate` and
    `corral config` read a config, and they import them when they run. The job request models
    (corral.jobspec, with the dependency parser) took 0.2 s of the 0.6 s left, and only the
    commands that read a job or a time do: they import them when they run."""
    wanted = {"corral.config", "corral.core.settings", "corral.jobspec"}
    probe = f"import sys, corral.cli; print(sorted({wanted!r} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.strip() == "[]"
