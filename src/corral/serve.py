"""`corral run`: the server, the control loop and the cloud driver in one process.

Files under the data directory (CORRAL_HOME):
  corral.db       SQLite store (unless store.url points elsewhere)
  token           the API token the CLI sends (created on first run, mode 0600)
  dispatcher-id   this dispatcher's stable id, so a restart keeps its own claims
  server.json     where the running server listens (the CLI reads it)
  logs/           job output, one file per attempt
  loopback/       the loopback cloud's instance records and agent logs (ec2 keeps none: its tags are its record)
"""

from __future__ import annotations

import fcntl
import ipaddress
import json
import logging
import math
import os
import secrets
import signal
import socket
import socket as socketlib
import stat
import time
from datetime import datetime
from pathlib import Path

import uvicorn
from sqlalchemy.exc import SQLAlchemyError

from corral.cloud.base import CloudDriver
from corral.config import Config
from corral.files import DamagedServerInfo, read_server_info, without_password
from corral.loop import ControlLoop, LiveLoop, PauseWatch, pause_threshold
from corral.server.app import Runtime, create_app
from corral.server.logstore import LogStore
from corral.store import Store
from corral.store.migrate import BrokenForeignKeys, MigrationFailed, OlderDispatchersRun, Starter, StoreTooNew

log = logging.getLogger("corral.serve")


# The ids a log call may pass as `extra` (log.warning("...", extra={"node_id": ...})): written as
# fields of their own, so that a log shipper (Loki, Elasticsearch) can select a node's or a job's lines
# without parsing the message.
LOG_FIELDS = ("job_id", "attempt_id", "node_id", "instance_id", "instance_type")
LOG_FORMATS = ("logfmt", "json")
LOG_LEVELS = ("debug", "info", "warning", "error")


def _timestamp(record: logging.LogRecord) -> str:
    # RFC 3339 with the UTC offset: a log shipper (Loki, Vector) reads a time without one as
    # UTC, which the local time of a host elsewhere is not.
    return datetime.fromtimestamp(record.created).astimezone().isoformat(timespec="milliseconds")


def _fields(record: logging.LogRecord) -> dict[str, object]:
    return {name: value for name in LOG_FIELDS if (value := getattr(record, name, None)) is not None}


class KeyValueFormatter(logging.Formatter):
    """Structured logs: one line of key=value pairs per record."""

    def format(self, record: logging.LogRecord) -> str:
        # One record, one line, whose msg a logfmt reader (Loki, Vector) can find the end of: a
        # message's own line breaks (a database error's "[SQL: ...]") would split it into lines
        # with no ts or level, and a trailing backslash would escape the closing quote.
        message = record.getMessage().replace("\\", "\\\\").replace('"', "'")
        message = message.replace("\n", "\\n").replace("\r", "\\r")
        line = f"ts={_timestamp(record)} level={record.levelname.lower()} "
        line += f'logger={record.name} msg="{message}"'
        for name, value in _fields(record).items():
            line += f" {name}={_logfmt_value(str(value))}"
        if record.exc_info:
            line += " exc=" + json.dumps(self.formatException(record.exc_info))
        return line


def _logfmt_value(value: str) -> str:
    return json.dumps(value) if not value or any(c in value for c in ' "=\\') else value


class JsonFormatter(logging.Formatter):
    """Structured logs: one JSON object per line (`corral run --log-format json`), for a shipper
    that parses JSON (Elasticsearch, Loki's json stage)."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, object] = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            **_fields(record),
        }
        if record.exc_info:
            data["exc"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)


def setup_logging(level: str = "info", log_format: str = "logfmt") -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if log_format.lower() == "json" else KeyValueFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("uvicorn.access", "httpx", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


# The longest dispatcher id the store keeps (dispatchers.id, jobs.claimed_by, nodes.dispatcher_id are
# VARCHAR(64)): on PostgreSQL every pass of a dispatcher with a longer one failed.
MAX_DISPATCHER_ID = 64


def new_dispatcher_id(hostname: str) -> str:
    """d-<host>-<6 hex digits>, the host cut so that the id fits the store (a hostname may have 64
    characters, an FQDN more)."""
    suffix = secrets.token_hex(3)
    return f"d-{hostname[: MAX_DISPATCHER_ID - len(suffix) - 3]}-{suffix}"


def read_or_create(path: Path, make: str) -> str:
    if path.exists():
        return path.read_text().strip()
    # Created 0600, never readable by others even for an instant (it may be the API token).
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as file:
        file.write(make + "\n")
    return make


def private_home(home: Path) -> list[str]:
    """The data directory made its owner's: what other users of the machine could read in it is
    the store (every job's command and environment, where users pass credentials), every job's
    output (`logs/`) and the API token. A new one is made 0700; one open to all (every corral
    before made it so, as mkdir does) loses the others' access, its group keeping what the operator
    gave it; a `token` readable by others than its owner (restored from a backup, say) is made
    0600. What was changed, or could not be, is returned, to be logged."""
    said = []
    if not home.exists():
        home.mkdir(parents=True, mode=0o700)
    was = stat.S_IMODE(home.stat().st_mode)
    if was & 0o007:
        now = was & ~0o007
        try:
            home.chmod(now)
        except OSError as exc:
            said.append(f"{home} is open to every user of this machine (mode {was:04o}) and cannot be closed: {exc}")
        else:
            said.append(
                f"{home} was open to every user of this machine (mode {was:04o}): the store (jobs' commands and"
                f" environments) and the jobs' output are in it; it is {now:04o} now"
            )
    token = home / "token"
    if token.exists() and (was := stat.S_IMODE(token.stat().st_mode)) & 0o077:
        try:
            token.chmod(0o600)
        except OSError as exc:
            said.append(f"{token} is readable by others than its owner (mode {was:04o}) and cannot be closed: {exc}")
        else:
            said.append(f"{token} was readable by others than its owner (mode {was:04o}); it is 0600 now")
    return said


def readable_tls_key(key: Path | None) -> str | None:
    """What to say of a TLS private key every user of the machine may read (whoever reads it can
    pose as this server to the CLI and the agents, and read their tokens): the operator's file,
    which corral does not change, but says so at start."""
    if key is None:
        return None
    try:
        was = stat.S_IMODE(key.stat().st_mode)
    except OSError:
        return None  # (the config check names a missing one)
    if not was & 0o004:
        return None
    return (
        f"server.tls_key {key} is readable by every user of this machine (mode {was:04o}): whoever reads it can"
        f" pose as this server to the CLI and the agents, and read the tokens they send; chmod o-r {key}"
    )


def make_cloud(config: Config, server_url: str) -> CloudDriver:
    if config.cloud.driver == "loopback":
        from corral.cloud.loopback import LoopbackCloud

        return LoopbackCloud(
            config.home,
            server_url,
            config.cloud.cluster,
            config.cloud.ping_interval,
            config.server.ca_file,
            config.containers.program,
        )
    if config.cloud.driver == "ec2":
        from corral.cloud.base import CloudError
        from corral.cloud.ec2 import Ec2Cloud

        ec2 = config.cloud.ec2
        ca_file = ec2.server_ca or config.server.ca_file
        try:
            # The address the instances reach the server at; the config requires it for ec2.
            return Ec2Cloud(
                ec2, config.cloud.cluster, ec2.server_url or server_url, ca_pem=ca_file.read_text() if ca_file else None
            )
        except CloudError as exc:
            raise SystemExit(f"error: {exc}") from None
    raise SystemExit(f"cloud.driver {config.cloud.driver!r} is not supported")


class SystemdNotifier:
    """systemd's service notifications (sd_notify(3), spoken directly: one datagram to the socket
    NOTIFY_SOCKET names) for a unit of `Type=notify`, with `WatchdogSec=` if it sets one. Without
    NOTIFY_SOCKET (not under systemd, or another Type) it sends nothing. The variables are taken out
    of `environ`, so that the processes corral starts (the loopback cloud's agents) do not speak
    for it."""

    def __init__(self, environ: dict[str, str] | os._Environ[str]) -> None:
        address = environ.pop("NOTIFY_SOCKET", "")
        watchdog_usec = environ.pop("WATCHDOG_USEC", "")
        watchdog_pid = environ.pop("WATCHDOG_PID", "")
        # An abstract socket's name is written with a leading @ for its leading NUL.
        self.address = "\0" + address[1:] if address.startswith("@") else address
        self.watchdog_every: float | None = None
        if watchdog_usec.isdigit() and int(watchdog_usec) > 0 and watchdog_pid in ("", str(os.getpid())):
            # Half the timeout, as sd_watchdog_enabled(3) advises: one late tick is no restart.
            self.watchdog_every = int(watchdog_usec) / 2e6
        self.watchdog_sent_at = -math.inf

    def send(self, state: str) -> None:
        if not self.address:
            return
        try:
            with socketlib.socket(socketlib.AF_UNIX, socketlib.SOCK_DGRAM) as notify:
                notify.sendto(state.encode(), self.address)
        except OSError as exc:  # systemd gone or the socket misnamed: corral runs on regardless
            log.warning("cannot notify systemd at %s: %s", self.address, exc.strerror or exc)

    def watchdog(self, now: float) -> None:
        if self.watchdog_every is not None and now - self.watchdog_sent_at >= self.watchdog_every:
            self.watchdog_sent_at = now
            self.send("WATCHDOG=1")


class CorralServer(uvicorn.Server):
    """Releases agents' long-polls as soon as a stop is asked for, so shutdown does not wait them
    out; tells systemd (`Type=notify`) when it serves and when it stops, and keeps its watchdog fed
    from the event loop that answers every request."""

    runtime: Runtime | None = None
    notifier: SystemdNotifier | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and self.notifier is not None:
            self.notifier.send("READY=1\nSTATUS=serving")

    async def on_tick(self, counter: int) -> bool:
        if self.notifier is not None:
            self.notifier.watchdog(time.monotonic())
        return await super().on_tick(counter)

    def handle_exit(self, sig: int, frame: object) -> None:
        if self.notifier is not None:
            # systemd then waits TimeoutStopSec for the fleet's shutdown, not mistaking it for a hang.
            self.notifier.send("STOPPING=1\nSTATUS=stopping")
        if self.runtime is not None:
            self.runtime.release_waiters()
        super().handle_exit(sig, frame)  # type: ignore[arg-type]


def serve(config: Config, keep_fleet: bool = False) -> None:
    """Until a signal stops it. Then the fleet is shut down and running work requeued, unless
    `keep_fleet`: the instances and their work are left for the next corral to take back."""
    home = config.home
    for warning in private_home(home):
        log.warning("%s", warning)
    if (key_warning := readable_tls_key(config.server.tls_key)) is not None:
        log.warning("%s", key_warning)
    # One corral per data directory: a second would share the first's dispatcher id, and its stop
    # would requeue the first's work and destroy its fleet. Held until the process ends (the
    # descriptor is not inherited: agents started by the loopback cloud do not hold it).
    lock = (home / "corral.lock").open("a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise SystemExit(f"error: another corral is running with the data directory {home}{_whose(home)}") from None
    dispatcher_id = read_or_create(home / "dispatcher-id", new_dispatcher_id(socketlib.gethostname()))
    if not dispatcher_id or len(dispatcher_id) > MAX_DISPATCHER_ID:
        raise SystemExit(
            f"error: {home / 'dispatcher-id'}: a dispatcher id has 1 to {MAX_DISPATCHER_ID} characters, not"
            f" {len(dispatcher_id)} (the store keeps no more)"
        )
    # Named in pg_stat_activity by its dispatcher: a DBA tells which corral holds a lock or a session.
    store = Store(
        config.store_url,
        application_name=f"corral {dispatcher_id}",
        idle_in_transaction=config.policy.dispatch.dispatcher_stale,
    )
    try:
        store.migrate(Starter(dispatcher_id, time.time(), config.policy.dispatch.dispatcher_stale))
    except SQLAlchemyError as exc:
        store.close()
        reason = without_password(str(getattr(exc, "orig", None) or exc))
        raise SystemExit(
            f"error: cannot open the store {without_password(config.store_url)} (store.url): {reason}"
        ) from None
    except StoreTooNew as exc:
        store.close()
        raise SystemExit(
            f"error: the store {without_password(config.store_url)} (store.url) was migrated by a newer corral: {exc}"
        ) from None
    except (OlderDispatchersRun, BrokenForeignKeys, MigrationFailed) as exc:
        store.close()
        where = without_password(config.store_url)
        # As for a store that cannot be opened: the database's reason may quote the URL, password and all.
        reason = without_password(str(exc))
        raise SystemExit(f"error: the store {where} (store.url) was not migrated: {reason}") from None
    api_token = read_or_create(home / "token", secrets.token_urlsafe(32))
    if not (api_token and api_token.isascii() and api_token.isprintable()):
        # Emptied to rotate the token, say: no client could present it, and the CLI would only say
        # "no API token" with the server up.
        raise SystemExit(
            f"error: {home / 'token'}: the API token is empty or has a character no token has (not"
            " printable ASCII): remove the file and corral run makes a new one"
        )

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((config.server.host, config.server.port))
    except OSError as exc:
        raise SystemExit(
            f"error: cannot listen on {config.server.host}:{config.server.port}: {exc.strerror or exc}"
            " (server.port, or --port; 0 takes any free port)"
        ) from None
    host, port = sock.getsockname()[:2]
    tls = config.server.tls_cert is not None
    # The URL for clients on this machine (the CLI, the loopback cloud's agents): a server on every
    # interface is reached at 127.0.0.1, an address a certificate can name (0.0.0.0 it cannot).
    url = f"{'https' if tls else 'http'}://{'127.0.0.1' if host == '0.0.0.0' else host}:{port}"

    loop: LiveLoop
    if config.executor == "slurm":  # Slurm owns the nodes: no cloud, no agents
        from corral.executor.slurm_loop import SlurmLoop

        loop = SlurmLoop(store, config, dispatcher_id, home / "logs")
    else:
        loop = ControlLoop(store, make_cloud(config, url), config, dispatcher_id)
        # Only here: the Slurm loop judges nothing by silence a pause of this process could cause
        # (why: SlurmLoop._follow).
        loop.pause_watch = PauseWatch(pause_threshold(config)).start()
    refused = loop.check_settings()
    if refused is not None:
        raise SystemExit(f"error: {refused}")
    runtime = Runtime(
        config=config,
        store=store,
        logs=LogStore(home / "logs", config.server.max_output_bytes),
        api_token=api_token,
        loop=loop,
    )
    runtime.stop_fleet_on_exit = not keep_fleet
    if config.notify:
        from corral.notifier import Notifier, missing_programs

        for missing in missing_programs(config.notify):
            log.warning("%s", missing)

        loop.notifier = Notifier(
            store, config.notify, home=home.resolve(), dispatcher_id=dispatcher_id, policy=config.policy
        )
        runtime.on_stop.append(loop.notifier.close)  # after the fleet's stop: its events are notified too
    if config.retention.enabled():
        from corral.retention import Retention

        loop.retention = Retention(store, runtime.logs, config.retention, time.time)
    app = create_app(runtime)
    info = home / "server.json"
    ca_file = config.server.ca_file
    # The CLI verifies the server with `ca`.
    info.write_text(json.dumps({"url": url, "pid": os.getpid(), **({"ca": str(ca_file)} if ca_file else {})}) + "\n")

    def forget_address() -> None:
        try:
            _url, pid, _ca = read_server_info(info)
        except FileNotFoundError:
            return
        except DamagedServerInfo as exc:
            # This corral holds the data directory's lock, so the file is its own, damaged since
            # (a full disk, a hand edit): left behind, it would only mislead the CLI.
            try:
                info.unlink()
            except OSError as unlink_error:
                log.warning("%s; cannot remove it: %s", exc, unlink_error.strerror or unlink_error)
            else:
                log.warning("%s; removed it", exc)
            return
        if pid == os.getpid():
            info.unlink()

    runtime.on_stop.append(forget_address)
    log.info("corral listening on %s (data in %s, store %s)", url, home, store.url.split("@")[-1])
    shared = config.jobs_reach_the_data_directory()
    if shared is not None and store.user_rows():
        log.warning("users have tokens of their own, but %s", shared)
    if not tls and not ipaddress.ip_address(host).is_loopback:
        log.warning(
            "corral listens on %s:%d over plain HTTP: the API token, the nodes' secrets and their boot tokens cross"
            " the network readable by anyone on the path; set server.tls_cert and server.tls_key, or listen on"
            " 127.0.0.1 behind a TLS proxy",
            host,
            port,
        )
    for warning in config.warnings():
        log.warning("config: %s", warning)
    server = CorralServer(
        uvicorn.Config(
            app,
            log_config=None,
            access_log=False,
            timeout_graceful_shutdown=5,
            ssl_certfile=config.server.tls_cert,
            ssl_keyfile=config.server.tls_key,
        )
    )
    server.runtime = runtime
    server.notifier = SystemdNotifier(os.environ)
    signal.signal(signal.SIGHUP, _hangup_ignored)
    try:
        server.run(sockets=[sock])
    finally:
        forget_address()  # also when the server fails before it stops
        store.close()
        lock.close()


def _hangup_ignored(_signum: int, _frame: object) -> None:
    # logrotate's postrotate and `systemctl kill -s HUP` send it to whatever they are told to. By
    # default it ended corral at once, as a crash does (no requeue, no recorded stop), and systemd's
    # Restart=on-failure does not start again a service that SIGHUP ended.
    log.info(
        "SIGHUP received and ignored: corral's log goes to stderr (no file of its own to reopen) and its"
        " config is read at start only (to change it, restart corral, with --keep-fleet to keep the work running)"
    )


def _whose(home: Path) -> str:
    try:
        return f" (pid {read_server_info(home / 'server.json')[1]})"
    except (OSError, ValueError):
        return ""
