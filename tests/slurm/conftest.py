"""A real Slurm on this machine for the Slurm executor's tests: munged, slurmctld and two slurmd.

Installed from Debian's packages when missing (root and apt-get needed; otherwise the tests skip
with the reason, unless `CI=true`, where that is a failure: CI never goes green without them).
Everything lives in a temporary directory: its own munge socket, state, spool and logs, ports
picked free, so it collides with no other Slurm on the machine. The settings are those found to
work here (shared/notes/slurm-on-one-machine.md): proctrack/linuxproc and no cgroups, cons_tres
with DefMemPerCPU, no accounting (exit codes come from `scontrol show job`); a second partition
whose jobs preempt the default one's.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.support import debian_packages_missing, require, wait_until

PACKAGES = ["slurmctld", "slurmd", "slurm-client", "munge"]
PROGRAMS = ["sbatch", "squeue", "scontrol", "scancel", "sinfo", "slurmctld", "slurmd", "munge"]
MUNGED = "/usr/sbin/munged"
NODES = ("c1", "c2")
# A partition over the same nodes whose jobs preempt those of the default one (partition_prio,
# PreemptMode=REQUEUE): a real preemption on one machine.
PREEMPTOR = "high"


def _missing() -> list[str]:
    return [p for p in PROGRAMS if shutil.which(p) is None] + ([] if Path(MUNGED).exists() else ["munged"])


@functools.cache
def slurm_unavailable() -> str | None:
    """Why a real Slurm cannot be started here (installing it first if need be), or None."""
    return debian_packages_missing(PACKAGES, _missing)


def require_slurm() -> None:
    require(slurm_unavailable(), "the Slurm tests")


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


@dataclass
class SlurmCluster:
    root: Path
    conf: Path
    nodes: tuple[str, ...]

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *args: str) -> str:
        return subprocess.run(args, env=self.env, capture_output=True, text=True, timeout=30, check=True).stdout

    def show_job(self, job_id: str) -> str:
        return self.run("scontrol", "show", "job", "--oneliner", job_id)

    def times(self, job_id: str) -> tuple[float, float]:
        """A job's StartTime and EndTime as `scontrol show job` gives them (in UTC, whatever this
        process's zone), in seconds since the epoch."""
        env = {**self.env, "TZ": "UTC0", "SLURM_TIME_FORMAT": "standard"}
        shown = subprocess.run(
            ["scontrol", "show", "job", "--oneliner", job_id], env=env, capture_output=True, text=True, timeout=30
        ).stdout
        found = [re.search(rf" {field}=(\S+)", shown) for field in ("StartTime", "EndTime")]
        assert all(found), shown
        start, end = (datetime.fromisoformat(m[1]).replace(tzinfo=UTC).timestamp() for m in found if m)
        return start, end

    def state(self, job_id: str) -> str:
        return self.run("squeue", "--noheader", "--states=all", "--format=%T", "--jobs", job_id).strip()

    def node_state(self, node: str) -> str:
        # A line per partition the node is in: the same state on each.
        return self.run("sinfo", "--noheader", "--Node", "--format=%T", "--nodes", node).split()[0]

    def jobs(self) -> list[str]:
        return self.run("squeue", "--noheader", "--states=all", "--format=%i|%T|%k").splitlines()

    @contextlib.contextmanager
    def controller_down(self) -> Iterator[None]:
        """slurmctld stopped (its state saved, as a restart or a crash of its host would leave it)
        while the block runs; slurmd go on running their jobs. Started again afterwards, whatever
        the block did, with the jobs it held."""
        _kill_pidfile(self.root / "slurmctld.pid")
        try:
            yield
        finally:
            subprocess.run(["slurmctld", "-f", str(self.conf)], check=True, timeout=30, stdin=subprocess.DEVNULL)
            wait_until(lambda: self.answers(), 30, "slurmctld to answer again", interval=0.2)
            self.wait_for_nodes()

    def restart_with_state_lost(self) -> None:
        """slurmctld started again with its StateSaveLocation lost (a new disk, an emptied
        directory): it knows no job, and gives job ids out from the first again."""
        _kill_pidfile(self.root / "slurmctld.pid")
        for saved in (self.root / "state").iterdir():
            shutil.rmtree(saved) if saved.is_dir() else saved.unlink()
        subprocess.run(["slurmctld", "-f", str(self.conf)], check=True, timeout=30, stdin=subprocess.DEVNULL)
        wait_until(lambda: self.answers(), 30, "slurmctld to answer again", interval=0.2)
        self.wait_for_nodes()

    def wait_for_nodes(self) -> None:
        """Until a restarted slurmctld has heard from every slurmd again: a node it has not is
        "unknown" for a few seconds, and runs nothing, so that the next test's jobs, which may
        need both nodes at once, would start one node's worth at a time."""
        wait_until(
            lambda: all(self.node_state(node).rstrip("*") != "unknown" for node in self.nodes),
            30,
            "the slurmd to register with slurmctld again",
            interval=0.2,
        )

    @contextlib.contextmanager
    def forgetting_ended_jobs(self) -> Iterator[None]:
        """slurmctld forgets an ended job within seconds while the block runs (MinJobAge=2; its
        purge runs every few seconds), as it does after 300 s by default: squeue, scontrol show
        job and, with accounting off, every command then know nothing of it."""
        text = self.conf.read_text()
        self.conf.write_text(text + "MinJobAge=2\n")
        self.run("scontrol", "reconfigure")
        try:
            yield
        finally:
            self.conf.write_text(text)
            self.run("scontrol", "reconfigure")

    def listed(self, job_id: str) -> bool:
        """Whether slurmctld still lists the job, in any state."""
        return any(line.split("|")[0] == job_id for line in self.jobs())

    def answers(self) -> bool:
        return subprocess.run(["squeue"], env=self.env, capture_output=True, timeout=30, check=False).returncode == 0

    def cancel_all(self) -> None:
        active = [line.split("|")[0] for line in self.jobs() if line.split("|")[1] in ("PENDING", "RUNNING")]
        if active:
            subprocess.run(["scancel", *active], env=self.env, capture_output=True, timeout=30, check=False)


def _write_conf(root: Path, ports: list[int]) -> Path:
    first, last = ports[1], ports[1] + len(NODES) - 1
    conf = root / "slurm.conf"
    conf.write_text(
        f"""ClusterName=corraltest
SlurmctldHost=localhost
SlurmctldPort={ports[0]}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge/munge.sock
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=100
SchedulerParameters=batch_sched_delay=0
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
NodeName=c[1-{len(NODES)}] NodeHostname=localhost NodeAddr=127.0.0.1 Port={first}-{last} CPUs=2 RealMemory=4000
PartitionName=debug Nodes=c[1-{len(NODES)}] Default=YES MaxTime=INFINITE State=UP
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
PartitionName={PREEMPTOR} Nodes=c[1-{len(NODES)}] PriorityTier=10 MaxTime=INFINITE State=UP
"""
    )
    return conf


def _consecutive_ports(count: int) -> list[int]:
    """A free port for slurmctld and `count` consecutive free ones for the slurmd (a node range
    takes a port range)."""
    for _ in range(50):
        ctld = free_ports(1)[0]
        base = free_ports(1)[0]
        wanted = list(range(base, base + count))
        if ctld in wanted or wanted[-1] > 65535:
            continue
        try:
            held = []
            for port in wanted:
                sock = socket.socket()
                held.append(sock)
                sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            for sock in held:
                sock.close()
        return [ctld, *wanted]
    raise RuntimeError("no free consecutive ports")


def _kill_pidfile(path: Path) -> None:
    try:
        pid = int(path.read_text().strip())
    except (OSError, ValueError):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    require_slurm()
    # Not under pytest's 0700 tmp dir: munged wants every directory above its socket searchable by all.
    root = Path(tempfile.mkdtemp(prefix="corral-slurm-"))
    root.chmod(0o755)
    for sub in ("state", "log", *(f"spool/{n}" for n in NODES)):
        (root / sub).mkdir(parents=True)
    munge_dir = root / "munge"
    munge_dir.mkdir()
    munge_dir.chmod(0o755)
    shutil.chown(munge_dir, "munge", "munge")
    conf = _write_conf(root, _consecutive_ports(len(NODES)))
    cluster = SlurmCluster(root, conf, NODES)
    pidfiles = [munge_dir / "munged.pid", root / "slurmctld.pid", *(root / f"slurmd-{n}.pid" for n in NODES)]
    try:
        subprocess.run(
            ["runuser", "-u", "munge", "--", MUNGED, f"--socket={munge_dir}/munge.sock",
             f"--pid-file={munge_dir}/munged.pid", f"--seed-file={munge_dir}/munged.seed",
             f"--log-file={munge_dir}/munged.log"],
            check=True, capture_output=True, timeout=30, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        subprocess.run(["slurmctld", "-f", str(conf)], check=True, timeout=30, stdin=subprocess.DEVNULL)
        for node in NODES:
            subprocess.run(["slurmd", "-f", str(conf), "-N", node], check=True, timeout=30, stdin=subprocess.DEVNULL)

        def idle() -> bool:
            out = subprocess.run(
                ["sinfo", "--noheader", "--format=%T %D"], env=cluster.env, capture_output=True, text=True, timeout=10
            ).stdout
            return set(out.split("\n")) - {""} == {f"idle {len(NODES)}"}  # a line per partition

        wait_until(idle, 30, "the Slurm nodes to be idle", interval=0.1)
        yield cluster
    finally:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            cluster.cancel_all()
        for pidfile in reversed(pidfiles):
            _kill_pidfile(pidfile)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def slurm(slurm_cluster: SlurmCluster) -> Iterator[SlurmCluster]:
    """The session's Slurm, with no job of an earlier test still running on it."""
    yield slurm_cluster
    slurm_cluster.cancel_all()
