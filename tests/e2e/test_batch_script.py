"""A batch script submitted as sbatch takes one (`corral submit --script job.sh -- ARG...`), through a
running corral on the loopback cloud and its real agent: the script's content is copied at submission
and travels with the job, its #SBATCH lines are read as options (the command line's win), the ones
corral does not take are said and ignored, and what sbatch refuses is refused, naming the file or
the line, with nothing stored."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.conftest import Corral, ended

SCRIPT = """#!/bin/sh
# the lab's usual header
#SBATCH -J from-script
#SBATCH --cpus-per-task=2 --mem 1536M
#SBATCH -t 5   # minutes, as sbatch reads a bare number
#SBATCH --partition=gpu
#SBATCH --output=run-%j.out
#SBATCH --partition gpu2
#SBATCH -p short
#SBATCH --hold

echo "args: $# [$1] [$2]"
echo "job $CORRAL_JOB_ID"
[ "$(dirname "$0")" = "$(pwd)" ] && echo "runs from its attempt's directory"
stat -c %a "$0"
#SBATCH --mem=9G
"""


def test_a_batch_script_runs_as_submitted_with_its_directives_and_arguments(running: Corral, tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text(SCRIPT)
    # --mem on the command line wins over the script's; the script's #SBATCH --hold holds the job.
    submitted = running.cli("submit", "--script", str(script), "--mem", "1G", "--", "one arg", "two")
    job = int(submitted.stdout)
    # Each option corral does not take is said once, at its first line, and nothing else is.
    assert submitted.stderr.splitlines() == [
        f"warning: {script}: line 6: #SBATCH --partition is not an option corral takes: ignored",
        f"warning: {script}: line 7: #SBATCH --output is not an option corral takes: ignored",
        f"warning: {script}: line 9: #SBATCH -p is not an option corral takes: ignored",
    ]
    j = running.cli_json("job", str(job))
    assert (j["name"], j["resources"]["vcpus"], j["resources"]["ram_mib"], j["time_limit"]) == (
        "from-script",
        2,
        1024,  # the command line's, not the script's 1536M (nor the 9G after its first command)
        300,
    )
    assert j["held"] and j["command"] == ["job.sh", "one arg", "two"]
    assert (j["script"], j["script_bytes"]) == (SCRIPT, len(SCRIPT.encode()))
    # A listing says it is a script and how large, without the text.
    [listed] = [row for row in running.api("GET", "/api/jobs").json() if row["id"] == job]
    assert (listed["script"], listed["script_bytes"]) == (None, len(SCRIPT.encode()))
    shown = running.cli("job", str(job)).stdout
    assert f"  script     job.sh ({len(SCRIPT.encode())} bytes)\n" in shown
    assert "  command    job.sh one arg two\n" in shown

    # The file changed after submission: the job runs what was submitted, as sbatch's copy.
    script.write_text("#!/bin/sh\necho edited\n")
    running.cli("release", str(job))
    done = ended(running, job)
    assert (done["state"], done["exit_code"]) == ("complete", 0)
    assert running.cli("logs", str(job)).stdout == (
        f"args: 2 [one arg] [two]\njob {job}\nruns from its attempt's directory\n700\n"
    )
    assert running.cli("job", str(job), "--script").stdout == SCRIPT
    # corral update changes what it may, never the script.
    assert running.api("PATCH", f"/api/jobs/{job}", json={"script": "#!/bin/sh\n"}).status_code == 422

    # Its exit code is the job's, as a command's; and without -J, the job is named after the script.
    failing = tmp_path / "fail.sh"
    failing.write_text("#!/bin/sh\necho failing >&2\nexit 3\n")
    job = int(running.cli("submit", "--script", str(failing)).stdout)
    done = ended(running, job)
    assert (done["state"], done["exit_code"], done["name"]) == ("failed", 3, "fail.sh")
    assert running.cli("logs", str(job)).stdout == "failing\n"


def test_what_sbatch_refuses_is_refused_naming_the_file_or_line_and_nothing_is_stored(
    running: Corral, tmp_path: Path
) -> None:
    def refusal(*args: str) -> str:
        done = running.cli("submit", *args, check=False)
        assert done.returncode != 0 and done.stdout == ""
        return done.stderr

    plain = tmp_path / "plain.sh"
    plain.write_text("echo no interpreter line\n")
    assert refusal("--script", str(plain)) == (
        f"error: {plain}: not a batch script: its first line must start with #! and an interpreter's path (e.g."
        " #!/bin/bash), as sbatch requires\n"
    )
    large = tmp_path / "large.sh"
    large.write_text("#!/bin/sh\n" + "#" * (4 * 1024 * 1024))
    assert refusal("--script", str(large)) == (
        f"error: {large}: 4,194,314 bytes; a batch script has at most 4,194,304 (4 MiB, Slurm's default"
        " max_script_size)\n"
    )
    good = tmp_path / "job.sh"
    good.write_text("#!/bin/sh\n#SBATCH -c 2\ntrue\n")
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text('{"command": ["true"]}\n')
    assert "--script and --file both give the jobs" in refusal("--script", str(good), "--file", str(jobs))
    # Words before -- are a command, which a script job has none of: its arguments go after --.
    assert refusal("--script", str(good), "echo", "hi") == (
        f"error: --script {good}: the job is the script, and 'echo' reads as a command: give the script's arguments"
        f" after -- (corral submit --script {good} -- ARG...)\n"
    )
    # A directive corral takes with a value it cannot read: refused naming its line, as the option's
    # own refusal says it (the same parser).
    for directive, said in [
        ("#SBATCH --mem=lots", "not a size: 'lots'"),
        ("#SBATCH -c two", "Invalid value for '--vcpus' / '--cpus-per-task' / '-c': Input should be a valid number"),
        ("#SBATCH --time=soon", "not a duration: 'soon'"),
        ("#SBATCH -N", "Option '-N' requires an argument."),
        ("#SBATCH -b now+never", "not a duration: 'never'"),
        ("#SBATCH -d afterok:x", "'afterok:x': 'x' is not a job id"),
        ('#SBATCH -J "unclosed', "no closing quotation"),
    ]:
        bad = tmp_path / "bad.sh"
        bad.write_text(f"#!/bin/bash\n#SBATCH --partition=x\n{directive}\nhostname\n")
        refused = refusal("--script", str(bad))
        # The option's own message, with the line named in the option's place.
        assert f"{bad}: line 3: {directive}: {said}" in refused, refused
    # The API and a job file refuse the same script, naming the field.
    answer = running.api("POST", "/api/jobs", json={"jobs": [{"command": ["job.sh"], "script": "echo hi\n"}]})
    assert answer.status_code == 422
    assert answer.json()["detail"][0].startswith("jobs.0.script: not a batch script: its first line must start with #!")
    answer = running.api("POST", "/api/jobs", json={"jobs": [{"command": ["bin/job.sh"], "script": "#!/bin/sh\n"}]})
    assert answer.status_code == 422 and "command.0: a script's command names its file" in answer.text
    assert running.jobs() == {}


def test_a_script_larger_than_a_jobs_other_text_may_be_is_taken(running: Corral, tmp_path: Path) -> None:
    """The 64 KiB bound on a job's other text (tags, traits, ...) is not the script's: 200 KiB of
    comments and one line of work run as any script."""
    script = tmp_path / "long.sh"
    script.write_text("#!/bin/sh\n" + "# a long header of notes\n" * 8000 + "echo done\n")
    job = int(running.cli("submit", "--script", str(script)).stdout)
    assert ended(running, job)["state"] == "complete"
    assert running.cli("logs", str(job)).stdout == "done\n"
