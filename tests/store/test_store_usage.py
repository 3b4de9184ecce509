"""What `corral usage` reads from a real store (SQLite and PostgreSQL): the spans in a window."""

from __future__ import annotations

import pytest

from corral.core.accounting import usage
from corral.core.model import NodeState
from corral.store import AttemptUsage, Store

from .storekit import NOW, ONE_CPU, SMALL, add_node, after_exit, claim, submit


def test_the_spans_of_a_window_are_the_nodes_up_and_the_runs_in_it_with_their_owners(store: Store) -> None:
    add_node(store, "old", now=NOW - 9000)
    assert store.mark_node("old", NodeState.GONE, "shut down", NOW - 5000)  # gone before the window
    add_node(store, "n1", now=NOW - 3600)
    (alice,) = submit(store, 1, user="alice", tags=["web", "prod"])
    (bob,) = submit(store, 1, user="bob")
    (never,) = submit(store, 1, user="carol")  # claimed, never started: no work done
    first = claim(store, alice, nodes=["n1"], now=NOW)
    second = claim(store, bob, nodes=["n1"], now=NOW)
    claim(store, never, nodes=["n1"], now=NOW)
    assert store.attempt_started(first, "n1", 11, NOW + 10)
    assert store.attempt_started(second, "n1", 12, NOW + 10)
    assert store.finish_attempt(first, "n1", 0, NOW + 3610, after_exit(0, first))

    nodes, attempts = store.usage_spans(NOW - 4000, NOW + 7200)

    assert [(n.node_id, n.instance_type, n.price_per_hour, n.capacity) for n in nodes] == [
        ("n1", "small", SMALL.price_per_hour, SMALL.capacity)
    ]
    spans = {a.job_id: a for a in attempts}
    assert set(spans) == {alice, bob}
    assert (spans[alice].user, spans[alice].tags, spans[alice].node_ids) == ("alice", ("web", "prod"), ("n1",))
    assert (spans[alice].started_at, spans[alice].finished_at, spans[alice].request) == (NOW + 10, NOW + 3610, ONE_CPU)
    assert (spans[bob].user, spans[bob].finished_at) == ("bob", None)  # still running

    report = usage(nodes, attempts, NOW - 4000, NOW + 7200, now=NOW + 7200)
    quarter_hour_price = SMALL.price_per_hour / 4  # one of the node's four vcpus
    costs = {row.key: row.cost for row in report.rows}
    assert costs["alice"] == pytest.approx(quarter_hour_price * 3600 / 3600)
    assert costs["bob"] == pytest.approx(quarter_hour_price * 7190 / 3600)
    assert report.billed == pytest.approx(SMALL.price_per_hour * (3600 + 7200) / 3600)


def test_a_window_before_anything_ran_is_empty(store: Store) -> None:
    add_node(store, "n1", now=NOW)
    nodes, attempts = store.usage_spans(NOW - 7200, NOW - 3600)
    assert (nodes, attempts) == ([], [])


def test_a_gang_run_in_front_of_slurm_spans_its_node_count_not_its_one_recorded_node(store: Store) -> None:
    (gang,) = submit(store, 1, nodes=3)
    (single,) = submit(store, 1)
    for job_id in (gang, single):
        attempt_id = claim(store, job_id, nodes=["slurm"], now=NOW)  # as the Slurm executor claims
        assert store.attempt_started(attempt_id, "slurm", None, NOW + 10)
    _, attempts = store.usage_spans(NOW, NOW + 3600)
    assert {a.job_id: (a.node_ids, a.node_count) for a in attempts} == {gang: (("slurm",), 3), single: (("slurm",), 1)}


def test_the_spans_carry_what_each_run_used_and_an_unmeasured_run_counts_as_unknown(store: Store) -> None:
    add_node(store, "n1", now=NOW - 3600)
    measured, unmeasured = submit(store, 2, user="alice")  # ONE_CPU, 1 GiB each
    for job_id, used in ((measured, AttemptUsage(1800.0, 256)), (unmeasured, None)):
        attempt_id = claim(store, job_id, nodes=["n1"], now=NOW)
        assert store.attempt_started(attempt_id, "n1", 11, NOW)
        assert store.finish_attempt(attempt_id, "n1", 0, NOW + 3600, after_exit(0, attempt_id), used=used)

    nodes, attempts = store.usage_spans(NOW - 3600, NOW + 3600)
    spans = {a.job_id: (a.cpu_seconds, a.max_rss_mib) for a in attempts}
    assert spans == {measured: (1800.0, 256), unmeasured: (None, None)}

    (alice,) = usage(nodes, attempts, NOW - 3600, NOW + 3600, now=NOW + 3600).rows
    assert (alice.attempts, alice.measured) == (2, 1)
    # The measured run's, not the average with a 0% that is no measurement.
    assert alice.cpu_efficiency == pytest.approx(0.5)
    assert alice.ram_efficiency == pytest.approx(256 / ONE_CPU.ram_mib)
