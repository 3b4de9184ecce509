"""The attempt runner with real processes: start, output, exit codes, process-group kills."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.agent import container, sysinfo
from corral.agent.runner import KEEPER, Attempt, AttemptSignal, AttemptSpec, BadAttempt, Runner, signal_run
from tests.support import alive
from tests.support import wait_until as wait_for


def spec(attempt_id: int, command: list[str], **extra: Any) -> AttemptSpec:
    return AttemptSpec(
        attempt_id=attempt_id,
        job_id=extra.pop("job_id", 7),
        command=command,
        env=extra.pop("env", {}),
        node_ids=extra.pop("node_ids", ["n1"]),
        resources={},
        **extra,
    )


def run_to_end(runner: Runner, attempt: Attempt, timeout: float = 10) -> int:
    wait_for(lambda: runner.poll() is not None and attempt.exited, timeout, f"attempt {attempt.attempt_id} to exit")
    assert attempt.exit_code is not None
    return attempt.exit_code


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[Runner]:
    r = Runner(tmp_path / "work", base_env={"PATH": os.environ["PATH"], "CORRAL_BOOT_TOKEN": "s3cret"}, kill_grace=0.3)
    yield r
    r.terminate_all(grace=0.1)


def test_output_and_exit_code(runner: Runner) -> None:
    attempt = runner.start(spec(1, ["sh", "-c", "echo out; echo err >&2; exit 3"]))
    assert attempt is not None and attempt.pid > 0
    assert run_to_end(runner, attempt) == 3
    assert attempt.log_path.read_text() == "out\nerr\n"


def test_a_job_that_keeps_its_stderr_apart_writes_it_to_a_file_of_its_own(runner: Runner, tmp_path: Path) -> None:
    """Workflow engines (Nextflow's .command.err, CWL's `stderr:`) need a job's stderr apart, as
    sbatch --error gives it; both went to one file."""
    attempt = runner.start(spec(11, ["sh", "-c", "echo out; echo err >&2; echo out2; exit 3"], separate_stderr=True))
    assert attempt is not None and attempt.stderr_path == tmp_path / "work" / "logs" / "11.err"
    assert run_to_end(runner, attempt) == 3
    assert attempt.log_path.read_text() == "out\nout2\n"
    assert attempt.stderr_path.read_text() == "err\n"
    # The agent's own word on a start that failed is the attempt's stderr.
    missing = runner.start(spec(12, ["/no/such/program"], separate_stderr=True))
    assert missing is not None and missing.exit_code == 127 and missing.stderr_path is not None
    assert missing.log_path.read_text() == ""
    assert "cannot run '/no/such/program'" in missing.stderr_path.read_text()
    away = runner.start(spec(13, ["true"], separate_stderr=True, chdir=str(tmp_path / "missing")))
    assert away is not None and away.exit_code == 1 and away.stderr_path is not None
    assert "chdir to" in away.stderr_path.read_text() and away.log_path.read_text() == ""


def test_the_default_keeps_stderr_in_the_output_and_no_second_file(runner: Runner, tmp_path: Path) -> None:
    attempt = runner.start(spec(14, ["sh", "-c", "echo out; echo err >&2"]))
    assert attempt is not None and attempt.stderr_path is None
    assert run_to_end(runner, attempt) == 0
    assert attempt.log_path.read_text() == "out\nerr\n"
    assert not (tmp_path / "work" / "logs" / "14.err").exists()


def test_separate_stderr_in_an_attempt_is_read_and_refused_when_not_a_boolean() -> None:
    base = {"attempt_id": 1, "job_id": 2, "command": ["true"]}
    assert AttemptSpec.from_json({**base, "separate_stderr": True}).separate_stderr is True
    assert AttemptSpec.from_json(base).separate_stderr is False
    with pytest.raises(BadAttempt, match="attempt.separate_stderr: must be true or false"):
        AttemptSpec.from_json({**base, "separate_stderr": "yes"})


def test_environment_and_working_directory(runner: Runner, tmp_path: Path) -> None:
    script = (
        'echo "$CORRAL_JOB_ID $CORRAL_ATTEMPT_ID $CORRAL_NODELIST $CORRAL_NNODES $MINE ${CORRAL_BOOT_TOKEN:-none}"; pwd'
    )
    attempt = runner.start(spec(2, ["sh", "-c", script], env={"MINE": "x"}, node_ids=["a", "b"], job_id=9))
    assert attempt is not None
    assert run_to_end(runner, attempt) == 0
    first, cwd = attempt.log_path.read_text().splitlines()
    assert first == "9 2 a,b 2 x none"
    assert Path(cwd) == tmp_path / "work" / "attempts" / "2"


def test_a_batch_script_is_written_to_its_attempts_directory_and_run_with_its_arguments(
    runner: Runner, tmp_path: Path
) -> None:
    text = '#!/bin/sh\necho "$0" "$#" "$1" "$2"; pwd; echo err >&2; exit 4\n'
    attempt = runner.start(spec(12, ["job.sh", "one arg", "two"], script=text, job_id=9))
    assert attempt is not None
    assert run_to_end(runner, attempt) == 4
    own = tmp_path / "work" / "attempts" / "12"
    assert attempt.log_path.read_text() == f"{own / 'job.sh'} 2 one arg two\n{own}\nerr\n"
    assert (own / "job.sh").read_text() == text
    assert (own / "job.sh").stat().st_mode & 0o777 == 0o700  # the job's user's alone, as slurmd's copy
    # With a directory of its own (chdir), it runs there, from the attempt's directory.
    shared = tmp_path / "shared"
    shared.mkdir()
    attempt = runner.start(spec(13, ["job.sh"], script="#!/bin/sh\npwd\n", chdir=str(shared)))
    assert attempt is not None and run_to_end(runner, attempt) == 0
    assert attempt.log_path.read_text() == f"{shared}\n"
    # An interpreter the node does not have: exec says "not found" of a file that is there.
    attempt = runner.start(spec(14, ["job.sh"], script="#!/no/such/shell\ntrue\n"))
    assert attempt is not None and attempt.exit_code == 127
    assert attempt.log_path.read_text() == (
        "corral-agent: cannot run 'job.sh' (its interpreter line '#!/no/such/shell'): No such file or directory\n"
    )


def test_a_script_in_a_work_item_is_read_and_a_name_that_is_a_path_refused() -> None:
    base = {"attempt_id": 1, "job_id": 2, "command": ["job.sh", "a"], "script": "#!/bin/sh\n"}
    assert AttemptSpec.from_json(base).script == "#!/bin/sh\n"
    assert AttemptSpec.from_json({**base, "script": None}).script is None
    with pytest.raises(BadAttempt, match="attempt.script: must be a script's text"):
        AttemptSpec.from_json({**base, "script": 3})
    with pytest.raises(BadAttempt, match="attempt.command: a script's first word names its file"):
        AttemptSpec.from_json({**base, "command": ["../job.sh"]})


def test_a_script_in_a_container_with_a_directory_of_its_own_has_its_file_mounted(tmp_path: Path) -> None:
    """A container sees its working directory: the attempt's (where the script is), or the job's
    own (chdir), where the script is not: its file is then mounted, read-only, at its path."""
    runner = Runner(tmp_path / "work", base_env={})
    runner.engine = container.Engine(("podman",))
    own = tmp_path / "work" / "attempts" / "5"
    own.mkdir(parents=True)
    item = spec(5, ["job.sh", "x"], script="#!/bin/sh\n", image="busybox")
    argv = runner.argv(item, own, own)
    assert argv[-3:] == ["busybox", str(own / "job.sh"), "x"] and ":ro" not in " ".join(argv)
    argv = runner.argv(dataclasses.replace(item, chdir="/shared"), Path("/shared"), own)
    assert f"{own / 'job.sh'}:{own / 'job.sh'}:ro" in argv and "/shared:/shared" in argv


def test_command_not_found_is_127(runner: Runner) -> None:
    attempt = runner.start(spec(3, ["/no/such/program", "arg"]))
    assert attempt is not None and attempt.exited and attempt.exit_code == 127
    assert "cannot run '/no/such/program'" in attempt.log_path.read_text()


def test_command_not_executable_is_126(runner: Runner, tmp_path: Path) -> None:
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    attempt = runner.start(spec(4, [str(script)]))
    assert attempt is not None and attempt.exit_code == 126
    assert "Permission denied" in attempt.log_path.read_text()


def test_killed_by_signal_is_128_plus_n(runner: Runner) -> None:
    attempt = runner.start(spec(5, ["sh", "-c", "kill -9 $$"]))
    assert attempt is not None
    assert run_to_end(runner, attempt) == 128 + 9
    # The signal is kept beside it (what the agent reports as exit_signal); an exit with 137 has none.
    assert attempt.exit_signal == 9
    exiting = runner.start(spec(15, ["sh", "-c", "exit 137"]))
    assert exiting is not None and run_to_end(runner, exiting) == 137 and exiting.exit_signal is None


def test_kill_takes_the_whole_process_group(runner: Runner, tmp_path: Path) -> None:
    marker = tmp_path / "child.pid"
    attempt = runner.start(spec(6, ["sh", "-c", f"sleep 60 & echo $! > {marker}; wait"]))
    assert attempt is not None
    child = int(wait_for(lambda: marker.exists() and marker.read_text().strip(), 10, "the child's pid"))
    assert alive(child)
    assert runner.kill(6)
    assert run_to_end(runner, attempt) == 128 + 15
    wait_for(lambda: not alive(child), 10, "the grandchild to die")


def test_kill_escalates_to_sigkill(runner: Runner, tmp_path: Path) -> None:
    marker = tmp_path / "ready"
    script = f"trap '' TERM; touch {marker}; while :; do sleep 0.05; done"
    attempt = runner.start(spec(7, ["sh", "-c", script]))
    assert attempt is not None
    wait_for(marker.exists, 10, "the trap to be set")
    runner.kill(7)
    assert run_to_end(runner, attempt) == 128 + 9


def test_leftovers_are_killed_when_the_command_exits(runner: Runner, tmp_path: Path) -> None:
    marker = tmp_path / "child.pid"
    attempt = runner.start(spec(8, ["sh", "-c", f"sleep 60 >/dev/null 2>&1 & echo $! > {marker}"]))
    assert attempt is not None
    assert run_to_end(runner, attempt) == 0
    child = int(marker.read_text())
    wait_for(lambda: not alive(child), 10, "the leftover child to die")


def test_usage_measures_cpu_and_memory(runner: Runner) -> None:
    code = "x = bytearray(64 * 1024 * 1024)\nwhile True: pass"
    attempt = runner.start(spec(9, [sys.executable, "-c", code]))
    assert attempt is not None
    seen: list[tuple[float, int]] = []

    def busy() -> bool:
        time.sleep(0.2)
        seen.append(runner.usage())
        return seen[-1][0] > 0.3 and seen[-1][1] >= 64

    wait_for(busy, 15, f"usage to show a busy attempt (saw {seen})")


def test_usage_leaves_out_the_attempts_keepers(runner: Runner) -> None:
    """A keeper is corral's (an interpreter of about 11 MiB), not the job's: the load a node
    reports, which the utilised placement policies read, is its commands'."""
    attempts = [runner.start(spec(attempt_id, ["sleep", "60"])) for attempt_id in (21, 22, 23, 24)]
    assert all(a is not None and a.pid > 0 for a in attempts)
    wait_for(lambda: all(len(sysinfo.session_members(a.pid)) == 2 for a in attempts if a), 10, "the commands to run")
    _, ram_mib = runner.usage()
    assert ram_mib < 4 * 5  # four sleeps (about 1.6 MiB each); with their keepers it was 49


def test_terminate_all_and_refuse_new_work(runner: Runner) -> None:
    attempt = runner.start(spec(10, ["sleep", "60"]))
    assert attempt is not None
    runner.terminate_all(grace=2)
    assert attempt.exit_code == 128 + 15
    assert runner.start(spec(11, ["true"])) is None


def test_bad_attempt_names_the_field() -> None:
    with pytest.raises(BadAttempt, match="attempt.command"):
        AttemptSpec.from_json({"attempt_id": 1, "job_id": 1, "command": "echo hi"})
    with pytest.raises(BadAttempt, match="attempt.attempt_id"):
        AttemptSpec.from_json({"job_id": 1, "command": ["true"]})
    parsed = AttemptSpec.from_json({"attempt_id": 1, "job_id": 2, "command": ["true"], "node_ids": ["n"]})
    assert parsed.command == ["true"] and parsed.env == {}


@pytest.mark.parametrize(
    ("command", "env", "says"),
    [
        (["true"], {"A=B": "x"}, "illegal environment variable name"),
        (["true"], {"A": "x\x00y"}, "embedded null byte"),
        (["tr\x00ue"], {}, "embedded null byte"),
    ],
)
def test_what_no_process_can_be_given_fails_the_attempt_not_the_agent(
    runner: Runner, command: list[str], env: dict[str, str], says: str
) -> None:
    """A job whose environment or command no exec can take (an '=' in a name, a NUL byte: a job
    file or the API could give them) raised out of the agent's work loop, which stopped the agent:
    the node went down, the job was requeued as a temporary failure and took down the next node,
    and the next."""
    attempt = runner.start(AttemptSpec(8, 7, command, env, ["n1"], {}))
    assert attempt is not None and attempt.exited and attempt.exit_code == 126
    assert says in attempt.log_path.read_text()
    after = runner.start(spec(9, ["sh", "-c", "echo fine"]))
    assert after is not None and run_to_end(runner, after) == 0


# An agent killed as it starts an attempt: after its keeper is running, before the run's record is
# written (a SIGKILL, the OOM killer, at that moment).
KILLED_BEFORE_THE_RECORD = """
import os, sys
from pathlib import Path
from corral.agent.runner import AttemptSpec, Runner

class KilledThere(Runner):
    def _record(self, spec, pid, started_at):
        print(pid, flush=True)  # the keeper's
        os._exit(9)

work, marker = Path(sys.argv[1]), sys.argv[2]
command = ["sh", "-c", f"echo ran >> {marker}"]
KilledThere(work).start(AttemptSpec(1, 7, command, {}, ["n1"], {}))
"""


def test_an_agent_killed_before_it_recorded_a_run_leaves_no_command_running(tmp_path: Path) -> None:
    """Seen in a chaos review (at the code): the keeper started the command before the agent wrote
    the run's record. An agent killed in between left the command running, unknown to the next
    agent, and the server, never told of its start, gave the next agent the attempt again: the job
    ran twice at once, with no event to say so."""
    work, marker = tmp_path / "work", tmp_path / "ran"
    child = subprocess.run(
        [sys.executable, "-c", KILLED_BEFORE_THE_RECORD, str(work), str(marker)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert child.returncode == 9, child.stderr
    keeper = int(child.stdout)
    wait_for(lambda: not alive(keeper), 10, "the dead agent's keeper to end")
    assert not marker.exists()

    # The next agent knows of no run; given the attempt again (its start was never reported), it
    # runs it, once.
    runner = Runner(work)
    assert runner.adopt() == ([], [])
    attempt = runner.start(spec(1, ["sh", "-c", f"echo ran >> {marker}"]))
    assert attempt is not None and run_to_end(runner, attempt) == 0
    assert marker.read_text() == "ran\n"


# A shell that records each SIGUSR1 it gets in `rec` with the time, starts a child shell (also
# recording its own to `child`), writes `up`, and runs until a file `go` appears, then exits 0.
TRAPS = (
    "trap 'echo main $(date +%s.%N) >> rec' USR1;"
    " sh -c \"trap 'echo child >> child' USR1; while [ ! -e go ]; do sleep 0.05; done\" &"
    " echo up > up; while [ ! -e go ]; do sleep 0.05; done; wait; exit 0"
)


def send_due_signals(runner: Runner, seconds: float) -> None:
    """What the agent's reporter does every round, for `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for attempt in runner.signals_due():
            runner.send_signal(attempt.attempt_id)
        runner.poll()
        time.sleep(0.05)


@pytest.mark.parametrize("main_only", [False, True], ids=["process-group", "main-process-only"])
def test_a_jobs_signal_reaches_it_once_before_its_time_limit(runner: Runner, tmp_path: Path, main_only: bool) -> None:
    """sbatch's --signal=USR1@2 with a 3 s limit: sent once, about 1 s into the run, so the job can
    checkpoint; to its whole process group (its keeper, the group's leader, outlives it and records
    the job's own end), or with B: to its main process alone, not the child it started."""
    attempt = runner.start(spec(41, ["sh", "-c", TRAPS], time_limit=3.0, signal=AttemptSignal(10, 2.0, main_only)))
    assert attempt is not None
    own = tmp_path / "work" / "attempts" / "41"
    wait_for(lambda: (own / "up").exists(), 5, "the job to start")
    send_due_signals(runner, 2.5)  # (the limit is the server's to enforce: the job runs on here)
    [line] = (own / "rec").read_text().splitlines()
    received = float(line.split()[1])
    assert attempt.started_at + 0.9 <= received < attempt.started_at + 3.0
    assert (own / "child").exists() is not main_only
    assert attempt.signal_sent and runner.signals_due() == []
    (own / "go").touch()
    assert run_to_end(runner, attempt) == 0  # the job's end, as its keeper recorded it


def test_a_signal_whose_time_is_the_whole_limit_goes_at_the_start_and_none_without_a_limit(runner: Runner) -> None:
    at_start = runner.start(spec(42, ["sleep", "30"], time_limit=5.0, signal=AttemptSignal(10, 60.0)))
    no_limit = runner.start(spec(43, ["sleep", "30"], signal=AttemptSignal(10, 60.0)))
    assert at_start is not None and no_limit is not None
    assert runner.signals_due() == [at_start]
    # A limit that a ping changes (corral update --time-limit of a running job) moves it.
    at_start.time_limit, no_limit.time_limit = 100.0, 59.0
    assert runner.signals_due() == [no_limit]
    at_start.time_limit, no_limit.time_limit = 5.0, None
    assert runner.signals_due() == [at_start]
    assert runner.send_signal(42) == f"process group {at_start.pid}"
    assert runner.send_signal(42) is None  # once
    # sleep does not catch it: killed by SIGUSR1, as a job that does not trap it is.
    run_to_end(runner, at_start)
    assert at_start.exit_signal == 10


def test_a_signal_in_a_work_item_is_read_and_a_bad_one_refused() -> None:
    item = {"attempt_id": 1, "job_id": 2, "command": ["x"], "time_limit": 3.0}
    parsed = AttemptSpec.from_json({**item, "signal": {"number": 10, "before": 62.0, "main_only": True}})
    assert parsed.signal == AttemptSignal(10, 62.0, True)
    assert AttemptSpec.from_json(item).signal is None
    for bad in ({"number": 0, "before": 1}, {"number": "USR1", "before": 1}, {"number": 10}, 10):
        with pytest.raises(BadAttempt, match="attempt.signal"):
            AttemptSpec.from_json({**item, "signal": bad})


def test_a_re_adopted_run_is_not_sent_its_signal_again_and_gets_one_not_sent_yet(tmp_path: Path) -> None:
    """An agent started again after the one that ran the job died: the signal sent before is not
    sent again (kept beside the run's record), and one whose time had not come is sent when due."""
    first = Runner(tmp_path / "work", kill_grace=0.3)
    sent = first.start(spec(44, ["sh", "-c", TRAPS], time_limit=30.0, signal=AttemptSignal(10, 29.5)))
    later = first.start(spec(45, ["sh", "-c", TRAPS], time_limit=30.0, signal=AttemptSignal(10, 28.0)))
    assert sent is not None and later is not None
    own = tmp_path / "work" / "attempts"
    wait_for(lambda: (own / "44" / "up").exists() and (own / "45" / "up").exists(), 5, "the jobs to start")
    send_due_signals(first, 1.0)
    assert (own / "44" / "rec").exists() and not (own / "45" / "rec").exists()
    # The agent dies here: its runner is dropped, the runs go on under their keepers.
    second = Runner(tmp_path / "work", kill_grace=0.3)
    try:
        adopted, lost = second.adopt()
        assert sorted(a.attempt_id for a in adopted) == [44, 45] and lost == []
        send_due_signals(second, 2.0)
        assert len((own / "44" / "rec").read_text().splitlines()) == 1
        assert len((own / "45" / "rec").read_text().splitlines()) == 1
        for attempt_id in (44, 45):
            (own / str(attempt_id) / "go").touch()
        wait_for(lambda: len(second.poll()) == 2 or all(a.exited for a in adopted), 10, "both to end")
        assert [a.exit_code for a in adopted] == [0, 0]
        second.forget(44)
        assert not (tmp_path / "work" / "running" / "44.signalled").exists()
    finally:
        second.terminate_all(grace=0.1)


def test_the_keeper_refuses_an_option_it_does_not_take(tmp_path: Path) -> None:
    for options in (["--ignore"], ["--ignore", "USR1"], ["--other", "10"], ["--ignore", "10", "x"]):
        argv = [sys.executable, "-I", "-S", KEEPER, str(tmp_path / "status"), "0", "0", *options, "--", "true"]
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30, check=False)
        assert done.returncode == 2 and "usage: keeper.py" in done.stderr, (options, done.stderr)


@pytest.mark.parametrize("number", [10, 1, 34])  # USR1, HUP, a real-time signal
def test_a_signal_asked_for_the_group_ends_a_command_that_does_not_catch_it_as_its_own_end(
    runner: Runner, number: int
) -> None:
    """`corral cancel --signal` to a run's whole process group, its keeper (the group's leader)
    included: the keeper ignores every signal it can, so it outlives it and records the command's
    end by that signal (exit_signal), not a keeper killed (a run lost). Its command gets each at its
    default disposition."""
    attempt = runner.start(spec(44, ["sleep", "30"]))
    assert attempt is not None
    wait_for(lambda: sysinfo.children_of(attempt.pid), 5, "the command to start")
    assert runner.signal(44, number, main_only=False) == f"process group {attempt.pid}"
    assert run_to_end(runner, attempt) == 128 + number
    assert attempt.exit_signal == number and not attempt.keeper_killed
    assert runner.signal(44, number, main_only=False) is None  # (ended: nothing to send it to)


def test_a_signal_for_the_group_spares_a_keeper_that_would_die_of_it(tmp_path: Path) -> None:
    """A keeper of an older corral, re-adopted after an upgrade, ignores TERM, INT and HUP but not
    USR1: `corral cancel --signal USR1` would have killed it with the rest of the group, and the
    run's end been lost. Its command gets it; the keeper, spared, goes on to record the end. One
    that ignores the signal gets it with its group, as ever."""
    ready = tmp_path / "ready"
    # The old keeper's stand-in: the leader of its session, TERM ignored, USR1 at its default,
    # waiting for its command.
    keeper = subprocess.Popen(
        ["sh", "-c", f"trap '' TERM; sleep 30 & c=$!; touch {ready}; wait $c; echo $? > {tmp_path / 'status'}"],
        start_new_session=True,
    )
    try:
        wait_for(lambda: ready.exists() and sysinfo.children_of(keeper.pid), 5, "the command to start")
        [command] = sysinfo.children_of(keeper.pid)
        assert sysinfo.ignores(keeper.pid, signal.SIGTERM) and sysinfo.ignores(keeper.pid, signal.SIGUSR1) is False
        assert signal_run(keeper.pid, signal.SIGUSR1) == f"process group {keeper.pid} (its keeper spared)"
        assert keeper.wait(timeout=10) == 0  # it lived to record its command's end, by USR1
        assert (tmp_path / "status").read_text() == f"{128 + signal.SIGUSR1}\n" and not alive(command)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(keeper.pid, signal.SIGKILL)
        keeper.wait()
    assert sysinfo.ignores(keeper.pid, signal.SIGUSR1) is None  # (gone: not known)
