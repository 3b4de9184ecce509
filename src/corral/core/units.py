"""Parsing of durations and sizes as people write them in configs and on the command line.

Both take only finite numbers: `nan` and `inf` (a TOML float, or a string such as "inf" or "1e999")
are errors, as is a number of digits too large to be one.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import BeforeValidator

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
# Slurm's --time forms but its bare minutes (a bare number here is seconds, as everywhere in corral):
# MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS.
_SLURM_TIME = re.compile(r"(?:(\d+)-)?(\d+)((?::\d+){0,2})")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]i?b?|b)?\s*$", re.IGNORECASE)
_SIZE_MIB = {"k": 1 / 1024, "m": 1.0, "g": 1024.0, "t": 1024.0 * 1024.0}


def not_a_boolean(value: Any) -> Any:
    """A number as given, refusing true and false: pydantic's lax mode would take them for 1 and 0
    (`max_instances = true` one instance, `"gpus": false` none), where they are a mistake."""
    if isinstance(value, bool):
        raise ValueError(f"must be a number, not {str(value).lower()}")
    return value


# Every int and float a user writes (configs, job files, API bodies): a number or a string of one
# as pydantic reads it, never a boolean. Durations and sizes refuse booleans in their own parsers.
Int = Annotated[int, BeforeValidator(not_a_boolean)]
Float = Annotated[float, BeforeValidator(not_a_boolean)]


def parse_duration(value: Any) -> float:
    """Seconds from a number or a string such as "90s", "5m", "1h30m"."""
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or a string like '5m'")
    if isinstance(value, int | float):
        return _finite_duration(_as_float(value), value)
    if isinstance(value, str):
        text = value.strip().lower()
        try:
            number = float(text)
        except ValueError:
            pass
        else:
            return _finite_duration(number, value)
        if (slurm := _slurm_time(text)) is not None:
            return _finite_duration(slurm, value)
        pos, total = 0, 0.0
        for match in _DURATION_PART.finditer(text):
            if text[pos : match.start()].strip():
                break
            total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
            pos = match.end()
        if pos == len(text) and pos > 0:
            return _finite_duration(total, value)
    raise ValueError(
        f"not a duration: {value!r} (write seconds, or e.g. '90s', '5m', '1h30m', or as Slurm's --time '1:30:00', "
        "'2-12:00:00')"
    )


def _slurm_time(text: str) -> float | None:
    """Seconds from Slurm's time forms, so that a limit copied from an sbatch script means what it
    meant there; None for a text not in one of them (a bare number is not: it is read as seconds)."""
    match = _SLURM_TIME.fullmatch(text)
    if match is None:
        return None
    days, first = match.group(1), int(match.group(2))
    rest = [int(part) for part in match.group(3).split(":")[1:]]
    if days is not None:  # D-HH[:MM[:SS]]
        hours, minutes, seconds = [first, *rest, 0, 0][:3]
        return int(days) * 86400.0 + hours * 3600.0 + minutes * 60.0 + seconds
    if len(rest) == 1:  # MM:SS
        return first * 60.0 + rest[0]
    if len(rest) == 2:  # HH:MM:SS
        return first * 3600.0 + rest[0] * 60.0 + rest[1]
    return None  # a bare number, which the caller reads as seconds


def _as_float(value: int | float) -> float:
    try:
        return float(value)
    except OverflowError:  # an int too large for a float
        return math.inf


def _finite_duration(seconds: float, value: Any) -> float:
    if not math.isfinite(seconds):
        raise ValueError(f"{value!r} is not a finite duration (write a number of seconds, or e.g. '90s', '5m')")
    if seconds < 0:
        raise ValueError("a duration cannot be negative")
    return seconds


def parse_size(value: Any) -> int:
    """MiB from a number (taken as MiB) or a string such as "512MiB", "4GiB", "4G", "1.5T"."""
    if isinstance(value, bool):
        raise ValueError("a size is a number of MiB or a string like '4GiB'")
    if isinstance(value, int | float):
        return _finite_size(_as_float(value), value)
    if isinstance(value, str):
        if value.strip().startswith("-"):
            raise ValueError("a size cannot be negative")
        match = _SIZE.match(value)
        if match:
            unit = (match.group(2) or "m")[0].lower()
            number = float(match.group(1))
            return _finite_size(number / (1024 * 1024) if unit == "b" else number * _SIZE_MIB[unit], value)
    raise ValueError(f"not a size: {value!r} (write MiB, or e.g. '512MiB', '4GiB')")


# A duration ("90s", "5m", "1h30m", or seconds) and a size ("4GiB", or MiB) as pydantic fields.
# Here, not beside the settings that use them most, so that a job request (corral.jobspec) is
# read without building every settings model (the CLI's start-up: tests/cli_start and bench).
Duration = Annotated[float, BeforeValidator(parse_duration)]
SizeMiB = Annotated[int, BeforeValidator(parse_size)]


def _finite_size(mib: float, value: Any) -> int:
    if not math.isfinite(mib):
        raise ValueError(f"{value!r} is not a finite size (write a number of MiB, or e.g. '512MiB', '4GiB')")
    if mib < 0:
        raise ValueError("a size cannot be negative")
    return int(round(mib))


def format_duration(seconds: float) -> str:
    """A duration as people read it: seconds, minutes, hours or days, one decimal above a minute."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def utc_text(epoch: float, seconds: bool = True) -> str:
    """A time in a stored reason or an event's words: UTC, since they are read anywhere, and never
    an epoch, which reads as noise in `corral events` (to the minute where seconds are noise)."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S UTC" if seconds else "%Y-%m-%d %H:%M UTC")
