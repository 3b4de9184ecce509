"""The live loop records a transient failure's reservation (seed 002 §5.4.5) as the simulator
does: the node's `failure_reserved_until` attribute, which the next snapshot carries, and an event."""

from __future__ import annotations

import time
from pathlib import Path

from corral.cloud.sim import SimCloud
from corral.core.snapshot import Decisions, NodeReserve
from corral.loop import ControlLoop, PassReport
from corral.placement.attributes import FAILURE_RESERVED_UNTIL
from corral.sim.settings import SimSettings
from corral.store import Store
from tests.test_loop import CONFIG


def test_a_node_reservation_becomes_an_attribute_and_an_event(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'corral.db'}")
    store.migrate()
    now = time.time()
    itype = CONFIG.core_instance_types()[0]
    store.create_node("n-1", itype, "token", now, "test", "d-test")
    loop = ControlLoop(store, SimCloud(CONFIG.core_instance_types(), SimSettings(), time.time), CONFIG, "d-test")
    snapshot = store.load_snapshot("d-test", [itype], now)
    why = "TRANSIENT_FAILURE: reserved until ..."
    decisions = Decisions(node_reservations=[NodeReserve("n-1", now + 60, why), NodeReserve("n-gone", now + 60, why)])
    loop.execute(decisions, snapshot, now, PassReport(decisions))
    (node,) = store.load_snapshot("d-test", [itype], now).nodes
    until = node.attributes[FAILURE_RESERVED_UNTIL]
    assert isinstance(until, str) and float(until) == now + 60
    events = store.list_events(node_id="n-1", kind="node.transient_failure")
    assert [e["message"] for e in events] == [why]


def test_corral_nodes_notes_a_reservation_while_it_lasts(tmp_path: Path) -> None:
    """The node took no work and `corral nodes` said nothing of why (only `corral node` listed the
    attribute, as epoch seconds, and went on listing it after it had lapsed)."""
    from corral.cli import node_note, when

    store = Store(f"sqlite:///{tmp_path / 'corral.db'}")
    store.migrate()
    now = time.time()
    store.create_node("n-1", CONFIG.core_instance_types()[0], "token", now, "test", "d-test")
    store.set_node_attributes("n-1", {FAILURE_RESERVED_UNTIL: repr(now + 60)}, [], None, now)
    row = store.node_row("n-1")
    assert row is not None
    assert node_note(row, now) == f"transient failure: no work until {when(now + 60)}; test"
    assert node_note(row, now + 60) == "test"
