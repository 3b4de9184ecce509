"""A job's working directory (`corral submit --chdir DIR`, `-D`, as sbatch's) through a running
corral on the loopback cloud: the agent runs the command there, where a workflow engine wrapped it
in `sh -c 'cd DIR && ...'`; a directory the node does not have fails the job at once, naming it;
a relative one is refused at submission, naming the option or field."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.conftest import Corral, ended


def test_a_job_runs_in_the_directory_it_names_and_finds_its_programs_there(running: Corral, tmp_path: Path) -> None:
    shared = tmp_path / "shared" / "run42"
    shared.mkdir(parents=True)
    step = shared / "step"
    step.write_text("#!/bin/sh\npwd\necho made > out.txt\n")
    step.chmod(0o755)
    # ./step: found in the job's directory, as `sbatch -D DIR ./step` finds it; no warning that it is not.
    submitted = running.cli("submit", "--chdir", str(shared), "--", "./step")
    assert "relative path" not in submitted.stderr
    job = int(submitted.stdout)
    assert ended(running, job)["state"] == "complete"
    assert running.cli("logs", str(job)).stdout == f"{shared}\n"  # the output is still corral's to show
    assert (shared / "out.txt").read_text() == "made\n"
    assert f"  chdir      {shared}\n" in running.cli("job", str(job)).stdout
    assert running.cli_json("job", str(job))["chdir"] == str(shared)

    # -D, and the job file's field, say the same.
    short = int(running.cli("submit", "-D", str(shared), "--", "pwd").stdout)
    from_file = tmp_path / "jobs.jsonl"
    from_file.write_text(f'{{"command": ["pwd"], "chdir": "{shared}"}}\n')
    [filed] = [int(line) for line in running.cli("submit", "--file", str(from_file)).stdout.split()]
    for each in (short, filed):
        assert ended(running, each)["state"] == "complete"
        assert running.cli("logs", str(each)).stdout == f"{shared}\n"


def test_a_directory_missing_on_the_node_fails_the_job_at_once_naming_it(running: Corral, tmp_path: Path) -> None:
    missing = tmp_path / "not-mounted" / "run42"
    job = int(running.cli("submit", "-D", str(missing), "--max-retries", "0", "--", "pwd").stdout)
    j = ended(running, job)
    # A permanent failure of the job's own request, as a missing program's: not retried on another node.
    assert (j["state"], j["exit_code"], j["end_cause"], j["attempts"]) == ("failed", 1, "exit", 1)
    said = f"chdir to {missing} failed: No such file or directory"
    assert j["wait_reason"] == f"exit 1 ({said})"  # the job's reason (corral jobs, its job.failed event)
    # (Spaces left out: a long directory folds the line at the console's width.)
    shown = "".join(running.cli("job", str(job)).stdout.split())
    assert "".join(f"ended exit 1 ({said}); not retried".split()) in shown
    assert running.cli("logs", str(job)).stdout == f"corral-agent: {said}\n"
    # A file is no directory either, and is named as such.
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    job = int(running.cli("submit", "-D", str(a_file), "--", "pwd").stdout)
    assert ended(running, job)["state"] == "failed"
    assert running.cli("logs", str(job)).stdout == f"corral-agent: chdir to {a_file} failed: Not a directory\n"


def test_a_relative_directory_is_refused_at_submission_naming_the_field(running: Corral, tmp_path: Path) -> None:
    refused = running.cli("submit", "--chdir", "run42", "--", "pwd", check=False)
    assert refused.returncode != 0
    assert "--chdir: not an absolute path: 'run42'" in refused.stderr
    answer = running.api("POST", "/api/jobs", json={"jobs": [{"command": ["pwd"], "chdir": "~/run42"}]})
    assert answer.status_code == 422
    assert answer.json()["detail"][0].startswith("jobs.0.chdir: not an absolute path: '~/run42'")
    bad_file = tmp_path / "jobs.jsonl"
    bad_file.write_text('{"command": ["pwd"], "chdir": "/ok"}\n{"command": ["pwd"], "chdir": "./here"}\n')
    refused = running.cli("submit", "--file", str(bad_file), check=False)
    assert refused.returncode != 0 and "chdir: not an absolute path: './here'" in refused.stderr
    assert running.jobs() == {}  # nothing submitted, the good line neither
