"""Slurm's --exclusive in the simulator: a JSON Lines workload's `"exclusive": true` reaches the same
core as the live loop's, so an exclusive job never shares a node, on an elastic fleet (it boots its
own instance) or on a fixed one (it waits for a node to empty, backfill holding it)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from corral.core.snapshot import Decisions, Snapshot
from corral.sim.engine import Simulation
from corral.sim.metrics import measure
from corral.workload.jsonl import read_jsonl
from tests.sim.helpers import config

LINES: list[dict[str, Any]] = [
    *(
        {"command": ["work"], "vcpus": 1, "ram": "1GiB", "submit_time": 0, "run_time": 600, "time_limit": 900}
        for _ in range(6)
    ),
    *(
        {"command": ["alone"], "vcpus": 1, "ram": "1GiB", "submit_time": 10 * k, "run_time": 300, "time_limit": 400}
        for k in range(1, 4)
    ),
    # Work that comes while the exclusive jobs run: it must not join them.
    *({"command": ["later"], "vcpus": 1, "ram": "1GiB", "submit_time": 60 + k, "run_time": 200} for k in range(4)),
]


def run(tmp_path: Path, exclusive: bool, **sections: Any) -> tuple[int, int, int]:
    """The most jobs seen on one node beside an exclusive job (its own included), the most jobs seen on
    one node at all, and the jobs completed."""
    workload = tmp_path / "work.jsonl"
    lines = [{**line, "exclusive": True} if exclusive and line["command"] == ["alone"] else line for line in LINES]
    workload.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with_exclusive = most = 0

    def watch(snapshot: Snapshot, now: float, decisions: Decisions) -> None:
        nonlocal with_exclusive, most
        jobs = {job.id: job for job in snapshot.jobs}
        on_node: Counter[str] = Counter()
        alone: set[str] = set()
        active = [a for a in snapshot.attempts if a.state.active]
        for attempt in active:
            for node_id in attempt.node_ids:
                on_node[node_id] += 1
                if jobs[attempt.job_id].exclusive:
                    alone.add(node_id)
        # This pass's placements go on top of what runs.
        for placement in decisions.placements:
            for node_id in placement.node_ids:
                on_node[node_id] += 1
                if jobs[placement.job_id].exclusive:
                    alone.add(node_id)
        most = max(most, *on_node.values(), 0)
        with_exclusive = max(with_exclusive, *(on_node[node_id] for node_id in alone), 0)

    sim = Simulation(read_jsonl(workload).jobs, config(**sections), on_pass=watch).run()
    return with_exclusive, most, measure(sim).completed


def test_an_exclusive_job_of_a_jsonl_workload_never_shares_a_node_on_an_elastic_fleet(tmp_path: Path) -> None:
    alone, most, completed = run(tmp_path, exclusive=True)
    assert alone == 1 and completed == len(LINES)
    # Not exclusive, the same jobs pack several to a node (the big type holds eight).
    alone, most, completed = run(tmp_path, exclusive=False)
    assert alone == 0 and most > 1 and completed == len(LINES)


def test_an_exclusive_job_never_shares_a_node_of_a_fixed_fleet(tmp_path: Path) -> None:
    fixed = {"fleet": {"mode": "fixed", "nodes": [{"instance_type": "big", "count": 2}]}}
    alone, most, completed = run(tmp_path, exclusive=True, sim={**fixed, "boot_delay": {"distribution": "fixed"}})
    assert alone == 1 and most > 1 and completed == len(LINES)
