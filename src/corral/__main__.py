"""`python -m corral`: the same CLI as the `corral` command (for an environment whose scripts
directory is not on PATH)."""

from corral.cli import app

app(prog_name="corral")
