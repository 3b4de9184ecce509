"""One dispatcher process of test_store_race: claim every job it can, as fast as it can.

Usage: python race_worker.py URL DISPATCHER_ID SEED WORKDIR
Reads WORKDIR/ids.json, opens its own Store, touches WORKDIR/ready-DISPATCHER_ID, waits for
WORKDIR/go, tries to claim every id in its own random order, and writes the ids it won to
WORKDIR/won-DISPATCHER_ID.json.
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

from corral.core.model import Resources
from corral.store import Store


def main(url: str, dispatcher_id: str, seed: int, workdir: Path) -> None:
    ids: list[int] = json.loads((workdir / "ids.json").read_text())
    random.Random(seed).shuffle(ids)
    store = Store(url)
    store.counts()  # connect (and load the driver) before the start line
    (workdir / f"ready-{dispatcher_id}").touch()
    deadline = time.monotonic() + 60
    while not (workdir / "go").exists():
        if time.monotonic() > deadline:
            sys.exit(f"{dispatcher_id}: no go signal within 60s")
        time.sleep(0.001)
    won = []
    node = f"node-of-{dispatcher_id}"
    for job_id in ids:
        if store.claim(job_id, dispatcher_id, [node], Resources(1.0, 512, 0, 0), time.time()) is not None:
            won.append(job_id)
    store.close()
    (workdir / f"won-{dispatcher_id}.json").write_text(json.dumps(won))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]))
