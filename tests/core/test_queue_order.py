"""The queue's order (policy.placement.queue.order; corral.core.admission), as both pure passes
(corral's and the one in front of Slurm) take it: submission alone under "submit", and under
"multifactor" (Slurm's priority/multifactor, corral.core.multifactor) a score of the job's age and
its user's fair-share factor, so a heavy user's job that has waited long enough goes before a light
user's new one, which fair share alone never lets it do."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from pydantic import ValidationError

from corral.core import batch, multifactor
from corral.core.model import GiB, InstanceType, Job, Node, NodeState, Resources
from corral.core.reconcile import plan_pass
from corral.core.settings import PolicySettings
from corral.core.snapshot import Snapshot
from corral.placement.settings import MultifactorSettings, QueueSettings

HOUR = 3600.0
DAY = 24 * HOUR
NOW = 100 * DAY
SMALL = InstanceType("small", 2, 4 * GiB, 0.10)


def policy(order: str, **multifactor_settings: float) -> PolicySettings:
    settings = PolicySettings()
    queue = settings.placement.queue
    queue.order = order  # type: ignore[assignment]
    queue.fairshare.calc_period = 60.0
    queue.multifactor = MultifactorSettings(**multifactor_settings)
    settings.boot.max_instances = 1  # the one node: no boot for the job left waiting
    return settings


def first_placed(jobs: list[Job], settings: PolicySettings, usage: dict[str, float]) -> int:
    node = Node("n1", SMALL.name, SMALL.capacity, SMALL.price_per_hour, NodeState.IDLE, 0, 1, NOW, NOW)
    snapshot = Snapshot(jobs, [], [node], [SMALL], fairshare_usage=usage)
    (placement,) = plan_pass(snapshot, NOW, settings).placements
    return placement.job_id


def first_claimed(jobs: list[Job], settings: PolicySettings, usage: dict[str, float]) -> int:
    snapshot = Snapshot(jobs, [], [], [], dispatcher_id="d", fairshare_usage=usage)
    (claim,) = batch.plan_batch_pass(snapshot, NOW, settings, {}, max_pending=1).claims
    return claim


def whole_node(job_id: int, user: str, waited: float, priority: int = 1) -> Job:
    return Job(job_id, ["x"], Resources(2, GiB), user=user, priority=priority, submitted_at=NOW - waited)


First = Callable[[list[Job], PolicySettings, dict[str, float]], int]


@pytest.mark.parametrize("pick", [first_placed, first_claimed])
def test_submit_order_ignores_priority(pick: First) -> None:
    early, urgent = whole_node(1, "ann", 20.0), whole_node(2, "ann", 10.0, priority=100)
    assert pick([urgent, early], policy("priority"), {}) == 2
    assert pick([urgent, early], policy("submit"), {}) == 1


@pytest.mark.parametrize("pick", [first_placed, first_claimed])
def test_a_heavy_users_old_job_goes_before_a_light_users_new_one_once_it_has_waited_enough(pick: First) -> None:
    usage = {"ann": 1e6, "bob": 1.0}  # ann's factor is about 0, bob's about 1
    # A day's wait is worth all of the fair-share factor's range.
    settings = policy("multifactor", weight_age=10_000, weight_fairshare=10_000, max_age=DAY)
    young = [whole_node(1, "ann", 6 * HOUR), whole_node(2, "bob", 60.0)]
    assert pick(young, settings, usage) == 2  # fair share still wins
    old = [whole_node(1, "ann", 2 * DAY), whole_node(2, "bob", 60.0)]
    assert pick(old, settings, usage) == 1  # its age has outgrown bob's standing
    assert pick(old, policy("fairshare"), usage) == 2  # fair share alone: bob, however long ann waited
    # Priority still comes first.
    urgent = [*old, whole_node(3, "ann", 0.0, priority=5)]
    assert pick(urgent, settings, usage) == 3


def test_factors_are_sprios() -> None:
    settings = QueueSettings(
        order="multifactor", multifactor=MultifactorSettings(weight_age=1000, weight_fairshare=10_000, max_age=DAY)
    )
    jobs = [whole_node(1, "ann", 6 * HOUR), whole_node(2, "bob", 3 * DAY), whole_node(3, "cyd", 0.0)]
    # ann used three times what bob did; cyd nothing; each has one share of three.
    factors = multifactor.scored(jobs, ["ann", "bob", "cyd"], {"ann": 300.0, "bob": 100.0}, NOW, settings)
    assert factors[1].age == pytest.approx(0.25)
    assert factors[2].age == 1.0  # at most 1, however long past max_age
    assert factors[3].age == 0.0
    assert factors[1].fairshare == pytest.approx(2 ** -(0.75 / (1 / 3)))
    assert factors[2].fairshare == pytest.approx(2 ** -(0.25 / (1 / 3)))
    assert factors[3].fairshare == 1.0
    assert factors[2].score == pytest.approx(1000 * 1.0 + 10_000 * factors[2].fairshare)


def test_age_counts_from_the_start_asked_for_and_moves_only_at_calc_times() -> None:
    later = Job(1, ["x"], submitted_at=0.0, not_before=1800.0)
    assert multifactor.age_factor(later, 2700.0, HOUR) == pytest.approx(0.25)
    assert multifactor.age_factor(later, 900.0, HOUR) == 0.0  # not yet eligible: no age, not less

    settings = QueueSettings(
        order="multifactor", multifactor=MultifactorSettings(weight_age=10_000, weight_fairshare=10_000, max_age=HOUR)
    )
    settings.fairshare.calc_period = 300.0
    usage = {"ann": 1e6, "bob": 1.0}  # factors about 0.25 and 1 (two users, a share each)
    ann, bob = Job(1, ["x"], user="ann", submitted_at=100.0), Job(2, ["x"], user="bob", submitted_at=2990.0)
    # At 2999 s the ages are as of 2700 s: ann's 0.72 (9,722 with her standing), bob's 0 (10,000).
    assert [j.id for j in multifactor.ordered([ann, bob], ["ann", "bob"], usage, 2999.0, settings)] == [2, 1]
    # At 3000 s: ann's 0.81 (10,556), bob's 0.003 (10,028).
    assert [j.id for j in multifactor.ordered([ann, bob], ["ann", "bob"], usage, 3000.0, settings)] == [1, 2]


def test_weights_that_leave_no_score_are_refused() -> None:
    with pytest.raises(ValidationError, match="weight_age and weight_fairshare are both 0"):
        MultifactorSettings(weight_age=0, weight_fairshare=0)
    with pytest.raises(ValidationError, match="max_age"):
        MultifactorSettings(max_age=0)
