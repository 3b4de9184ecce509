"""The HTML report of one or several simulation runs: a summary table and PNG plots (matplotlib)
of fleet size, vcpus in use and queue length over time, cost accumulated over time, the wait-time distribution,
and utilisation by instance type. With several runs every plot overlays them."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; never a window

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import FixedFormatter, FixedLocator, NullFormatter  # noqa: E402

from corral.sim.engine import Trace  # noqa: E402
from corral.sim.metrics import SimResult  # noqa: E402
from corral.sim.run import Outcome  # noqa: E402
from corral.sim.summary import ROWS, format_value  # noqa: E402

MAX_POINTS = 4000
# The wait plots' ticks: (seconds, label).
WAIT_TICKS = [
    (1.0, "1 s"),
    (10.0, "10 s"),
    (60.0, "1 min"),
    (600.0, "10 min"),
    (3600.0, "1 h"),
    (6 * 3600.0, "6 h"),
    (86400.0, "1 d"),
    (7 * 86400.0, "1 week"),
    (30 * 86400.0, "30 d"),
    (365 * 86400.0, "1 year"),
]


def write_report(directory: Path, outcome: Outcome) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    results = outcome.results
    plots = [
        ("fleet.png", "Fleet size, vcpus in use and queue length", _plot_fleet(results)),
        ("cost.png", "Cost accumulated", _plot_cost(results)),
        ("waits.png", "Wait-time distribution", _plot_waits(results)),
        ("user-waits.png", "Mean wait by user", _plot_user_waits(results)),
        ("utilisation.png", "Utilisation by instance type", _plot_utilisation(results)),
    ]
    for name, _title, figure in plots:
        figure.savefig(directory / name, dpi=110)
        plt.close(figure)
    page = directory / "index.html"
    page.write_text(_html(outcome, [(name, title) for name, title, _ in plots]))
    return page


# The time axis's unit, by the longest run's span: (span up to, seconds per unit, name).
TIME_UNITS = [(2 * 3600.0, 60.0, "minutes"), (2 * 86400.0, 3600.0, "hours"), (float("inf"), 86400.0, "days")]


def _time_unit(results: list[SimResult]) -> tuple[float, str]:
    span = max((float(r.cost_curve[0][-1]) - r.start_time for r in results if len(r.cost_curve[0])), default=0.0)
    return next((seconds, name) for limit, seconds, name in TIME_UNITS if span <= limit)


def _since_start(result: SimResult, times: np.ndarray, unit: float) -> np.ndarray:
    return (times - result.start_time) / unit


def _thin(x: np.ndarray, ys: list[np.ndarray]) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]]]:
    """At most MAX_POINTS points: each bucket's least and greatest value, so that both the peaks and
    the troughs survive (a bucket's maximum alone would show a queue that never empties)."""
    if len(x) <= MAX_POINTS:
        return x, [(y, y) for y in ys]
    edges = np.linspace(0, len(x), MAX_POINTS + 1).astype(int)
    starts = edges[:-1]
    return x[starts], [(np.minimum.reduceat(y, starts), np.maximum.reduceat(y, starts)) for y in ys]


def _plot_fleet(results: list[SimResult]) -> Any:
    """Fleet size, the share of its vcpus in use and jobs queued over time. The share says how full
    the fleet is: a fixed fleet's size is a flat line, and EASY against FIFO on it shows there."""
    figure, axes = plt.subplots(3, 1, figsize=(10, 8.5), sharex=True)
    fleet_ax, in_use_ax, queue_ax = axes
    unit, unit_name = _time_unit(results)
    for result in results:
        trace = result.trace
        times = np.frombuffer(trace.time, dtype=float)
        x, series = _thin(
            _since_start(result, times, unit),
            [np.frombuffer(trace.fleet, dtype=float), _in_use(trace), np.frombuffer(trace.queued, dtype=float)],
        )
        for ax, (low, high) in zip(axes, series, strict=True):
            (line,) = ax.step(x, high, where="post", label=result.label, linewidth=1)
            if low is not high:  # thinned: the band is each bucket's range
                ax.fill_between(x, low, high, step="post", color=line.get_color(), alpha=0.25, linewidth=0)
    fleet_ax.set_ylabel("instances\n(booting or running)")
    in_use_ax.set_ylabel("vcpus in use\n(% of the fleet's)")
    in_use_ax.set_ylim(0, 105)
    queue_ax.set_ylabel("jobs queued")
    queue_ax.set_xlabel(f"{unit_name} since the first submission")
    fleet_ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    for ax in axes:
        ax.grid(alpha=0.3)
    figure.tight_layout()
    return figure


def _in_use(trace: Trace) -> np.ndarray:
    """The share of the fleet's vcpus that running attempts hold, in percent (0 with no fleet)."""
    busy = np.frombuffer(trace.busy_vcpus, dtype=float)
    fleet = np.frombuffer(trace.fleet_vcpus, dtype=float)
    return np.divide(100.0 * busy, fleet, out=np.zeros_like(busy), where=fleet > 0).clip(0.0, 100.0)


def _plot_cost(results: list[SimResult]) -> Any:
    figure, ax = plt.subplots(figsize=(10, 4))
    unit, unit_name = _time_unit(results)
    for result in results:
        times, cost = result.cost_curve
        shown = f"${result.cost:,.0f}" if result.cost >= 100 else f"${result.cost:,.2f}"  # (not "$0")
        ax.plot(_since_start(result, times, unit), cost, label=f"{result.label} ({shown})")
    ax.set_xlabel(f"{unit_name} since the first submission")
    ax.set_ylabel("cost so far (USD)")
    ax.legend(loc="upper left")
    ax.grid(alpha=0.3)
    figure.tight_layout()
    return figure


def _plot_waits(results: list[SimResult]) -> Any:
    return _plot_distribution(
        [(r.label, r.waits) for r in results],
        "wait (log scale; waits under 1 s drawn at 1 s)",
        "fraction of jobs waiting at most this long",
    )


def _plot_user_waits(results: list[SimResult]) -> Any:
    """Each user's mean wait, as a distribution over users: how fair share (or any policy) treats
    the typical and the worst-served user, whatever the number of jobs each submits."""
    return _plot_distribution(
        [(r.label, r.user_waits) for r in results],
        "a user's mean wait (log scale; under 1 s drawn at 1 s)",
        "fraction of users with a mean wait at most this",
    )


def _plot_distribution(series: list[tuple[str, np.ndarray]], xlabel: str, ylabel: str) -> Any:
    figure, ax = plt.subplots(figsize=(10, 4))
    for label, values in series:
        ordered = np.sort(values)
        if not len(ordered):
            continue
        fraction = np.arange(1, len(ordered) + 1) / len(ordered)
        ax.step(np.maximum(ordered, 1.0), fraction, where="post", label=label)
    ax.set_xscale("log")
    # Waits in the units people think in: "10^4" seconds is read as nothing, "3 h" at once.
    longest = max((float(np.max(values)) for _, values in series if len(values)), default=1.0)
    ticks = [(seconds, name) for seconds, name in WAIT_TICKS if seconds <= max(longest, 60.0) * 1.5]
    ax.xaxis.set_major_locator(FixedLocator([seconds for seconds, _ in ticks]))
    ax.xaxis.set_major_formatter(FixedFormatter([name for _, name in ticks]))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, 1.01)
    if any(len(values) for _, values in series):
        ax.legend(loc="lower right")
    else:
        ax.text(0.5, 0.5, "no job ran to the end of its run", transform=ax.transAxes, ha="center", va="center")
    ax.grid(alpha=0.3, which="both")
    figure.tight_layout()
    return figure


def _plot_utilisation(results: list[SimResult]) -> Any:
    """One row per instance type, a bar per run. Horizontal: a config with many types (or spot
    variants of each, "c5.12xlarge-spot" beside "c5.12xlarge") gives long names that, under the
    bars, ran into each other."""
    names = sorted({name for r in results for name in r.utilisation_by_type}, reverse=True)  # A at the top
    runs = max(1, len(results))
    # Each type's row grows with the runs it holds, up to a limit: the figure stays a page or so.
    row = min(0.45, 0.12 + 0.1 * runs)
    figure, ax = plt.subplots(figsize=(10, max(2.5, 1.2 + row * len(names))))
    height = 0.8 / runs
    positions = np.arange(len(names))
    for i, result in enumerate(results):
        values = [result.utilisation_by_type.get(name, 0.0) * 100 for name in names]
        # The first run on top of each row, as the legend lists it.
        bars = ax.barh(positions + (runs - 1 - i) * height, values, height, label=result.label)
        # A type billed and never used draws no bar: say 0 so that it is not read as "not billed".
        for bar, name in zip(bars, names, strict=True):
            if name in result.utilisation_by_type and result.utilisation_by_type[name] == 0:
                ax.text(1, bar.get_y() + bar.get_height() / 2, "0", ha="left", va="center", fontsize=8)
    ax.set_yticks(positions + height * (runs - 1) / 2, names)
    ax.set_ylim(-0.5, max(0.5, len(names) - 0.5 + height * (runs - 1)))
    ax.set_xlabel("vcpu-seconds used / billed (%)")
    ax.set_xlim(0, 100)
    # Outside the axes: bars near 100% run under a legend drawn inside.
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    ax.grid(alpha=0.3, axis="x")
    figure.tight_layout()
    return figure


def _html(outcome: Outcome, plots: list[tuple[str, str]]) -> str:
    data = outcome.to_json()
    runs = data["runs"]
    workload = data["workload"]
    head = "".join(f"<th>{html.escape(r['label'])} ({html.escape(r['mode'])})</th>" for r in runs)
    rows = "\n".join(
        f"<tr><td>{html.escape(label)}</td>"
        + "".join(f"<td>{html.escape(format_value(r.get(key), fmt))}</td>" for r in runs)
        + "</tr>"
        for label, key, fmt in ROWS
    )
    quirks = (
        "".join(f"<li>{html.escape(name)}: {count:,}</li>" for name, count in workload["quirks"].items())
        or "<li>none</li>"
    )
    # Which config file each run is: labels are the files' names, made unique ("x", "x#2").
    configs = "".join(
        f"<li>{html.escape(r['label'])} ({html.escape(r['mode'])}): "
        + (f"<code>{html.escape(r['config'])}</code>" if r.get("config") else "the built-in defaults")
        + "</li>"
        for r in runs
    )
    # Which lines were skipped (--skip-bad-lines), and why: the first few.
    examples = workload["skipped_examples"]
    skipped = (
        (":</p><ul>" if len(examples) == workload["skipped_lines"] else f", the first {len(examples)}:</p><ul>")
        + "".join(f"<li><code>{html.escape(example)}</code></li>" for example in examples)
        + "</ul>"
        if examples
        else ".</p>"
    )
    replayed = f"{workload['replayed']:,} jobs replayed"
    if workload["replayed"] < workload["jobs"]:
        replayed = f"the first {workload['replayed']:,} of its {workload['jobs']:,} jobs replayed (--limit)"
    warnings = [f"{r.label}: {w}" for r in outcome.results for w in r.warnings()]
    notes = (
        "<p><strong>Note:</strong></p><ul>" + "".join(f"<li>{html.escape(w)}</li>" for w in warnings) + "</ul>"
        if warnings
        else ""
    )
    figures = "\n".join(
        f'<h2>{html.escape(title)}</h2>\n<img src="{name}" alt="{html.escape(title)}">' for name, title in plots
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>corral simulation report</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1150px; color: #222; }}
table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #ccc; padding: 4px 10px; text-align: right; }}
td:first-child {{ text-align: left; }} img {{ max-width: 100%; }}
</style></head><body>
<h1>corral simulation report</h1>
<p>Workload <code>{html.escape(workload["source"])}</code> ({html.escape(workload["format"])}):
{html.escape(replayed)}, {workload["skipped_lines"]:,} bad lines skipped{skipped}
<p>Runs:</p><ul>{configs}</ul>
<p>What the mapping filled in or fixed:</p><ul>{quirks}</ul>
{notes}
<h2>Summary</h2>
<table><tr><th></th>{head}</tr>
{rows}
</table>
{figures}
</body></html>
"""
