"""`python -m corral` is the `corral` command, for an environment whose scripts are not on PATH."""

from __future__ import annotations

import subprocess
import sys


def test_python_m_corral_runs_the_cli() -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "corral", "config", "reference"], capture_output=True, text=True, check=True, timeout=60
    )
    assert shown.stdout.startswith("# Configuration reference")
