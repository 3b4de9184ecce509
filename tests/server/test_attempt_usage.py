"""What a run used against what its job asked for, as seff shows a Slurm job's: the agent's end
report carries the run's CPU seconds and peak RSS, the server stores them with the attempt, and
`corral job` (the real command) says them: `used  CPU 12m30s of 33m20s (38%), peak RAM 1.2G of 4G
(30%)`. An agent of an older corral sends neither: nothing is shown, and the API says null."""

from __future__ import annotations

import time

import httpx

import corral
from corral.cli import used_text
from corral.core.model import InstanceType, Resources
from corral.jobspec import JobRequest
from corral.store import Store
from tests.server.cli import corral as corral_cli
from tests.server.cli import corral_json

C5 = InstanceType("c5.xlarge", vcpus=4, ram_mib=8192, price_per_hour=0.2)
ASKED = Resources(2, 4096)


def paired(url: str, store: Store, node_id: str) -> dict[str, str]:
    store.create_node(node_id, C5, f"boot-{node_id}", 1000.0, "test")
    body = {
        "node_id": node_id,
        "boot_token": f"boot-{node_id}",
        "capacity": {"vcpus": 4, "ram_mib": 8192},
        "hostname": f"host-{node_id}",
        "agent_version": corral.__version__,
    }
    answer = httpx.post(f"{url}/api/agent/pair", json=body)
    assert answer.status_code == 200, answer.text
    return {"Authorization": f"Bearer {answer.json()['secret']}"}


def ran(url: str, store: Store, headers: dict[str, str], job: int, nodes: list[str], **report: object) -> int:
    """A run of 1,000 s, placed 2,000 s ago, ended as `report` says (the pinged finish)."""
    now = time.time()
    attempt = store.claim(job, "d1", nodes, ASKED, now - 2000)
    assert attempt is not None
    started = {"pid": 42, "started_at": now - 1500}
    assert httpx.post(f"{url}/api/agent/attempts/{attempt}/started", json=started, headers=headers).status_code == 200
    finish = {"attempt_id": attempt, "finished_at": now - 500, **report}
    pinged = httpx.post(f"{url}/api/agent/ping", json={"finished": [finish]}, headers=headers)
    assert pinged.status_code == 200 and pinged.json()["ack"] == [attempt], pinged.text
    return attempt


def test_corral_job_shows_what_each_run_used_of_what_it_asked(served: tuple[str, Store]) -> None:
    url, store = served
    headers = paired(url, store, "n1")
    paired(url, store, "n2")
    measured, older, retried, gang = store.submit(
        [
            JobRequest(command=["x"], name="measured", vcpus=2, ram="4GiB"),
            JobRequest(command=["x"], name="older", vcpus=2, ram="4GiB"),
            JobRequest(command=["x"], name="retried", vcpus=2, ram="4GiB", max_retries=1),
            JobRequest(command=["x"], name="gang", vcpus=2, ram="4GiB", nodes=2),
        ],
        time.time() - 3000,
    )
    ran(url, store, headers, measured, ["n1"], exit_code=0, cpu_seconds=750.0, max_rss_mib=1229)
    ran(url, store, headers, older, ["n1"], exit_code=0)  # an agent of a corral before them
    first = ran(url, store, headers, retried, ["n1"], exit_code=3, cpu_seconds=100.0, max_rss_mib=300)
    second = ran(url, store, headers, retried, ["n1"], exit_code=0, cpu_seconds=1900.0, max_rss_mib=3900)
    ran(url, store, headers, gang, ["n1", "n2"], exit_code=0, cpu_seconds=500.0, max_rss_mib=512)

    [attempt] = corral_json(url, "job", str(measured))["attempt_list"]
    assert (attempt["cpu_seconds"], attempt["max_rss_mib"]) == (750.0, 1229)
    [attempt] = corral_json(url, "job", str(older))["attempt_list"]
    assert (attempt["cpu_seconds"], attempt["max_rss_mib"]) == (None, None)

    # 750 s of CPU in 1,000 s on 2 vCPUs: 38%; 1229 MiB of 4 GiB: 30%.
    shown = corral_cli(url, "job", str(measured)).stdout
    assert "  used       CPU 12m30s of 33m20s (38%), peak RAM 1.2G of 4G (30%)\n" in shown, shown
    assert "used" not in corral_cli(url, "job", str(older)).stdout
    # The job's figures are all its runs' (CPU summed, the highest peak), and each run's follows.
    shown = corral_cli(url, "job", str(retried)).stdout
    assert "  used       CPU 33m20s of 1h06m (50%), peak RAM 3.8G of 4G (95%) (2 attempts)\n" in shown, shown
    assert f"  attempt {first} used  CPU 1m40s of 33m20s (5%), peak RAM 300M of 4G (7%)\n" in shown, shown
    assert f"  attempt {second} used  CPU 31m40s of 33m20s (95%), peak RAM 3.8G of 4G (95%)\n" in shown, shown
    # A gang's figures are its first node's, where the command runs: said so.
    shown = corral_cli(url, "job", str(gang)).stdout
    said = "CPU 8m20s of 33m20s (25%), peak RAM 512M of 4G (12%) (on n1, where the command runs; the gang's"
    assert f"  used       {said} 1 other node not measured)\n" in shown, shown


def test_a_report_with_a_figure_out_of_range_is_refused_naming_it(served: tuple[str, Store]) -> None:
    url, store = served
    headers = paired(url, store, "n1")
    [job] = store.submit([JobRequest(command=["x"])], time.time())
    attempt = store.claim(job, "d1", ["n1"], ASKED, time.time())
    for bad in ({"cpu_seconds": -1.0}, {"max_rss_mib": -5}, {"cpu_seconds": "lots"}):
        answer = httpx.post(
            f"{url}/api/agent/attempts/{attempt}/finished", json={"exit_code": 0, **bad}, headers=headers
        )
        assert answer.status_code == 422 and next(iter(bad)) in answer.text, answer.text
    good = {"exit_code": 0, "cpu_seconds": 0.5, "max_rss_mib": 12}
    assert httpx.post(f"{url}/api/agent/attempts/{attempt}/finished", json=good, headers=headers).status_code == 200
    assert [(a["cpu_seconds"], a["max_rss_mib"]) for a in store.attempts_of(job)] == [(0.5, 12)]


def test_a_short_runs_cpu_time_is_shown_to_the_tenth() -> None:
    """ "CPU 2s of 4s" said nothing of 1.5 s against 4.2 s."""
    run = {"cpu_seconds": 1.5, "max_rss_mib": 100, "started_at": 10.0, "finished_at": 14.2, "node": "n1"}
    assert used_text([run], {"vcpus": 1.0, "ram_mib": 1024}) == "CPU 1.5s of 4.2s (36%), peak RAM 100M of 1G (10%)"
