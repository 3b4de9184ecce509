"""What a job's runs used, end to end (seff's figures): a real `corral run`, its loopback agent and
real commands; `corral job` shows the CPU time and peak RAM against what the job asked for."""

from __future__ import annotations

import re
import sys

from tests.e2e.conftest import Corral, wait_until

# Touches 100 MiB, then burns a second of CPU.
BURN = """
import time
memory = bytearray(100 * 1024 * 1024)
for page in range(0, len(memory), 4096):
    memory[page] = 1
start = time.process_time()
while time.process_time() - start < 1.0:
    pass
"""


def test_corral_job_says_what_a_run_used_of_what_it_asked(corral: Corral) -> None:
    corral.start()
    burn = int(corral.cli("submit", "--vcpus", "1", "--ram", "1GiB", "--", sys.executable, "-c", BURN).stdout)
    # Ended by its time limit: corral records no exit for it, but what it used up to its kill.
    limited = int(corral.cli("submit", "--time-limit", "2s", "--", "sleep", "300").stdout)
    wait_until(lambda: corral.jobs()[burn]["state"] == "complete", 120, "the burning job to complete")
    [attempt] = corral.cli_json("job", str(burn))["attempt_list"]
    assert attempt["cpu_seconds"] >= 0.8 and 90 <= attempt["max_rss_mib"] < 1024, attempt
    shown = corral.cli("job", str(burn)).stdout
    line = r"\n  used       CPU [0-9.hms]+ of [0-9.hms]+ \(\d+%\), peak RAM \d+M of 1G \(\d+%\)\n"
    assert re.search(line, shown), shown

    def used_when_killed() -> bool:
        [attempt] = corral.cli_json("job", str(limited))["attempt_list"]
        return attempt["state"] == "timeout" and attempt["cpu_seconds"] is not None

    wait_until(used_when_killed, 120, "the timed-out run's usage to be reported")
