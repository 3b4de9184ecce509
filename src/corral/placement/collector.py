"""Pausing Python's cyclic garbage collector while a placement pass runs (and a whole reconcile
pass, corral.core.reconcile.plan_pass, which calls it).

A pass allocates a few containers per job (the kept top scores, the placed node lists) that live
until its result is returned. Every 25% growth of the heap's long-lived objects makes the collector
run a full collection, which walks the whole heap: the caller's nodes and jobs as well as the pass's
own objects, tens of thousands of them per pass. Measured on the placement benchmark (10,000 nodes,
20,000 jobs), those collections took about a quarter of the pass while finding nothing to free: a
pass makes no reference cycles it leaves behind. The pass therefore runs with the collector paused;
reference counting still frees everything as usual, and the collector, enabled again afterwards,
sees the pass's survivors once as young objects rather than walking the heap again and again.

The collector is process-wide: other threads run without it for the length of a pass too (their
cyclic garbage waits until it is enabled again; nothing else changes for them).
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


def collector_paused(func: Callable[P, R]) -> Callable[P, R]:
    """`func` with the cyclic collector disabled while it runs, and enabled again however it ends.
    A caller that disabled the collector itself keeps it disabled."""

    @functools.wraps(func)
    def paused(*args: P.args, **kwargs: P.kwargs) -> R:
        if not gc.isenabled():
            return func(*args, **kwargs)
        gc.disable()
        try:
            return func(*args, **kwargs)
        finally:
            gc.enable()

    return paused
