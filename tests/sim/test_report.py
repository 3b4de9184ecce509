"""The report's plots keep what a reader looks for: when a long run is thinned to a plot's width,
each bucket's least and greatest value (a queue that empties now and then shows it does); with
many instance types, each type's name, clear of the others."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from corral.sim.metrics import SimResult
from corral.sim.report import (
    MAX_POINTS,
    _in_use,
    _plot_fleet,
    _plot_user_waits,
    _plot_utilisation,
    _plot_waits,
    _thin,
)
from tests.sim.helpers import SMALL as SMALL_TYPE
from tests.sim.helpers import config, job, simulate


def test_thinning_keeps_each_buckets_trough_and_peak() -> None:
    points = MAX_POINTS * 10
    x = np.arange(points, dtype=float)
    queued = np.full(points, 50.0)
    queued[::7] = 0.0  # the queue empties now and then, between bursts
    queued[3] = 400.0
    thinned_x, [(low, high)] = _thin(x, [queued])
    assert len(thinned_x) == MAX_POINTS
    assert low.min() == 0.0 and (low == 0.0).sum() > MAX_POINTS // 2  # the troughs survive
    assert high.max() == 400.0 and high[0] == 400.0  # and the peak, in its bucket
    short_x, [(same_low, same_high)] = _thin(x[:10], [queued[:10]])
    assert same_low is same_high and len(short_x) == 10  # nothing to thin


def run(label: str, utilisation_by_type: dict[str, float]) -> SimResult:
    """A run's result with only what the utilisation plot reads."""
    required: dict[str, Any] = {
        f.name: 0
        for f in dataclasses.fields(SimResult)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    return SimResult(**{**required, "label": label, "mode": "elastic", "utilisation_by_type": utilisation_by_type})


def test_the_utilisation_plot_names_every_type_without_names_running_into_each_other() -> None:
    """A spot config doubles the types ("c5.12xlarge" beside "c5.12xlarge-spot"); compared with
    others, the names under the bars ran into each other and a reader could not tell which bar was
    which type. Each name is now a label of its own row, clear of its neighbours."""
    names = [
        f"{family}.{size}{suffix}"
        for family in ("c5", "m5")
        for size in ("large", "xlarge", "2xlarge", "4xlarge", "9xlarge", "12xlarge", "18xlarge")
        for suffix in ("", "-spot")
    ]
    # Four configs, each using all but a quarter of the types.
    results = [
        run(f"config-{i}", {name: (n * 7 % 100) / 100 for n, name in enumerate(names) if n % 4 != i}) for i in range(4)
    ]
    figure = _plot_utilisation(results)
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    (ax,) = figure.axes
    labels = [t for t in [*ax.get_xticklabels(), *ax.get_yticklabels()] if t.get_text() in names]
    assert sorted(t.get_text() for t in labels) == sorted(names)
    boxes = [t.get_window_extent(renderer) for t in labels]
    overlapping = [
        (labels[i].get_text(), labels[j].get_text())
        for i in range(len(boxes))
        for j in range(i + 1, len(boxes))
        if boxes[i].overlaps(boxes[j])
    ]
    assert not overlapping
    assert [text.get_text() for text in ax.get_legend().get_texts()] == [r.label for r in results]


def test_the_note_on_jobs_that_never_finished_counts_those_it_does_not_name() -> None:
    """Past its three commonest reasons the note said "; 1 other reasons": neither how many jobs
    were left out of it, nor in good English."""
    result = run("fixed", {})
    result.unfinished_reasons = {"needs 64 vcpus": 5, "needs 2 GPUs": 3, "needs 8 nodes": 2, "needs 1 TiB RAM": 1}
    result.unfinished = 11
    (note,) = result.warnings()
    assert note.endswith("5 needs 64 vcpus; 3 needs 2 GPUs; 2 needs 8 nodes; 1 job for 1 other reason")
    result.unfinished_reasons |= {"needs a trait": 4}
    result.unfinished = 15
    assert result.warnings()[0].endswith("; 5 jobs for 2 other reasons")


def test_the_wait_plots_read_in_minutes_hours_and_days() -> None:
    """Before, the waits' axis read 10^0 to 10^5 seconds: which of them is an hour, or a day, was
    left to the reader's arithmetic."""
    result = run("busy", {})
    result.waits = np.array([0.0, 30.0, 400.0, 5000.0, 2 * 86400.0])
    result.user_waits = np.array([100.0, 3 * 86400.0])
    for plot in (_plot_waits, _plot_user_waits):
        figure = plot([result])
        figure.canvas.draw()
        (ax,) = figure.axes
        shown = [label.get_text() for label in ax.get_xticklabels() if label.get_text()]
        assert {"1 min", "1 h", "1 d"} <= set(shown), shown
        assert not any("10^" in text for text in shown), shown


def test_the_fleet_plot_shows_how_full_the_fleet_is() -> None:
    """A fixed fleet's size is a flat line, and before, the plot's other panel was the queue: how
    full the nodes were (what EASY against FIFO changes) could not be seen. The trace now holds
    the vcpus running attempts hold and those of the instances up, and the plot their share."""
    fixed = {"fleet": {"mode": "fixed", "nodes": [{"instance_type": "small", "count": 2}]}}
    cfg = config(sim=fixed)  # two 2-vcpu nodes
    jobs = [job(1, submit=0, run=100, vcpus=2), job(2, submit=0, run=300, vcpus=1), job(3, submit=50, run=10, vcpus=1)]
    sim, result = simulate(jobs, cfg)
    trace = result.trace
    at = dict(zip(trace.time, zip(trace.busy_vcpus, trace.fleet_vcpus, strict=True), strict=True))
    assert at[0.0] == (3, 4)  # jobs 1 and 2
    assert at[50.0] == (4, 4)  # job 3 beside job 2
    assert at[100.0] == (1, 4)  # job 1 ended (job 3 at 60)
    assert trace.busy_vcpus[-1] == 0 and trace.fleet_vcpus[-1] == 4
    assert list(_in_use(trace)[:1]) == [75.0]

    result.label = "partition"
    figure = _plot_fleet([result])
    labels = [ax.get_ylabel() for ax in figure.axes]
    assert labels == ["instances\n(booting or running)", "vcpus in use\n(% of the fleet's)", "jobs queued"]


def test_the_vcpus_in_use_come_back_to_nothing_after_failures_and_reclaims() -> None:
    """Work lost on a failed or reclaimed node stops holding vcpus when the node fails, once."""
    spot = {"name": "spot", "vcpus": 2, "ram": "4GiB", "price_per_hour": 0.03}
    failures = {"per_instance_day_by_type": {"spot": 200.0, "small": 100.0}, "notice_by_type": {"spot": "0s"}}
    cfg = config(instance_types=[spot, SMALL_TYPE], sim={"failures": failures})
    jobs = [job(i, submit=60.0 * i, run=900, vcpus=2) for i in range(20)]
    sim, result = simulate(jobs, cfg)
    assert result.node_failures > 0
    assert min(result.trace.busy_vcpus) >= 0 and result.trace.busy_vcpus[-1] == 0
    assert sim.busy_vcpus == 0 and sim.fleet_vcpus == 0
