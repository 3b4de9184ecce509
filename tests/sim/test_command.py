"""`corral simulate` through Typer's CliRunner on an app of the test's own."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import threading
from pathlib import Path
from typing import Any, cast

import pytest
import typer
from typer.testing import CliRunner

from corral.sim.command import register
from corral.sim.engine import SimulationError
from corral.sim.run import load_runs, simulate
from corral.workload.synth import SynthParams, generate, to_swf

runner = CliRunner()


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    app = typer.Typer()
    register(app)

    @app.command("version")  # a second command, so that Typer keeps "simulate" as a subcommand
    def version() -> None:
        pass

    return app


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> Path:
    params = SynthParams(jobs=150, seed=3, mean_interarrival=120, max_procs=16, quirks=True)
    path = tmp_path_factory.mktemp("w") / "small.swf"
    path.write_text(to_swf(generate(params), params))
    return path


def write_config(path: Path, idle_grace: str) -> Path:
    path.write_text(
        f"""
[[instance_types]]
name = "small"
vcpus = 4
ram = "16GiB"
price_per_hour = 0.2

[[instance_types]]
name = "large"
vcpus = 16
ram = "64GiB"
price_per_hour = 0.8

[policy.boot]
max_instances = 50

[policy.lifecycle]
idle_grace = "{idle_grace}"

[sim.boot_delay]
distribution = "fixed"
seconds = 60
"""
    )
    return path


def one_run(app: typer.Typer, workload: Path, cfg: Path) -> dict[str, Any]:
    """`corral simulate WORKLOAD -c CFG --json`'s one run."""
    result = runner.invoke(app, ["simulate", str(workload), "-c", str(cfg), "--json", "--no-progress"])
    assert result.exit_code == 0, result.output
    (run,) = json.loads(result.stdout)["runs"]
    return cast(dict[str, Any], run)


def test_json_results(app: typer.Typer, workload: Path, tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "a.toml", "1m")
    result = runner.invoke(app, ["simulate", str(workload), "--config", str(cfg), "--json", "--no-progress"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    (run,) = data["runs"]
    assert run["label"] == "a" and run["mode"] == "elastic"
    assert run["jobs"] == 150 == run["completed"] + run["failed"] + run["cancelled"] + run["unfinished"]
    assert run["cost_usd"] > 0 and run["cost_over_packing_bound"] >= 1
    assert data["workload"]["quirks"]["never ran (run time -1 or 0): cancelled on arrival"] > 0


def test_json_results_are_strict_json_when_a_job_runs_no_time(app: typer.Typer, tmp_path: Path) -> None:
    # A JSON Lines job may run for 0 s; its plain slowdown has no value, and the output must stay
    # JSON that any parser reads (no Infinity or NaN), with no warning on the terminal.
    workload = tmp_path / "zero.jsonl"
    workload.write_text('{"run_time": 0, "vcpus": 1, "ram": "1GiB"}\n{"run_time": 100, "vcpus": 1, "ram": "1GiB"}\n')
    cfg = write_config(tmp_path / "a.toml", "1m")
    result = runner.invoke(app, ["simulate", str(workload), "--config", str(cfg), "--json", "--no-progress"])
    assert result.exit_code == 0, result.output
    (run,) = json.loads(result.stdout, parse_constant=lambda name: pytest.fail(f"not JSON: {name}"))["runs"]
    assert run["completed"] == 2 and run["slowdown_mean"] == pytest.approx(160 / 100)
    assert "Warning" not in result.output


def test_table_by_default(app: typer.Typer, workload: Path, tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "a.toml", "1m")
    result = runner.invoke(app, ["simulate", str(workload), "-c", str(cfg), "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "mean bounded slowdown" in result.stdout and "cost / packing bound" in result.stdout


def test_compare_runs_each_config_and_the_report_overlays_them(
    app: typer.Typer, workload: Path, tmp_path: Path
) -> None:
    quick = write_config(tmp_path / "quick.toml", "1m")
    patient = write_config(tmp_path / "patient.toml", "30m")
    report = tmp_path / "report"
    args = ["simulate", str(workload), "--compare", str(quick), str(patient), "--report", str(report), "--json"]
    result = runner.invoke(app, [*args, "--no-progress"])
    assert result.exit_code == 0, result.output
    runs = {run["label"]: run for run in json.loads(result.stdout)["runs"]}
    assert set(runs) == {"quick", "patient"}
    assert runs["patient"]["cost_usd"] > runs["quick"]["cost_usd"]  # idle nodes kept longer cost more
    assert runs["patient"]["boots"] < runs["quick"]["boots"]
    page = (report / "index.html").read_text()
    for name in ("fleet.png", "cost.png", "waits.png", "user-waits.png", "utilisation.png"):
        assert (report / name).stat().st_size > 1000 and name in page
    assert "<th>quick (elastic)</th><th>patient (elastic)</th>" in page


def test_compared_configs_run_at_once_give_the_results_of_one_after_the_other(
    app: typer.Typer, workload: Path, tmp_path: Path
) -> None:
    """--workers 2 runs the configs in two processes: the same figures as in one, in the order
    given, with every run's progress reaching the parent."""
    configs = [str(write_config(tmp_path / f"{name}.toml", grace)) for name, grace in (("b", "5m"), ("a", "1m"))]

    def figures(workers: str) -> list[dict[str, object]]:
        args = ["simulate", str(workload), "--compare", *configs, "--json", "--no-progress", "--workers", workers]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        runs = json.loads(result.stdout)["runs"]
        for run in runs:
            del run["wall_seconds"], run["jobs_per_second"]
        return runs

    alone = figures("1")
    assert [run["label"] for run in alone] == ["b", "a"] and alone[0]["cost_usd"] != alone[1]["cost_usd"]
    assert figures("2") == alone

    seen: dict[str, tuple[float, float]] = {}
    runs = load_runs([Path(c) for c in configs])
    outcome = simulate(
        workload, runs, progress=lambda label, done, total: seen.update({label: (done, total)}), workers=2
    )
    assert [r.label for r in outcome.results] == ["b", "a"]
    assert set(seen) == {"b", "a"} and all(done == total > 0 for done, total in seen.values())


def test_a_run_that_fails_in_its_worker_fails_the_command_with_its_reason(
    app: typer.Typer, workload: Path, tmp_path: Path
) -> None:
    good = write_config(tmp_path / "good.toml", "1m")
    bad = write_config(tmp_path / "bad.toml", "1m")
    bad.write_text(bad.read_text() + '\n[sim.fleet]\nmode = "fixed"\nnodes = [{instance_type = "huge", count = 2}]\n')
    args = ["simulate", str(workload), "--compare", str(good), str(bad), "--no-progress", "--workers", "2"]
    result = runner.invoke(app, args)
    assert result.exit_code != 0
    assert "sim.fleet.nodes.0.instance_type: 'huge' is not in instance_types" in result.output


def test_a_worker_killed_mid_run_fails_the_simulation_with_a_reason(tmp_path: Path) -> None:
    """A worker the system kills (the OOM killer, say) ends the whole simulation with a reason to
    act on, not a traceback of the process pool's."""
    params = SynthParams(jobs=30_000, seed=5, mean_interarrival=60, max_procs=16)
    long_workload = tmp_path / "long.swf"
    long_workload.write_text(to_swf(generate(params), params))
    runs = load_runs([write_config(tmp_path / f"{name}.toml", grace) for name, grace in (("b", "5m"), ("a", "1m"))])
    running = threading.Event()

    def kill_the_workers() -> None:
        running.wait(timeout=120)  # a run has reported progress: it is well under way
        for child in multiprocessing.active_children():
            if child.pid is not None:
                os.kill(child.pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_the_workers)
    killer.start()
    try:
        with pytest.raises(SimulationError, match="worker process died before its run ended"):
            simulate(long_workload, runs, progress=lambda label, done, total: running.set(), workers=2)
    finally:
        running.set()
        killer.join()


def test_a_bad_workload_line_is_reported_with_its_number(app: typer.Typer, tmp_path: Path) -> None:
    path = tmp_path / "bad.swf"
    path.write_text("; header\n1 0 -1 10 1 -1 -1 1 60 -1 1 1 1 -1 1 1 -1 -1\n2 5 -1 x\n")
    result = runner.invoke(app, ["simulate", str(path), "--no-progress"])
    assert result.exit_code == 2
    assert f"{path}:3: expected 18 fields, found 4" in result.output
    result = runner.invoke(app, ["simulate", str(path), "--skip-bad-lines", "--json", "--no-progress"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["workload"]["skipped_lines"] == 1 and data["runs"][0]["jobs"] == 1


def test_a_bad_config_names_the_key(app: typer.Typer, workload: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[sim.boot_delay]\ndistribution = "gaussian"\n')
    result = runner.invoke(app, ["simulate", str(workload), "-c", str(cfg), "--no-progress"])
    assert result.exit_code == 2 and "sim.boot_delay.distribution" in result.output


def test_a_config_file_given_as_the_workload_is_caught(app: typer.Typer, workload: Path, tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "a.toml", "1m")
    result = runner.invoke(app, ["simulate", str(workload), str(cfg), "--no-progress"])
    assert result.exit_code == 2 and "--compare" in result.output


def test_scale_limit_and_seed(app: typer.Typer, workload: Path, tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "a.toml", "1m")
    base = ["simulate", str(workload), "-c", str(cfg), "--json", "--no-progress", "--limit", "40"]
    one = json.loads(runner.invoke(app, [*base, "--seed", "7"]).stdout)["runs"][0]
    two = json.loads(runner.invoke(app, [*base, "--seed", "7", "--scale", "0.25"]).stdout)["runs"][0]
    assert one["jobs"] == 40
    assert two["cost_usd"] < one["cost_usd"]  # a quarter of the vcpus per processor


def test_jobs_that_never_run_are_counted_with_the_cores_reason(app: typer.Typer, tmp_path: Path) -> None:
    # Left out of the waits, such jobs would make a config that starves them look better: the
    # results must say how many there are and why.
    workload = tmp_path / "big.jsonl"
    lines = ['{"submit_time": 0, "run_time": 100, "vcpus": 2, "ram": "1GiB"}']
    lines += ['{"submit_time": 10, "run_time": 100, "vcpus": 32, "ram": "1GiB"}'] * 2
    lines += ['{"submit_time": 20, "run_time": 100, "vcpus": 2, "ram": "100GiB"}']
    workload.write_text("\n".join(lines) + "\n")
    cfg = write_config(tmp_path / "a.toml", "1m")
    run = one_run(app, workload, cfg)
    assert run["completed"] == 1 and run["unfinished"] == 3
    assert run["unfinished_reasons"] == {
        "no instance type has 32 vcpus (the largest has 16 vcpus)": 2,
        "no instance type has 100 GiB RAM (the largest has 64 GiB RAM)": 1,
    }
    table = runner.invoke(app, ["simulate", str(workload), "-c", str(cfg), "--no-progress"])
    assert "3 jobs never finished (not in the waits, slowdowns or bounds): 2 no instance type has 32 vcpus" in (
        " ".join(table.stdout.split())
    )


def test_swf_jobs_larger_than_any_type_are_counted_as_gangs(app: typer.Typer, tmp_path: Path) -> None:
    # Fields: job, submit, wait, run, allocated processors, ..., requested processors (8), ..., status (11).
    jobs = [
        "1 10 -1 100 4 -1 -1 4 -1 -1 1 -1 -1 -1 -1 -1 -1 -1",
        "2 20 -1 100 40 -1 -1 40 -1 -1 1 -1 -1 -1 -1 -1 -1 -1",
    ]
    workload = tmp_path / "gang.swf"
    workload.write_text("\n".join(jobs) + "\n")
    cfg = write_config(tmp_path / "a.toml", "1m")
    run = one_run(app, workload, cfg)
    assert run["gangs"] == 1 and run["completed"] == 2


def test_a_run_stopped_at_the_horizon_says_so_in_the_table_and_report(app: typer.Typer, tmp_path: Path) -> None:
    workload = tmp_path / "long.jsonl"
    workload.write_text('{"submit_time": 0, "run_time": 7200, "vcpus": 1, "ram": "1GiB"}\n')
    cfg = write_config(tmp_path / "a.toml", "1m")
    cfg.write_text(cfg.read_text() + '\n[sim]\nhorizon = "10m"\n')
    report = tmp_path / "report"
    result = runner.invoke(app, ["simulate", str(workload), "-c", str(cfg), "--report", str(report), "--no-progress"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "stopped at the horizon │ yes" in text and "stopped at sim.horizon with work left" in text
    assert "1 running at the end" in text
    assert "stopped at sim.horizon with work left" in (report / "index.html").read_text()


def test_a_report_directory_that_cannot_be_made_fails_before_the_run(
    app: typer.Typer, workload: Path, tmp_path: Path
) -> None:
    taken = tmp_path / "a-file"
    taken.write_text("")
    result = runner.invoke(app, ["simulate", str(workload), "--report", str(taken), "--no-progress"])
    assert result.exit_code == 2
    assert f"--report {taken}: exists and is not a directory" in " ".join(result.output.split())
    assert "Traceback" not in result.output and "jobs" not in result.stdout  # nothing was simulated


@pytest.mark.parametrize("option", ["--scale", "--time-scale"])
@pytest.mark.parametrize("value", ["nan", "inf", "0"])
def test_scales_must_be_finite_and_positive(app: typer.Typer, workload: Path, option: str, value: str) -> None:
    result = runner.invoke(app, ["simulate", str(workload), option, value, "--no-progress"])
    assert result.exit_code == 2
    assert f"{option} must be a finite number more than 0" in result.output


def test_compared_labels_are_not_cut_in_a_narrow_terminal(app: typer.Typer, workload: Path, tmp_path: Path) -> None:
    one = write_config(tmp_path / "fixed-partition.toml", "1m")
    two = write_config(tmp_path / "fixed-peak.toml", "1m")
    three = write_config(tmp_path / "one-per-job.toml", "1m")
    args = ["simulate", str(workload), "--compare", str(one), str(two), str(three), "--no-progress", "--workers", "1"]
    result = runner.invoke(app, args, env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert "…" not in result.stdout
    words = result.stdout.split("jobs │")[0].split()
    assert {"fixed-partition", "fixed-peak", "one-per-job"} <= set(words)


def test_a_schedule_outside_the_runs_clock_is_named_as_having_done_nothing(app: typer.Typer, tmp_path: Path) -> None:
    # A real log's clock starts where its first submission is, often days after 0.
    workload = tmp_path / "late.jsonl"
    workload.write_text('{"submit_time": 600000, "run_time": 100, "vcpus": 1, "ram": "1GiB"}\n')
    cfg = write_config(tmp_path / "a.toml", "1m")
    schedule = (
        '[[sim.capacity.outages]]\nstart = 0\nend = "1d"\n[[sim.capacity.outages]]\nstart = 599000\nend = 601000\n'
    )
    cfg.write_text(cfg.read_text() + schedule + '[[sim.failures.schedule]]\nat = "2h"\n')
    run = one_run(app, workload, cfg)
    assert run["outside_run"] == ["sim.capacity.outages.0 (0 s to 86400 s)", "sim.failures.schedule.0 (at 7200 s)"]
    assert run["capacity_errors"] > 0  # the second outage was in the run
    table = runner.invoke(app, ["simulate", str(workload), "-c", str(cfg), "--no-progress"])
    assert "outside the run (from 600000 s to" in " ".join(table.stdout.split())


def test_an_error_shows_the_bad_value_as_written(app: typer.Typer, tmp_path: Path) -> None:
    # Printed through Rich: a value like "[red]" was taken for markup and vanished.
    workload = tmp_path / "tagged.jsonl"
    workload.write_text('{"run_time": 10, "ram": "[red]"}\n')
    result = runner.invoke(app, ["simulate", str(workload), "--no-progress"])
    assert result.exit_code == 2
    assert "ram: not a size: '[red]'" in " ".join(result.output.split())


def test_python_dash_m_corral_cli_runs_the_command(tmp_path: Path) -> None:
    """`python -m corral.cli simulate ...` (from a checkout, without the `corral` script): before,
    it imported the module, printed nothing and exited 0, as if the replay had run."""
    import subprocess
    import sys

    import corral

    workload = tmp_path / "one.jsonl"
    workload.write_text('{"run_time": 100, "vcpus": 1, "ram": "1GiB"}\n')
    cfg = write_config(tmp_path / "a.toml", "1m")
    env = {**os.environ, "PYTHONPATH": str(Path(corral.__file__).parent.parent)}
    args = [sys.executable, "-m", "corral.cli", "simulate", str(workload), "-c", str(cfg), "--json", "--no-progress"]
    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["runs"][0]["completed"] == 1


@pytest.mark.parametrize(("option", "value"), [("--scale", "4"), ("--default-memory", "8GiB")])
def test_an_swf_mapping_option_on_a_json_lines_workload_is_refused(
    app: typer.Typer, tmp_path: Path, option: str, value: str
) -> None:
    """--scale and --default-memory say how SWF processors become vcpus and RAM; a JSON Lines job
    gives its own. Before, they were silently ignored there: `--scale 4` printed the same figures
    as without it, and the user read them as those of a workload four times as wide."""
    workload = tmp_path / "jobs.jsonl"
    workload.write_text('{"run_time": 100, "vcpus": 1, "ram": "1GiB"}\n')
    cfg = write_config(tmp_path / "a.toml", "1m")
    result = runner.invoke(app, ["simulate", str(workload), "-c", str(cfg), option, value, "--no-progress"])
    assert result.exit_code == 2
    message = " ".join(result.output.split())
    assert f"{option} applies to SWF workloads only" in message and "JSON Lines" in message
    assert "jobs" not in result.stdout  # nothing was simulated


def test_the_results_say_how_the_workload_was_read(app: typer.Typer, workload: Path, tmp_path: Path) -> None:
    """A report is read long after its command: before, nothing in the table, the JSON or the
    report said that --scale, --time-scale or --default-memory changed the jobs, nor that --limit
    replayed only the start of the log (the title called its first 40 jobs the workload's)."""
    cfg = write_config(tmp_path / "a.toml", "1m")
    options = ["--limit", "40", "--scale", "2", "--time-scale", "0.5", "--default-memory", "3GiB", "--no-progress"]
    report = tmp_path / "report"
    result = runner.invoke(app, ["simulate", str(workload), "-c", str(cfg), *options, "--report", str(report)])
    assert result.exit_code == 0, result.output
    table = " ".join(result.stdout.split())
    assert "the first 40 of 150 jobs (--limit)" in table
    assert "vcpus per SWF processor │ 2 │" in table and "submit times scaled by │ 0.5 │" in table
    assert "RAM per SWF processor if none │ 3 GiB │" in table
    page = (report / "index.html").read_text()
    assert "the first 40 of its 150 jobs replayed (--limit)" in page
    assert "<tr><td>vcpus per SWF processor</td><td>2</td></tr>" in page

    data = json.loads(runner.invoke(app, ["simulate", str(workload), "-c", str(cfg), *options, "--json"]).stdout)
    assert (data["workload"]["limit"], data["workload"]["replayed"], data["workload"]["jobs"]) == (40, 40, 150)
    (run,) = data["runs"]
    assert (run["swf_scale"], run["time_scale"], run["swf_default_memory_mib"]) == (2, 0.5, 3072)

    # A JSON Lines job gives its own vcpus and RAM: the SWF mapping does not apply to it.
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text('{"run_time": 100, "vcpus": 1, "ram": "1GiB"}\n')
    (run,) = json.loads(runner.invoke(app, ["simulate", str(jobs), "-c", str(cfg), "--json", "--no-progress"]).stdout)[
        "runs"
    ]
    assert (run["swf_scale"], run["time_scale"], run["swf_default_memory_mib"]) == (None, 1, None)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--compare"], "--compare needs the config files to compare"),
        (["--workers", "2"], "--workers applies to --compare"),
    ],
)
def test_an_option_that_would_do_nothing_is_refused(
    app: typer.Typer, workload: Path, options: list[str], message: str
) -> None:
    """Before, --compare with no config file ran the built-in defaults alone (a comparison of one),
    and --workers without --compare was ignored; both ran to the end as if they had been heeded."""
    result = runner.invoke(app, ["simulate", str(workload), *options, "--no-progress"])
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())
    assert "jobs" not in result.stdout  # nothing was simulated


def test_the_results_name_each_runs_config_file(app: typer.Typer, workload: Path, tmp_path: Path) -> None:
    """Two teams' configs of one name, compared: before, the runs were "cluster" and "cluster#2",
    and nothing in the JSON or the report said which file was which."""
    (tmp_path / "ours").mkdir()
    (tmp_path / "theirs").mkdir()
    ours = write_config(tmp_path / "ours" / "cluster.toml", "1m")
    theirs = write_config(tmp_path / "theirs" / "cluster.toml", "20m")
    report = tmp_path / "report"
    args = ["simulate", str(workload), "--compare", str(ours), str(theirs), "--limit", "30", "--no-progress"]
    result = runner.invoke(app, [*args, "--json", "--report", str(report), "--workers", "1"])
    assert result.exit_code == 0, result.output
    runs = json.loads(result.stdout)["runs"]
    assert [(run["label"], run["config"]) for run in runs] == [("cluster", str(ours)), ("cluster#2", str(theirs))]
    page = (report / "index.html").read_text()
    assert f"<li>cluster (elastic): <code>{ours}</code></li>" in page
    assert f"<li>cluster#2 (elastic): <code>{theirs}</code></li>" in page

    default = json.loads(runner.invoke(app, ["simulate", str(workload), "--limit", "30", "--json"]).stdout)["runs"]
    assert default[0]["config"] is None  # the built-in defaults


def test_the_report_says_which_lines_were_skipped_and_why(app: typer.Typer, tmp_path: Path) -> None:
    """Before, the report said "2 bad lines skipped" and no more: which lines, and what was wrong
    with them, was on the terminal of the run (one of them) or in its JSON only."""
    path = tmp_path / "bad.swf"
    good, short, negative = "1 0 -1 10 1 -1 -1 1 60", "2 5 -1 x", "3 9 -1 10 1 -1 -1 -3 60"
    tail = " -1 1 1 1 -1 1 1 -1 -1"
    path.write_text(f"; header\n{good}{tail}\n{short}\n{negative}{tail}\n")
    report = tmp_path / "report"
    args = ["simulate", str(path), "--skip-bad-lines", "--report", str(report), "--no-progress"]
    assert runner.invoke(app, args).exit_code == 0
    page = (report / "index.html").read_text()
    assert "2 bad lines skipped:" in page
    assert f"<li><code>{path}:3: expected 18 fields, found 4</code></li>" in page
    assert f"<li><code>{path}:4: field 8 (requested processors) is negative: &#x27;-3&#x27;" in page


def test_an_elastic_fleet_that_may_boot_nothing_is_warned_of(app: typer.Typer, workload: Path, tmp_path: Path) -> None:
    """max_instances = 0 (a fixed partition written as an elastic config, say): before, the run
    went on to its end with no warning, every job "never finished" with NO_NODES."""
    cfg = write_config(tmp_path / "a.toml", "1m")
    cfg.write_text(cfg.read_text().replace("max_instances = 50", "max_instances = 0"))
    result = runner.invoke(app, ["simulate", str(workload), "-c", str(cfg), "--limit", "5", "--no-progress"])
    assert result.exit_code == 0, result.output
    message = " ".join(result.stderr.split())
    assert "warning (a): policy.boot.max_instances is 0: an elastic fleet boots nothing and runs no job" in message
    assert 'sim.fleet.mode = "fixed"' in message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no job to replay"),
        ("; Version: 2.2\n; a header and nothing more\n", "no job to replay"),
        ("1 0 -1 x\n", "no job to replay: every job line was bad (1 skipped), e.g."),
    ],
)
def test_a_workload_with_no_job_is_an_error(app: typer.Typer, tmp_path: Path, text: str, message: str) -> None:
    """Before, an empty log (or one whose every line was skipped) gave a table of zeros and dashes
    that read as a run's results."""
    path = tmp_path / "w.swf"
    path.write_text(text)
    result = runner.invoke(app, ["simulate", str(path), "--skip-bad-lines", "--no-progress"])
    assert result.exit_code == 2
    assert f"{path}: {message}" in " ".join(result.output.split())
    assert "cost" not in result.stdout


def test_jobs_left_waiting_by_the_default_memory_are_said_to_be(app: typer.Typer, tmp_path: Path) -> None:
    """An SWF log with no memory field (the KTH SP2 log has none) on nodes of 512 MiB: each job is
    given the default 1 GiB per processor, and none runs. Before, the note said only "no instance
    type has 1 GiB RAM": that the 1 GiB was --default-memory's, not the log's, was left to guess."""
    path = tmp_path / "w.swf"
    tail = " -1 1 1 1 -1 1 1 -1 -1"
    path.write_text(f"1 0 -1 100 1 -1 -1 1 600{tail}\n2 10 -1 100 2 -1 -1 2 600{tail}\n")
    cfg = tmp_path / "small.toml"
    cfg.write_text(
        '[[instance_types]]\nname = "sp2"\nvcpus = 1\nram = "512MiB"\nprice_per_hour = 0.05\n'
        '[sim.fleet]\nmode = "fixed"\nnodes = [{ instance_type = "sp2", count = 4 }]\n'
    )
    result = runner.invoke(app, ["simulate", str(path), "-c", str(cfg), "--no-progress"])
    assert result.exit_code == 0, result.output
    notes = " ".join(result.stdout.split())
    assert (
        "2 of the jobs that never finished have no memory in the log and were given --default-memory"
        " (sim.workload.default_memory), 1 GiB per processor: a smaller default may let them run"
    ) in notes
    data = json.loads(runner.invoke(app, ["simulate", str(path), "-c", str(cfg), "--json"]).stdout)
    assert data["runs"][0]["unfinished_with_default_memory"] == 2
    # With a default that fits, they run, and nothing is said.
    fitting = runner.invoke(app, ["simulate", str(path), "-c", str(cfg), "--default-memory", "256MiB", "--json"])
    (run,) = json.loads(fitting.stdout)["runs"]
    assert (run["completed"], run["unfinished"], run["unfinished_with_default_memory"]) == (2, 0, 0)


def test_a_config_in_front_of_slurm_is_said_to_be_replayed_with_corrals_own_placement(
    app: typer.Typer, workload: Path, tmp_path: Path
) -> None:
    """executor = "slurm" (a live config reused): corral would hand the jobs to Slurm; the replay,
    with no Slurm, places them itself. Before, it said nothing, and the figures read as those of
    corral in front of Slurm."""
    cfg = write_config(tmp_path / "ours.toml", "1m")
    cfg.write_text('executor = "slurm"\n' + cfg.read_text())
    result = runner.invoke(app, ["simulate", str(workload), "-c", str(cfg), "--limit", "5", "--no-progress"])
    assert result.exit_code == 0, result.output
    message = " ".join(result.stderr.split())
    assert "warning (ours): executor is 'slurm': the replay places the jobs with corral's own policy" in message


def test_a_fixed_fleet_that_leaves_out_a_room_filter_is_warned_of(app: typer.Typer, tmp_path: Path) -> None:
    """The placement filters' warnings (jobs may be placed beyond a node's room) were given for an
    elastic config only: a fixed partition without min-ram ran jobs on nodes too small for them,
    and said nothing."""
    cfg = tmp_path / "partition.toml"
    cfg.write_text(
        '[[instance_types]]\nname = "n"\nvcpus = 4\nram = "8GiB"\nprice_per_hour = 0.2\n'
        '[sim.fleet]\nmode = "fixed"\nnodes = [{ instance_type = "n", count = 2 }]\n'
        "[policy.placement]\n"
        'filters = ["state", "reserved", "min-cpu", "min-disk", "gpus"]\n'
    )
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text('{"run_time": 100, "vcpus": 1, "ram": "1GiB"}\n')
    result = runner.invoke(app, ["simulate", str(jobs), "-c", str(cfg), "--no-progress"])
    assert result.exit_code == 0, result.output
    message = " ".join(result.stderr.split())
    assert "warning (partition): policy.placement.filters leaves out min-ram" in message


def test_the_help_says_the_mapping_options_default_to_the_configs(app: typer.Typer) -> None:
    """--scale's help said "(default 1)", while a config's sim.workload.scale is what a run without
    the option takes: a user whose config sets 4 read that leaving it out meant 1."""
    result = runner.invoke(app, ["simulate", "--help"], env={"COLUMNS": "200"})
    text = " ".join(result.stdout.split())
    for key in ("scale", "time_scale", "default_memory"):
        assert f"(default: each config's sim.workload.{key}," in text
    assert "(default 1)" not in text
