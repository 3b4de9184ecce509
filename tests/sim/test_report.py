"""The report's plots keep what a reader looks for when a long run is thinned to a plot's width:
each bucket's least and greatest value (a queue that empties now and then shows it does)."""

from __future__ import annotations

import numpy as np

from corral.sim.report import MAX_POINTS, _thin


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
