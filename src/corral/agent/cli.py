"""`python -m corral.agent`: the agent's command line.

Capacity flags that are left out are read from the machine (standalone worker mode, seed 001):
usable CPUs, MemTotal from /proc/meminfo, free disk space of the work dir, and no GPUs.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn
from urllib.parse import urlsplit

from corral.agent import credentials, logs, sysinfo
from corral.agent.agent import AgentOptions, run_agent
from corral.home import DEFAULT_PORT, default_home


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m corral.agent", description="corral node agent")
    p.add_argument(
        "--server",
        default=os.environ.get("CORRAL_SERVER", f"http://127.0.0.1:{DEFAULT_PORT}"),
        help="corral server URL (default: $CORRAL_SERVER or %(default)s)",
    )
    p.add_argument(
        "--ca",
        default=os.environ.get("CORRAL_CA") or None,
        help="PEM CA bundle to verify an https server with (default: $CORRAL_CA, else the system's trusted CAs)",
    )
    p.add_argument("--node-id", default=None, help="this node's id (default: the host name)")
    p.add_argument(
        "--boot-token",
        default=None,
        help="one-time pairing token (default: $CORRAL_BOOT_TOKEN, which keeps it out of the process list); not"
        " needed by an agent started again in the work dir of one that paired (it resumes with the saved credentials)",
    )
    p.add_argument("--vcpus", type=_positive_float, default=None, help="default: the CPUs this process may use")
    p.add_argument("--ram-mib", type=_non_negative_int, default=None, help="default: MemTotal")
    p.add_argument("--scratch-mib", type=_non_negative_int, default=None, help="default: free space of --work-dir")
    p.add_argument("--gpus", type=_non_negative_int, default=None, help="default: 0")
    p.add_argument("--work-dir", type=Path, default=None, help="default: $CORRAL_HOME/agent/NODE_ID")
    p.add_argument(
        "--ping-interval",
        type=_positive_float,
        default=None,
        help="seconds between pings (default: what the server says at pairing)",
    )
    p.add_argument("--work-wait", type=_positive_float, default=20.0, help="long-poll wait for work, seconds")
    p.add_argument("--kill-grace", type=_non_negative_float, default=3.0, help="SIGTERM to SIGKILL delay, seconds")
    p.add_argument(
        "--imds",
        default=None,
        help="EC2's instance metadata service (http://169.254.169.254), asked at each ping for a spot interruption"
        " notice, which the server drains the node on (default: not asked)",
    )
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    return p


def _positive_float(text: str) -> float:
    value = _float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 (got {text!r})")
    return value


def _non_negative_float(text: str) -> float:
    value = _float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative (got {text!r})")
    return value


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative (got {text!r})")
    return value


def options_from_args(argv: Sequence[str] | None = None) -> tuple[AgentOptions, str]:
    p = parser()
    args = p.parse_args(argv)
    boot_token = args.boot_token or os.environ.get("CORRAL_BOOT_TOKEN") or None
    server = urlsplit(args.server)
    if server.scheme not in ("http", "https") or not server.hostname:
        # httpx would refuse it at every request, and the agent retry its pairing for ever.
        p.error(f"--server: {args.server!r} is not an http:// or https:// URL (e.g. http://corral.example:8642)")
    if args.ca is not None and not Path(args.ca).is_file():
        p.error(f"--ca: {args.ca} is not a file")
    node_id = args.node_id or socket.gethostname()
    work_dir: Path = args.work_dir or default_home() / "agent" / node_id
    work_dir = work_dir.expanduser().resolve()
    if not boot_token and not credentials.path_in(work_dir).exists():
        # A restarted agent needs none: it resumes with the credentials its predecessor saved.
        p.error(f"--boot-token (or $CORRAL_BOOT_TOKEN) is required: no saved credentials in {work_dir}")
    work_dir.mkdir(parents=True, exist_ok=True)
    capacity = {
        "vcpus": args.vcpus if args.vcpus is not None else sysinfo.cpu_count(),
        "ram_mib": args.ram_mib if args.ram_mib is not None else sysinfo.mem_total_mib(),
        "scratch_mib": args.scratch_mib if args.scratch_mib is not None else sysinfo.disk_free_mib(work_dir),
        "gpus": args.gpus if args.gpus is not None else 0,
    }
    options = AgentOptions(
        server=args.server,
        node_id=node_id,
        boot_token=boot_token,
        capacity=capacity,
        work_dir=work_dir,
        ping_interval=args.ping_interval,
        ca_file=args.ca,
        work_wait=args.work_wait,
        kill_grace=args.kill_grace,
        imds_url=args.imds,
    )
    return options, args.log_level


def main(argv: Sequence[str] | None = None) -> int:
    options, level = options_from_args(argv)
    logs.setup(level)
    return run_agent(options)


def exit_now(code: int) -> NoReturn:
    """End the agent's process once its run is over (its attempts stopped, its last reports sent)
    without the interpreter's finalization: the work thread may still be in a long poll on the
    closed client, and a daemon thread woken while the interpreter is torn down crashed the agent
    with SIGSEGV (seen once, exit -11 after a clean shutdown)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
