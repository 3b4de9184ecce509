"""Parsing of durations and sizes as people write them in configs and on the command line."""

from __future__ import annotations

import re
from typing import Any

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]i?b?|b)?\s*$", re.IGNORECASE)
_SIZE_MIB = {"k": 1 / 1024, "m": 1.0, "g": 1024.0, "t": 1024.0 * 1024.0}


def parse_duration(value: Any) -> float:
    """Seconds from a number or a string such as "90s", "5m", "1h30m"."""
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or a string like '5m'")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return float(value)
    if isinstance(value, str):
        text = value.strip().lower()
        try:
            return parse_duration(float(text))
        except ValueError:
            pass
        pos, total = 0, 0.0
        for match in _DURATION_PART.finditer(text):
            if text[pos : match.start()].strip():
                break
            total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
            pos = match.end()
        if pos == len(text) and pos > 0:
            return total
    raise ValueError(f"not a duration: {value!r} (write seconds, or e.g. '90s', '5m', '1h30m')")


def parse_size(value: Any) -> int:
    """MiB from a number (taken as MiB) or a string such as "512MiB", "4GiB", "4G", "1.5T"."""
    if isinstance(value, bool):
        raise ValueError("a size is a number of MiB or a string like '4GiB'")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError("a size cannot be negative")
        return int(round(value))
    if isinstance(value, str):
        if value.strip().startswith("-"):
            raise ValueError("a size cannot be negative")
        match = _SIZE.match(value)
        if match:
            unit = (match.group(2) or "m")[0].lower()
            if unit == "b":
                return int(round(float(match.group(1)) / (1024 * 1024)))
            return int(round(float(match.group(1)) * _SIZE_MIB[unit]))
    raise ValueError(f"not a size: {value!r} (write MiB, or e.g. '512MiB', '4GiB')")
