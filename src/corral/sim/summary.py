"""The rows of a simulation's summary, as the terminal table (corral simulate) and the HTML report
(corral.sim.report) both show them. Apart from the report so that the table does not load matplotlib,
which takes about a second: every `corral` command pays its module's imports."""

from __future__ import annotations

from typing import Any

from corral.core.units import format_duration

# (label, JSON key, format) of the rows of the summary table.
ROWS: list[tuple[str, str, str]] = [
    ("jobs", "jobs", "{:,}"),
    # How the run read the workload (sim.workload, or --scale, --time-scale, --default-memory):
    # runs compared may read it differently, and a report is read long after its command.
    ("vcpus per SWF processor", "swf_scale", "{:g}"),
    ("submit times scaled by", "time_scale", "{:g}"),
    ("RAM per SWF processor if none", "swf_default_memory_mib", "size"),
    ("completed", "completed", "{:,}"),
    ("failed", "failed", "{:,}"),
    ("timed out (of failed)", "jobs_timed_out", "{:,}"),
    ("cancelled", "cancelled", "{:,}"),
    ("never finished", "unfinished", "{:,}"),
    ("stopped at the horizon", "horizon_reached", "yes/no"),
    ("run as gangs", "gangs", "{:,}"),
    ("mean wait", "wait_mean_s", "duration"),
    ("median wait", "wait_median_s", "duration"),
    ("p95 wait", "wait_p95_s", "duration"),
    ("users", "users", "{:,}"),
    ("median user's mean wait", "user_wait_median_s", "duration"),
    ("worst user's mean wait", "user_wait_max_s", "duration"),
    ("mean bounded slowdown", "bounded_slowdown_mean", "{:.2f}"),
    ("mean slowdown", "slowdown_mean", "{:.2f}"),
    ("makespan", "makespan_s", "duration"),
    ("instance-hours billed", "instance_hours", "{:,.1f}"),
    ("cost (USD)", "cost_usd", "{:,.2f}"),
    ("utilisation", "utilisation", "{:.1%}"),
    ("GPU utilisation", "gpu_utilisation", "{:.1%}"),
    ("peak fleet", "peak_fleet", "{:,}"),
    ("peak queue", "peak_queue", "{:,}"),
    ("boots", "boots", "{:,}"),
    ("shutdowns", "shutdowns", "{:,}"),
    ("capacity errors", "capacity_errors", "{:,}"),
    ("boots that never paired", "boot_failures", "{:,}"),
    ("node failures", "node_failures", "{:,}"),
    ("of them given notice", "interruption_notices", "{:,}"),
    ("of them taken back by the cloud", "reclaims", "{:,}"),
    ("types backed off after a notice", "interruption_backoffs", "{:,}"),
    ("requeues", "requeues", "{:,}"),
    ("work lost to failures (vcpu-h)", "work_lost_vcpu_hours", "{:,.1f}"),
    ("per-job bound (USD)", "per_job_bound_usd", "{:,.2f}"),
    ("cost / per-job bound", "cost_over_per_job_bound", "{:.3f}"),
    ("packing bound (USD)", "packing_bound_usd", "{:,.2f}"),
    ("cost / packing bound", "cost_over_packing_bound", "{:.3f}"),
    ("reconcile passes", "passes", "{:,}"),
    ("simulated jobs/s", "jobs_per_second", "{:,.0f}"),
]


def format_value(value: Any, fmt: str) -> str:
    if value is None:
        return "-"
    if fmt == "yes/no":
        return "yes" if value else "no"
    if fmt == "duration":
        return format_duration(float(value))
    if fmt == "size":  # MiB
        mib = float(value)
        return f"{mib / 1024:g} GiB" if mib >= 1024 and mib % 1024 == 0 else f"{mib:g} MiB"
    return fmt.format(value)
