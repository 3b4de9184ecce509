"""The agent process end to end, against a real HTTP peer that speaks the agent API (peer.py)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.agent import sysinfo
from tests.agent.fake_imds import fake_imds
from tests.agent.peer import Peer, PeerState
from tests.support import alive
from tests.support import wait_until as wait_for

MARK = "CORRAL_AGENT_TEST_MARK"


def marked_pids(mark: str) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if f"{MARK}={mark}".encode() in (entry / "environ").read_bytes().split(b"\0"):
                    out.append(int(entry.name))
    return out


class Agents:
    """Starts agent processes and makes sure none of them, nor anything they ran, outlives the test."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.mark = uuid.uuid4().hex
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, url: str, node_id: str, token: str, *extra: str, capacity: bool = True) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-m", "corral.agent", "--server", url, "--node-id", node_id]
        argv += ["--work-dir", str(self.tmp_path / node_id), "--work-wait", "2", "--kill-grace", "1"]
        if capacity:
            argv += ["--vcpus", "2", "--ram-mib", "1024", "--scratch-mib", "100", "--gpus", "1"]
        argv += list(extra)
        env = dict(os.environ, CORRAL_BOOT_TOKEN=token, **{MARK: self.mark})
        log = open(self.tmp_path / f"{node_id}.log", "ab")  # noqa: SIM115 - the child keeps it
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        log.close()
        self.procs.append(proc)
        return proc

    def log(self, node_id: str) -> list[dict[str, Any]]:
        lines = (self.tmp_path / f"{node_id}.log").read_text().splitlines()
        return [json.loads(line) for line in lines if line.startswith("{")]

    def log_text(self, node_id: str) -> str:
        return (self.tmp_path / f"{node_id}.log").read_text()

    def cleanup(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for pid in marked_pids(self.mark):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def agents(tmp_path: Path) -> Iterator[Agents]:
    a = Agents(tmp_path)
    yield a
    a.cleanup()


@pytest.fixture
def peer() -> Iterator[Any]:
    p = Peer().start()
    yield p
    p.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_pairs_once_the_server_comes_up_and_runs_work(agents: Agents, tmp_path: Path) -> None:
    state = PeerState()
    token = state.add_token("n1")
    state.assign(1, "n1", ["sh", "-c", "echo hello; echo oops >&2; sleep 0.3; echo bye; exit 4"], env={"A": "b"})
    port = free_port()
    agent = agents.start(f"http://127.0.0.1:{port}", "n1", token)
    # The server is not there yet: the agent keeps trying to pair.
    wait_for(lambda: any("retry pairing" in e["msg"] for e in agents.log("n1")), 10, "a pairing retry")
    peer = Peer(state, port=port).start()
    try:
        wait_for(lambda: 1 in state.finished, 20, "attempt 1 to finish")
        assert state.finished[1][0] == 4
        assert state.log_text(1) == "hello\noops\nbye\n"
        assert state.started[1] > 0
        body = state.nodes["n1"]
        assert body["capacity"] == {"vcpus": 2.0, "ram_mib": 1024, "scratch_mib": 100, "gpus": 1}
        assert body["pid"] == agent.pid and body["hostname"] == socket.gethostname()
        wait_for(lambda: len(state.pings) >= 2, 10, "pings")
        assert agent.poll() is None
        # A logrotate's kill -HUP, or the terminal it was started from closing: it pings on.
        agent.send_signal(signal.SIGHUP)
        pinged = len(state.pings)
        wait_for(lambda: len(state.pings) > pinged, 10, "a ping after SIGHUP")
        assert agent.poll() is None
        assert any(e["msg"].startswith("SIGHUP received and ignored") for e in agents.log("n1"))
    finally:
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(15) == 0
        peer.stop()
    # The run's story is in the structured log, one JSON object per line.
    messages = [e["msg"] for e in agents.log("n1")]
    for expected in ("paired", "attempt started", "attempt exited", "agent stopped"):
        assert expected in messages


def test_wrong_boot_token_exits_non_zero(agents: Agents, peer: Any) -> None:
    peer.state.add_token("n1")
    agent = agents.start(peer.url, "n1", "not-the-token")
    assert agent.wait(15) == 2
    assert any("pairing refused" in e["msg"] for e in agents.log("n1"))


def test_a_wrong_server_address_is_said_so_not_blamed_on_the_token(agents: Agents, peer: Any) -> None:
    # A URL with a path that is not corral's: before, "the boot token is wrong or already used".
    agent = agents.start(peer.url + "/corral", "n1", peer.state.add_token("n1"))
    assert agent.wait(15) == 2
    (refused,) = [e for e in agents.log("n1") if e["msg"].startswith("pairing refused")]
    assert refused["msg"] == (
        f"pairing refused: {peer.url}/corral has no corral agent API (HTTP 404): is --server right? exiting"
    )


def test_a_server_address_without_a_scheme_is_a_command_line_error(agents: Agents) -> None:
    # Before, the agent retried its pairing for ever ("Request URL is missing an 'http://' ...").
    agent = agents.start("127.0.0.1:8642", "n1", "token")
    assert agent.wait(15) == 2
    said = (agents.tmp_path / "n1.log").read_text()
    assert "--server: '127.0.0.1:8642' is not an http:// or https:// URL" in said


def test_standalone_mode_reads_local_capacity(agents: Agents, peer: Any, tmp_path: Path) -> None:
    token = peer.state.add_token("solo")
    agent = agents.start(peer.url, "solo", token, capacity=False)
    wait_for(lambda: "solo" in peer.state.nodes, 15, "pairing")
    capacity = peer.state.nodes["solo"]["capacity"]
    assert capacity["vcpus"] == sysinfo.cpu_count()
    assert capacity["ram_mib"] == sysinfo.mem_total_mib() > 0
    assert capacity["scratch_mib"] > 0 and capacity["gpus"] == 0
    peer.state.shutdown = True
    assert agent.wait(15) == 0


def test_kill_on_ping_and_not_wanted_on_start(agents: Agents, peer: Any, tmp_path: Path) -> None:
    state = peer.state
    token = state.add_token("n1")
    state.unwanted.add(2)
    state.assign(1, "n1", ["sleep", "60"])
    state.assign(2, "n1", ["sleep", "61"])
    agent = agents.start(peer.url, "n1", token)
    wait_for(lambda: 1 in state.started and 2 in state.started, 15, "both attempts to start")
    # 409 on "started": killed at once and never reported finished.
    wait_for(lambda: not alive(state.started[2]), 10, "the unwanted attempt to die")
    wait_for(lambda: any(1 in p["running"] for p in state.pings), 10, "a ping listing attempt 1")
    with state.lock:
        state.kill.add(1)
    wait_for(lambda: 1 in state.finished, 15, "attempt 1 to be killed")
    assert state.finished[1][0] == 128 + 15
    assert not alive(state.started[1])
    assert 2 not in state.finished
    assert agent.poll() is None
    state.shutdown = True
    assert agent.wait(15) == 0


def test_shutdown_kills_work_and_leaves_its_fate_to_the_server(agents: Agents, peer: Any) -> None:
    state = peer.state
    token = state.add_token("n1")
    state.assign(1, "n1", ["sh", "-c", "echo working; exec sleep 60"])
    agent = agents.start(peer.url, "n1", token)
    wait_for(lambda: 1 in state.started, 15, "the attempt to start")
    state.shutdown = True
    assert agent.wait(15) == 0
    assert not alive(state.started[1])
    # The node going away is an infrastructure failure for the server to handle, not the command's exit.
    assert 1 not in state.finished
    assert state.log_text(1) == "working\n"


def test_sigterm_kills_work_and_exits_zero(agents: Agents, peer: Any) -> None:
    state = peer.state
    token = state.add_token("n1")
    state.assign(1, "n1", ["sh", "-c", "exit 3"])
    state.assign(2, "n1", ["sh", "-c", "trap '' TERM; echo stubborn; while :; do sleep 0.05; done"])
    agent = agents.start(peer.url, "n1", token)
    wait_for(lambda: 1 in state.finished and 2 in state.started, 15, "one attempt to end and one to start")
    agent.send_signal(signal.SIGTERM)
    assert agent.wait(15) == 0
    assert not alive(state.started[2])  # it ignored SIGTERM, so SIGKILL after the grace
    assert state.finished == {1: (3, state.finished[1][1])}
    assert state.log_text(2) == "stubborn\n"
    assert any(e["msg"] == "attempts stopped with this node; their exits are not reported" for e in agents.log("n1"))


def test_a_finish_says_the_cpu_time_and_peak_memory_the_run_used(agents: Agents, peer: Any) -> None:
    """seff's figures for a run: the agent reports its CPU seconds and peak RSS with its exit."""
    state = peer.state
    burn = (
        "import time\n"
        "memory = bytearray(100 * 1024 * 1024)\n"
        "for page in range(0, len(memory), 4096):\n"
        "    memory[page] = 1\n"
        "start = time.process_time()\n"
        "while time.process_time() - start < 1.0:\n"
        "    pass\n"
    )
    state.assign(1, "n1", [sys.executable, "-c", burn])
    state.assign(2, "n1", ["true"])
    agent = agents.start(peer.url, "n1", state.add_token("n1"))
    wait_for(lambda: 1 in state.finished and 2 in state.finished, 60, "both attempts to end")
    burnt, at_once = state.reports[1], state.reports[2]
    assert burnt["exit_code"] == 0 and 0.8 <= burnt["cpu_seconds"] < 30, burnt
    assert 90 <= burnt["max_rss_mib"] < 1000, burnt
    # Ended before any ping sampled it: its keeper's count still gives its CPU time.
    assert at_once["exit_code"] == 0 and 0 <= at_once["cpu_seconds"] < 5, at_once
    state.shutdown = True
    assert agent.wait(15) == 0


def test_forgotten_node_kills_work_and_exits(agents: Agents, peer: Any) -> None:
    state = peer.state
    token = state.add_token("n1")
    state.assign(1, "n1", ["sleep", "60"])
    agent = agents.start(peer.url, "n1", token)
    wait_for(lambda: 1 in state.started, 15, "the attempt to start")
    state.forget = True
    assert agent.wait(15) == 3
    assert not alive(state.started[1])


def test_a_restarted_agent_resumes_its_node_and_re_adopts_what_the_dead_one_ran(
    agents: Agents, peer: Any, tmp_path: Path
) -> None:
    """Before, the node secret lived in the agent's memory only: an agent that died could not come
    back (a used boot token is refused), and what it ran went on, unknown, beside the requeued job.
    Now the new agent resumes the node and follows the runs on, as slurmstepd keeps a job through a
    restart of slurmd: one that ends after the restart, and one that ended while no agent ran."""
    state = peer.state
    token = state.add_token("n1")
    attempts = tmp_path / "n1" / "attempts"
    wait_for_go = "echo up; while [ ! -e go ]; do sleep 0.05; done; echo done; exit 5"
    state.assign(1, "n1", ["sh", "-c", wait_for_go])
    state.assign(2, "n1", ["sh", "-c", wait_for_go.replace("exit 5", "exit 6")])
    agent = agents.start(peer.url, "n1", token)
    wait_for(lambda: state.log_text(1) == state.log_text(2) == "up\n", 15, "the attempts to run")
    saved = agents.tmp_path / "n1" / "credentials.json"
    assert saved.stat().st_mode & 0o777 == 0o600
    [secret] = state.secrets
    assert json.loads(saved.read_text()) == {"node_id": "n1", "server": peer.url, "secret": secret}
    agent.kill()  # SIGKILL: no time to stop its attempts, which run on without it
    agent.wait()
    (attempts / "2" / "go").touch()  # attempt 2 ends while no agent runs
    wait_for(lambda: not alive(state.started[2]), 10, "attempt 2 to end")

    shipped_before = len(state.log_offsets)
    again = agents.start(peer.url, "n1", "")  # no boot token: the used one would be refused anyway
    wait_for(lambda: state.resumes, 15, "the new agent to resume")
    assert sorted(state.resumes[0]["running"]) == [1, 2] and state.resumes[0]["pid"] == again.pid
    assert state.lost == set()
    wait_for(lambda: 2 in state.finished, 15, "the end of attempt 2 to be reported")
    assert state.finished[2][0] == 6 and state.log_text(2) == "up\ndone\n"
    assert alive(state.started[1])
    (attempts / "1" / "go").touch()
    wait_for(lambda: 1 in state.finished, 15, "the end of attempt 1 to be reported")
    assert state.finished[1][0] == 5 and state.log_text(1) == "up\ndone\n"
    # The output the server had ("up\n") is not sent again: the new agent goes on from its end.
    assert sorted(state.log_offsets[shipped_before:]) == [(1, 3), (2, 3)]
    state.assign(3, "n1", ["sh", "-c", "echo third"])
    wait_for(lambda: 3 in state.finished, 15, "the resumed node to run new work")
    assert again.poll() is None


def test_a_job_that_keeps_its_stderr_apart_sends_it_as_a_stream_of_its_own(
    agents: Agents, peer: Any, tmp_path: Path
) -> None:
    """Both went out as one output: a workflow engine could not tell a job's stderr from its
    stdout (sbatch --error). The finish is reported once both streams got through, and a restarted
    agent goes on from what the server has of each."""
    state = peer.state
    script = "echo out; echo err >&2; while [ ! -e go ]; do sleep 0.05; done; echo out2; echo err2 >&2; exit 3"
    state.assign(1, "n1", ["sh", "-c", script], separate_stderr=True)
    state.assign(2, "n1", ["sh", "-c", "echo mixed; echo in >&2"])  # the default: one output
    agent = agents.start(peer.url, "n1", state.add_token("n1"))
    wait_for(lambda: state.log_text(1) == "out\n" and state.stderr_text(1) == "err\n", 15, "both streams")
    wait_for(lambda: 2 in state.finished, 15, "attempt 2 to end")
    assert state.log_text(2) == "mixed\nin\n" and 2 not in state.stderr_logs
    agent.kill()  # a restart: the new agent re-adopts the run, and sends on from what the server has
    agent.wait()
    again = agents.start(peer.url, "n1", "")
    wait_for(lambda: state.resumes, 15, "the new agent to resume")
    (tmp_path / "n1" / "attempts" / "1" / "go").touch()
    wait_for(lambda: 1 in state.finished, 15, "attempt 1 to end")
    assert state.finished[1][0] == 3
    assert state.log_text(1) == "out\nout2\n" and state.stderr_text(1) == "err\nerr2\n"
    assert state.stderr_offsets == [(1, 0), (1, 4)]  # "err\n" was not sent again
    last_chunk = max(i for i, (what, aid) in enumerate(state.arrivals) if aid == 1 and what != "finished")
    assert state.arrivals.index(("finished", 1)) > last_chunk
    assert again.poll() is None


def test_an_end_not_yet_reported_when_the_agent_dies_is_reported_by_the_next(agents: Agents, peer: Any) -> None:
    """The agent reaped the run while the server was away, then died: the end was in its memory
    only, and the next agent's resume had the server take the run for lost (a completed job ran
    again)."""
    state = peer.state
    state.assign(1, "n1", ["sh", "-c", "echo up; while [ ! -e go ]; do sleep 0.05; done; echo done; exit 7"])
    agent = agents.start(peer.url, "n1", state.add_token("n1"))
    wait_for(lambda: state.log_text(1) == "up\n", 15, "the attempt to run")
    peer.stop()
    (agents.tmp_path / "n1" / "attempts" / "1" / "go").touch()
    wait_for(lambda: any(e["msg"] == "attempt exited" for e in agents.log("n1")), 15, "the agent to see the run end")
    agent.kill()
    agent.wait()
    assert 1 not in state.finished

    peer.start()
    agents.start(peer.url, "n1", "")
    wait_for(lambda: 1 in state.finished, 15, "the end to be reported by the next agent")
    assert state.resumes[0]["running"] == [1] and state.lost == set()
    assert state.finished[1][0] == 7 and state.log_text(1) == "up\ndone\n"
    # What the run used, as its keeper wrote it beside its end, goes with it (the dead agent's
    # samples died with it: a shell's peak, below its keeper's, is not known).
    assert state.reports[1]["cpu_seconds"] >= 0
    # Nothing left for a later agent, once the server's answer acknowledged the end (the agent
    # removes the run's records after that answer, which comes after the server recorded it).
    running = agents.tmp_path / "n1" / "running"
    wait_for(lambda: not list(running.iterdir()), 15, "the run's records to be removed")


def test_sigusr1_hands_the_runs_over_to_the_next_agent(agents: Agents, peer: Any) -> None:
    """An upgrade without losing the work (slurmd's restart keeps its jobs): SIGUSR1 makes the agent
    exit 75 (systemd's Restart=on-failure starts the next at once) and leave its runs running,
    which the next agent re-adopts; SIGTERM stops them, as before."""
    state = peer.state
    script = "echo up; while [ ! -e go ]; do sleep 0.05; done; echo done; exit 4"
    state.assign(1, "n1", ["sh", "-c", script])
    agent = agents.start(peer.url, "n1", state.add_token("n1"))
    wait_for(lambda: state.log_text(1) == "up\n", 15, "the attempt to run")
    agent.send_signal(signal.SIGUSR1)
    assert agent.wait(15) == 75
    assert alive(state.started[1])

    agents.start(peer.url, "n1", "")
    wait_for(lambda: state.resumes, 15, "the next agent to resume")
    assert state.resumes[0]["running"] == [1]
    (agents.tmp_path / "n1" / "attempts" / "1" / "go").touch()
    wait_for(lambda: 1 in state.finished, 15, "the run's end to be reported")
    assert state.finished[1][0] == 4 and state.log_text(1) == "up\ndone\n"


def run_under_keeper(agents: Agents, peer: Any) -> tuple[subprocess.Popen[bytes], int, int]:
    """An agent running attempt 1 (a long sleep): the agent, the attempt's keeper, its command."""
    state = peer.state
    state.assign(1, "n1", ["sh", "-c", "echo up; exec sleep 300"])
    agent = agents.start(peer.url, "n1", state.add_token("n1"))
    wait_for(lambda: state.log_text(1) == "up\n", 15, "the attempt to run")
    keeper = state.started[1]
    [command] = [pid for pid in sysinfo.session_members(keeper) if pid != keeper]
    return agent, keeper, command


def test_a_restarted_agent_stops_a_run_whose_keeper_died_with_it(agents: Agents, peer: Any) -> None:
    state = peer.state
    agent, keeper, command = run_under_keeper(agents, peer)
    os.kill(keeper, signal.SIGKILL)  # (killed with the agent, as by a kill of the whole group)
    agent.kill()
    agent.wait()
    assert alive(command)

    agents.start(peer.url, "n1", "")
    wait_for(lambda: state.resumes, 15, "the new agent to resume")
    assert state.resumes[0]["running"] == [] and state.lost == {1}
    assert not alive(command)
    assert any(e["msg"] == "stopped what the previous agent here left running" for e in agents.log("n1"))


def test_a_restarted_agent_whose_node_the_server_forgot_pairs_again_only_with_a_boot_token(
    agents: Agents, peer: Any
) -> None:
    state = peer.state
    state.assign(1, "n1", ["sh", "-c", "echo up; exec sleep 300"])
    agent = agents.start(peer.url, "n1", state.add_token("n1"))
    wait_for(lambda: state.log_text(1) == "up\n", 15, "the attempt to run")
    agent.kill()
    agent.wait()
    state.secrets.clear()  # the server forgot the node meanwhile

    again = agents.start(peer.url, "n1", "")
    assert again.wait(15) == 3
    assert not alive(state.started[1])  # re-adopted, then stopped with the node that is no more
    said = [e["msg"] for e in agents.log("n1") if e["level"] == "error"]
    assert said[-1] == (
        "the server does not know this node's saved credentials (HTTP 401): it forgot the node, and there is no"
        " boot token to pair again with; exiting"
    )
    assert not (agents.tmp_path / "n1" / "credentials.json").exists()
    # Nothing saved and no token: a command-line error, not a pairing attempt.
    assert agents.start(peer.url, "n1", "").wait(15) == 2
    assert "--boot-token (or $CORRAL_BOOT_TOKEN) is required: no saved credentials in" in agents.log_text("n1")

    fresh = agents.start(peer.url, "n1", state.add_token("n1"))
    wait_for(lambda: state.secrets, 15, "pairing again with a new token")
    assert fresh.poll() is None


def test_one_agent_per_work_dir(agents: Agents, peer: Any) -> None:
    state = peer.state
    first = agents.start(peer.url, "n1", state.add_token("n1"))
    # (Saved once the pairing's answer is in: the peer knows the secret a moment earlier.)
    wait_for(lambda: (agents.tmp_path / "n1" / "credentials.json").exists(), 15, "pairing")
    second = agents.start(peer.url, "n1", "")
    assert second.wait(15) == 2
    assert any(e["msg"] == "another agent runs in this work dir; exiting" for e in agents.log("n1"))
    assert first.poll() is None and state.resumes == []


def test_work_survives_a_server_restart(agents: Agents, tmp_path: Path) -> None:
    state = PeerState()
    token = state.add_token("n1")
    go = tmp_path / "go"
    state.assign(1, "n1", ["sh", "-c", f"echo before; while [ ! -e {go} ]; do sleep 0.05; done; echo after; exit 5"])
    peer = Peer(state).start()
    agent = agents.start(peer.url, "n1", token)
    try:
        wait_for(lambda: "before" in state.log_text(1), 15, "the first output")
        peer.stop()  # the server dies; the attempt must run on regardless
        go.touch()
        wait_for(lambda: any(e["msg"] == "attempt exited" for e in agents.log("n1")), 15, "the attempt to end")
        assert agent.poll() is None and 1 not in state.finished
        state.assign(2, "n1", ["sh", "-c", "echo second"])
        peer.start()  # same port, same state: the restarted server
        wait_for(lambda: 1 in state.finished and 2 in state.finished, 20, "both finishes after the restart")
        assert state.finished[1][0] == 5
        assert state.log_text(1) == "before\nafter\n"
        assert state.log_text(2) == "second\n"
    finally:
        state.shutdown = True
        assert agent.wait(15) == 0
        peer.stop()


def test_a_start_report_held_back_by_an_outage_gives_the_time_it_started(agents: Agents, peer: Any) -> None:
    state = peer.state
    state.starts_down = True  # the server is down when the agent would report the start
    state.assign(1, "n1", ["sleep", "60"])
    agent = agents.start(peer.url, "n1", state.add_token("n1"))
    wait_for(lambda: any(e["msg"] == "attempt started" for e in agents.log("n1")), 15, "the attempt to start")
    time.sleep(1.5)
    back = time.time()
    state.starts_down = False
    wait_for(lambda: 1 in state.started, 15, "the start report once the server is back")
    assert state.started_at[1] < back - 1.0  # when it started, not when the report got through
    state.shutdown = True
    assert agent.wait(15) == 0


def test_gang_command_runs_on_the_first_node_only(agents: Agents, peer: Any) -> None:
    state = peer.state
    token = state.add_token("n2")
    state.assign(1, "n2", ["sh", "-c", "echo should-not-run"], node_ids=["n1", "n2"])
    state.assign(2, "n2", ["sh", "-c", 'echo "$CORRAL_NODELIST $CORRAL_NNODES"'], node_ids=["n2", "n3"])
    agent = agents.start(peer.url, "n2", token)
    wait_for(lambda: 2 in state.finished, 15, "the gang led by this node to finish")
    assert state.log_text(2) == "n2,n3 2\n"
    assert 1 not in state.started
    state.shutdown = True
    assert agent.wait(15) == 0


def test_a_spot_interruption_notice_goes_out_with_every_ping_from_when_it_is_given(agents: Agents, peer: Any) -> None:
    with fake_imds() as (imds_url, imds):
        agents.start(peer.url, "n1", peer.state.add_token("n1"), "--imds", imds_url)
        wait_for(lambda: len(peer.state.pings) >= 2 and imds.asked >= 2, 10, "pings that asked the metadata service")
        assert all("interruption" not in body for body in peer.state.pings)
        imds.notice = {"action": "terminate", "time": "2026-11-26T06:30:00Z"}
        wait_for(lambda: "interruption" in peer.state.pings[-1], 10, "a ping with the notice")
        asked = imds.asked
        count = len(peer.state.pings)
        wait_for(lambda: len(peer.state.pings) >= count + 2, 10, "more pings")
    assert peer.state.pings[-1]["interruption"] == {"action": "terminate", "time": "2026-11-26T06:30:00Z"}
    assert imds.asked == asked  # a notice is not taken back: not asked again
    assert any(e["msg"] == "the cloud takes this instance back" for e in agents.log("n1"))


def test_a_kill_sends_one_sigterm_then_sigkill_after_the_grace(agents: Agents, peer: Any) -> None:
    # The grace is the command's time to clean up (Slurm's KillWait): a SIGTERM again at every ping
    # would interrupt the cleanup it started at the first.
    state = peer.state
    state.assign(1, "n1", ["sh", "-c", "trap 'echo TERM' TERM; echo ready; while :; do sleep 0.05; done"])
    agent = agents.start(peer.url, "n1", state.add_token("n1"))
    wait_for(lambda: "ready" in state.log_text(1), 15, "the attempt to start")
    with state.lock:
        state.kill.add(1)
    wait_for(lambda: 1 in state.finished, 15, "the attempt to be killed")
    assert state.finished[1][0] == 128 + signal.SIGKILL
    assert state.log_text(1).splitlines().count("TERM") == 1  # (sh may also say its sleep was Terminated)
    killing = [e for e in agents.log("n1") if e["msg"] == "killing attempt on the server's request"]
    assert len(killing) == 1
    state.shutdown = True
    assert agent.wait(15) == 0


def test_a_job_flooding_its_output_does_not_hold_back_the_others_finishes(agents: Agents, peer: Any) -> None:
    state = peer.state
    state.log_delay = 0.05  # 12 MiB take ~2.4 s to send
    big = 12 * 1024 * 1024
    state.assign(1, "n1", ["sh", "-c", f"head -c {big} /dev/zero; exec sleep 60"])
    state.assign(2, "n1", ["sh", "-c", "sleep 0.5; echo done"])
    agent = agents.start(peer.url, "n1", state.add_token("n1"))
    wait_for(lambda: 2 in state.finished, 30, "the quiet job's finish")
    # Before, its finish waited for the whole backlog the flooding job had when a round began.
    with state.lock:
        assert len(state.logs.get(1, b"")) < big
    assert state.log_text(2) == "done\n"
    wait_for(lambda: len(state.logs.get(1, b"")) == big, 60, "the flood's output, all of it")
    state.shutdown = True
    assert agent.wait(15) == 0


def test_an_attempt_that_ended_is_listed_until_its_end_is_reported(agents: Agents, peer: Any) -> None:
    """The server takes a running attempt its agent lists neither as running nor as finished for
    lost; one whose command ended while its output is still going out (a finish waits for it) is
    still the agent's: it is listed as running until its finish goes out."""
    state = peer.state
    state.log_delay = 0.05  # 12 MiB take ~2.4 s to send
    big = 12 * 1024 * 1024
    state.assign(1, "n1", ["head", "-c", str(big), "/dev/zero"])
    agent = agents.start(peer.url, "n1", state.add_token("n1"))
    exited = lambda: any(e["msg"] == "attempt exited" for e in agents.log("n1"))  # noqa: E731
    wait_for(exited, 30, "the command to end")
    seen = len(state.pings)
    # The second ping from here was composed after the end (the agent pings one at a time).
    wait_for(lambda: len(state.pings) >= seen + 2, 10, "two more pings")
    with state.lock:
        ping, reported = state.pings[seen + 1], 1 in state.finished
    assert reported or 1 in ping["running"] or 1 in [f["attempt_id"] for f in ping["finished"]]
    assert not reported, "the finish went out before the check could be made: send more output"
    wait_for(lambda: 1 in state.finished, 60, "the finish")
    state.shutdown = True
    assert agent.wait(15) == 0


def test_a_keeper_killed_under_a_running_agent_leaves_the_run_lost_not_failed(agents: Agents, peer: Any) -> None:
    """The keeper alone SIGKILLed (not by corral): the command's end is unknown, so no exit goes
    out as if the command had failed with 137; its command is stopped, and the agent lists the run
    neither way, so the server takes it for lost (the job's on_node_failure deciding), as when the
    same happens with no agent running."""
    state = peer.state
    agent, keeper, command = run_under_keeper(agents, peer)
    os.kill(keeper, signal.SIGKILL)
    wait_for(lambda: not alive(command), 15, "the command to be stopped")
    seen = len(state.pings)
    wait_for(lambda: len(state.pings) >= seen + 2, 15, "two more pings")
    with state.lock:
        later = state.pings[seen + 1]
    assert 1 not in later["running"] and 1 not in [f["attempt_id"] for f in later["finished"]]
    assert 1 not in state.finished
    assert any(e["msg"].startswith("the attempt's keeper was killed") for e in agents.log("n1"))
    assert not list((agents.tmp_path / "n1" / "running").glob("1.*")), "a later agent would take it up"
    assert agent.poll() is None


# An agent whose main thread is inside stop.wait(), the event's lock held (Condition.wait before it
# lets go of it), when SIGTERM comes: the lock is taken here, and the signal sent, by hand.
SIGTERM_IN_STOP_WAIT = """
import os, signal, sys
from pathlib import Path
from corral.agent.agent import Agent, AgentOptions

agent = Agent(AgentOptions("http://127.0.0.1:9", "n1", None, {}, Path(sys.argv[1])))
agent.install_signal_handlers()
with agent.stop._cond:
    os.kill(os.getpid(), signal.SIGTERM)
    handled = True  # (a step of the main thread's: the handler has run)
print("stopped" if agent.stop.wait(30) else "not stopped", flush=True)
"""


def test_a_sigterm_that_comes_while_the_agent_waits_on_its_stop_event_stops_it(tmp_path: Path) -> None:
    """Seen in a chaos review: a node's agent SIGTERMed by the shutdown of its node logged 'signal
    received, stopping' and then nothing: its handler's stop.set() waited for the event's lock,
    which the main thread held in stop.wait(), for ever. Its runs went on to their ends after corral
    had requeued their jobs, until the next corral SIGKILLed the instance."""
    stopped = subprocess.run(
        [sys.executable, "-c", SIGTERM_IN_STOP_WAIT, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=20,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert stopped.stdout == "stopped\n", stopped.stderr


def test_a_jobs_signal_before_its_time_limit_is_sent_by_the_agent_and_logged(agents: Agents, peer: Any) -> None:
    """sbatch's --signal=USR1@2 with a 3 s time limit: the agent sends it about a second into the
    run, on its own clock (the server need not be reached), and says so in its log; the job
    checkpoints and ends on its own, before the limit."""
    state = peer.state
    script = "trap 'echo checkpoint; exit 0' USR1; echo ready; while :; do sleep 0.05; done"
    signal_item = {"number": signal.SIGUSR1, "before": 2.0, "main_only": False}
    state.assign(1, "n1", ["sh", "-c", script], time_limit=3.0, signal=signal_item)
    agent = agents.start(peer.url, "n1", state.add_token("n1"))
    wait_for(lambda: 1 in state.finished, 15, "the job to checkpoint and end")
    # (The whole group gets it: sh may also say its sleep was killed by it.)
    assert state.finished[1][0] == 0 and state.log_text(1).splitlines()[::-1][0] == "checkpoint"
    [sent] = [e for e in agents.log("n1") if e["msg"] == "sent the job's signal before its time limit"]
    assert sent["attempt_id"] == 1 and sent["job_id"] == 10 and sent["signal"] == "signal 10 (SIGUSR1)"
    assert sent["to"].startswith("process group ") and 0.9 <= sent["ran"] < 3.0
    state.shutdown = True
    assert agent.wait(15) == 0
