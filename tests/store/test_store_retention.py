"""Retention on SQLite and PostgreSQL: ended jobs past `retention.jobs_after` are deleted with
their attempts, dependency rows and output, and events past `events_after`; what an open job still
needs (a dependency), a job array not all of whose tasks may go, and events the notifier has not
handled yet, are kept. Through the live loop's shell (corral.retention) as after each pass."""

from __future__ import annotations

from pathlib import Path

from corral.cloud.sim import SimCloud
from corral.config import Config, RetentionConfig
from corral.core.model import JobState
from corral.jobspec import JobRequest
from corral.loop import ControlLoop
from corral.retention import Retention
from corral.server.logstore import LogStore
from corral.sim.settings import SimSettings
from corral.store import JobFilter, NotFound, Store

from .storekit import NOW, add_node, after_exit, claim, count_rows, request, submit

DAY = 86400.0


def gone(store: Store, job_id: int) -> bool:
    try:
        store.job_row(job_id)
    except NotFound:
        return True
    return False


def run_to_end(store: Store, job_id: int, at: float, exit_code: int = 0) -> int:
    attempt_id = claim(store, job_id, nodes=["n1"], now=at)
    assert store.attempt_started(attempt_id, "n1", 7, at)
    assert store.finish_attempt(attempt_id, "n1", exit_code, at + 1, after_exit(exit_code, attempt_id))
    return attempt_id


def sweep(store: Store, logs: LogStore, now: float, **settings: str) -> Retention:
    """A whole sweep, as the passes of a live loop run it step by step; what `corral retention`
    counted before it (Store.purgeable) is what it deleted."""
    config = RetentionConfig.model_validate(settings)
    jobs_cut = None if config.jobs_after is None else now - config.jobs_after
    events_cut = None if config.events_after is None else now - config.events_after
    counted = store.purgeable(jobs_cut, events_cut)
    jobs, events, purges = count_rows(store, "jobs"), count_rows(store, "events"), purge_events(store)
    retention = Retention(store, logs, config, lambda: now)
    retention.after_pass()
    while retention.sweep is not None:
        retention.after_pass()
    assert count_rows(store, "jobs") == jobs - counted.jobs
    # (Each batch of jobs deleted is an event, store.purged, newer than any cut.)
    assert count_rows(store, "events") == events - counted.events + purge_events(store) - purges
    return retention


def purge_events(store: Store) -> int:
    return len(store.list_events(kind="store.purged"))


def test_ended_jobs_past_jobs_after_go_with_their_attempts_and_output_and_the_rest_stays(
    store: Store, tmp_path: Path
) -> None:
    add_node(store, "n1")
    logs = LogStore(tmp_path / "logs")
    old_ok, old_failed, recent, still_queued = submit(store, 4)
    for job_id, exit_code in ((old_ok, 0), (old_failed, 3)):
        attempt_id = run_to_end(store, job_id, NOW, exit_code)
        logs.write(job_id, attempt_id, 0, b"old output\n")
    recent_attempt = run_to_end(store, recent, NOW + 80 * DAY)
    logs.write(recent, recent_attempt, 0, b"recent output\n")
    assert store.job_row(old_failed)["state"] == JobState.FAILED.value

    sweep(store, logs, NOW + 91 * DAY, jobs_after="90d")

    assert gone(store, old_ok) and gone(store, old_failed)
    assert store.job_row(recent)["state"] == JobState.COMPLETE.value
    assert store.job_row(still_queued)["state"] == JobState.QUEUED.value
    assert count_rows(store, "attempts") == 1
    assert logs.job_ids() == [recent]
    [purged] = store.list_events(kind="store.purged")
    assert purged["message"].startswith(f"2 ended jobs ({old_ok} to {old_failed}), ended before ")


def test_a_jobs_tags_go_with_it_and_those_of_the_jobs_kept_still_find_them(store: Store, tmp_path: Path) -> None:
    """A job's tags are rows of their own (job_tags, by which `corral jobs --tag` finds its jobs):
    deleted with the job, none left naming a job that is gone."""
    add_node(store, "n1")
    old, kept = submit(store, 2, tags=["nightly", "db"])
    run_to_end(store, old, NOW)
    sweep(store, LogStore(tmp_path / "logs"), NOW + 91 * DAY, jobs_after="90d")
    assert gone(store, old)
    assert [row["id"] for row in store.list_job_rows(picked=JobFilter(tag="nightly"))] == [kept]
    assert count_rows(store, "job_tags") == 2


def test_a_job_an_open_job_depends_on_is_kept_until_its_dependent_ends(store: Store, tmp_path: Path) -> None:
    add_node(store, "n1")
    logs = LogStore(tmp_path / "logs")
    [first] = submit(store)
    run_to_end(store, first, NOW)
    [waiting] = store.submit([request(dependency=f"afterany:{first}")], NOW + 1)

    sweep(store, logs, NOW + 100 * DAY, jobs_after="90d")
    assert not gone(store, first), "its dependent would wait for ever (DependencyNeverSatisfied)"

    run_to_end(store, waiting, NOW + 2)
    sweep(store, logs, NOW + 100 * DAY, jobs_after="90d")
    assert gone(store, first) and gone(store, waiting)
    assert count_rows(store, "job_dependencies") == 0


def test_a_job_array_goes_whole_or_not_at_all(store: Store, tmp_path: Path) -> None:
    add_node(store, "n1")
    logs = LogStore(tmp_path / "logs")
    tasks = store.submit([JobRequest(command=["sweep"], array="0-2")], NOW)
    for task in tasks[:2]:
        run_to_end(store, task, NOW)

    sweep(store, logs, NOW + 100 * DAY, jobs_after="90d")
    assert all(not gone(store, task) for task in tasks), "a task still queued keeps its array"

    run_to_end(store, tasks[2], NOW + 10 * DAY)
    sweep(store, logs, NOW + 95 * DAY, jobs_after="90d")
    assert all(not gone(store, task) for task in tasks), "its last task ended 85 days ago"
    sweep(store, logs, NOW + 101 * DAY, jobs_after="90d")
    assert all(gone(store, task) for task in tasks)


def test_a_task_an_open_job_depends_on_keeps_its_whole_array(store: Store, tmp_path: Path) -> None:
    add_node(store, "n1")
    tasks = store.submit([JobRequest(command=["sweep"], array="0-1")], NOW)
    for task in tasks:
        run_to_end(store, task, NOW)
    store.submit([request(dependency=f"afterok:{tasks[1]}")], NOW)

    assert store.purgeable(NOW + 10 * DAY, None).jobs == 0
    sweep(store, LogStore(tmp_path / "logs"), NOW + 100 * DAY, jobs_after="90d")
    assert all(not gone(store, task) for task in tasks)


def test_a_sweep_goes_on_past_a_batch_whose_jobs_must_all_stay(store: Store) -> None:
    add_node(store, "n1")
    kept = submit(store, 3)
    for job_id in kept:
        run_to_end(store, job_id, NOW)
    store.submit([request(dependency="afterany:" + ":".join(map(str, kept)))], NOW)
    gone = submit(store, 2)
    for job_id in gone:
        run_to_end(store, job_id, NOW)
    later = NOW + 100 * DAY
    deleted, last_seen = store.purge_jobs(later - 90 * DAY, 3, later)
    assert (deleted, last_seen) == ([], kept[-1])
    deleted, last_seen = store.purge_jobs(later - 90 * DAY, 3, later, last_seen)
    assert deleted == gone
    assert store.purge_jobs(later - 90 * DAY, 3, later, last_seen) == ([], 0)


def test_old_events_go_but_not_those_the_notifier_has_yet_to_handle(store: Store, tmp_path: Path) -> None:
    for n in range(5):
        store.add_event(NOW + n, "test.old", f"old {n}")
    store.add_event(NOW + 50 * DAY, "test.recent", "recent")
    [*_, third, _, _] = [e["id"] for e in store.list_events(kind="test.old")]
    assert store.advance_notify_cursor(None, third, {}, NOW)

    sweep(store, LogStore(tmp_path / "logs"), NOW + 40 * DAY, events_after="30d")
    left = [e["message"] for e in store.list_events(kind="test.")]
    assert left == ["old 3", "old 4", "recent"]


def test_output_after_removes_output_before_the_job_and_that_of_jobs_gone_from_the_store(
    store: Store, tmp_path: Path
) -> None:
    add_node(store, "n1")
    logs = LogStore(tmp_path / "logs")
    old, recent = submit(store, 2)
    logs.write(old, run_to_end(store, old, NOW), 0, b"x")
    logs.write(recent, run_to_end(store, recent, NOW + 20 * DAY), 0, b"y")
    logs.write(999_999, 1, 0, b"a job a peer dispatcher's sweep deleted")

    sweep(store, logs, NOW + 31 * DAY, output_after="30d")
    assert logs.job_ids() == [recent]
    assert store.job_row(old)["state"] == JobState.COMPLETE.value, "the job itself stays: no jobs_after"


def test_a_config_that_forgets_what_fair_share_counts_is_warned_of() -> None:
    config = Config.model_validate(
        {"retention": {"jobs_after": "30d"}, "policy": {"placement": {"queue": {"order": "fairshare"}}}}
    )
    [warning] = config.warnings()
    assert warning.startswith("retention.jobs_after (30 days) is shorter than fair share remembers usage")
    assert Config.model_validate({"retention": {"jobs_after": "30d"}}).warnings() == []


def test_the_live_loop_sweeps_after_its_passes(store: Store, tmp_path: Path) -> None:
    clock = [NOW + 100 * DAY]
    config = Config.model_validate(
        {
            "instance_types": [{"name": "small", "vcpus": 4, "ram": "8GiB", "price_per_hour": 0.1}],
            "retention": {"jobs_after": "90d"},
        }
    )
    loop = ControlLoop(store, SimCloud(config.core_instance_types(), SimSettings(), lambda: clock[0]), config, "d1")
    loop.clock = lambda: clock[0]
    loop.retention = Retention(store, LogStore(tmp_path / "logs"), config.retention, lambda: clock[0])
    add_node(store, "n1")
    [old] = submit(store)
    run_to_end(store, old, NOW)
    loop.run_pass()
    assert gone(store, old)
