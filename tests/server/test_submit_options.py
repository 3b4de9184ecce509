"""What `corral submit` and `corral update` take on their command line, as a Slurm user types it,
against a served app (no control loop: the jobs are only stored, which is what is looked at)."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from pathlib import Path
from subprocess import PIPE

from corral.core.model import Resources
from corral.core.snapshot import Annotation
from tests.server.cli import CORRAL, corral
from tests.support import interrupts_at_default, served_app, wait_until


def test_a_start_time_of_now_or_now_plus_a_duration_is_taken_as_slurms_begin_takes_it(tmp_path: Path) -> None:
    """`corral update --not-before now` worked where `corral submit --not-before now` was refused
    as 'not a time'; Slurm's --begin=now+1hour was refused by both."""
    with served_app(tmp_path) as (url, store):
        before = time.time()
        now = int(corral(url, "submit", "--not-before", "now", "--", "true").stdout)
        later = int(corral(url, "submit", "--not-before", "now+2h", "--", "true").stdout)
        after = time.time()
        assert before <= (store.job(now).not_before or 0) <= after
        assert before + 7200 <= (store.job(later).not_before or 0) <= after + 7200
        corral(url, "update", str(later), "--not-before", "NOW+1:00:00")
        assert before + 3600 <= (store.job(later).not_before or 0) <= time.time() + 3600
        bad = corral(url, "submit", "--not-before", "now+soon", "--", "true", check=False)
        assert bad.returncode == 1
        assert bad.stderr.startswith("error: --not-before 'now+soon': not a duration: 'soon'"), bad.stderr
        assert len(store.list_job_rows()) == 2


def test_submit_wait_says_when_the_job_it_waits_for_cannot_be_placed(tmp_path: Path) -> None:
    """A job no instance type holds stays queued until an operator adds one: `corral submit --wait`
    on it (`-f examples/jobs.jsonl`, whose last job asks for 64 GiB) sat silent, as if hung."""
    with served_app(tmp_path) as (url, store):
        env = {**os.environ, "CORRAL_URL": url, "CORRAL_TOKEN": "t"}
        # Started with SIGINT at its default, as from a terminal, whatever this process has.
        with interrupts_at_default():
            waiting = subprocess.Popen(
                [CORRAL, "submit", "--wait", "--ram", "64GiB", "--", "true"],
                env=env,
                stdout=PIPE,
                stderr=PIPE,
                text=True,
            )
        said = ""
        try:
            wait_until(lambda: store.list_job_rows() != [], 30, "the job to be submitted")
            reason = "no instance type has 64 GiB RAM (the largest has 32 GiB RAM)"
            store.annotate_many([Annotation(1, reason, unplaceable=True)], {}, time.time())  # as a pass does
            assert waiting.stderr is not None
            ready, _, _ = select.select([waiting.stderr], [], [], 30)  # silent: the failure is the assert's
            said = waiting.stderr.readline() if ready else ""
        finally:
            waiting.send_signal(signal.SIGINT)
            try:
                waiting.wait(30)
            except subprocess.TimeoutExpired:
                # (What it said, and how it held SIGINT: ignored, it had been started ignoring it.)
                dispositions = Path(f"/proc/{waiting.pid}/status").read_text().splitlines()
                held = [line for line in dispositions if line.startswith(("State", "SigBlk", "SigIgn", "SigCgt"))]
                waiting.kill()
                rest = waiting.communicate(timeout=30)
                raise AssertionError(f"Ctrl-C did not stop the wait: said {said!r}, then {rest!r}; {held}") from None
        assert said == (
            f"job 1 cannot be placed: {reason}; it waits for an instance type that holds it"
            " (corral update 1 to ask for less, corral cancel 1)\n"
        )
        assert waiting.returncode == 130  # Ctrl-C stops the waiting, not the job


def test_a_program_named_by_a_relative_path_is_warned_of_with_its_full_path(tmp_path: Path) -> None:
    """`corral submit ./step`, as `sbatch ./step`, queued a job bound to end with exit 127: it runs in
    its attempt's directory on the node. It is still queued (the README shows why it fails). A step
    that is a script here (#!) is what sbatch would have sent with the job: --script is named."""
    step = tmp_path / "step"
    step.write_bytes(b"\x7fELF")
    script = tmp_path / "step.sh"
    script.write_text("#!/bin/sh\n")
    (tmp_path / "home").mkdir()
    with served_app(tmp_path / "home") as (url, store):
        env = {**os.environ, "CORRAL_URL": url, "CORRAL_TOKEN": "t"}
        done = subprocess.run([CORRAL, "submit", "./step"], env=env, cwd=tmp_path, capture_output=True, text=True)
        assert done.returncode == 0 and done.stdout == "1\n"
        assert done.stderr == (
            "warning: ./step is a relative path, and the command does not run here: on the node it runs in a"
            " directory of its own (its attempt's), where ./step is not found (exit 127):"
            f" give its full path ({step})\n"
        )
        full = subprocess.run([CORRAL, "submit", str(step)], env=env, cwd=tmp_path, capture_output=True, text=True)
        assert full.stderr == "" and [store.job(i).command[0] for i in (1, 2)] == ["./step", str(step)]
        done = subprocess.run([CORRAL, "submit", "./step.sh"], env=env, cwd=tmp_path, capture_output=True, text=True)
        assert done.returncode == 0 and done.stdout == "3\n"
        assert done.stderr == (
            "warning: ./step.sh is a relative path, and the command does not run here: on the node it runs in a"
            " directory of its own (its attempt's), where ./step.sh is not found (exit 127): submit it as a batch"
            " script, its content sent with the job: corral submit --script ./step.sh\n"
        )


def test_job_options_given_with_a_job_file_are_refused_not_dropped(tmp_path: Path) -> None:
    """`corral submit -f jobs.jsonl --vcpus 4 --name x` submitted the file's jobs with 1 vCPU and no
    name, without a word (sbatch's options override the script's): each is refused by its option."""
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text('{"command": ["true"]}\n')
    with served_app(tmp_path) as (url, store):
        refused = corral(url, "submit", "-f", str(jobs), "--vcpus", "4", "--name", "x", check=False)
        assert refused.returncode == 1
        assert refused.stderr == (
            'error: --name, --vcpus: with --file, each job of the file gives its own (e.g. "vcpus": 4 on its line);'
            " nothing was submitted\n"
        )
        assert store.list_job_rows() == []
        corral(url, "submit", "-f", str(jobs), "--user", "bob")  # whose jobs they are stays an option
        assert [store.job(row["id"]).user for row in store.list_job_rows()] == ["bob"]


def test_a_job_submitted_held_waits_until_released_as_with_sbatch_hold(tmp_path: Path) -> None:
    """sbatch -H queues a job held (JobHeldUser) for a workflow to release when its inputs are in."""
    with served_app(tmp_path) as (url, store):
        job = int(corral(url, "submit", "--hold", "--", "true").stdout)
        assert store.job(job).held  # what the pass reads: it places nothing held, boots nothing for it
        assert store.job_row(job)["wait_reason"] == "held at submission: it runs once released (corral release)"
        assert [e["kind"] for e in store.list_events(job_id=job)] == ["job.queued", "job.held"]

        jobs = tmp_path / "jobs.jsonl"
        jobs.write_text('{"command": ["true"], "array": "0-1"}\n{"command": ["true"], "hold": false}\n')
        held = [int(i) for i in corral(url, "submit", "-H", "--file", str(jobs)).stdout.split()]
        assert len(held) == 3 and all(store.job(i).held for i in held)  # -H holds every job of the file

        corral(url, "release", str(job))
        assert not store.job(job).held and store.job_row(job)["wait_reason"] == ""


def test_sbatchs_own_spellings_ask_for_what_corrals_do(tmp_path: Path) -> None:
    """A Slurm user types `-J`, `-c`, `--mem`, `-t`: they were refused as unknown options."""
    with served_app(tmp_path) as (url, store):
        corral_ids = corral(
            url, "submit", "--name", "build", "--vcpus", "2", "--ram", "4000", "--scratch", "1GiB", "--nodes", "2",
            "--time-limit", "1:30:00", "--not-before", "now+1h", "--array", "0-3%2", "--", "true",
        ).stdout.split()  # fmt: skip
        slurm_ids = corral(
            url, "submit", "-J", "build", "-c", "2", "--mem", "4000", "--tmp", "1G", "-N", "2", "-t", "1:30:00",
            "-b", "now+1h", "-a", "0-3%2", "--", "true",
        ).stdout.split()  # fmt: skip
        assert len(corral_ids) == len(slurm_ids) == 4

        def asked(job_id: str) -> tuple[object, ...]:
            job = store.job(int(job_id))
            assert job.array is not None
            return (job.name, job.resources, job.node_count, job.time_limit, job.array.task_id, job.array_throttle)

        assert [asked(i) for i in slurm_ids] == [asked(i) for i in corral_ids]
        assert asked(slurm_ids[0])[:4] == ("build", Resources(2, 4000, 1024, 0), 2, 5400.0)
        starts = [store.job(int(i)).not_before or 0 for i in (corral_ids[0], slurm_ids[0])]
        assert starts[0] > time.time() + 3000 and abs(starts[1] - starts[0]) < 60
        corral(url, "update", slurm_ids[1], "-c", "4", "--mem", "8G", "-t", "2:00:00", "-J", "bigger")
        assert asked(slurm_ids[1])[:4] == ("bigger", Resources(4, 8192, 1024, 0), 2, 7200.0)
        # sbatch's bare number is minutes, where --time-limit's is seconds; Slurm's TimeLimit=+ too.
        minutes = corral(url, "submit", "-t", "30", "--", "true").stdout.strip()
        assert store.job(int(minutes)).time_limit == 1800.0
        corral(url, "update", minutes, "-t", "+15")
        assert store.job(int(minutes)).time_limit == 2700.0
        both = corral(url, "submit", "-t", "30", "--time-limit", "60", "--", "true", check=False)
        assert both.returncode == 1 and "give one" in both.stderr
        # 4000 MiB is not a whole number of GiB: shown in MiB, as squeue shows it.
        assert "resources  2c 4000M x2" in corral(url, "job", slurm_ids[0]).stdout


def test_squeue_and_scancel_short_filters_list_and_cancel_what_the_long_ones_do(tmp_path: Path) -> None:
    with served_app(tmp_path) as (url, store):
        for name, user in (("a", "alice"), ("a", "bob"), ("b", "alice")):
            corral(url, "submit", "-J", name, "--user", user, "--", "true")

        def listed(*filters: str) -> list[int]:
            return [row["id"] for row in json.loads(corral(url, "jobs", *filters, "--json").stdout)]

        assert listed("-t", "PD", "-u", "alice", "-n", "a") == listed(
            "--states", "queued", "--user", "alice", "--name", "a"
        )
        assert listed("-t", "PD", "-u", "alice", "-n", "a") == [1]
        assert corral(url, "cancel", "-t", "PD", "-u", "alice").stdout.startswith("cancel requested for 2 jobs: 1, 3")
        assert [store.job(i).cancel_requested for i in (1, 2, 3)] == [True, False, True]


def test_sbatch_wrap_mem_per_cpu_and_gres_ask_for_what_they_do_in_slurm(tmp_path: Path) -> None:
    """`sbatch --wrap`, `--mem-per-cpu` and `--gres=gpu:N`, on the command line and as #SBATCH lines."""
    (tmp_path / "home").mkdir()
    with served_app(tmp_path / "home") as (url, store):
        wrapped = int(corral(url, "submit", "--wrap", "python3 x.py > out.txt").stdout)
        assert store.job(wrapped).command == ["/bin/sh", "-c", "python3 x.py > out.txt"]
        assert store.job(wrapped).name == "wrap"
        per_cpu = int(corral(url, "submit", "-c", "3", "--mem-per-cpu", "2G", "--gres", "gpu:2", "--", "true").stdout)
        assert (store.job(per_cpu).resources.ram_mib, store.job(per_cpu).resources.gpus) == (3 * 2048, 2)
        script = tmp_path / "job.sh"
        script.write_text("#!/bin/sh\n#SBATCH -c 2\n#SBATCH --mem-per-cpu=1500\n#SBATCH --gres=gpu\necho hi\n")
        scripted = int(corral(url, "submit", "--script", str(script)).stdout)
        assert (store.job(scripted).resources.ram_mib, store.job(scripted).resources.gpus) == (3000, 1)
        for refused, said in [
            (["--mem", "1G", "--mem-per-cpu", "1G", "--", "true"], "--mem and --mem-per-cpu both give the RAM"),
            (["--gres", "gpu:a10:1", "--", "true"], "a GPU type is not matched by --gres here"),
            (["--gres", "license:2", "--", "true"], "corral takes only GPUs as a generic resource"),
            (["--gres", "gpu:1", "-G", "1", "--", "true"], "--gres and --gpus both give the GPUs"),
            (["--wrap", "true", "--", "false"], "--wrap gives the command: not with another"),
        ]:
            done = corral(url, "submit", *refused, check=False)
            assert done.returncode == 1 and said in done.stderr, (refused, done.stderr)
        assert len(store.list_job_rows()) == 3


def test_exclusive_as_sbatchs_option_directive_and_job_file_field_runs_a_job_alone(tmp_path: Path) -> None:
    """Slurm's --exclusive: on the command line, as an #SBATCH line and as a job file's field; the
    job shows it, and the placement filters read it (the job is stored exclusive)."""
    (tmp_path / "home").mkdir()
    with served_app(tmp_path / "home") as (url, store):
        given = int(corral(url, "submit", "--exclusive", "--", "true").stdout)
        script = tmp_path / "job.sh"
        script.write_text("#!/bin/sh\n#SBATCH -c 2\n#SBATCH --exclusive\necho hi\n")
        scripted = int(corral(url, "submit", "--script", str(script)).stdout)
        jobs = tmp_path / "jobs.jsonl"
        jobs.write_text('{"command": ["true"], "exclusive": true}\n{"command": ["true"]}\n')
        from_file = [int(i) for i in corral(url, "submit", "--file", str(jobs)).stdout.split()]
        yaml_jobs = tmp_path / "jobs.yaml"
        yaml_jobs.write_text('- {command: ["true"], exclusive: true}\n')
        from_yaml = int(corral(url, "submit", "--file", str(yaml_jobs)).stdout)
        plain = int(corral(url, "submit", "--", "true").stdout)
        assert [store.job(i).exclusive for i in (given, scripted, *from_file, from_yaml, plain)] == [
            True, True, True, False, True, False,
        ]  # fmt: skip
        assert store.job(scripted).resources.vcpus == 2  # (it still asks for its vCPUs)
        assert "runs on    exclusive" in corral(url, "job", str(given)).stdout
        assert "runs on" not in corral(url, "job", str(plain)).stdout
        assert json.loads(corral(url, "job", str(given), "--json").stdout)["exclusive"] is True
        # sbatch's --exclusive=user (a user's jobs may share) is not corral's: refused, not taken for it.
        script.write_text("#!/bin/sh\n#SBATCH --exclusive=user\necho hi\n")
        done = corral(url, "submit", "--script", str(script), check=False)
        assert done.returncode == 1 and "line 2" in done.stderr, done.stderr
