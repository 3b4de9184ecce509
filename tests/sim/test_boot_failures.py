"""Instance types whose instances never pair (sim.boot_delay.never_pairs_by_type: a broken AMI),
in the simulator: the core backs such a type off as after a capacity error, exactly as in the live
loop, so the next type that fits boots, and with every type broken boots pause between ever
longer back-offs instead of one doomed instance per boot grace."""

from __future__ import annotations

from corral.core.snapshot import Decisions, Snapshot
from tests.sim.helpers import config, decides_as_live, job, simulate

HOUR = 3600.0


def boot_times(seen: list[tuple[float, list[str]]]) -> list[tuple[float, str]]:
    return [(now, name) for now, names in seen for name in names]


def test_a_type_that_never_pairs_is_backed_off_and_the_job_runs_on_the_next_type() -> None:
    cfg = config(sim={"boot_delay": {"distribution": "fixed", "seconds": 60, "never_pairs_by_type": {"small": 1.0}}})
    seen: list[tuple[float, list[str]]] = []

    def on_pass(_: Snapshot, now: float, decisions: Decisions) -> None:
        seen.append((now, [b.instance_type for b in decisions.boots]))

    sim, r = simulate([job(1, run=600)], cfg, on_pass=on_pass)
    # small at 0 never pairs; at its boot grace (600) it is shut down and small backed off, and big
    # is booted in the same pass, pairs at 660 and runs the job. Before, small was booted again at
    # 600, 1200, ... and the job never ran.
    assert boot_times(seen) == [(0.0, "small"), (600.0, "big")]
    assert (r.completed, r.boot_failures, sim.counters.boot_failures) == (1, 1, 1)
    assert sim.records[1].wait == 660.0
    assert sim.unavailable == {"small": 900.0}


def test_with_every_type_broken_boots_pause_between_ever_longer_back_offs() -> None:
    cfg = config(
        sim={
            "boot_delay": {"distribution": "fixed", "seconds": 60, "never_pairs_by_type": {"small": 1, "big": 1}},
            "horizon": 3 * HOUR,
        }
    )
    seen = decides_as_live([job(1, run=600)], cfg)  # the live loop's decide makes every pass's decisions
    booted = [(now, b.instance_type) for _, now, decisions in seen for b in decisions.boots]
    # Each failure backs its type off for 5m, 10m, 20m, 40m, then 1h (boot_failure_backoff_max):
    # the types take turns while one's back-off is shorter than the other's boot grace, then boots
    # pause (3600-4200, 5400-7200, 8400-11400). Before: one instance every 10 minutes, 18 in 3 hours.
    assert booted == [
        (0.0, "small"),
        (600.0, "big"),
        (1200.0, "small"),
        (1800.0, "big"),
        (2400.0, "small"),
        (3000.0, "big"),
        (4200.0, "small"),
        (4800.0, "big"),
        (7200.0, "small"),
        (7800.0, "big"),
    ]
    backoffs = [(now, b.instance_type, b.failures, b.until - now) for _, now, d in seen for b in d.type_backoffs]
    assert backoffs[-2:] == [(7800.0, "small", 5, HOUR), (8400.0, "big", 5, HOUR)]
    sim, r = simulate([job(1, run=600)], cfg)
    assert r.horizon_reached and r.completed == 0 and r.boot_failures == 10 and r.boots == 10
