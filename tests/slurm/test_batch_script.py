"""corral's batch script (corral.executor.slurm.BATCH_SCRIPT) run by sh as slurmd runs it, without
Slurm: how it bounds the output it keeps (server.max_output) on nodes of every kind.
tests/slurm/test_slurm_executor.py runs it under a real Slurm."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.core.batch import ExitStatus
from corral.executor.slurm import BATCH_SCRIPT, FORWARD_CARRIER, parse_exit_status
from tests.support import interrupts_at_default

NOTE = "[corral: this attempt's output was cut here, at 10 bytes (server.max_output); the rest was not kept]"
COMMAND = ["sh", "-c", "echo 0123456789abcdef; echo to stderr >&2; exit 3"]


def run_script(tmp_path: Path, max_output: int, path: str = os.environ["PATH"]) -> tuple[bytes, str]:
    """The output the script wrote (its stdout and stderr, as Slurm's one --output file) and its
    exit status file."""
    script = tmp_path / "corral-batch.sh"
    script.write_text(BATCH_SCRIPT)
    status = tmp_path / "status"
    output = tmp_path / "output"
    with output.open("wb") as file:
        subprocess.run(
            ["sh", str(script), str(status), str(max_output), NOTE, *COMMAND],
            env={"PATH": path, "CORRAL_WITHHELD": "", "SLURM_JOB_ID": "17"},
            stdin=subprocess.DEVNULL,
            stdout=file,
            stderr=subprocess.STDOUT,
            timeout=30,
            check=False,
        )
    return output.read_bytes(), status.read_text()


def test_the_output_is_cut_at_max_output_with_the_line_and_the_exit_code_kept(tmp_path: Path) -> None:
    output, status = run_script(tmp_path, 10)
    assert output == f"0123456789\n{NOTE}\n".encode()
    exit_status = parse_exit_status(status)
    assert exit_status is not None and exit_status.exit_code == 3


def test_max_output_zero_keeps_it_all(tmp_path: Path) -> None:
    output, _ = run_script(tmp_path, 0)
    assert output == b"0123456789abcdef\nto stderr\n"


@pytest.mark.parametrize("kind", ["broken stdbuf", "no stdbuf"])
def test_a_node_whose_stdbuf_cannot_run_or_that_has_none_still_keeps_the_output(tmp_path: Path, kind: str) -> None:
    """coreutils' stdbuf makes the limiter's head unbuffered; one that cannot preload its library
    (a node without libstdbuf.so) fails before it runs head, and the whole output was dropped."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    needed = ["sh", "head", "wc", "cat", "mktemp", "mkfifo", "rm", "rmdir", "date", "mv", "sleep", "paste"]
    for name in needed:
        found = next(Path(d) / name for d in os.environ["PATH"].split(os.pathsep) if (Path(d) / name).exists())
        (bin_dir / name).symlink_to(found)
    if kind == "broken stdbuf":
        stdbuf = bin_dir / "stdbuf"
        stdbuf.write_text("#!/bin/sh\necho \"stdbuf: failed to find 'libstdbuf.so'\" >&2\nexit 125\n")
        stdbuf.chmod(stdbuf.stat().st_mode | stat.S_IXUSR)
    output, _ = run_script(tmp_path, 10, path=str(bin_dir))
    assert output == f"0123456789\n{NOTE}\n".encode()


def processes_marked(marker: str) -> list[str]:
    """The command lines of this host's processes whose environment holds `marker` (a job's own
    variable: every process the batch script starts inherits it)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if marker.encode() in (proc / "environ").read_bytes().split(b"\0"):
                found.append((proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            continue  # ended meanwhile, or another user's
    return found


def test_the_output_limiter_leaves_no_process_behind_once_the_script_has_ended(tmp_path: Path) -> None:
    """The limiter's watchdog was a background `(sleep 5; kill ...)`: the script killed the subshell
    and its `sleep 5` ran on after the job, where Slurm's linuxproc no longer sees it."""
    marker = f"CORRAL_TEST_MARK={tmp_path.name}"
    script = tmp_path / "corral-batch.sh"
    script.write_text(BATCH_SCRIPT)
    output = tmp_path / "output"
    with output.open("wb") as file:
        done = subprocess.run(
            ["sh", str(script), str(tmp_path / "status"), "10", NOTE, *COMMAND],
            env={"PATH": os.environ["PATH"], "CORRAL_WITHHELD": "", marker.split("=")[0]: marker.split("=")[1]},
            stdin=subprocess.DEVNULL,
            stdout=file,
            stderr=subprocess.STDOUT,
            timeout=30,
            check=False,
        )
    assert done.returncode == 3
    assert output.read_bytes() == f"0123456789\n{NOTE}\n".encode()
    assert processes_marked(marker) == []


@pytest.mark.parametrize("max_output", [10, 0])
def test_a_sigkilled_script_leaves_no_temporary_directory_behind(tmp_path: Path, max_output: int) -> None:
    """Slurm SIGKILLs every process of a job (scancel --signal=KILL, a command that outlives
    KillWait): the script's cleanup never runs, and the FIFO's directory stayed in the node's
    TMPDIR."""
    node_tmp = tmp_path / "node-tmp"
    node_tmp.mkdir()
    script = tmp_path / "corral-batch.sh"
    script.write_text(BATCH_SCRIPT)
    started = tmp_path / "started"
    command = ["sh", "-c", f"echo running; touch {started}; exec sleep 60"]
    env = {"PATH": os.environ["PATH"], "CORRAL_WITHHELD": "TMPDIR", "CORRAL_WITHHELD_TMPDIR": str(node_tmp)}
    job = subprocess.Popen(
        ["sh", str(script), str(tmp_path / "status"), str(max_output), NOTE, *command],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # a process group of its own: the job's processes, as Slurm kills them
    )
    try:
        deadline = time.monotonic() + 20
        while not started.exists():
            assert time.monotonic() < deadline, "the command did not start"
            time.sleep(0.05)
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(timeout=10)
    assert list(node_tmp.iterdir()) == []


def run_script_apart(tmp_path: Path, max_output: int, command: list[str], **env: str) -> tuple[bytes, bytes, str]:
    """The script run as Slurm runs a job with --error: its stdout to the --output file, its stderr
    to the --error file. The two files and the exit status file."""
    script = tmp_path / "corral-batch.sh"
    script.write_text(BATCH_SCRIPT)
    status, output, error = tmp_path / "status", tmp_path / "output", tmp_path / "error"
    with output.open("wb") as out, error.open("wb") as err:
        subprocess.run(
            ["sh", str(script), str(status), str(max_output), NOTE, *command],
            env={
                "PATH": os.environ["PATH"],
                "CORRAL_WITHHELD": "",
                "CORRAL_SEPARATE_STDERR": "1",
                "SLURM_JOB_ID": "17",
                **env,
            },
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            timeout=30,
            check=False,
        )
    return output.read_bytes(), error.read_bytes(), status.read_text()


@pytest.mark.parametrize("max_output", [10, 0])
def test_a_job_that_keeps_its_stderr_apart_has_each_stream_bounded_on_its_own(tmp_path: Path, max_output: int) -> None:
    """With --error (separate_stderr), the command's stderr went into the output's limiter: the
    --error file got nothing but the script's own lines, and the two were cut together."""
    command = ["sh", "-c", "echo 0123456789abcdef; echo err-0123456789 >&2; echo x; exit 3"]
    output, error, status = run_script_apart(tmp_path, max_output, command)
    if max_output:
        assert output == f"0123456789\n{NOTE}\n".encode()
        assert error == f"err-012345\n{NOTE}\n".encode()
    else:
        assert (output, error) == (b"0123456789abcdef\nx\n", b"err-0123456789\n")
    exit_status = parse_exit_status(status)
    assert exit_status is not None and exit_status.exit_code == 3


def test_a_short_stderr_kept_apart_is_kept_whole_and_no_process_is_left(tmp_path: Path) -> None:
    marker = f"CORRAL_TEST_MARK={tmp_path.name}"
    output, error, _ = run_script_apart(
        tmp_path, 10, ["sh", "-c", "echo out; echo err >&2"], CORRAL_TEST_MARK=tmp_path.name
    )
    assert (output, error) == (b"out\n", b"err\n")
    assert processes_marked(marker) == []


@pytest.mark.parametrize("job_signal", ["", "10", "B:10"])
@pytest.mark.parametrize("max_output", [1000, 0])
def test_a_signal_to_the_whole_job_reaches_the_command_and_the_script_and_its_limiter_outlive_it(
    tmp_path: Path, max_output: int, job_signal: str
) -> None:
    """`corral cancel --signal USR1` in front of Slurm is `scancel --signal=USR1 --full`: every
    process of the job gets it, the script and its output limiter too, as here by the process
    group. The command traps it and goes on; the script, which died of it before, outlives it, the
    output is whole and the exit status the command's own. A job whose own --signal is the same
    gets it once: the script sends the command only what Slurm's --signal sends it."""
    script = tmp_path / "corral-batch.sh"
    script.write_text(BATCH_SCRIPT)
    got, stop = tmp_path / "got", tmp_path / "stop"
    body = f"trap 'echo usr1 >> {got}' USR1; echo up; while [ ! -e {stop} ]; do sleep 0.05; done; echo after; exit 4"
    output = tmp_path / "output"
    with output.open("wb") as file:
        job = subprocess.Popen(
            ["sh", str(script), str(tmp_path / "status"), str(max_output), NOTE, "sh", "-c", body],
            env={"PATH": os.environ["PATH"], "CORRAL_WITHHELD": "", "SLURM_JOB_ID": "17", "CORRAL_SIGNAL": job_signal},
            stdin=subprocess.DEVNULL,
            stdout=file,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a process group of its own: the job's processes, as --full signals them
        )
    try:
        deadline = time.monotonic() + 20
        while b"up" not in output.read_bytes():
            assert time.monotonic() < deadline, "the command did not start"
            time.sleep(0.05)
        os.killpg(job.pid, signal.SIGUSR1)
        while not got.exists():
            assert time.monotonic() < deadline, "the command did not get the signal"
            time.sleep(0.05)
        stop.touch()
        assert job.wait(timeout=20) == 4
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    # (sh may say its sleep died of the signal: the command's own word.)
    kept = output.read_bytes()
    assert got.read_text() == "usr1\n" and kept.startswith(b"up\n") and kept.endswith(b"after\n"), kept
    exit_status = parse_exit_status((tmp_path / "status").read_text())
    assert exit_status is not None and exit_status.exit_code == 4 and not exit_status.signal


def start_job(
    tmp_path: Path,
    max_output: int,
    command: list[str],
    path: str = os.environ["PATH"],
    shell: str = "sh",
    **env: str,
) -> subprocess.Popen[bytes]:
    """The script started as slurmstepd starts it (by `shell`): the leader of a process group of its
    own, SIGINT and SIGQUIT at their defaults, its output (stdout and stderr) to tmp_path/output.
    Whatever is left of the group when the test ends is killed (`kill_started_jobs`)."""
    script = tmp_path / "corral-batch.sh"
    script.write_text(BATCH_SCRIPT)
    with (tmp_path / "output").open("wb") as file, interrupts_at_default():
        job = subprocess.Popen(
            [shell, str(script), str(tmp_path / "status"), str(max_output), NOTE, *command],
            env={"PATH": path, "CORRAL_WITHHELD": "", "SLURM_JOB_ID": "17", **env},
            stdin=subprocess.DEVNULL,
            stdout=file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    STARTED.append(job.pid)
    return job


# The process groups start_job started: a test that fails midway leaves its job running (a command
# in a loop, burning CPU for the rest of the suite), unless it is killed at the test's end.
STARTED: list[int] = []


@pytest.fixture(autouse=True)
def kill_started_jobs() -> Iterator[None]:
    yield
    while STARTED:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(STARTED.pop(), signal.SIGKILL)


def until_exists(path: Path, what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def until_in_output(tmp_path: Path, text: bytes) -> None:
    deadline = time.monotonic() + 20
    while text not in (tmp_path / "output").read_bytes():
        assert time.monotonic() < deadline, "the command did not start"
        time.sleep(0.05)


def ended(job: subprocess.Popen[bytes], tmp_path: Path) -> tuple[int, ExitStatus]:
    """The script's exit code and the exit status it recorded (the job killed whole if it hangs)."""
    try:
        code = job.wait(timeout=20)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    exit_status = parse_exit_status((tmp_path / "status").read_text())
    assert exit_status is not None
    return code, exit_status


@pytest.mark.parametrize("max_output", [1000, 0])
@pytest.mark.parametrize("main_only", [True, False])
def test_a_jobs_signal_reaches_its_main_process_with_b_and_every_process_of_it_without(
    tmp_path: Path, max_output: int, main_only: bool
) -> None:
    """A job's --signal in front of Slurm: Slurm sends the batch shell alone (sbatch's B:) the
    carrier, and the script sends the command the job's signal, as the agent does: with B: to its
    main process, without to the whole job (its children too). It went to the job's steps, of which
    corral's jobs have none, or to the script, which died of it or swallowed it: never the command.
    The command checkpoints on it and exits 0."""
    main, child, ready = tmp_path / "main", tmp_path / "child", tmp_path / "ready"
    inner = f"trap 'echo usr1 >> {child}; exit 0' USR1; touch {ready}; while :; do sleep 0.05; done"
    body = (
        # (Its child given a second to end by itself: killed then.)
        f"trap 'echo usr1 >> {main}; i=0; while kill -0 $c 2>/dev/null && [ $i -lt 20 ]; do sleep 0.05; i=$((i+1));"
        f' done; kill $c 2>/dev/null; exit 0\' USR1; sh -c "{inner}" & c=$!; echo up; while :; do sleep 0.05; done'
    )
    job = start_job(
        tmp_path, max_output, ["sh", "-c", body], CORRAL_SIGNAL=f"{'B:' if main_only else ''}{int(signal.SIGUSR1)}"
    )
    until_exists(ready, "the command did not start")
    os.kill(job.pid, FORWARD_CARRIER)  # as Slurm's --signal=B:... sends it: to the batch shell alone
    code, exit_status = ended(job, tmp_path)
    assert main.read_text() == "usr1\n"
    assert (child.read_text() if child.exists() else "") == ("" if main_only else "usr1\n")
    assert code == 0 and exit_status.exit_code == 0 and not exit_status.signal
    assert (tmp_path / "output").read_bytes().startswith(b"up\n")


@pytest.mark.parametrize("main_only", [True, False])
def test_a_jobs_sigint_reaches_the_command_at_its_default_disposition(tmp_path: Path, main_only: bool) -> None:
    """A shell starts a background command with SIGINT and SIGQUIT ignored (dash does): a job whose
    signal is INT could not trap it (a non-interactive sh cannot trap a signal ignored at its
    start), nor die of it."""
    trapped = tmp_path / "trapped"
    to = "B:" if main_only else ""
    job = start_job(
        tmp_path,
        0,
        ["sh", "-c", f"trap 'echo int > {trapped}; exit 0' INT; echo up; while :; do sleep 0.05; done"],
        CORRAL_SIGNAL=f"{to}{int(signal.SIGINT)}",
    )
    until_in_output(tmp_path, b"up")
    os.kill(job.pid, FORWARD_CARRIER)
    code, exit_status = ended(job, tmp_path)
    assert trapped.read_text() == "int\n" and code == 0 and exit_status.exit_code == 0
    # Untrapped, it ends the command as it would any process: 128+2, the command's own exit.
    (tmp_path / "status").unlink()
    job = start_job(tmp_path, 0, ["sh", "-c", "echo up; exec sleep 30"], CORRAL_SIGNAL=f"{to}{int(signal.SIGINT)}")
    until_in_output(tmp_path, b"up")
    os.kill(job.pid, FORWARD_CARRIER)
    code, exit_status = ended(job, tmp_path)
    assert code == exit_status.exit_code == 128 + signal.SIGINT and not exit_status.signal


def test_a_jobs_term_is_sent_the_command_and_not_taken_for_slurms_kill(tmp_path: Path) -> None:
    """A job may ask for TERM before its time limit: the carrier keeps it apart from Slurm's own
    TERM, which the script records as a kill; the command ends by itself."""
    body = "trap 'echo term; exit 0' TERM; echo up; while :; do sleep 0.05; done"
    job = start_job(tmp_path, 1000, ["sh", "-c", body], CORRAL_SIGNAL=str(int(signal.SIGTERM)))
    until_in_output(tmp_path, b"up")
    os.kill(job.pid, FORWARD_CARRIER)
    code, exit_status = ended(job, tmp_path)
    assert code == exit_status.exit_code == 0 and not exit_status.signal
    # (sh may say its sleep died of the signal: the command's own word.)
    kept = (tmp_path / "output").read_bytes()
    assert kept.startswith(b"up\n") and kept.endswith(b"term\n"), kept


@pytest.mark.parametrize("max_output", [1000, 0])
def test_slurms_kill_of_a_job_with_a_signal_is_recorded_as_such(tmp_path: Path, max_output: int) -> None:
    """Slurm's TERM to every process of the job (a time limit, a scancel) while the script waits for
    its command in the background: recorded as Slurm's kill, with the command's exit, as for a job
    in the foreground."""
    job = start_job(tmp_path, max_output, ["sh", "-c", "echo up; exec sleep 30"], CORRAL_SIGNAL="B:10")
    until_in_output(tmp_path, b"up")
    os.killpg(job.pid, signal.SIGTERM)
    code, exit_status = ended(job, tmp_path)
    assert code == exit_status.exit_code == 128 + signal.SIGTERM and exit_status.signal == "TERM"
    assert exit_status.cpu_seconds is not None  # what it used up to Slurm's kill


def test_a_node_without_env_default_signal_still_runs_a_job_with_a_signal(tmp_path: Path) -> None:
    """coreutils before 8.31 has no env --default-signal: the command runs without (SIGINT and
    SIGQUIT ignored), gets its signal and its exit is recorded."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    needed = ["sh", "date", "mv", "sleep", "paste"]
    for name in needed:
        found = next(Path(d) / name for d in os.environ["PATH"].split(os.pathsep) if (Path(d) / name).exists())
        (bin_dir / name).symlink_to(found)
    env = bin_dir / "env"
    env.write_text("#!/bin/sh\necho \"env: unrecognized option '$1'\" >&2\nexit 125\n")
    env.chmod(env.stat().st_mode | stat.S_IXUSR)
    body = "trap 'echo usr1; exit 5' USR1; echo up; while :; do sleep 0.05; done"
    job = start_job(tmp_path, 0, ["sh", "-c", body], path=str(bin_dir), CORRAL_SIGNAL="B:10")
    until_in_output(tmp_path, b"up")
    os.kill(job.pid, FORWARD_CARRIER)
    code, exit_status = ended(job, tmp_path)
    assert code == exit_status.exit_code == 5 and (tmp_path / "output").read_bytes() == b"up\nusr1\n"


@pytest.mark.parametrize("job_signal", ["", "B:10", "12"])
def test_the_command_starts_with_sigint_and_sigquit_at_their_default(tmp_path: Path, job_signal: str) -> None:
    """Whether it runs in the foreground (no signal) or in the background (a job with one)."""
    job = start_job(tmp_path, 0, ["sh", "-c", "grep SigIgn /proc/self/status"], CORRAL_SIGNAL=job_signal)
    code, _ = ended(job, tmp_path)
    ignored = int((tmp_path / "output").read_text().split()[1], 16)
    assert code == 0 and not ignored & (1 << (signal.SIGINT - 1) | 1 << (signal.SIGQUIT - 1))


def test_a_command_whose_name_holds_an_equals_sign_runs_as_named(tmp_path: Path) -> None:
    """env would take "a=b" for a variable: such a command goes through a shell's exec."""
    command = tmp_path / "run=1"
    command.write_text('#!/bin/sh\necho ran "$@"\nexit 3\n')
    command.chmod(0o755)
    job = start_job(tmp_path, 0, [str(command), "x=y"], CORRAL_SIGNAL="10")
    code, exit_status = ended(job, tmp_path)
    assert code == exit_status.exit_code == 3 and (tmp_path / "output").read_bytes() == b"ran x=y\n"


# A quarter of a second of CPU time, and a line.
BURN = """
import time
start = time.process_time()
while time.process_time() - start < 0.25:
    pass
print("burnt", flush=True)
"""
# Two of them at once: one in the background, which the command (sh) waits for.
BURN_TWICE = ["sh", "-c", '"$0" -c "$1" & "$0" -c "$1"; wait', sys.executable, BURN]


@pytest.mark.parametrize("shell", ["dash", "bash"])
@pytest.mark.parametrize(("job_signal", "max_output"), [("", 1000), ("", 0), ("B:10", 1000)])
def test_the_commands_cpu_time_is_recorded_with_its_exit(
    tmp_path: Path, shell: str, job_signal: str, max_output: int
) -> None:
    """The shell's `times` in the script's own process, before and after the command: the CPU time
    of the command and of every process it waited for (a subshell's `times` counts none of them),
    not the script's own work before it; whether the command runs in the foreground or in the
    background (a job with a signal), whichever sh the node has (dash: Debian's; bash: Red Hat's)."""
    if shutil.which(shell) is None:
        pytest.skip(f"no {shell} here")
    job = start_job(tmp_path, max_output, BURN_TWICE, shell=shell, CORRAL_SIGNAL=job_signal)
    code, exit_status = ended(job, tmp_path)
    assert code == exit_status.exit_code == 0
    assert (tmp_path / "output").read_bytes() == b"burnt\nburnt\n"
    # Half a second burnt, give or take the clock's tick (10 ms with dash); little more: the
    # interpreters' start.
    assert exit_status.cpu_seconds is not None and 0.48 <= exit_status.cpu_seconds < 1.5, exit_status
    assert (tmp_path / "status").read_text().endswith(f" cpu={exit_status.cpu_seconds:.3f}\n")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["corral-batch.sh", "output", "status"]


def test_a_job_whose_directory_cannot_be_entered_records_no_cpu_time(tmp_path: Path) -> None:
    """Its command never ran: not measured (None, as a command that never started under the agent),
    rather than 0 s."""
    job = start_job(tmp_path, 1000, ["true"], CORRAL_CHDIR=str(tmp_path / "missing"))
    code, exit_status = ended(job, tmp_path)
    assert code == exit_status.exit_code == 1 and exit_status.chdir_failed
    assert exit_status.cpu_seconds is None
    assert (tmp_path / "status").read_text().endswith(" chdir=failed cpu=\n")
