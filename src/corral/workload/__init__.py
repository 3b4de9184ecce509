"""Workload readers for the simulator: SWF (Parallel Workloads Archive) and corral's JSON Lines."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from corral.workload.jsonl import read_jsonl
from corral.workload.model import ReadStats, SimJob, Workload, WorkloadError, open_text, shape_gangs
from corral.workload.swf import read_swf

Format = Literal["auto", "swf", "jsonl"]

__all__ = [
    "Format",
    "ReadStats",
    "SimJob",
    "Workload",
    "WorkloadError",
    "detect_format",
    "read_workload",
    "shape_gangs",
]


def detect_format(path: Path) -> Literal["swf", "jsonl"]:
    """By name (.swf, .jsonl/.ndjson/.json, optionally .gz), else by the first line that is neither
    blank nor a JSON Lines `#` comment: JSON Lines if it starts with `{`, else SWF (whose `;`
    header lines count). A file of only `#` comments is JSON Lines; an empty one, SWF."""
    suffixes = [s.lower() for s in path.suffixes if s.lower() != ".gz"]
    if suffixes and suffixes[-1] == ".swf":
        return "swf"
    if suffixes and suffixes[-1] in (".jsonl", ".ndjson", ".json"):
        return "jsonl"
    commented = False
    with open_text(path) as text:
        for line in text:
            stripped = line.strip()
            if stripped.startswith("#"):
                commented = True
            elif stripped:
                return "jsonl" if stripped.startswith("{") else "swf"
    return "jsonl" if commented else "swf"


def read_workload(
    path: Path,
    fmt: Format = "auto",
    *,
    scale: float = 1.0,
    time_scale: float = 1.0,
    default_memory: float = 1024.0,
    skip_bad_lines: bool = False,
    limit: int | None = None,
) -> Workload:
    """`limit`: replay only the first N jobs by submit time (the quirk counts are theirs)."""
    if not path.is_file():
        raise WorkloadError(f"{path}: no such file")
    kind = detect_format(path) if fmt == "auto" else fmt
    if kind == "jsonl":
        workload = read_jsonl(path, time_scale=time_scale, skip_bad_lines=skip_bad_lines)
    else:
        workload = read_swf(
            path, scale=scale, time_scale=time_scale, default_memory=default_memory, skip_bad_lines=skip_bad_lines
        )
    if limit is not None:
        workload.keep_first(limit)
    return workload
