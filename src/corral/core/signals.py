"""A signal's number as a reader looks it up, shared by the core's reasons and the command line
(which cannot afford to import the core's policies at every start)."""

from __future__ import annotations

import signal


def signal_name(number: int) -> str | None:
    """ "SIGKILL" for 9; None for a number this host has no name for. (Linux's numbering, the
    nodes' and Slurm's as well as the server's.)"""
    try:
        return signal.Signals(number).name
    except ValueError:
        return None


def signal_text(number: int) -> str:
    """ "signal 9 (SIGKILL)"; a number with no name, bare: "signal 77"."""
    name = signal_name(number)
    return f"signal {number} ({name})" if name else f"signal {number}"
