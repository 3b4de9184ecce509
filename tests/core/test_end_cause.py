"""How an ended job ended, as the API's `end_cause` gives it (corral.core.retry.end_cause): from the
job's state and reason, whether a user asked for its end, and its last attempt, for each way a job
can end, including those an end-to-end run cannot cause at will (a lost node, Slurm's refusal)."""

from __future__ import annotations

import pytest

from corral.core.model import AttemptState, JobState
from corral.core.retry import EndCause, end_cause

Q, C, R = JobState.QUEUED, JobState.CLAIMED, JobState.RUNNING
DONE, FAILED, CANCELLED = JobState.COMPLETE, JobState.FAILED, JobState.CANCELLED
EXITED, TEMPFAIL, TIMEOUT = AttemptState.EXITED, AttemptState.TEMPFAIL, AttemptState.TIMEOUT


@pytest.mark.parametrize(
    ("state", "reason", "by_request", "last_attempt", "last_exit_code", "cause"),
    [
        (DONE, "exit 0", False, EXITED, 0, EndCause.COMPLETE),
        (FAILED, "exit 3", False, EXITED, 3, EndCause.EXIT),
        (FAILED, "exit 4; not retried", False, EXITED, 4, EndCause.EXIT),
        (FAILED, "TIMEOUT: ran past its time limit of 2h", False, TIMEOUT, None, EndCause.TIMEOUT),
        (FAILED, "node n-1 lost; gave up after 6 temporary failures", False, TEMPFAIL, None, EndCause.NODE_FAILURE),
        # Slurm's sbatch refused the job's own request: the attempt ended without an exit code.
        (
            FAILED,
            "sbatch refused: Requested node configuration is not available",
            False,
            EXITED,
            None,
            EndCause.REFUSED,
        ),
        (CANCELLED, "cancelled by request", True, None, None, EndCause.CANCELLED),
        (CANCELLED, "cancelled", True, AttemptState.CANCELLED, None, EndCause.CANCELLED),
        (CANCELLED, "cancelled after: node n-1 lost", True, TEMPFAIL, None, EndCause.CANCELLED),
        (
            CANCELLED,
            "node n-1 lost; cancelled (on_node_failure=cancel: the job's setting)",
            False,
            TEMPFAIL,
            None,
            EndCause.NODE_FAILURE,
        ),
        (CANCELLED, "DependencyNeverSatisfied: afterok:12 (job 12 failed)", False, None, None, EndCause.DEPENDENCY),
        # A job that had lost a node, was requeued, and then whose dependency could never be satisfied.
        (CANCELLED, "DependencyNeverSatisfied: afterok:12 (job 12 failed)", False, TEMPFAIL, None, EndCause.DEPENDENCY),
        (
            CANCELLED,
            "slurm job 77 was cancelled outside corral",
            False,
            AttemptState.CANCELLED,
            None,
            EndCause.CANCELLED,
        ),
    ],
)
def test_an_ended_job_says_how_it_ended(
    state: JobState,
    reason: str,
    by_request: bool,
    last_attempt: AttemptState | None,
    last_exit_code: int | None,
    cause: EndCause,
) -> None:
    assert end_cause(state, reason, by_request, last_attempt, last_exit_code) is cause


@pytest.mark.parametrize("state", [Q, C, R])
def test_an_open_job_has_no_end_cause(state: JobState) -> None:
    assert end_cause(state, "exit 3; retry 1/2", False, EXITED, 3) is None
