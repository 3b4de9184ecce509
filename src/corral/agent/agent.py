"""The agent: pairs with the server, then runs three loops until told to stop.

- ping (main thread): reports running and finished attempts and load; obeys kill / ack / shutdown;
- work (thread): long-polls for attempts assigned to this node and starts them at once;
- reporter (thread): reaps exited attempts, streams their output, reports starts and finishes;
and, when the server gives one at pairing, a health check (thread) whose latest result each ping
carries (corral.agent.health).

The server may vanish at any moment (SIGKILL, restart). The agent never lets that touch its running
work: every report is retried until the server is back, which is how a restarted server re-adopts
the attempts that ran on while it was gone. Only a 401 (the server forgot this node), a `shutdown`
in a ping answer, or SIGTERM/SIGINT end the agent, and each of them kills its attempts first
(without reporting their exits: work lost with its node is for the server to judge).

The agent itself may die too (a crash, the OOM killer). It saves the node's credentials at pairing
(corral.agent.credentials), and each attempt runs under a keeper that outlives it
(corral.agent.keeper), so an agent started again in the same work dir resumes the node instead of
pairing, re-adopts the runs its predecessor started, and stops what it cannot follow
(docs/agent.md, "Restarts").
"""

from __future__ import annotations

import collections
import fcntl
import json
import os
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tenacity import RetryCallState, Retrying, retry_if_exception_type, wait_exponential, wait_random

from corral import AGENT_PROTOCOL, __version__
from corral.agent import container, credentials, logs, sysinfo
from corral.agent.client import AgentClient, Rejected, Unauthorized, Unreachable
from corral.agent.health import HealthChecker
from corral.agent.imds import Imds, Notice
from corral.agent.runner import Attempt, AttemptSpec, BadAttempt, Runner, run_limit
from corral.core.signals import signal_text

# Told at pairing and resuming: the server shows the version (corral nodes) and refuses a
# protocol it does not speak. An older server ignores both.
WHO_SPEAKS = {"agent_version": __version__, "protocol": AGENT_PROTOCOL}

EXIT_OK = 0
EXIT_PAIRING_REFUSED = 2
EXIT_NODE_UNKNOWN = 3
# After SIGUSR1: the agent left its runs to the next agent (an upgrade); non-zero, so that systemd's
# Restart=on-failure (and the loopback instance's init) starts the next at once.
EXIT_HANDED_OVER = 75

LOG_CHUNK = 256 * 1024
# An attempt's output shipped in one reporting round at most: one that floods its log must not hold
# back the output, starts and finishes of the others on the node until its whole backlog is sent.
LOG_ROUND = 4 * 1024 * 1024
REPORT_TICK = 0.2  # output is batched this long before it is sent
LOG_STUCK_AFTER = 30.0  # a finish waits this long for its log to get through before it is reported anyway
# An attempt past its time limit is the server's to end (its pass sends the kill in a ping answer);
# the agent ends it itself only this much later (at least; 3 ping intervals if longer), which is
# when the server has evidently not: it is down, or cut off from this node.
LIMIT_SLACK = 5.0


def server_detail(exc: Rejected) -> str:
    """What the server said of a refusal: its JSON `detail`, else its text."""
    try:
        detail = json.loads(exc.detail).get("detail")
    except (ValueError, AttributeError):
        return exc.detail
    return detail if isinstance(detail, str) else exc.detail


@dataclass(slots=True)
class AgentOptions:
    server: str
    node_id: str
    boot_token: str | None  # None: only the credentials saved in the work dir by an earlier agent
    capacity: dict[str, Any]
    work_dir: Path
    ping_interval: float | None = None  # None: the interval the server gives at pairing
    ca_file: str | None = None  # the CA bundle an https server is verified with (None: the system's)
    work_wait: float = 20.0
    kill_grace: float = 3.0
    flush_budget: float = 2.0  # at exit, time allowed to report the last output and finishes
    # EC2's instance metadata service, asked at each ping for a spot interruption notice (None: not
    # asked; the ec2 driver's instances pass it).
    imds_url: str | None = None


class Agent:
    def __init__(self, options: AgentOptions) -> None:
        self.options = options
        self.client = AgentClient(options.server, ca_file=options.ca_file)
        self.imds = Imds(options.imds_url) if options.imds_url else None
        self._noticed: Notice | None = None  # the cloud's notice, once given (it is not taken back)
        self.health: HealthChecker | None = None  # the check the server asked for at pairing, if any
        self.runner = Runner(options.work_dir, kill_grace=options.kill_grace)
        self.stop = threading.Event()
        self.exit_code = EXIT_OK
        self.forgotten = False
        self.ping_interval = options.ping_interval or 2.0
        # Attempts finished and reported in this agent's life: never start one of them again, whatever
        # a confused or restarted server lists. Bounded, oldest out first.
        self._done: collections.OrderedDict[int, None] = collections.OrderedDict()
        self._cancelled: set[int] = set()  # kill arrived before the attempt did
        # Signal requests (`corral cancel --signal`) sent, by id -> what each went to: said in every
        # ping until one is answered, and each sent once in this agent's life though the server
        # hands it out until then.
        self._signalled: dict[int, str | None] = {}
        self._ignored: set[int] = set()
        self._server_up = True
        self._lock = threading.Lock()
        self._lock_fd: int | None = None  # the work dir's lock (lock_work_dir)
        # Stopping to be replaced (SIGUSR1): the runs go on under their keepers for the next agent.
        self.handing_over = False

    # ---- lifecycle ---------------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        # A handler runs in the main thread between two of its steps, which may be inside
        # stop.wait() with the event's lock held: stop.set() there waited for that lock for ever,
        # and the agent, SIGTERMed by its node's shutdown, never stopped its runs (they ran on to
        # their ends, after corral had requeued their jobs). The handler only starts a thread that
        # says so and sets the event, once the main thread has let go of the lock.
        def stop_for(said: str, **fields: Any) -> None:
            logs.info(said, **fields)
            self.stop.set()

        def handler(signum: int, _frame: Any) -> None:
            name = signal.Signals(signum).name
            threading.Thread(
                target=stop_for, args=("signal received, stopping",), kwargs={"signal": name}, daemon=True
            ).start()

        def hand_over(_signum: int, _frame: Any) -> None:
            self.handing_over = True
            said = "SIGUSR1 received: exiting, leaving the runs to the next agent"
            threading.Thread(target=stop_for, args=(said,), daemon=True).start()

        def hangup(_signum: int, _frame: Any) -> None:
            # By default it ended the agent (a logrotate postrotate's kill -HUP, a closed terminal),
            # and systemd's Restart=on-failure does not start again a service SIGHUP ended: the node
            # then went silent and its work ran again elsewhere. Its log goes to stderr, so there is
            # no file of its own to reopen. (Logged from a thread, as the others: see above.)
            said = "SIGHUP received and ignored: the agent's log goes to stderr, nothing to reopen"
            threading.Thread(target=logs.info, args=(said,), daemon=True).start()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)
        signal.signal(signal.SIGUSR1, hand_over)
        signal.signal(signal.SIGHUP, hangup)

    def run(self) -> int:
        logs.info(
            "agent starting",
            node_id=self.options.node_id,
            server=self.options.server,
            capacity=self.options.capacity,
            work_dir=str(self.options.work_dir),
            pid=os.getpid(),
        )
        try:
            if not self.lock_work_dir():
                return self.exit_code
            if not self.connect():
                # Runs re-adopted from a dead agent, and this one stops before it could resume
                # (a signal, the node forgotten): they are stopped as any run is when an agent stops.
                if self.handing_over:
                    self.exit_code = EXIT_HANDED_OVER
                elif self.runner.running():
                    logs.info("stopping the re-adopted runs", attempts=[a.attempt_id for a in self.runner.running()])
                    self.runner.terminate_all()
                return self.exit_code
            threads = [
                threading.Thread(target=self._guard(self.work_loop), name="work", daemon=True),
                threading.Thread(target=self._guard(self.report_loop), name="reporter", daemon=True),
            ]
            for thread in threads:
                thread.start()
            self.ping_loop()
            self.shutdown(threads[1])
            return self.exit_code
        finally:
            self.client.close()

    def _guard(self, loop: Any) -> Any:
        """A loop that dies of a bug must not leave a half-working agent behind: stop the whole agent."""

        def run() -> None:
            try:
                loop()
            except Exception:
                logs.LOG.exception("agent loop crashed", extra={"fields": {"loop": loop.__name__}})
                self.exit_code = 1
                self.stop.set()

        return run

    def lock_work_dir(self) -> bool:
        """One agent per work dir: two would share the node's secret and stop each other's work as
        leftovers. The lock goes with the process, however it ends."""
        path = self.options.work_dir / "agent.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            holder = path.read_text().strip() or "?"
            logs.error("another agent runs in this work dir; exiting", work_dir=str(self.options.work_dir), pid=holder)
            self.exit_code = EXIT_PAIRING_REFUSED
            return False
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd  # kept open (and so locked) for the agent's life
        return True

    def connect(self) -> bool:
        """Resume as the node whose credentials an earlier agent saved here, else pair with the boot
        token. First, the runs an agent that died here started are re-adopted (their keepers ran
        on, corral.agent.keeper), and what cannot be is stopped: the server is about to take those
        runs for lost, and a run requeued elsewhere must never run beside them."""
        adopted, stopped = self.runner.adopt()
        if stopped:
            logs.warning("stopped what the previous agent here left running", attempts=stopped)
        if adopted:
            logs.info(
                "re-adopted the previous agent's runs",
                running=[a.attempt_id for a in adopted if not a.exited],
                ended=[a.attempt_id for a in adopted if a.exited],
            )
        try:
            saved = credentials.load(self.options.work_dir)
        except credentials.CredentialsError as exc:
            logs.error("saved credentials not used", error=str(exc))
            saved = None
        if saved is not None and not saved.matches(self.options.node_id, self.options.server):
            logs.warning(
                "saved credentials are another node's or server's: not used",
                saved_node_id=saved.node_id,
                saved_server=saved.server,
            )
            saved = None
        if saved is not None:
            resumed = self.resume(saved, [a.attempt_id for a in adopted])
            if resumed is not None:
                return resumed
        for attempt in adopted:
            # Not resuming that node: its runs are no one's to report any more.
            self.runner.abandon(attempt.attempt_id)
        if adopted:
            logs.warning("stopped the runs of a node not resumed", attempts=[a.attempt_id for a in adopted])
        if not self.options.boot_token:
            logs.error(
                "no boot token and no usable saved credentials: this agent cannot join the server; exiting",
                node_id=self.options.node_id,
                credentials=str(credentials.path_in(self.options.work_dir)),
            )
            self.exit_code = EXIT_PAIRING_REFUSED
            return False
        return self.pair()

    def resume(self, saved: credentials.Credentials, running: list[int]) -> bool | None:
        """True: resumed; False: stop (exit_code says why); None: the server refused the saved
        secret, pair instead if a boot token was given. `running`: the runs re-adopted, which the
        server keeps (those that ended meanwhile are reported as any end is)."""
        body = {
            "node_id": saved.node_id,
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "running": running,
            **WHO_SPEAKS,
        }
        try:
            answer = self._until_answered(lambda: self.client.resume(saved.secret, body), "resuming")
        except Unauthorized as exc:
            credentials.remove(self.options.work_dir)
            self.client.secret = None
            said = "the server does not know this node's saved credentials (HTTP 401): it forgot the node"
            if self.options.boot_token:
                logs.warning(said + "; pairing with the boot token instead", error=str(exc))
                return None
            logs.error(said + ", and there is no boot token to pair again with; exiting", error=str(exc))
            self.exit_code = EXIT_NODE_UNKNOWN
            return False
        except Rejected as exc:
            self.client.secret = None
            logs.error(f"the server refused to resume with the saved credentials: {server_detail(exc)}", error=str(exc))
            if self.options.boot_token:
                return None
            self.exit_code = EXIT_PAIRING_REFUSED
            return False
        if answer is None:
            return False
        lost = _ints(answer.get("lost"))
        self._configure(answer)
        self._skip_output_stored(answer.get("output_stored"), answer.get("stderr_stored"))
        logs.warning(
            "resumed with the saved credentials",
            node_id=saved.node_id,
            ping_interval=self.ping_interval,
            attempts_lost=lost,
        )
        self._remove_node_containers()
        return True

    def _skip_output_stored(self, stored: Any, stderr_stored: Any = None) -> None:
        """A re-adopted run's output (and stderr kept apart) goes on from what the server has of it
        (a server older than this says nothing: all of it is sent again, and stored at its offsets
        unchanged)."""
        for told, stream in ((stored, "output"), (stderr_stored, "stderr")):
            if not isinstance(told, dict):
                continue
            for key, size in told.items():
                attempt = self.runner.get(int(key)) if str(key).isdigit() else None
                if attempt is None or not isinstance(size, int) or isinstance(size, bool) or size <= 0:
                    continue
                # Never past what this node has: the server's is a prefix of the file the run writes.
                if stream == "output":
                    attempt.log_offset = min(size, attempt.log_size())
                elif attempt.stderr_path is not None:
                    attempt.stderr_offset = min(size, attempt.stderr_size())

    def _until_answered(self, call: Any, doing: str) -> Any:
        """`call`'s answer, retried with back-off while the server cannot be reached; None if the
        agent was stopped meanwhile. Refusals (Rejected, Unauthorized) are the caller's."""

        def before_sleep(state: RetryCallState) -> None:
            n = state.attempt_number
            # Log the first failures, then ever more rarely: a server may be down for hours.
            if n & (n - 1) == 0 or n % 100 == 0:
                exc = state.outcome.exception() if state.outcome else None
                logs.warning(f"server unreachable, will retry {doing}", attempt=n, error=str(exc))

        retrying = Retrying(
            retry=retry_if_exception_type(Unreachable),
            wait=wait_exponential(multiplier=0.25, max=5.0) + wait_random(0, 0.25),
            stop=lambda _state: self.stop.is_set(),
            sleep=self._sleep,
            before_sleep=before_sleep,
            reraise=True,
        )
        try:
            answer = retrying(call)
        except Unreachable:
            logs.info(f"stopped before {doing}")
            return None
        return None if self.stop.is_set() else answer

    def _remove_node_containers(self) -> None:
        """This agent's containers (its node's and its work dir's: container.own_containers, never
        another corral's that drew the same node id) that the run records did not name (an agent
        killed between starting one and recording it): nothing runs here yet but the re-adopted
        runs, so the others are all leftovers."""
        engine = self.runner.engine
        if engine is None:
            return
        kept = {a.container_name for a in self.runner.all() if a.container_name is not None}
        try:
            own = container.own_containers(engine, self.options.node_id, self.runner.work_dir)
            names = [name for name in own if name not in kept]
            if names:
                logs.warning("removing containers the previous agent left", containers=names)
                subprocess.run(
                    container.remove_ids_argv(engine, names), stdin=subprocess.DEVNULL, capture_output=True, timeout=60
                )
        except (OSError, subprocess.TimeoutExpired) as exc:
            logs.warning("cannot list or remove this node's leftover containers", error=str(exc))

    def pair(self) -> bool:
        body = {
            "node_id": self.options.node_id,
            "boot_token": self.options.boot_token,
            "capacity": self.options.capacity,
            # What the disk has, beside the scratch the agent was told to report: the server warns
            # of a node whose disk is smaller than its instance type promises.
            "work_dir_free_mib": sysinfo.writable_mib(self.options.work_dir),
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            **WHO_SPEAKS,
        }

        try:
            answer = self._until_answered(lambda: self.client.pair(body), "pairing")
        except (Rejected, Unauthorized) as exc:
            status = exc.status if isinstance(exc, Rejected) else 401
            if status == 404:
                # Not a boot token problem: the URL reaches something that is not a corral server.
                said = (
                    f"pairing refused: {self.options.server} has no corral agent API (HTTP 404):"
                    " is --server right? exiting"
                )
            elif status == 403:
                said = "pairing refused: the boot token is wrong or already used, or the node id unknown; exiting"
            elif status == 409 and isinstance(exc, Rejected):
                said = f"pairing refused: {server_detail(exc)}; exiting"
            else:
                said = f"pairing refused by the server (HTTP {status}); exiting"
            logs.error(said, node_id=self.options.node_id, server=self.options.server, error=str(exc))
            self.exit_code = EXIT_PAIRING_REFUSED
            return False
        if answer is None:
            return False
        try:
            mine = credentials.Credentials(self.options.node_id, self.options.server, answer["secret"])
            saved = credentials.save(self.options.work_dir, mine)
        except OSError as exc:
            # The node works without the file; only a restart of this agent would lose it.
            said = "cannot save the node's credentials: a restarted agent will not get the node back"
            logs.error(said, error=str(exc))
        else:
            logs.info("credentials saved", path=str(saved))
        self._configure(answer)
        logs.info("paired", node_id=answer.get("node_id", self.options.node_id), ping_interval=self.ping_interval)
        return True

    def _configure(self, answer: dict[str, Any]) -> None:
        """What pairing (or resuming) says of how this node works: ping interval, health check, engine."""
        if self.options.ping_interval is None and isinstance(answer.get("ping_interval"), int | float):
            self.ping_interval = max(0.05, float(answer["ping_interval"]))
        check = answer.get("health_check")
        if isinstance(check, dict) and check.get("command"):
            self.health = HealthChecker(
                [str(arg) for arg in check["command"]], float(check["interval"]), float(check["timeout"]), self.stop
            )
            self.health.start()
        engine = answer.get("containers")
        if isinstance(engine, dict) and engine.get("program"):
            self.runner.engine = container.Engine(
                tuple(str(arg) for arg in engine["program"]), tuple(str(arg) for arg in engine.get("run_args") or ())
            )

    @property
    def limit_slack(self) -> float:
        """How long past its time limit an attempt runs before the agent ends it itself."""
        return max(LIMIT_SLACK, 3 * self.ping_interval)

    def _sleep(self, seconds: float) -> None:
        self.stop.wait(seconds)

    def forget_node(self, error: Exception) -> None:
        with self._lock:
            if self.forgotten:
                return
            self.forgotten = True
        logs.error("the server no longer knows this node: killing all work and exiting", error=str(error))
        credentials.remove(self.options.work_dir)  # a node that is gone does not come back
        self.exit_code = EXIT_NODE_UNKNOWN
        self.stop.set()

    def shutdown(self, reporter: threading.Thread) -> None:
        if self.handing_over and not self.forgotten:
            self.hand_over(reporter)
            return
        self.runner.poll()
        running = self.runner.running()
        for attempt in running:
            if attempt.kill_requested_at is None:
                attempt.abandoned = True
        logs.info("shutting down", running=[a.attempt_id for a in running])
        self.runner.terminate_all()
        reporter.join(timeout=self.options.flush_budget + 10)
        if self.forgotten:
            return
        # Last words: whatever output and finishes can still reach the server, quickly.
        self.client.timeout = min(self.client.timeout, 1.0)
        deadline = time.monotonic() + self.options.flush_budget
        while time.monotonic() < deadline and self.runner.all():
            try:
                self.report_once()
            except (Unreachable, Unauthorized):
                break
            time.sleep(0.05)
        left = [a.attempt_id for a in self.runner.all() if not a.unwanted and not a.abandoned]
        if left:
            logs.warning("exiting with unreported attempts", attempts=left)
        abandoned = [a.attempt_id for a in running if a.abandoned]
        for attempt_id in abandoned:
            # Their ends are the node's going, not the commands': no later agent is to report them.
            self.runner.forget(attempt_id)
        if abandoned:
            logs.info("attempts stopped with this node; their exits are not reported", attempts=abandoned)
        logs.info("agent stopped", exit_code=self.exit_code)

    def hand_over(self, reporter: threading.Thread) -> None:
        """Exit without touching the runs: the next agent in this work dir resumes the node and
        re-adopts them from their records (what has ended and is not reported yet, it reports)."""
        self.runner.close()  # no new run from here on
        reporter.join(timeout=self.options.flush_budget + 10)
        left = [a.attempt_id for a in self.runner.all()]
        logs.info("exiting; the runs go on for the next agent", attempts=left)
        self.exit_code = EXIT_HANDED_OVER

    # ---- ping --------------------------------------------------------------------------------

    def ping_loop(self) -> None:
        while not self.stop.is_set():
            self.ping_once()
            self.stop.wait(self.ping_interval)

    def _finished_for_ping(self, now: float) -> list[dict[str, Any]]:
        out = []
        for attempt in self.runner.all():
            if not attempt.exited or attempt.unwanted or attempt.abandoned or not attempt.start_reported:
                continue
            stuck = attempt.log_failing_since is not None and now - attempt.log_failing_since > LOG_STUCK_AFTER
            if attempt.log_done or stuck:
                finish: dict[str, Any] = {
                    "attempt_id": attempt.attempt_id,
                    "exit_code": attempt.exit_code,
                    "finished_at": attempt.finished_at,
                }
                if attempt.exit_signal is not None:
                    finish["exit_signal"] = attempt.exit_signal  # (an older server ignores it)
                if attempt.timed_out:
                    finish["timed_out"] = True
                if attempt.failure:
                    finish["reason"] = attempt.failure
                finish.update(usage_report(attempt))
                out.append(finish)
        return out

    def ping_once(self) -> None:
        vcpus, ram_mib = self.runner.usage()
        finished = self._finished_for_ping(time.time())
        reported = {f["attempt_id"] for f in finished}
        body: dict[str, Any] = {
            # What this agent holds: the attempts that run, and those that ended whose end is not in
            # this ping (their output still going out): the server takes an attempt its agent lists
            # neither way for lost (corral.core.listing).
            "running": [
                a.attempt_id
                for a in self.runner.all()
                if not (a.unwanted or a.abandoned) and (not a.exited or a.attempt_id not in reported)
            ],
            "finished": finished,
            "used": {"vcpus": vcpus, "ram_mib": ram_mib},
        }
        if self.imds is not None and self._noticed is None:
            self._noticed = self.imds.interruption()
            if self._noticed is not None:
                logs.warning("the cloud takes this instance back", action=self._noticed.action, at=self._noticed.time)
        if self._noticed is not None:
            body["interruption"] = {"action": self._noticed.action, "time": self._noticed.time}
        checked = self.health.latest if self.health is not None else None
        if checked is not None:
            body["health"] = {"ok": checked.ok, "message": checked.message}
        told = dict(self._signalled)
        if told:
            body["signalled"] = [{"id": request_id, "to": to} for request_id, to in told.items()]
        try:
            answer = self.client.ping(body)
        except Unreachable as exc:
            self._server_down(exc)
            return
        except Unauthorized as exc:
            self.forget_node(exc)
            return
        except Rejected as exc:
            logs.warning("ping refused", error=str(exc))
            return
        self._server_back()
        for request_id in told:
            self._signalled.pop(request_id, None)  # (the server has it: it hands that one out no more)
        self.send_requested_signals(answer.get("signals"))
        for attempt_id in _ints(answer.get("kill")):
            if self.runner.kill(attempt_id):
                logs.info("killing attempt on the server's request", attempt_id=attempt_id)
            elif self.runner.get(attempt_id) is None:
                self._cancelled.add(attempt_id)
        limits = answer.get("time_limits")
        for key, value in limits.items() if isinstance(limits, dict) else ():
            # The limits as they stand now (an operator may change a running job's): what the agent
            # enforces should the server go away.
            attempt = self.runner.get(int(key)) if str(key).isdigit() else None
            if attempt is not None:
                try:
                    attempt.time_limit = run_limit(value, f"time_limits[{key}]")
                except BadAttempt as exc:
                    logs.error("unusable time limit from the server", error=str(exc))
        for attempt_id in _ints(answer.get("ack")):
            attempt = self.runner.get(attempt_id)
            if attempt is not None and attempt.exited:
                if not attempt.log_done:
                    logs.warning(
                        "attempt's end reported without all its output: the server could not take the rest",
                        attempt_id=attempt.attempt_id,
                        output_bytes_unsent=max(0, attempt.log_size() - attempt.log_offset),
                    )
                self._mark_done(attempt)
        if answer.get("shutdown") is True:
            logs.info("the server asked this node to shut down")
            self.stop.set()

    def send_requested_signals(self, requests: Any) -> None:
        """The signals the server asks sent to running attempts now (`corral cancel --signal`):
        each once, and said sent in the next ping. One whose attempt this agent does not run is
        said sent to nothing, and the server drops it."""
        for request in requests if isinstance(requests, list) else ():
            try:
                request_id, attempt_id, number = (int(request[key]) for key in ("id", "attempt_id", "number"))
                main_only = request.get("main_only") is True
            except (TypeError, KeyError, ValueError):
                logs.error("unusable signal request from the server", request=repr(request)[:200])
                continue
            if request_id in self._signalled:
                continue  # sent already, its answer not yet back
            to = self.runner.signal(attempt_id, number, main_only) if number in signal.valid_signals() else None
            self._signalled[request_id] = to
            fields = {"attempt_id": attempt_id, "signal": signal_text(number), "request": request_id}
            if to is None:
                logs.warning("a signal asked by the server found no process to go to", **fields)
            else:
                logs.info("sent a signal on the server's request", to=to, **fields)

    def _server_down(self, exc: Exception) -> None:
        if self._server_up:
            logs.warning("server unreachable; attempts keep running, reports are kept until it is back", error=str(exc))
        self._server_up = False

    def _server_back(self) -> None:
        if not self._server_up:
            logs.info("server reachable again")
        self._server_up = True

    def _mark_done(self, attempt: Attempt) -> None:
        with self._lock:
            self._done[attempt.attempt_id] = None
            while len(self._done) > 100_000:
                self._done.popitem(last=False)
        self.runner.forget(attempt.attempt_id)

    # ---- work --------------------------------------------------------------------------------

    def work_loop(self) -> None:
        backoff = 0.25
        while not self.stop.is_set():
            try:
                items = self.client.work(self.options.work_wait)
            except Unreachable as exc:
                self._server_down(exc)
                self.stop.wait(backoff)
                # Capped low: after a server restart, queued work should start within a couple of seconds.
                backoff = min(backoff * 2, 2.0)
                continue
            except Unauthorized as exc:
                self.forget_node(exc)
                return
            except Rejected as exc:
                logs.warning("work poll refused", error=str(exc))
                self.stop.wait(2.0)
                continue
            backoff = 0.25
            launched = sum(self.launch(item) for item in items)
            if items and not launched:
                # Everything listed is already known here: do not spin on a server that answers at once.
                self.stop.wait(0.5)

    def launch(self, item: Any) -> bool:
        try:
            spec = AttemptSpec.from_json(item)
        except BadAttempt as exc:
            logs.error("unusable attempt from the server", error=str(exc), attempt=item)
            return False
        aid = spec.attempt_id
        with self._lock:
            done = aid in self._done
        known = self.runner.get(aid)
        if done or aid in self._ignored:
            return False
        if known is not None:
            if not known.start_reported:
                self._report_started_quietly(known)
            return False
        if aid in self._cancelled:
            logs.info("not starting an attempt the server asked to kill", attempt_id=aid)
            return False
        if spec.node_ids and spec.node_ids[0] != self.options.node_id:
            # A gang's command runs on its first node only, as a Slurm batch script does.
            logs.info("gang member: the command runs on the first node", attempt_id=aid, first=spec.node_ids[0])
            self._ignored.add(aid)
            return False
        attempt = self.runner.start(spec)
        if attempt is None:
            return False
        if attempt.exited:
            logs.warning("attempt could not start", attempt_id=aid, job_id=spec.job_id, exit_code=attempt.exit_code)
        else:
            logs.info("attempt started", attempt_id=aid, job_id=spec.job_id, pid=attempt.pid, command=spec.command)
        self._report_started_quietly(attempt)
        return True

    def _report_started_quietly(self, attempt: Attempt) -> None:
        try:
            self.report_started(attempt)
        except Unreachable as exc:
            self._server_down(exc)
        except Unauthorized as exc:
            self.forget_node(exc)

    # ---- reporting ---------------------------------------------------------------------------

    def report_loop(self) -> None:
        while not self.stop.is_set():
            behind = False
            try:
                behind = self.report_once()
            except Unreachable as exc:
                self._server_down(exc)
            except Unauthorized as exc:
                self.forget_node(exc)
                return
            # Output left over from the round's share is sent on at once, not after a tick.
            self.stop.wait(0 if behind else REPORT_TICK)

    def report_once(self) -> bool:
        """One round of reports; raises Unreachable at the first sign the server is gone, so that a
        dead server costs one failed request per round, not one per attempt. True if some output
        was left for the next round (an attempt sends at most LOG_ROUND per round)."""
        behind = False
        for attempt in self.runner.poll():
            if attempt.keeper_killed:
                logs.warning(
                    "the attempt's keeper was killed before its command ended; its command was stopped"
                    " and the run is left to the server as lost",
                    attempt_id=attempt.attempt_id,
                )
            elif attempt.status_unkept:
                logs.warning(
                    "attempt exited; its keeper could not write its status (no disk left?): its exit code"
                    " is the keeper's word, and an agent started again before it is reported would lose it",
                    attempt_id=attempt.attempt_id,
                    exit_code=attempt.exit_code,
                )
            else:
                logs.info(
                    "attempt exited",
                    attempt_id=attempt.attempt_id,
                    exit_code=attempt.exit_code,
                    exit_signal=attempt.exit_signal,
                )
        self.send_signals_due()
        for attempt in self.runner.past_time_limit(self.limit_slack):
            # slurmstepd's way: a limit holds even when the controller cannot be reached.
            logs.warning(
                "attempt ran past its time limit and the server has not ended it; killing it",
                attempt_id=attempt.attempt_id,
                time_limit=attempt.time_limit,
            )
            attempt.timed_out = True
            self.runner.kill(attempt.attempt_id)
        for attempt in self.runner.all():
            if attempt.unwanted:
                if attempt.exited:
                    self._mark_done(attempt)
                continue
            if not attempt.start_reported:
                self.report_started(attempt)
                if not attempt.start_reported:
                    continue
            if not attempt.log_done:
                behind = self.ship_log(attempt) or behind
            if attempt.exited and attempt.log_done:
                if attempt.abandoned:
                    self._mark_done(attempt)
                else:
                    self.report_finished(attempt)
        return behind

    def send_signals_due(self) -> None:
        """Each run's --signal once it is due (slurmstepd's way: sent on the node, whether or not
        the server can be reached), before its time limit, so that the job can checkpoint."""
        for attempt in self.runner.signals_due():
            to = self.runner.send_signal(attempt.attempt_id)
            job_signal = attempt.spec.signal
            assert job_signal is not None
            fields: dict[str, Any] = {
                "attempt_id": attempt.attempt_id,
                "job_id": attempt.spec.job_id,
                "signal": signal_text(job_signal.number),
                "time_limit": attempt.time_limit,
                "ran": round(time.monotonic() - attempt.started_monotonic, 1),
            }
            if to is None:
                logs.warning("the job's signal before its time limit found no process to go to", **fields)
            else:
                logs.info("sent the job's signal before its time limit", to=to, **fields)

    def report_started(self, attempt: Attempt) -> None:
        if attempt.start_reported:
            return
        try:
            self.client.started(attempt.attempt_id, attempt.pid, attempt.started_at)
        except Rejected as exc:
            # 409: cancelled while it was on its way here. Anything else: the server wants no part of it.
            logs.info("server does not want this attempt; killing it", attempt_id=attempt.attempt_id, error=str(exc))
            attempt.unwanted = True
            self.runner.kill(attempt.attempt_id, hard=True)
            return
        attempt.start_reported = True
        self._server_back()

    def ship_log(self, attempt: Attempt) -> bool:
        """Send what the attempt has written since the last call, up to LOG_ROUND of each stream
        (its output, and its stderr when its job keeps that apart); True if more is left. Done once
        it has exited and both are sent (or refused): only then is its finish reported. The output
        refused or unreadable ends both (the finish is reported); the stderr, only itself."""
        if attempt.log_done:
            return False
        behind = self._ship_stream(attempt, "output")
        if behind is None:
            attempt.log_done = True
            return False
        if attempt.stderr_path is not None and not attempt.stderr_refused:
            stderr_behind = self._ship_stream(attempt, "stderr")
            attempt.stderr_refused = stderr_behind is None
            behind = bool(stderr_behind) or behind
        stderr_sent = attempt.stderr_refused or attempt.stderr_offset >= attempt.stderr_size()
        if attempt.exited and attempt.log_offset >= attempt.log_size() and stderr_sent:
            attempt.log_done = True
        return behind

    def _ship_stream(self, attempt: Attempt, stream: str) -> bool | None:
        """Send up to LOG_ROUND of one of the attempt's streams ("output", or "stderr" kept apart)
        from where the server has it: True if more is left, None once it is done with for good
        (the server refused it, or its file cannot be read)."""
        output = stream == "output"
        path = attempt.log_path if output else attempt.stderr_path
        assert path is not None
        offset = attempt.log_offset if output else attempt.stderr_offset
        written = attempt.log_size() if output else attempt.stderr_size()
        size = min(written, offset + LOG_ROUND)
        while offset < size:
            try:
                with open(path, "rb") as f:
                    f.seek(offset)
                    chunk = f.read(min(LOG_CHUNK, size - offset))
            except OSError as exc:
                logs.error(f"cannot read attempt {stream}", attempt_id=attempt.attempt_id, error=str(exc))
                return None
            if not chunk:
                break
            try:
                self.client.log(attempt.attempt_id, offset, chunk, stream=stream)
            except Rejected as exc:
                logs.warning(f"server refused {stream}; sending no more", attempt_id=attempt.attempt_id, error=str(exc))
                return None
            except Unreachable:
                if attempt.log_failing_since is None:
                    attempt.log_failing_since = time.time()
                raise
            offset += len(chunk)
            if output:
                attempt.log_offset = offset
            else:
                attempt.stderr_offset = offset
            attempt.log_failing_since = None
        return offset < written

    def report_finished(self, attempt: Attempt) -> None:
        assert attempt.exit_code is not None and attempt.finished_at is not None
        try:
            self.client.finished(
                attempt.attempt_id,
                attempt.exit_code,
                attempt.finished_at,
                attempt.timed_out,
                reason=attempt.failure,
                exit_signal=attempt.exit_signal,
                **usage_report(attempt),
            )
        except Rejected as exc:
            logs.warning("the server refused a finish; dropping it", attempt_id=attempt.attempt_id, error=str(exc))
        else:
            logs.info("attempt finish reported", attempt_id=attempt.attempt_id, exit_code=attempt.exit_code)
        self._mark_done(attempt)


def usage_report(attempt: Attempt) -> dict[str, Any]:
    """What an ended attempt used, for its exit report: the figures that are known (an older server
    ignores them)."""
    used: dict[str, Any] = {}
    if attempt.cpu_seconds is not None:
        used["cpu_seconds"] = attempt.cpu_seconds
    if attempt.max_rss_mib is not None:
        used["max_rss_mib"] = attempt.max_rss_mib
    return used


def _ints(value: Any) -> list[int]:
    if not isinstance(value, list):
        return []
    return [v for v in value if isinstance(v, int) and not isinstance(v, bool)]


def run_agent(options: AgentOptions, handle_signals: bool = True) -> int:
    agent = Agent(options)
    if handle_signals:
        agent.install_signal_handlers()
    return agent.run()


__all__ = [
    "Agent",
    "AgentOptions",
    "run_agent",
    "EXIT_OK",
    "EXIT_PAIRING_REFUSED",
    "EXIT_NODE_UNKNOWN",
    "EXIT_HANDED_OVER",
]
