"""Where a corral keeps its data, and the port it serves on by default: read by the server, the CLI
and the agent. A module of its own so that the agent, which every node starts, need not load the
configuration's models (and NumPy through the placement settings) to know them."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_PORT = 8642


def default_home() -> Path:
    """CORRAL_HOME, else ~/.local/share/corral."""
    env = os.environ.get("CORRAL_HOME")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".local" / "share" / "corral"
