"""The agent's health check run (corral.agent.health.run_check): healthy on exit 0; otherwise failed,
with the first line the check printed, or why it could not run or did not end."""

from __future__ import annotations

import sys

from corral.agent.health import Result, run_check


def test_a_check_passes_on_exit_0_and_fails_with_its_first_words_otherwise() -> None:
    assert run_check(["true"], 5) == Result(True, "")
    script = "import sys; print(); print('  /scratch is full  '); print('more'); sys.exit(1)"
    assert run_check([sys.executable, "-c", script], 5) == Result(False, "/scratch is full")
    assert run_check(["false"], 5) == Result(False, "exit 1")


def test_a_check_that_cannot_run_or_does_not_end_has_failed() -> None:
    missing = run_check(["/nonexistent/nhc"], 5)
    assert not missing.ok and missing.message.startswith("cannot run /nonexistent/nhc")
    assert run_check(["sleep", "5"], 0.2) == Result(False, "no exit within 0.2 s")
