"""An agent started again on a paired node (it died, or an upgrade restarted it) resumes with the
secret its predecessor saved, at corral's real server (its app over HTTP, a real store): the node
stays, and the runs the dead agent carried end as on a lost node, each with an event naming the
restart, under the job's on_node_failure; what the new agent says it runs on is left alone."""

from __future__ import annotations

from typing import Any

import httpx

from corral.core.model import AttemptState, JobState, NodeState
from corral.store import Store
from tests.store.storekit import add_node, claim, submit


def running_on(store: Store, node_id: str, **fields: Any) -> tuple[int, int]:
    [job_id] = submit(store, **fields)
    attempt_id = claim(store, job_id, nodes=[node_id])
    assert store.attempt_started(attempt_id, node_id, 4242, 1000.0)
    return job_id, attempt_id


def test_a_resumed_node_stays_and_the_runs_its_dead_agent_carried_end_as_on_a_lost_node(
    served: tuple[str, Store],
) -> None:
    url, store = served
    secret = add_node(store, "n1")
    requeued, lost_first = running_on(store, "n1")
    held, lost_second = running_on(store, "n1", on_node_failure="hold")
    kept, kept_attempt = running_on(store, "n1")
    body = {"node_id": "n1", "hostname": "host-n1", "pid": 77, "running": [kept_attempt]}
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {secret}"}) as client:
        shipped = client.post(f"/api/agent/attempts/{kept_attempt}/log", params={"offset": 0}, content=b"step 1\n")
        assert shipped.status_code == 200, shipped.text
        answer = client.post("/api/agent/resume", json=body)
        assert answer.status_code == 200, answer.text
        assert answer.json()["lost"] == [lost_first, lost_second]
        # The new agent ships the run's output on from what the server has, not again from its start.
        assert answer.json()["output_stored"] == {str(kept_attempt): 7}
        assert answer.json()["containers"] == {"program": ["podman"], "run_args": []}

        assert client.post("/api/agent/resume", json={**body, "node_id": "n2"}).status_code == 403
    with httpx.Client(base_url=url, headers={"Authorization": "Bearer not-a-secret"}) as client:
        assert client.post("/api/agent/resume", json=body).status_code == 401

    said = f"the agent on node n1 restarted; attempt {lost_first} was lost"
    job = store.job_row(requeued)
    assert job["state"] == JobState.QUEUED.value and job["temp_failures"] == 1
    assert job["wait_reason"].startswith(f"{said}; retry 1/")
    attempt = store.attempt_row(lost_first)
    assert attempt is not None and attempt["state"] == AttemptState.TEMPFAIL.value
    [requeue_event] = store.list_events(job_id=requeued, kind="job.requeued")
    assert requeue_event["message"].startswith(said) and requeue_event["node_id"] == "n1"

    job = store.job_row(held)
    assert job["state"] == JobState.QUEUED.value and job["held"]
    assert [e["kind"] for e in store.list_events(job_id=held)][-2:] == ["job.requeued", "job.held"]

    assert store.job_row(kept)["state"] == JobState.RUNNING.value  # the new agent runs it on
    node = store.node_row("n1")
    assert node is not None and node["state"] == NodeState.IDLE.value  # the pass marks it from its work
    [restarted] = store.list_events(node_id="n1", kind="node.agent_restarted")
    assert restarted["message"] == (
        "agent (corral unknown) restarted on host-n1 (pid 77), resumed with its saved credentials; it runs on"
        f" attempts {kept_attempt}"
    )
