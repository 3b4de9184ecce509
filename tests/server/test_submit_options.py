"""What `corral submit` and `corral update` take on their command line, as a Slurm user types it,
against a served app (no control loop: the jobs are only stored, which is what is looked at)."""

from __future__ import annotations

import time
from pathlib import Path

from tests.server.cli import corral
from tests.support import served_app


def test_a_start_time_of_now_or_now_plus_a_duration_is_taken_as_slurms_begin_takes_it(tmp_path: Path) -> None:
    """`corral update --not-before now` worked where `corral submit --not-before now` was refused
    as 'not a time'; Slurm's --begin=now+1hour was refused by both."""
    with served_app(tmp_path) as (url, store):
        before = time.time()
        now = int(corral(url, "submit", "--not-before", "now", "--", "true").stdout)
        later = int(corral(url, "submit", "--not-before", "now+2h", "--", "true").stdout)
        after = time.time()
        assert before <= (store.job(now).not_before or 0) <= after
        assert before + 7200 <= (store.job(later).not_before or 0) <= after + 7200
        corral(url, "update", str(later), "--not-before", "NOW+1:00:00")
        assert before + 3600 <= (store.job(later).not_before or 0) <= time.time() + 3600
        bad = corral(url, "submit", "--not-before", "now+soon", "--", "true", check=False)
        assert bad.returncode == 1
        assert bad.stderr.startswith("error: --not-before 'now+soon': not a duration: 'soon'"), bad.stderr
        assert len(store.list_job_rows()) == 2
