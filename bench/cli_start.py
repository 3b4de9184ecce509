"""What every `corral` command pays before it does anything: starting Python and importing the CLI.

Times, in fresh interpreters, `import corral.cli` alone and a whole `corral --help` (the console
script), --repeat times each, and prints the median and the slowest. Every CLI call of an operator
(and of the e2e tests, hundreds per run) pays this. Prints a table, then one JSON object of the
figures as the last line.

    .venv/bin/python bench/cli_start.py [--repeat 15]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

IMPORT_PROBE = "import time; t = time.perf_counter(); import corral.cli; print(time.perf_counter() - t)"
HEAVY = ("numpy", "sqlalchemy", "matplotlib")
LOADED_PROBE = f"import sys, corral.cli; print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r}))"


def timed_import() -> float:
    done = subprocess.run([sys.executable, "-c", IMPORT_PROBE], capture_output=True, text=True, check=True)
    return float(done.stdout)


def timed_help(corral: Path) -> float:
    started = time.perf_counter()
    subprocess.run([str(corral), "--help"], capture_output=True, check=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    corral = Path(sys.executable).with_name("corral")
    imports = [timed_import() for _ in range(args.repeat)]
    helps = [timed_help(corral) for _ in range(args.repeat)]
    loaded = subprocess.run([sys.executable, "-c", LOADED_PROBE], capture_output=True, text=True, check=True)

    table = Table(title=f"corral's command line start ({args.repeat} runs each)")
    for column in ("measure", "median", "slowest"):
        table.add_column(column, justify="right" if column != "measure" else "left")
    table.add_row("import corral.cli", f"{statistics.median(imports) * 1000:.0f} ms", f"{max(imports) * 1000:.0f} ms")
    table.add_row(
        "corral --help (whole process)", f"{statistics.median(helps) * 1000:.0f} ms", f"{max(helps) * 1000:.0f} ms"
    )
    Console().print(table)
    Console().print(f"heavy packages the CLI loads: {loaded.stdout.strip()}")
    figures = {
        "repeat": args.repeat,
        "import_cli_median_s": round(statistics.median(imports), 4),
        "help_median_s": round(statistics.median(helps), 4),
        "help_max_s": round(max(helps), 4),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
