"""Fair share in a running corral (queue.order = "fairshare"): the node freed goes to the user who
has not used it, though another's job was queued first; `corral share` shows the standing."""

from __future__ import annotations

from tests.e2e.conftest import Corral, wait_until

FAIR = """
[policy.placement.queue]
order = "fairshare"

[policy.placement.queue.fairshare]
calc_period = "1s"
"""


def test_the_freed_node_goes_to_the_user_who_used_least(corral: Corral) -> None:
    # One two-vCPU node, and jobs that each take it whole.
    corral.config.write_text(corral.config.read_text().replace("max_instances = 4", "max_instances = 1") + FAIR)
    corral.start()
    # Alice's first job holds the node until both others are queued, however slow the machine.
    go = corral.home / "go"
    hold = f"sleep 3; while [ ! -e {go} ]; do sleep 0.1; done"
    first = int(corral.cli("submit", "--user", "alice", "--vcpus", "2", "--", "sh", "-c", hold).stdout)
    wait_until(lambda: corral.jobs()[first]["state"] == "running", 60, "alice's first job to run")
    second = int(corral.cli("submit", "--user", "alice", "--vcpus", "2", "--", "true").stdout)
    bobs = int(corral.cli("submit", "--user", "bob", "--vcpus", "2", "--", "true").stdout)
    go.touch()
    wait_until(lambda: all(corral.jobs()[i]["state"] == "complete" for i in (first, second, bobs)), 60, "all to end")

    def started(job_id: int) -> float:
        (attempt,) = corral.cli_json("job", str(job_id))["attempt_list"]
        return float(attempt["started_at"])

    assert started(first) < started(bobs) < started(second)

    report = corral.cli_json("share")
    assert report["order"] == "fairshare"
    rows = {row["user"]: row for row in report["rows"]}
    assert [row["user"] for row in report["rows"]] == ["bob", "alice"]  # the most deserving first
    # alice held two vCPUs for 3 s or more, until the others were queued (a week's half-life decays
    # nothing to speak of).
    assert 4.0 < rows["alice"]["usage"] < 200.0 and rows["bob"]["usage"] < rows["alice"]["usage"]
    assert rows["bob"]["factor"] > 0.5 > rows["alice"]["factor"]
    text = corral.cli("share").stdout
    assert "alice" in text and "the queue is in this order within each priority" in text
