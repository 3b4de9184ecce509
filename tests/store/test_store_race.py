"""Two real dispatcher processes race to claim the same 1,000 jobs: never a double claim."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from sqlalchemy import func, select

from corral.core.model import AttemptState, JobState
from corral.store import Store
from corral.store.schema import attempts

from .storekit import NOW, request

WORKER = Path(__file__).with_name("race_worker.py")
JOBS = 1000
DISPATCHERS = ("disp-a", "disp-b")


def wait_for_files(paths: list[Path], procs: list[subprocess.Popen[str]], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not all(p.exists() for p in paths):
        for proc in procs:
            if proc.poll() is not None:
                _, err = proc.communicate()
                raise AssertionError(f"worker exited early with {proc.returncode}: {err}")
        if time.monotonic() > deadline:
            raise AssertionError(f"workers not ready within {timeout}s")
        time.sleep(0.01)


def test_two_dispatcher_processes_racing_over_1000_jobs_never_double_claim(store: Store, tmp_path: Path) -> None:
    ids = store.submit([request(f"race-{i}") for i in range(JOBS)], NOW)
    (tmp_path / "ids.json").write_text(json.dumps(ids))

    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), store.url, dispatcher, str(seed), str(tmp_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed, dispatcher in enumerate(DISPATCHERS)
    ]
    try:
        wait_for_files([tmp_path / f"ready-{d}" for d in DISPATCHERS], procs, timeout=60)
        (tmp_path / "go").touch()  # both are connected: start together
        for proc in procs:
            _, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, f"worker failed: {err}"
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    won = {d: json.loads((tmp_path / f"won-{d}.json").read_text()) for d in DISPATCHERS}
    a, b = (set(won[d]) for d in DISPATCHERS)
    assert len(a) == len(won["disp-a"]) and len(b) == len(won["disp-b"])  # nobody won a job twice
    assert a & b == set()
    assert a | b == set(ids)
    print(f"claims won: disp-a {len(a)}, disp-b {len(b)}")

    # The database agrees: exactly one attempt per job, by the dispatcher that reported winning it.
    owner = {job_id: d for d in DISPATCHERS for job_id in won[d]}
    with store.read() as conn:
        assert conn.execute(select(func.count()).select_from(attempts)).scalar_one() == JOBS
        attempt_rows = conn.execute(select(attempts.c.job_id, attempts.c.dispatcher_id, attempts.c.state)).all()
    assert Counter(r.job_id for r in attempt_rows) == Counter(ids)  # one per job
    for attempt in attempt_rows:
        assert attempt.dispatcher_id == owner[attempt.job_id] and attempt.state == AttemptState.ASSIGNED.value
    for row in store.list_job_rows(limit=JOBS):
        assert row["state"] == JobState.CLAIMED.value
        assert row["attempt_count"] == 1
        assert row["claimed_by"] == owner[row["id"]]
    assert len(store.list_events(kind="job.claimed", limit=10 * JOBS)) == JOBS
