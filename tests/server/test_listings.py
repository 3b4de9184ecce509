"""`corral jobs` against corral's server app: what a listing leaves out, it says."""

from __future__ import annotations

import time

from corral.core.model import InstanceType, NodeState
from corral.jobspec import JobRequest
from corral.store import Store
from tests.server.cli import corral, corral_json
from tests.store.storekit import add_node, after_exit, claim


def test_a_job_listing_cut_at_its_limit_says_so(served: tuple[str, Store]) -> None:
    url, store = served
    store.submit([JobRequest(command=["true"], name=f"job-{i}") for i in range(3)], 1000.0)
    cut = corral(url, "jobs", "--limit", "2")
    assert "job-1" in cut.stdout and "job-2" in cut.stdout and "job-0" not in cut.stdout
    assert "the newest 2 jobs shown; older ones: --before 2 (or a larger --limit)" in cut.stderr
    assert [j["name"] for j in corral_json(url, "jobs", "--limit", "2")] == ["job-1", "job-2"]
    assert "there are more" not in corral(url, "jobs", "--limit", "3").stderr


def test_the_output_of_a_job_that_never_ran_says_so(served: tuple[str, Store]) -> None:
    """An empty answer read as "it ran and printed nothing"."""
    url, store = served
    [job_id] = store.submit([JobRequest(command=["true"])], 1000.0)
    store.hold(job_id, 1001.0, "input not ready")
    never = corral(url, "logs", str(job_id), check=False)
    assert never.returncode == 1 and never.stdout == ""
    assert never.stderr == f"error: job {job_id} has not run: it is queued (held by an operator: input not ready)\n"
    # --all lists every attempt: none, and no error.
    assert corral(url, "logs", "--all", str(job_id)).stdout == ""


def test_corral_nodes_lists_every_live_node_of_a_fleet_of_more_than_1000(served: tuple[str, Store]) -> None:
    """`corral nodes` showed the newest 1,000 live nodes, and its fleet's $/hour summed only those."""
    url, store = served
    itype = InstanceType("c5.large", vcpus=2, ram_mib=4096, price_per_hour=0.1)
    for n in range(1003):
        store.create_node(f"n-{n:05d}", itype, f"token-{n}", 1000.0 + n, "test")
    listed = corral_json(url, "nodes")
    assert len(listed) == 1003 and listed[0]["id"] == "n-00000"
    assert "1,003 live nodes, $100.300/hour" in corral(url, "nodes").stdout


def test_corral_nodes_and_corral_node_say_when_a_silent_node_is_given_up(served: tuple[str, Store]) -> None:
    """A booting node whose agent never pairs, and a busy node whose agent went quiet, listed as if
    all were well: the on-call could not tell whether corral had noticed, nor when it would act."""
    url, store = served
    itype = InstanceType("c5.large", vcpus=2, ram_mib=4096, price_per_hour=0.1)
    now = time.time()
    store.create_node("n-booting", itype, "boot-1", now - 100, "test")
    store.create_node("n-quiet", itype, "boot-2", now - 200, "test")
    store.pair_node("n-quiet", "boot-2", itype.capacity, "host-2", now - 190)
    store.create_node("n-fine", itype, "boot-3", now - 200, "test")
    store.pair_node("n-fine", "boot-3", itype.capacity, "host-3", now)

    outlooks = {n["id"]: n["outlook"] for n in corral_json(url, "nodes")}
    # The defaults: boot_grace 10m, ping_stale 1m, ping_interval 2s. (1m40s when created, and up to
    # 19 s later on a loaded host: the CLI's start counts.)
    assert outlooks["n-booting"].startswith(("agent not paired after 1m4", "agent not paired after 1m5"))
    assert outlooks["n-booting"].endswith("(boot_grace 10m)") and "given up in 8m" in outlooks["n-booting"]
    assert (
        outlooks["n-quiet"].startswith("no ping for 3m")
        and "past ping_stale 1m, down at the next pass" in (outlooks["n-quiet"])
    )
    assert outlooks["n-fine"] == ""
    listing = corral(url, "nodes").stdout
    assert "(boot_grace 10m)" in listing and "past ping_stale 1m" in listing
    shown = corral(url, "node", "n-booting").stdout
    assert "\n  outlook: agent not paired after 1m" in shown


def test_corral_job_says_why_a_failed_job_was_not_retried(served: tuple[str, Store]) -> None:
    """`corral job` of a job that failed on a non-zero exit said `ended exit 4`, `attempts 3`: not
    whether it had retries, nor that they were spent, which is what an on-call asks first."""
    url, store = served
    once, thrice = store.submit(
        [JobRequest(command=["false"], name="once"), JobRequest(command=["false"], name="thrice", max_retries=2)],
        1000.0,
    )
    add_node(store, "n1", 1000.0)
    for job_id, runs in ((once, 1), (thrice, 3)):
        for run in range(runs):
            attempt = claim(store, job_id, now=1001.0 + run)
            store.finish_attempt(attempt, "n1", 4, 1001.5 + run, after_exit(4, attempt))

    shown = corral(url, "job", str(once)).stdout
    assert "attempts 1 (retries 0 of 0, temporary failures 0)" in shown
    assert "ended      exit 4; not retried: the job asked for no retries (corral submit --max-retries N)" in shown
    shown = corral(url, "job", str(thrice)).stdout
    assert "attempts 3 (retries 2 of 2, temporary failures 0)" in shown
    assert "ended      exit 4; not retried: the retries it asked for (--max-retries 2) are used up" in shown
    assert {k: corral_json(url, "job", str(thrice))[k] for k in ("nonzero_exits", "max_retries")} == {
        "nonzero_exits": 3,
        "max_retries": 2,
    }


def test_corral_node_shows_a_node_that_is_gone_and_where_its_story_is(served: tuple[str, Store]) -> None:
    """`corral node N` of a node that failed and was shut down said only 'no live node N': the node
    an on-call asks about after a failure is that one."""
    url, store = served
    itype = InstanceType("c5.large", vcpus=2, ram_mib=4096, price_per_hour=0.1)
    add_node(store, "n-lost", 1000.0, itype)
    store.mark_node("n-lost", NodeState.DOWN, "no ping for more than 60s", 1100.0)
    store.mark_node("n-lost", NodeState.SHUTTING_DOWN, "no ping for more than 60s (down, ...)", 1100.0)
    store.mark_node("n-lost", NodeState.GONE, "shut down (down)", 1105.0)

    shown = corral(url, "node", "n-lost")
    assert shown.stdout.startswith("node n-lost gone (c5.large), rack -\n  reason: shut down (down)\n")
    assert "  gone after 1m45s: what happened to it and its jobs, corral events --node n-lost\n" in shown.stdout
    # A change to it is still refused, and a node that never was is named as such.
    refused = corral(url, "node", "n-lost", "held=true", check=False)
    assert refused.returncode == 1 and "no live node n-lost" in refused.stderr
    unknown = corral(url, "node", "n-never", check=False)
    assert unknown.returncode == 1 and "no node n-never" in unknown.stderr
