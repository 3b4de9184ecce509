"""`corral simulate`: replay a workload through corral's own decision code on a simulated cloud."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn, cast

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from corral.core.units import format_duration, parse_size
from corral.sim.summary import ROWS, format_value

if TYPE_CHECKING:
    from corral.sim.run import Outcome
    from corral.workload import Format

CONFIG_SUFFIXES = (".toml", ".yaml", ".yml")


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate_command)


def simulate_command(
    paths: Annotated[
        list[Path],
        typer.Argument(
            help="The workload (.swf, .swf.gz or JSON Lines); with --compare, also the config files to compare.",
            show_default=False,
            metavar="WORKLOAD",
        ),
    ],
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="corral config file (instance types, policy, \\[sim] section)."),
    ] = None,
    compare: Annotated[
        bool, typer.Option("--compare", help="Run every config file given (.toml/.yaml) on the workload, side by side.")
    ] = False,
    report: Annotated[Path | None, typer.Option("--report", help="Write an HTML report with plots here.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
    skip_bad_lines: Annotated[
        bool, typer.Option("--skip-bad-lines", help="Skip malformed workload lines (counted) instead of stopping.")
    ] = False,
    scale: Annotated[
        float | None,
        typer.Option("--scale", help="vcpus per SWF processor (default: each config's sim.workload.scale, 1)."),
    ] = None,
    time_scale: Annotated[
        float | None,
        typer.Option(
            "--time-scale",
            help="Multiply submit times, 0.5: arrivals twice as dense (default: each config's"
            " sim.workload.time_scale, 1).",
        ),
    ] = None,
    default_memory: Annotated[
        str | None,
        typer.Option(
            "--default-memory",
            help="RAM per SWF processor when the log has none, e.g. 2GiB (default: each config's"
            " sim.workload.default_memory, 1GiB).",
        ),
    ] = None,
    fmt: Annotated[str, typer.Option("--format", help="auto, swf or jsonl.")] = "auto",
    seed: Annotated[int | None, typer.Option("--seed", help="Override sim.seed of every config.")] = None,
    limit: Annotated[int | None, typer.Option("--limit", help="Replay only the first N jobs.", min=1)] = None,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Show a progress bar.")] = True,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            help="With --compare, run this many configs at once, each in its own process (default: one per CPU).",
            min=1,
        ),
    ] = None,
) -> None:
    """Replay WORKLOAD through corral's reconcile pass on a simulated cloud: cost, waits, a report."""
    # Here, not at the top: the engine loads NumPy, which no other CLI command needs.
    from corral.config import ConfigError, filter_warnings
    from corral.sim.engine import SimulationError
    from corral.sim.run import WorkloadOptions, default_workers, load_runs, simulate
    from corral.workload import WorkloadError, detect_format

    err = Console(stderr=True)

    def fail(message: str) -> NoReturn:
        # Text, never markup (as corral.cli.fail): a workload line or config value may hold "[...]".
        err.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
        raise typer.Exit(2)

    configs = [p for p in paths if p.suffix.lower() in CONFIG_SUFFIXES]
    workloads = [p for p in paths if p.suffix.lower() not in CONFIG_SUFFIXES]
    if len(workloads) != 1:
        fail(f"give exactly one workload file (got {len(workloads)}: {', '.join(map(str, workloads)) or 'none'})")
    if configs and not compare:
        fail(f"{configs[0]} looks like a config file: use --config FILE, or --compare A.toml B.toml to compare")
    if compare and not configs:
        # It ran the built-in defaults alone: a table of one, compared with nothing.
        fail("--compare needs the config files to compare (--compare A.toml B.toml ...)")
    if workers is not None and not compare:
        fail("--workers applies to --compare (several configs run at once); one config runs in this process")
    if config is not None:
        configs.insert(0, config)
    if fmt not in ("auto", "swf", "jsonl"):
        fail(f"--format must be auto, swf or jsonl (got {fmt!r})")
    options = WorkloadOptions(
        fmt=cast("Format", fmt), scale=scale, time_scale=time_scale, skip_bad_lines=skip_bad_lines, limit=limit
    )
    for name, value in (("--scale", scale), ("--time-scale", time_scale)):
        if value is not None and not (math.isfinite(value) and value > 0):
            fail(f"{name} must be a finite number more than 0 (got {value})")
    if workloads[0].is_dir():
        fail(f"{workloads[0]} is a directory, not a workload file")
    swf_only = [name for name, value in (("--scale", scale), ("--default-memory", default_memory)) if value]
    if swf_only and workloads[0].is_file():
        # A JSON Lines job gives its own vcpus and RAM: the option would change nothing, and the
        # figures would be read as those of the workload it describes.
        try:
            kind = detect_format(workloads[0]) if fmt == "auto" else fmt
        except WorkloadError as exc:
            fail(str(exc))
        if kind == "jsonl":
            fail(
                f"{swf_only[0]} applies to SWF workloads only (processors become vcpus and RAM);"
                f" {workloads[0]} is JSON Lines, whose lines give each job's vcpus and ram"
            )
    if report is not None:
        # Checked before the run, which may take minutes: its figures would be lost.
        if report.exists() and not report.is_dir():
            fail(f"--report {report}: exists and is not a directory")
        try:
            report.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            fail(f"--report {report}: cannot create it ({exc.strerror or exc})")
        if not os.access(report, os.W_OK):
            fail(f"--report {report}: not writable")
    if default_memory is not None:
        try:
            options.default_memory = float(parse_size(default_memory))
        except ValueError as exc:
            fail(f"--default-memory: {exc}")
    try:
        runs = load_runs(configs, seed)
    except ConfigError as exc:
        fail(str(exc))
    for run in runs:
        if run.config.executor == "slurm":
            # The live corral hands such a config's jobs to Slurm, which places them; a replay has
            # no Slurm, and what it measures is corral's own placement (and fleet) in its stead.
            err.print(
                f"[yellow]warning[/] ({run.label}): executor is 'slurm': the replay places the jobs with corral's"
                " own policy on instance_types, as no Slurm is simulated (a partition's nodes: sim.fleet.mode ="
                ' "fixed" with sim.fleet.nodes)',
                highlight=False,
            )
        if run.config.sim.fleet.mode == "elastic":
            warnings = run.config.warnings()
            if run.config.policy.boot.max_instances == 0:
                # A live corral may be told to boot nothing for a while; a replay so told runs no job.
                warnings.append(
                    "policy.boot.max_instances is 0: an elastic fleet boots nothing and runs no job"
                    ' (for a given set of nodes, sim.fleet.mode = "fixed" with sim.fleet.nodes)'
                )
        else:
            # A fixed fleet boots nothing, so no boot limit can keep it from booting; but jobs go to its
            # nodes through the same filters.
            warnings = filter_warnings(run.config.policy.placement.filters)
        for warning in warnings:
            err.print(f"[yellow]warning[/] ({run.label}): {escape(warning)}")

    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[clock]}"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=not progress,
    )
    tasks: dict[str, TaskID] = {}

    def step(label: str, done: float, total: float) -> None:
        if label not in tasks:
            tasks[label] = bar.add_task(f"simulating {label}", total=total, clock="")
        bar.update(tasks[label], completed=min(done, total), total=total, clock=f"{format_duration(done)} simulated")

    try:
        with bar:
            outcome = simulate(workloads[0], runs, options, step, workers or default_workers())
    except (WorkloadError, SimulationError) as exc:
        fail(str(exc))

    if report is not None:
        from corral.sim.report import write_report  # matplotlib: only a run with --report loads it

        page = write_report(report, outcome)
        err.print(f"report written to {page}")
    if as_json:
        typer.echo(json.dumps(outcome.to_json(), indent=2))
    else:
        out = Console()
        out.print(results_table(outcome))
        for result in outcome.results:
            for warning in result.warnings():
                out.print(f"[yellow]note:[/yellow] {escape(f'{result.label}: {warning}')}", highlight=False)
        skipped = outcome.workload.stats.skipped
        if skipped:
            err.print(f"{skipped:,} bad lines skipped, e.g. {outcome.workload.stats.errors[0]}", highlight=False)


def results_table(outcome: Outcome) -> Table:
    runs = outcome.to_json()["runs"]
    table = Table(title=outcome.title, title_justify="left")
    # Labels fold rather than end in an ellipsis: two configs cut to "fixed-p…" could not be told apart.
    table.add_column("", overflow="fold")
    for run in runs:
        table.add_column(f"{run['label']} ({run['mode']})", justify="right", overflow="fold")
    for label, key, fmt in ROWS:
        table.add_row(label, *(format_value(run.get(key), fmt) for run in runs))
    return table
