"""The real `corral` command, run as a process against a served app (tests.support.served_app)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

CORRAL = str(Path(sys.executable).parent / "corral")


def corral(url: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CORRAL_URL": url, "CORRAL_TOKEN": "t", "COLUMNS": "200"}
    done = subprocess.run([CORRAL, *args], env=env, capture_output=True, text=True, timeout=60)
    if check and done.returncode != 0:
        raise AssertionError(f"corral {' '.join(args)} exited {done.returncode}:\n{done.stderr}")
    return done


def corral_json(url: str, *args: str) -> Any:
    return json.loads(corral(url, *args, "--json").stdout)
