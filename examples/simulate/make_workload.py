"""Writes workload.swf: the small synthetic SWF workload the simulator examples replay.

Run from the repository root: .venv/bin/python examples/simulate/make_workload.py
The generator is deterministic, so the committed file is exactly what this script writes.
"""

from __future__ import annotations

from pathlib import Path

from corral.workload.synth import SynthParams, generate, to_swf

PARAMS = SynthParams(jobs=1000, seed=2024, max_procs=64, mean_interarrival=240.0, memory_fraction=0.25, quirks=True)


def main() -> None:
    path = Path(__file__).with_name("workload.swf")
    path.write_text(to_swf(generate(PARAMS), PARAMS))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
