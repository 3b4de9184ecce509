"""The `corral` command. Every listing command takes --json for scripts."""

from __future__ import annotations

import getpass
import json
import math
import os
import re
import secrets
import ssl
import sys
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import httpx
import typer
import yaml
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

# (typer carries its own click, whose context and errors are its own)
from typer._click.core import Context
from typer._click.exceptions import UsageError
from typer.core import TyperCommand, TyperOption

from corral.core.model import JobState
from corral.core.signals import parse_job_signal, parse_signal, signal_name, signal_text
from corral.core.units import format_duration, parse_duration, parse_size
from corral.files import (
    DamagedServerInfo,
    RepeatedKey,
    UnreadableFile,
    is_yaml,
    load_yaml,
    read_server_info,
    read_text,
    unique_keys,
    without_password,
)
from corral.home import default_home
from corral.placement import attributes as attr
from corral.sim.command import register as register_simulate

if TYPE_CHECKING:
    from corral.jobspec import JobRequest

app = typer.Typer(
    help="corral: a workload manager for cloud and cluster compute.", no_args_is_help=True, rich_markup_mode="markdown"
)
config_app = typer.Typer(help="Check and show configuration.", no_args_is_help=True)
app.add_typer(config_app, name="config")
notify_app = typer.Typer(help="The notifier: its rules and where it is in the event log.", no_args_is_help=True)
app.add_typer(notify_app, name="notify")
backoff_app = typer.Typer(
    help="Instance types backed off (`corral status` lists them): end a back-off.", no_args_is_help=True
)
app.add_typer(backoff_app, name="backoff")
users_app = typer.Typer(
    help="Users with a token of their own, who change only their own jobs (an admin's: anything).",
    no_args_is_help=True,
)
app.add_typer(users_app, name="users")
# Piped output (scripts, CI logs) is not cut to 80 columns. No markup: what is printed holds what
# users wrote (job names, commands, events), which must show as written, and a name like '[/b]'
# would be an error in markup; styles are given as Text.
console = Console(markup=False) if sys.stdout.isatty() else Console(width=160, markup=False)
err = Console(stderr=True, soft_wrap=True)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]


def error(message: str) -> None:
    # The message is text, never markup: a config value like [nan] must show as it is, and
    # `afterok:x:` no emoji.
    err.print(f"[red]error:[/red] {escape(message)}", highlight=False, emoji=False)


def fail(message: str, code: int = 1) -> NoReturn:
    error(message)
    raise typer.Exit(code)


# ---- talking to the server ------------------------------------------------------------------


def client() -> httpx.Client:
    home = default_home()
    url = os.environ.get("CORRAL_URL")
    url_from = "CORRAL_URL"
    ca = os.environ.get("CORRAL_CA") or None
    if not url:
        info = home / "server.json"
        url_from = str(info)
        try:
            url, _pid, written_ca = read_server_info(info)
            ca = ca or written_ca
        except FileNotFoundError:
            # `corral run --home DIR` serves from DIR, and the CLI looks in CORRAL_HOME's (or the default).
            fail(
                f"no running corral found (no {info}); start one with `corral run`, set CORRAL_HOME to the"
                " data directory of one started with --home DIR, or set CORRAL_URL"
            )
        except DamagedServerInfo as exc:
            fail(f"{exc}: set CORRAL_URL, or start corral again")
    token, token_from = _token(home, url_from_home=url_from != "CORRAL_URL")
    global _token_from
    _token_from = token_from
    if not (token.isascii() and token.isprintable()):
        # A pasted typographic quote or a line break: no HTTP header can carry it.
        fail(f"{token_from}: the API token has a character no token has (not ASCII, or a control character)")
    verify: ssl.SSLContext | bool = True
    if ca:
        try:
            verify = ssl.create_default_context(cafile=ca)
        except (OSError, ssl.SSLError) as exc:
            fail(f"{'CORRAL_CA' if os.environ.get('CORRAL_CA') else url_from}: cannot read the CA bundle {ca}: {exc}")
    try:
        return httpx.Client(
            base_url=str(url), headers={"Authorization": f"Bearer {token}"}, timeout=60.0, verify=verify
        )
    except httpx.InvalidURL as exc:
        fail(f"{url_from}: not a valid URL: {url!r} ({exc})")


# Where the token of the latest client() came from, for a refusal of it (401) to name.
_token_from = ""


def user_token_file() -> Path:
    """A user's own token (`corral users add` prints it): $XDG_CONFIG_HOME/corral/token."""
    config_home = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config_home) / "corral" / "token"


def _token(home: Path, url_from_home: bool) -> tuple[str, str]:
    """The token the CLI sends and where it came from: CORRAL_TOKEN; else the token goes with the
    server: the data directory's (the operator's) for the server its server.json names, the user's
    own token file first for one CORRAL_URL names (a user's shared corral, whose data directory is
    not theirs to read)."""
    token = os.environ.get("CORRAL_TOKEN")
    if token:
        return token, "CORRAL_TOKEN"
    data_dir_token, own = home / "token", user_token_file()
    why: dict[Path, str] = {}
    for token_file in (data_dir_token, own) if url_from_home else (own, data_dir_token):
        try:
            token = token_file.read_text().strip()
        except FileNotFoundError:
            token = ""
        except OSError as exc:  # the data directory of an operator who is not you: 0700
            why[token_file] = f"cannot read {token_file}: {exc.strerror}"
            continue
        if token:
            return token, str(token_file)
        why[token_file] = f"{token_file} is missing or empty"
    # An empty Bearer header failed in httpx as "cannot reach corral: Illegal header value".
    fail(
        f"no API token: set CORRAL_TOKEN to the server's (the token file in its data directory;"
        f" {why[data_dir_token]}) or to your own (`corral users add` gave it), or put yours in {own} ({why[own]})"
    )


def _why_unreachable() -> str:
    """What server.json says of a server that does not answer: after a crash (SIGKILL, OOM) it names
    a process that is gone, which is the operator's answer ("start it again"), not the socket's."""
    if os.environ.get("CORRAL_URL"):
        return ""
    info = default_home() / "server.json"
    try:
        _url, pid, _ca = read_server_info(info)
        os.kill(pid, 0)
    except ProcessLookupError:
        return f" ({info} names pid {pid}, which is not running: corral ended without a clean stop; start it again)"
    except (OSError, DamagedServerInfo):
        return ""
    return ""


class Refused(Exception):
    """The server refused a request (4xx/5xx); the message is its detail."""


# What a terminal acts on rather than shows: C0 controls but tab and newline, DEL, C1 controls.
_TERMINAL_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# How one shows in a JSON text (escaped, or DEL and C1 as they are): most answers have none, and
# are not walked (a listing of 100,000 jobs would take a second more).
_CONTROLS_IN_JSON = re.compile(r"\\u00[0-1][0-9a-fA-F]|\\u00[7-9][0-9a-fA-F]|\\[bfr]|[\x7f-\x9f]")


def answer_of(response: httpx.Response) -> Any:
    """A JSON answer, its text made safe to show (shown_safely)."""
    data = response.json()
    return shown_safely(data) if _CONTROLS_IN_JSON.search(response.text) else data


def shown_safely(value: Any) -> Any:
    """The server's answer with every control character in its text written out (ESC as \\x1b).
    Its text is other users' (a job's name, tags, command, an event naming them): an ESC sequence
    in a job's name would otherwise reach the terminal of whoever lists the queue, to clear it,
    forge lines or, through OSC 52, write their clipboard."""
    if isinstance(value, str):
        return _TERMINAL_CONTROLS.sub(lambda m: f"\\x{ord(m[0]):02x}", value)
    if isinstance(value, list):
        return [shown_safely(item) for item in value]
    if isinstance(value, dict):
        return {shown_safely(key): shown_safely(item) for key, item in value.items()}
    return value


class AnswerLost(Exception):
    """A request's answer was lost after it was sent (the connection dropped, or the server's store
    was unreachable, 503): whether it was carried out is not known."""

    def __init__(self, message: str, response: httpx.Response | None = None) -> None:
        super().__init__(message)
        self.response = response


# How long a request that is safe to send again (a submission with its key) is sent again while its
# answer is lost: a store outage or a restart of corral is over in seconds to a minute or two.
SEND_AGAIN_FOR = 120.0


class Away(Exception):
    """corral does not answer for now: not running (a crash, a restart) or its store unreachable."""


def request(method: str, path: str, *, again_if_lost: bool = False, away: bool = False, **kwargs: Any) -> Any:
    """The response's JSON or bytes; Refused if the server refuses the request (an unreachable
    server ends the command: no later request would reach it either; with `away`, Away is raised
    for it and for a store the server cannot reach, 503, instead). `again_if_lost`: the request
    is safe to send again (a submission with its key queues its jobs once), and is, for up to
    SEND_AGAIN_FOR, while its answer is lost."""
    if again_if_lost:
        from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_exponential

        def said_again(state: Any) -> None:
            lost = state.outcome.exception() if state.outcome else None
            wait = state.next_action.sleep if state.next_action else 0
            err.print(escape(f"{lost}: sending it again in {wait:.1f}s (its key queues it once)"), highlight=False)

        retrying = Retrying(
            retry=retry_if_exception_type(AnswerLost),
            wait=wait_exponential(multiplier=0.5, max=8),
            stop=stop_after_delay(SEND_AGAIN_FOR),
            before_sleep=said_again,
            reraise=True,
        )
        try:
            response = retrying(_send, method, path, again_if_lost, away, **kwargs)
        except AnswerLost as exc:
            if exc.response is None:
                fail(f"{exc}; for {SEND_AGAIN_FOR:.0f}s: whether it was carried out is not known (corral jobs)")
            response = exc.response
    else:
        response = _send(method, path, again_if_lost, away, **kwargs)
    if response.status_code >= 400:
        detail = _detail(response)
        if response.status_code == 401:
            detail = f"{detail} (the token of {_token_from})"
        raise Refused(detail)
    if response.is_redirect:
        # No route of the API redirects a request the CLI makes as it meant it: a path gone wrong.
        raise Refused(f"{method} {path}: the server answered {response.status_code}, not a result")
    if response.headers.get("content-type", "").startswith("application/json"):
        return answer_of(response)
    return response.content


def _detail(response: httpx.Response) -> str:
    """What a refusal says: its detail, with the API's field names as the CLI's."""
    try:
        body = answer_of(response)
        detail = body.get("detail", body) if isinstance(body, dict) else body
    except ValueError:
        detail = shown_safely(response.text)
    if isinstance(detail, list):
        # A query parameter is the CLI's option of the same name ("query.limit" is --limit, and
        # "query.state.1" the second --state), a path's the argument ("path.job_id" is JOB_ID).
        lines = [re.sub(r"^query\.(\w+)(?:\.\d+)?", _as_flag, str(d)) for d in detail]
        lines = [re.sub(r"^path\.(\w+)", lambda m: m[1].upper(), line) for line in lines]
        detail = lines[0] if len(lines) == 1 else "\n  " + "\n  ".join(lines)
    return str(detail)


def _send(method: str, path: str, again_if_lost: bool, away: bool, **kwargs: Any) -> httpx.Response:
    try:
        with client() as http:
            response = http.request(method, path, **kwargs)
    except httpx.TransportError as exc:
        if away:
            raise Away(f"cannot reach corral at {http.base_url}: {exc}") from exc
        # (One that never connected was not carried out: the server is not there.)
        sent = not isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)
        if again_if_lost and sent:
            lost = str(exc) or type(exc).__name__
            raise AnswerLost(f"the answer from corral at {http.base_url} was lost ({lost})") from exc
        maybe = ""
        if method != "GET" and sent:
            # Sent, and no answer came back (corral killed as it answered): what was asked may have
            # been done.
            maybe = (
                "; it went away after the request was sent, which it may have carried out: look (corral jobs,"
                " corral events) before you try again"
            )
        fail(f"cannot reach corral at {http.base_url}: {exc}{maybe}{_why_unreachable()}")
    if response.status_code == 503 and away:
        raise Away(f"corral answers 503: {_detail(response)}")
    if response.status_code == 503 and again_if_lost:
        raise AnswerLost(f"corral answered 503: {_detail(response)}", response)
    return response


def _as_flag(match: re.Match[str]) -> str:
    return "--" + match[1].replace("_", "-")


def call(method: str, path: str, **kwargs: Any) -> Any:
    try:
        return request(method, path, **kwargs)
    except Refused as exc:
        fail(str(exc))


def look(path: str, **kwargs: Any) -> Any:
    """GET `path` for a command that waits on jobs (submit --wait, logs -f); raises Away while
    corral does not answer: crashed or stopped and not started again yet, or its store unreachable.
    The jobs run on meanwhile (their agents keep their exits for the next corral), so such a
    command waits on too: it ended with exit 1, which --wait also gives for a job that failed, and
    a script that took it for one submitted the job again."""
    if not os.environ.get("CORRAL_URL") and not (default_home() / "server.json").exists():
        raise Away("corral is not running (a clean stop removes its server.json)")
    try:
        return request("GET", path, away=True, **kwargs)
    except Refused as exc:
        fail(str(exc))


class AwayNotice:
    """Says once per outage, on stderr, that corral does not answer and the wait goes on."""

    def __init__(self) -> None:
        self.away = False

    def gone(self, exc: Away) -> None:
        if not self.away:
            said = f"warning: {exc}; waiting for it to answer again (the jobs run on; Ctrl-C stops waiting)"
            err.print(escape(said), highlight=False)
        self.away = True

    def back(self) -> None:
        if self.away:
            err.print("corral answers again", highlight=False, markup=False)
        self.away = False

    def look(self, path: str, **kwargs: Any) -> Any | None:
        """`look(path)`; None while corral does not answer, once said (gone) and FOLLOW_EVERY
        waited, for the caller to look again."""
        try:
            answer = look(path, **kwargs)
        except Away as exc:
            self.gone(exc)
            time.sleep(FOLLOW_EVERY)
            return None
        self.back()
        return answer


MAX_LIMIT = 100_000  # the most rows a listing of the API gives at once


def listed(path: str, params: dict[str, Any], limit: int, oldest: bool = False) -> tuple[list[dict[str, Any]], bool]:
    """The newest `limit` rows of a listing (oldest first; with `oldest`, a listing that gives the
    oldest, the oldest `limit`), and whether there were more: one row more is asked for, and
    dropped (a listing cut at its limit without a word reads as complete)."""
    if not 1 <= limit < MAX_LIMIT:
        return call("GET", path, params={**params, "limit": limit}), False
    rows = call("GET", path, params={**params, "limit": limit + 1})
    return rows[:limit] if oldest else rows[-limit:], len(rows) > limit


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


# ---- formatting -------------------------------------------------------------------------------


def ago(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds // 60:.0f}m{seconds % 60:02.0f}s"
    if seconds < 86400:
        return f"{seconds // 3600:.0f}h{seconds % 3600 // 60:02.0f}m"
    return f"{seconds // 86400:.0f}d{seconds % 86400 // 3600:02.0f}h"


def when(timestamp: float | None) -> str:
    return "-" if timestamp is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp))


def money(dollars: float) -> str:
    """Dollars to the cent; below a dollar to the hundredth of a cent (a short run's share)."""
    return f"${dollars:,.2f}" if dollars >= 1 or dollars == 0 else f"${dollars:.4f}"


def job_name(text: str) -> str:
    """A job as a user names it: its id, or an array's task as Slurm writes it (`12_3`), which the
    server resolves. Checked here since Python's int() reads `12_3` as 123, another job."""
    text = text.strip()
    if not re.fullmatch(r"[0-9]+(_[0-9]+)?", text):
        raise typer.BadParameter(f"{text!r}: not a job id, nor an array's task as ARRAY_TASK (12_3)")
    return text


def plain_id(text: str) -> int:
    """An id that is a number only (an array's, an event's): `12_3` is refused, not read as 123."""
    text = text.strip()
    if not re.fullmatch(r"[0-9]+", text):
        raise typer.BadParameter(f"{text!r}: not a number (an array's id is its first task's job id)")
    return int(text)


def duration(text: str) -> float:
    """A positive duration as the config takes one (90d, 36h, 1:30:00, seconds)."""
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    if seconds <= 0:
        raise typer.BadParameter(f"{text!r}: a duration longer than 0")
    return seconds


JOB_HELP = "A job id, or an array's task as ARRAY_TASK (12_3)."
JobArg = Annotated[str, typer.Argument(parser=job_name, metavar="JOB", help=JOB_HELP, show_default=False)]
# A command that changes jobs takes an array's id for every task of it, as Slurm's do.
ACT_HELP = "A job id, a job array's id (every task of it, as in Slurm), or one task as ARRAY_TASK (12_3)."
ActArg = Annotated[str, typer.Argument(parser=job_name, metavar="JOB", help=ACT_HELP, show_default=False)]


def counted(count: int, noun: str) -> str:
    """'1 node', '2 nodes', '1,200 jobs'."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def resources_text(r: dict[str, Any], nodes: int = 1) -> str:
    """`2c 4G`, `1c 500M` (RAM not a whole number of GiB in MiB, as squeue shows it: not 0.488281G)."""
    ram_mib = r["ram_mib"]
    ram = f"{ram_mib / 1024:g}G" if ram_mib % 1024 == 0 else f"{ram_mib:g}M"
    text = f"{r['vcpus']:g}c {ram}"
    if r.get("gpus"):
        text += f" {r['gpus']}gpu"
    return text + (f" x{nodes}" if nodes > 1 else "")


def locality_text(hints: dict[str, Any]) -> str:
    """`near 12, tag:web; far tag:db (strict, rack level)`."""
    sides = [f"{side} {', '.join(hints[side])}" for side in ("near", "far") if hints.get(side)]
    how = "strict" if hints.get("strict") else "preferred"
    return f"{'; '.join(sides)} ({how}, {hints.get('level', 'server')} level)"


STATE_STYLE = {
    "queued": "yellow",
    "claimed": "cyan",
    "running": "blue",
    "complete": "green",
    "failed": "red",
    "cancelled": "magenta",
    "idle": "green",
    "busy": "blue",
    "booting": "yellow",
    "draining": "magenta",
    "down": "red",
    "gone": "dim",
}


def styled(state: str) -> Text:
    return Text(state, style=STATE_STYLE.get(state, "white"))


# ---- commands ---------------------------------------------------------------------------------


@app.command()
def run(
    config_file: Annotated[Path | None, typer.Option("--config", "-c", help="TOML or YAML config file.")] = None,
    home: Annotated[Path | None, typer.Option(help="Data directory (default: CORRAL_HOME).")] = None,
    port: Annotated[int | None, typer.Option(help="Port to listen on (0 = any free port).")] = None,
    log_level: Annotated[str, typer.Option(help="Log level: debug, info, warning or error.")] = "info",
    log_format: Annotated[
        str,
        typer.Option(help="How log lines are written to stderr: logfmt (key=value) or json (one object a line)."),
    ] = "logfmt",
    keep_fleet: Annotated[
        bool,
        typer.Option(
            "--keep-fleet",
            help="On Ctrl-C or SIGTERM, leave the instances and their work running: a corral started again"
            " with the same data directory and port takes them back (a restart to change the config).",
        ),
    ] = False,
) -> None:
    """Run corral: the server, the control loop and the cloud driver (default: loopback + SQLite)."""
    from corral.config import ConfigError, load_config
    from corral.serve import LOG_FORMATS, LOG_LEVELS, serve, setup_logging

    if log_level.lower() not in LOG_LEVELS:
        fail(f"--log-level {log_level!r}: write one of {', '.join(LOG_LEVELS)}", 2)
    if log_format.lower() not in LOG_FORMATS:
        fail(f"--log-format {log_format!r}: write one of {', '.join(LOG_FORMATS)}", 2)
    try:
        config = load_config(config_file, home=home)
    except ConfigError as exc:
        fail(str(exc), 2)
    if port is not None:
        config.server.port = port
    setup_logging(log_level, log_format)
    serve(config, keep_fleet=keep_fleet)


def _start_time(text: str, given_by: str | None = None) -> str | float:
    """`now` and `now+D` (Slurm's --begin=now+1hour) as epoch seconds, read on this machine's clock
    as the user means them; any other text goes to the job request, which reads ISO 8601.
    `given_by`: a script's directive line that gave it, named by a refusal."""
    lowered = text.strip().lower()
    if lowered == "now":
        return time.time()
    if lowered.startswith("now+"):
        try:
            return time.time() + parse_duration(lowered.removeprefix("now+"))
        except ValueError as exc:
            fail(f"{given_by or f'--not-before {text!r}'}: {exc}")
    return text


def _parse_env(values: list[str]) -> dict[str, str]:
    env = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            fail(f"--env {item!r}: write NAME=VALUE")
        env[key] = value
    return env


def _parse_traits(option: str, values: list[str]) -> dict[str, str | list[str]]:
    """KEY=VALUE options as a job's traits: a key given twice takes either value (a list)."""
    traits: dict[str, list[str]] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep:
            fail(f"{option} {item!r}: write KEY=VALUE (VALUE '*' for any value)")
        traits.setdefault(key, []).append(value)
    return {key: found[0] if len(found) == 1 else found for key, found in traits.items()}


JOB_FILE_FORMS = "a job file is JSON Lines, one job's object per line, or a YAML list of jobs (.yaml, .yml)"


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    return "a boolean" if isinstance(value, bool) else "a number"


def read_job_file(path: Path) -> tuple[list[JobRequest], list[str]]:
    """Jobs from a JSON Lines or YAML file, and where each is ("line 3", "item 2"); every error
    names its line or item and field."""
    try:
        text = read_text(path)
    except UnreadableFile as exc:
        fail(str(exc))
    entries: list[tuple[str, Any]] = []
    repeated: list[str] = []  # JSON objects that give a key twice, listed with the other problems
    if is_yaml(path):
        try:
            document = load_yaml(text)
        except yaml.YAMLError as exc:
            fail(f"{path}: not valid YAML: {exc}")
        if isinstance(document, dict) and "jobs" in document:
            document = document["jobs"]
        if not isinstance(document, list):
            fail(f"{path}: expected a list of jobs (or a mapping with a 'jobs' list)")
        entries = [(f"item {i + 1}", item) for i, item in enumerate(document)]
    else:
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            try:
                entries.append((f"line {number}", json.loads(line, object_pairs_hook=unique_keys)))
            except json.JSONDecodeError as exc:
                fail(f"{path}: line {number}: not valid JSON: {exc.msg} ({JOB_FILE_FORMS})")
            except RepeatedKey as exc:
                repeated.append(f"{path}: line {number}: {exc}")
    from corral.jobspec import JobRequest  # the job models: for the commands that submit

    requests, places, problems = [], [], repeated
    for where, entry in entries:
        if not isinstance(entry, dict):
            # A JSON array of jobs on one line read as "(job): Input should be a valid dictionary or
            # instance of JobRequest".
            problems.append(f"{path}: {where}: not a job, but {_json_kind(entry)} ({JOB_FILE_FORMS})")
            continue
        try:
            requests.append(JobRequest.model_validate(entry))
            places.append(where)
        except ValidationError as exc:
            for item in exc.errors():
                field = ".".join(str(p) for p in item["loc"]) or "(job)"
                message = "unknown field" if item["type"] == "extra_forbidden" else item["msg"]
                problems.append(f"{path}: {where}: {field}: {message.removeprefix('Value error, ')}")
    if problems:
        fail("nothing was submitted:\n  " + "\n  ".join(problems))
    if not requests:
        fail(f"{path}: no jobs in the file")
    return requests, places


def _locality(near: list[str], far: list[str], strict: bool, level: str) -> dict[str, Any] | None:
    """The job's locality hints from submit's options (JobRequest checks each entry, and its
    error names the option)."""
    if not near and not far:
        if strict or level != "server":
            fail("--strict-locality and --locality-level say how to keep --near or --far: give one of them")
        return None
    return {"near": near, "far": far, "strict": strict, "level": level}


# The submit option of each JobRequest field whose name differs from it.
_OPTION_OF_FIELD: dict[tuple[int | str, ...], str] = {
    ("tags",): "--tag",
    ("traits",): "--trait",
    ("forbidden_traits",): "--forbid",
    ("locality", "near"): "--near",
    ("locality", "far"): "--far",
    ("locality", "strict"): "--strict-locality",
    ("locality", "level"): "--locality-level",
}


def _option_of(loc: tuple[int | str, ...]) -> str:
    for length in (2, 1):
        if loc[:length] in _OPTION_OF_FIELD:
            return _OPTION_OF_FIELD[loc[:length]]
    return "--" + ".".join(str(p) for p in loc).replace("_", "-")


# sbatch's -t/--time, whose bare number is minutes (`-t 30`: half an hour), where corral's
# --time-limit reads one as seconds: the spelling a Slurm user types means what it means in Slurm.
SlurmTimeOption = Annotated[
    str | None,
    typer.Option(
        "--time",
        "-t",
        metavar="TIME",
        help="The time limit as sbatch's --time: a bare number is minutes (-t 30), else as --time-limit (1:30:00);"
        " corral update also takes +TIME.",
    ),
]


def _time_limit_given(time_limit: str | None, slurm_time: str | None) -> str | None:
    """The time limit asked for by --time-limit, or by sbatch's -t/--time with its minutes made explicit."""
    if slurm_time is None:
        return time_limit
    if time_limit is not None:
        fail("--time-limit and -t/--time both give the time limit: give one")
    sign, value = ("+", slurm_time[1:]) if slurm_time.startswith("+") else ("", slurm_time)
    try:
        float(value)
    except ValueError:
        return slurm_time
    return f"{sign}{value.strip()}m"


# Where submit's parse_args notes how many of its arguments came after `--`: a batch script's
# arguments go there, and words before it are a command (click hands both over as one list).
_AFTER_DASHES = "corral.after_dashes"


class _SubmitCommand(TyperCommand):
    def parse_args(self, ctx: Context, args: list[str]) -> list[str]:
        if "--" in args:
            ctx.meta[_AFTER_DASHES] = len(args) - args.index("--") - 1
        return super().parse_args(ctx, args)


# sbatch's spellings that corral's submit takes with sbatch's meaning, as #SBATCH directives: each
# names the submit parameter it sets. (-e is not among them: sbatch's is --error, corral's --env.)
SBATCH_DIRECTIVES = {
    **dict.fromkeys(("-J", "--job-name"), "name"),
    **dict.fromkeys(("-c", "--cpus-per-task"), "vcpus"),
    "--mem": "ram",
    "--mem-per-cpu": "mem_per_cpu",
    "--gres": "gres",
    "--tmp": "scratch",
    **dict.fromkeys(("-G", "--gpus"), "gpus"),
    **dict.fromkeys(("-N", "--nodes"), "nodes"),
    **dict.fromkeys(("-t", "--time"), "slurm_time"),
    **dict.fromkeys(("-b", "--begin"), "not_before"),
    **dict.fromkeys(("-a", "--array"), "array"),
    **dict.fromkeys(("-d", "--dependency"), "dependency"),
    **dict.fromkeys(("-H", "--hold"), "hold"),
    **dict.fromkeys(("-D", "--chdir"), "chdir"),
    "--exclusive": "exclusive",  # (a flag: sbatch's --exclusive=user|mcs|topo are refused, as any value)
    "--signal": "signal",
}
# The job request's field each directive's parameter gives (a refusal of the field names the line).
_FIELD_OF_PARAMETER = {"slurm_time": "time_limit"}
# The parameters given on the command line that override a directive's (the time limit's two).
_OVERRIDDEN_BY = {"slurm_time": ("slurm_time", "time_limit")}


@app.command(cls=_SubmitCommand)
def submit(
    ctx: typer.Context,
    command: Annotated[
        list[str] | None,
        typer.Argument(help="The command and its arguments, after --; with --script, the script's arguments."),
    ] = None,
    file: Annotated[
        Path | None, typer.Option("--file", "-f", help="Submit the jobs in a .jsonl or .yaml file.")
    ] = None,
    wrap: Annotated[
        str | None,
        typer.Option(
            metavar="COMMAND",
            help="Run this shell command line as the job, as sbatch --wrap does (/bin/sh -c COMMAND; named 'wrap').",
        ),
    ] = None,
    script: Annotated[
        Path | None,
        typer.Option(
            "--script",
            metavar="FILE",
            help="Submit a batch script as the job, as sbatch does: its content is copied now (later edits do not"
            " change the job) and run on the node with the arguments after --; its #SBATCH lines (-J, -c, --mem,"
            " --mem-per-cpu, --tmp, -G, --gres, -N, -t, -b, -a, -d, -H, -D, --exclusive, --signal) are read as"
            " options, and the command line's win over them.",
        ),
    ] = None,
    name: Annotated[str, typer.Option("--name", "--job-name", "-J", help="A name for the job.")] = "",
    image: Annotated[
        str | None,
        typer.Option(help="Run the command in this container image (podman or docker on the node: [containers])."),
    ] = None,
    chdir: Annotated[
        str | None,
        typer.Option(
            "--chdir",
            "-D",
            metavar="DIR",
            help="Run the command in this directory on the node, an absolute path (as sbatch's; e.g. on a shared"
            " file system). Default: the attempt's own directory.",
        ),
    ] = None,
    separate_stderr: Annotated[
        bool,
        typer.Option(
            "--separate-stderr",
            help="Keep the command's stderr apart from its output, as sbatch --error does (corral logs --stderr"
            " reads it). Default: both in one output, as sbatch --output alone.",
        ),
    ] = False,
    env: Annotated[list[str] | None, typer.Option("--env", "-e", help="NAME=VALUE, repeatable.")] = None,
    vcpus: Annotated[float, typer.Option("--vcpus", "--cpus-per-task", "-c", help="vCPUs per node.")] = 1.0,
    ram: Annotated[
        str | None,
        typer.Option(
            "--ram", "--mem", help="RAM per node, e.g. 512MiB, 4GiB, 4G; a bare number is MiB. Default: 1GiB."
        ),
    ] = None,
    mem_per_cpu: Annotated[
        str | None,
        typer.Option(
            "--mem-per-cpu",
            metavar="SIZE",
            help="RAM per vCPU, as sbatch's: the job asks for this times its vCPUs per node (not with --mem).",
        ),
    ] = None,
    scratch: Annotated[str, typer.Option("--scratch", "--tmp", help="Scratch disk per node.")] = "0",
    gpus: Annotated[int, typer.Option("--gpus", "-G", help="GPUs per node.")] = 0,
    gres: Annotated[
        str | None,
        typer.Option(
            metavar="gpu[:N]",
            help="sbatch's --gres for GPUs: gpu:2 is --gpus 2 (a GPU type is not matched: --trait names one).",
        ),
    ] = None,
    nodes: Annotated[int, typer.Option("--nodes", "-N", help="Run as a gang on this many nodes.")] = 1,
    priority: Annotated[int, typer.Option(help="Higher runs first; 0 cancels.")] = 1,
    not_before: Annotated[
        str | None,
        typer.Option(
            "--not-before",
            "--begin",
            "-b",
            help="Do not start before this ISO 8601 time (local unless it has an offset), or now+D (now+2h),"
            " as Slurm's --begin.",
        ),
    ] = None,
    time_limit: Annotated[
        str | None,
        typer.Option(
            help="Time limit, e.g. 2h or Slurm's 1:30:00, 2-00:00:00 (a bare number is seconds, not Slurm's minutes):"
            " a longer run is ended, failed (TIMEOUT); 0 = none."
        ),
    ] = None,
    slurm_time: SlurmTimeOption = None,
    signal: Annotated[
        str | None,
        typer.Option(
            "--signal",
            metavar="[B:]SIG[@TIME]",
            help="As sbatch's: send SIG (USR1, SIGUSR1 or 10) TIME seconds (default 60) before the time limit, once,"
            " so the job can checkpoint. To the job's whole process group (sbatch's: its steps only), or with B: to"
            " its main process alone (the script's shell); a container's main process either way. Only a job"
            " with a time limit gets it.",
        ),
    ] = None,
    max_retries: Annotated[int, typer.Option(help="Retries after a non-zero exit.")] = 0,
    tag: Annotated[list[str] | None, typer.Option(help="A tag naming a group of jobs; repeatable.")] = None,
    near: Annotated[
        list[str] | None,
        typer.Option(
            metavar="JOB|tag:NAME",
            help="Place it near this job (its id), or near the jobs with this tag: on the same server (or rack, with"
            " --locality-level rack); repeatable. A preference unless --strict-locality.",
        ),
    ] = None,
    far: Annotated[
        list[str] | None,
        typer.Option(
            metavar="JOB|tag:NAME",
            help="Keep it away from this job, or from the jobs with this tag (replicas with --far tag:NAME --tag NAME"
            " spread over servers); repeatable. Far wins over near.",
        ),
    ] = None,
    strict_locality: Annotated[
        bool,
        typer.Option(
            "--strict-locality",
            help="Wait rather than break --near/--far (by default they are dropped when too few nodes meet them).",
        ),
    ] = False,
    locality_level: Annotated[
        str, typer.Option(help="What --near/--far mean: 'server' (the same node) or 'rack' (the same rack).")
    ] = "server",
    trait: Annotated[
        list[str] | None,
        typer.Option(
            metavar="KEY=VALUE",
            help="Run only on a node whose attribute KEY is VALUE (Slurm's --constraint); repeatable; the same KEY"
            " twice: either value; VALUE '*': any. corral nodes / corral node show nodes' attributes.",
        ),
    ] = None,
    forbid: Annotated[
        list[str] | None,
        typer.Option(
            metavar="KEY=VALUE",
            help="Never run on a node whose attribute KEY is VALUE (e.g. capacity=spot); repeatable; VALUE '*': a"
            " node that has KEY at all.",
        ),
    ] = None,
    min_platform: Annotated[
        str | None, typer.Option(help="Run only on a node whose platform attribute is at least this version.")
    ] = None,
    reservation: Annotated[
        str | None, typer.Option(help="An admin reservation whose nodes the job may use (besides unreserved ones).")
    ] = None,
    cpu_capped: Annotated[
        bool, typer.Option("--cpu-capped", help="A CPU-capped job: it shares no node with uncapped jobs.")
    ] = False,
    exclusive: Annotated[
        bool,
        typer.Option(
            "--exclusive",
            help="Run alone on each of its nodes, as sbatch --exclusive: it starts only on a node that runs nothing,"
            " and no other job joins it there (it still asks for its --vcpus, --mem and --gpus).",
        ),
    ] = False,
    on_node_failure: Annotated[
        str | None,
        typer.Option(
            help="If a node it runs on is lost: requeue, cancel or hold (default: policy.retry.on_node_failure)."
        ),
    ] = None,
    user: Annotated[
        str | None,
        typer.Option(
            help="Whose job it is (default: your token's user, or under the operator's token your login name;"
            " a file's own `user` is kept). Only an admin submits as another user."
        ),
    ] = None,
    dependency: Annotated[
        str | None,
        typer.Option(
            "--dependency",
            "-d",
            metavar="KIND:JOB[:JOB...][,KIND:JOB...]",
            help="Run only after other jobs, as Slurm's: after (started), afterany (ended), afterok (completed),"
            " afternotok (failed or cancelled); ',' = all must hold, '?' = any one. E.g. afterok:12:13,afterany:14."
            " An array's id (or 12_*) is the whole array, 12_3 its task 3 alone.",
        ),
    ] = None,
    array: Annotated[
        str | None,
        typer.Option(
            "--array",
            "-a",
            metavar="IDS[%N]",
            help="A job array, as Slurm's --array: one job per task id (0-99, 1,3,5-7, 0-99:4), each with"
            " CORRAL_ARRAY_TASK_ID; %N at the end runs at most N at once. Prints every task's job id.",
        ),
    ] = None,
    hold: Annotated[
        bool,
        typer.Option(
            "--hold",
            "-H",
            help="Queue it held, as sbatch --hold: it waits until corral release (with --file: every job of it).",
        ),
    ] = False,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            help="Wait for the jobs to end, as sbatch --wait: exit 0 if all completed, else the highest exit code"
            " of a failed job, or 1 for one that ended without one (cancelled, TIMEOUT, lost nodes).",
        ),
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Queue a job (`corral submit [OPTIONS] -- COMMAND [ARG...]`), a batch script (`corral submit --script
    FILE [OPTIONS] [-- ARG...]`) or a file of jobs; prints the ids."""
    places: list[str] = []  # a file's jobs: where each is in it
    origins: dict[str, str] = {}  # a job field set by a script's directive: the line that set it
    if script is not None and file is not None:
        fail("--script and --file both give the jobs: give one (a job file's job may carry its own 'script')")
    if wrap is not None and script is not None:
        fail("--wrap and --script both give the job: give one")
    if file is not None:
        if command:
            fail("give either a command or --file, not both")
        if array is not None:
            fail("--array: give each job of the file its own 'array' instead")
        # Options that describe a job were dropped without a word (sbatch lets them override the
        # script's #SBATCH lines): the file's jobs say their own.
        ignored = [
            param.opts[0]
            for param in ctx.command.params
            if param.name not in {"command", "file", "wait", "as_json", "user", "hold"}
            # (typer carries its own click: its ParameterSource is known by name only)
            and getattr(ctx.get_parameter_source(param.name or ""), "name", "") == "COMMANDLINE"
        ]
        if ignored:
            fail(
                f'{", ".join(ignored)}: with --file, each job of the file gives its own (e.g. "vcpus": 4 on'
                " its line); nothing was submitted"
            )
        requests, places = read_job_file(file)
        if hold:
            requests = [request.model_copy(update={"hold": True}) for request in requests]
    else:
        options = dict(ctx.params)
        script_text = None
        if script is not None:
            before_dashes = len(command or []) - ctx.meta.get(_AFTER_DASHES, 0)
            if before_dashes > 0:
                fail(
                    f"--script {script}: the job is the script, and {(command or [''])[0]!r} reads as a command: give"
                    f" the script's arguments after -- (corral submit --script {script} -- ARG...)"
                )
            script_text = read_batch_script(script)
            for parameter, (value, where) in script_options(ctx, script, script_text).items():
                origins[_FIELD_OF_PARAMETER.get(parameter, parameter)] = where
                options[parameter] = value
            options["command"] = [script.name, *(command or [])]
            # sbatch's default job name: the script's.
            options["name"] = options["name"] or script.name
        elif wrap is not None:
            if command:
                fail(f"--wrap gives the command: not with another ({' '.join(command)})")
            options["command"] = ["/bin/sh", "-c", wrap]
            options["name"] = options["name"] or "wrap"  # (sbatch's name for it)
        elif not command:
            fail("no command: write `corral submit [OPTIONS] -- COMMAND [ARG...]` (or --script FILE, --wrap CMD)")
        fields = _job_fields(options, origins)
        if script_text is not None:
            fields["script"] = script_text
        from corral.jobspec import JobRequest

        try:
            requests = [JobRequest.model_validate(fields)]
        except ValidationError as exc:
            problems = [
                f"{origins.get(str(e['loc'][0]) if e['loc'] else '') or _option_of(e['loc'])}:"
                f" {e['msg'].removeprefix('Value error, ')}"
                for e in exc.errors()
            ]
            fail("nothing was submitted:\n  " + "\n  ".join(problems))
    if user is not None:
        requests = [r if r.user else r.model_copy(update={"user": user}) for r in requests]
    # The rest are the token's user's; under the operator's token, this login's (as Slurm's owner).
    # Its own key: sent again after a lost answer (a dropped connection, a store outage), the
    # submission queues its jobs once.
    key = secrets.token_urlsafe(24)
    body: dict[str, Any] = {"jobs": [r.without_defaults() for r in requests], "key": key}
    if submitter := _login_name():  # (none known: the field's default, left out as a job's are)
        body["submitter"] = submitter
    try:
        result = request("POST", "/api/jobs", again_if_lost=True, json=body)
    except Refused as exc:
        fail(_submit_refusal(str(exc), file, places, origins))
    if as_json:
        print_json(result)
    else:
        for job_id in result["ids"]:
            sys.stdout.write(f"{job_id}\n")
    _warn_of_relative_programs(requests)
    _warn_of_signals_never_sent(requests, origins.get("signal") or ("a job's signal" if file else "--signal"))
    if wait:
        sys.stdout.flush()
        raise typer.Exit(wait_for_jobs(result["ids"]))


def _job_fields(options: dict[str, Any], origins: dict[str, str]) -> dict[str, Any]:
    """One job's request from submit's options as parsed (`ctx.params`, a script's directives set
    in them); `origins`: the directive line that gave a field, which a refusal names."""
    fields: dict[str, Any] = {
        "command": options["command"],
        "name": options["name"],
        "env": _parse_env(options["env"] or []),
        "vcpus": options["vcpus"],
        "scratch": options["scratch"],
        "gpus": options["gpus"],
        "nodes": options["nodes"],
        "priority": options["priority"],
        "max_retries": options["max_retries"],
        "tags": options["tag"] or [],
    }
    ram, mem_per_cpu = options["ram"], options["mem_per_cpu"]
    if mem_per_cpu is not None:
        said = origins.get("mem_per_cpu") or f"--mem-per-cpu {mem_per_cpu!r}"
        if ram is not None:
            fail(f"{said}: --mem and --mem-per-cpu both give the RAM: give one (as sbatch)")
        try:
            ram = math.ceil(parse_size(mem_per_cpu) * options["vcpus"])
        except ValueError as exc:
            fail(f"{said}: {exc}")
    if ram is not None:
        fields["ram"] = ram
    if options["gres"] is not None:
        if options["gpus"]:
            fail("--gres and --gpus both give the GPUs: give one")
        fields["gpus"] = _gres_gpus(options["gres"], origins.get("gres") or f"--gres {options['gres']!r}")
    for field in ("image", "chdir", "on_node_failure", "dependency", "min_platform", "reservation", "signal"):
        if options[field] is not None:
            fields[field] = options[field]
    for flag in ("separate_stderr", "cpu_capped", "exclusive", "hold"):
        if options[flag]:
            fields[flag] = True
    if options["not_before"]:
        fields["not_before"] = _start_time(options["not_before"], origins.get("not_before"))
    time_limit = _time_limit_given(options["time_limit"], options["slurm_time"])
    if time_limit:
        fields["time_limit"] = time_limit
    array = options["array"]
    if array is not None:
        if not array.strip():  # (a job file's empty "array" is no array; an empty option is a slip)
            said = origins.get("array") or "--array"
            fail(f"{said}: no task ids (write e.g. 0-99, 1,3,5-7 or 0-99:4, with %N to throttle)")
        fields["array"] = array
    locality = _locality(
        options["near"] or [], options["far"] or [], options["strict_locality"], options["locality_level"]
    )
    if locality is not None:
        fields["locality"] = locality
    if options["trait"]:
        fields["traits"] = _parse_traits("--trait", options["trait"])
    if options["forbid"]:
        fields["forbidden_traits"] = _parse_traits("--forbid", options["forbid"])
    return fields


def _gres_gpus(gres: str, said: str) -> int:
    """The GPUs per node of sbatch's --gres: `gpu` (one), `gpu:N`. Other resources, and a GPU type,
    are refused: corral has no generic resources, and matching a GPU type is --trait's."""
    name, _, count = gres.strip().partition(":")
    if name != "gpu" or "," in count:
        fail(f"{said}: corral takes only GPUs as a generic resource: gpu or gpu:N")
    if ":" in count:
        fail(f"{said}: a GPU type is not matched by --gres here: give gpu:N and the type with --trait (e.g. accel=a10)")
    if not count:
        return 1
    if not count.isdigit():
        fail(f"{said}: not a number of GPUs: {count!r}")
    return int(count)


def read_batch_script(path: Path) -> str:
    """A batch script's text as `corral submit --script` sends it, refused (naming the file) as
    sbatch refuses one: no #! line, larger than Slurm's default max_script_size, not text."""
    from corral.jobspec import MAX_SCRIPT, script_problem, script_too_large

    try:
        with path.open("rb") as file:
            data = file.read(MAX_SCRIPT + 1)
            if len(data) > MAX_SCRIPT:
                fail(f"{path}: {script_too_large(max(os.fstat(file.fileno()).st_size, len(data)))}")
    except OSError as exc:
        fail(f"{path}: cannot read the script: {exc.strerror or exc}")
    try:
        text = data.decode()
    except UnicodeDecodeError as exc:
        fail(f"{path}: not UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start}): a batch script is text")
    problem = script_problem(text)
    if problem is not None:
        fail(f"{path}: {problem}")
    return text


def script_options(ctx: typer.Context, path: Path, text: str) -> dict[str, tuple[Any, str]]:
    """The submit options a script's #SBATCH lines give (sbatch's: the last line to give one wins)
    and the command line does not, each with its line as a refusal names it (`job.sh: line 3:
    #SBATCH --mem=lots`): parsed by submit's own parser, one option at a time. A directive corral
    does not take (--partition, --output, ...) is said once on stderr, with its line, and ignored,
    as a real script carries many; one it takes with a value it cannot read is refused."""
    from corral.batch_script import DirectiveError, directives

    command = ctx.command
    flags = {spelling for p in command.params if isinstance(p, TyperOption) and p.is_flag for spelling in p.opts}
    takes_value = {spelling: spelling not in flags for spelling in SBATCH_DIRECTIVES}
    try:
        found = directives(text, takes_value)
    except DirectiveError as exc:
        fail(f"{path}: line {exc.line}: {exc.text.strip()}: {exc}")
    given: dict[str, tuple[Any, str]] = {}
    warned: set[str] = set()
    for directive in found:
        where = f"{path}: line {directive.line}: {directive.text.strip()}"
        if not directive.known:
            if directive.spelling not in warned:
                warned.add(directive.spelling)
                err.print(
                    f"warning: {path}: line {directive.line}: #SBATCH {directive.spelling} is not an option corral"
                    " takes: ignored",
                    markup=False,
                    highlight=False,
                )
            continue
        parameter = SBATCH_DIRECTIVES[directive.spelling]
        try:
            parsed = command.make_context(ctx.info_name, list(directive.words), parent=ctx.parent)
        except UsageError as exc:
            fail(f"{where}: {exc.format_message()}")
        given[parameter] = (parsed.params[parameter], where)
    return {
        parameter: value
        for parameter, value in given.items()
        if not any(
            getattr(ctx.get_parameter_source(overriding), "name", "") == "COMMANDLINE"
            for overriding in _OVERRIDDEN_BY.get(parameter, (parameter,))
        )
    }


def _warn_of_relative_programs(requests: list[JobRequest]) -> None:
    """`corral submit ./step`, as one types `sbatch ./step`, queued a job that could only end with
    exit 127: the command runs in its attempt's own directory on the node, where no ./step is (a job
    with --chdir finds it in that directory, as `sbatch -D DIR` does)."""
    relative = {r.command[0] for r in requests if r.image is None and r.chdir is None and "/" in r.command[0]}
    for program in sorted(p for p in relative if not p.startswith("/")):
        here = Path(program)
        hint = f"give its full path ({here.resolve()})" if here.exists() else "give its full path"
        if _is_batch_script(here):
            # sbatch's way: the script's content goes with the job, found on no node's disk.
            hint = f"submit it as a batch script, its content sent with the job: corral submit --script {program}"
        err.print(
            f"warning: {program} is a relative path, and the command does not run here: on the node it runs in"
            f" a directory of its own (its attempt's), where {program} is not found (exit 127): {hint}",
            markup=False,
            highlight=False,
        )


def signal_shown(stored: str, time_limit: float | None) -> str:
    """A job's --signal as `corral job` shows it: "SIGUSR1 (10) 60 s before the time limit, to its
    process group (USR1@60)"; never sent without a time limit."""
    job_signal = parse_job_signal(stored)
    to = "to its main process (B:)" if job_signal.main_only else "to its process group"
    name = signal_name(job_signal.number)
    which = f"{name} ({job_signal.number})" if name else f"signal {job_signal.number}"
    said = f"{which} {job_signal.before} s before the time limit, {to} ({stored})"
    return said if time_limit else f"{said}; no time limit: never sent"


def _warn_of_signals_never_sent(requests: list[JobRequest], said: str) -> None:
    """A job with --signal and no time limit: Slurm would send it before the partition's default
    limit, which ends the job; corral's default (policy.placement.queue.default_time_limit) is only
    a placement assumption and ends nothing, so such a job is never sent its signal."""
    if any(r.signal and not r.time_limit for r in requests):
        err.print(
            f"warning: {said}: a job without a time limit is never ended at one, so it is never sent its signal"
            " (corral's default time limit ends no job, unlike a Slurm partition's DefaultTime): give --time",
            markup=False,
            highlight=False,
        )


def _is_batch_script(path: Path) -> bool:
    """Whether `path` is a file here that starts with #!."""
    try:
        with path.open("rb") as file:
            return file.read(2) == b"#!"
    except OSError:
        return False


def wait_for_jobs(job_ids: list[int]) -> int:
    """Wait until every job has ended, looking at one open job at a time (a thousand jobs cost no
    more requests than one), and give sbatch --wait's exit code. Ctrl-C leaves the jobs running."""
    worst = 0
    remaining = list(job_ids)
    told_unplaceable: set[int] = set()
    notice = AwayNotice()
    try:
        with err.status(f"waiting for {len(remaining)} job(s) to end") as shown:
            while remaining:
                job = notice.look(f"/api/jobs/{remaining[0]}")
                if job is None:
                    continue
                if job.get("unplaceable") and job["id"] not in told_unplaceable:
                    # It stays queued until an operator adds an instance type that holds it: without a
                    # word, --wait looked hung (sbatch refuses such a job at submission instead).
                    told_unplaceable.add(job["id"])
                    err.print(
                        f"job {job['id']} cannot be placed: {job['wait_reason']}; it waits for an instance type"
                        f" that holds it (corral update {job['id']} to ask for less, corral cancel {job['id']})",
                        highlight=False,
                        markup=False,
                    )
                if JobState(job["state"]).terminal:
                    remaining.pop(0)
                    if job["state"] != JobState.COMPLETE.value:
                        worst = max(worst, job["exit_code"] or 1)
                    shown.update(f"waiting for {len(remaining)} job(s) to end")
                    continue
                time.sleep(FOLLOW_EVERY)
    except KeyboardInterrupt:
        error(f"stopped waiting; the jobs go on ({len(remaining)} not ended, e.g. {remaining[0]})")
        return 130
    return worst


def _login_name() -> str:
    """The submitting user, as Slurm records a job's owner ("" where the system knows none)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # a container's uid with no passwd entry and no $USER
        return ""


def _submit_refusal(detail: str, file: Path | None, places: list[str], origins: dict[str, str]) -> str:
    """The server's refusal of a submission (a dependency on no job), each line naming the job as
    the user wrote it: its file's line or item, the script's directive, or the option."""

    def where(match: re.Match[str]) -> str:
        index, field = int(match[1]), match[2]
        if file is None:
            return f"{origins.get(field) or _option_of((field,))}:"
        place = places[index] if index < len(places) else f"job {index + 1}"
        return f"{file}: {place}: {field}:"

    lines = [re.sub(r"^jobs\.(\d+)\.(\w+):", where, line.strip()) for line in detail.strip().splitlines()]
    return "nothing was submitted:\n  " + "\n  ".join(lines)


# Slurm's job state names and codes (squeue -t, sacct -s) for the states they mean here.
SLURM_STATES = {
    "pending": "queued",
    "pd": "queued",
    "running": "running",
    "r": "running",
    "completed": "complete",
    "cd": "complete",
    "cancelled": "cancelled",
    "canceled": "cancelled",
    "ca": "cancelled",
    "failed": "failed",
    "f": "failed",
}


def job_states(values: list[str] | None) -> list[str]:
    """--state values as corral's job states: in any case, several at once (queued,running), or as
    Slurm names them (PENDING, PD, R, COMPLETED, CD, CA, F); a value that is none names itself."""
    states: list[str] = []
    for value in values or []:
        for given in value.split(","):
            word = given.strip().lower()
            state = word if word in {s.value for s in JobState} else SLURM_STATES.get(word)
            if state is None:
                fail(
                    f"--state {given.strip()!r}: not a job state; give {', '.join(s.value for s in JobState)}"
                    " (or Slurm's PENDING, RUNNING, COMPLETED, CANCELLED, FAILED, or PD, R, CD, CA, F)"
                )
            if state not in states:
                states.append(state)
    return states


@app.command()
def jobs(
    state: Annotated[
        list[str] | None,
        typer.Option(
            "--state",
            "--states",
            "-t",
            help="Only jobs in this state (queued, running, ...; or Slurm's PD, R, ...); repeatable, or a,b.",
        ),
    ] = None,
    user: Annotated[str | None, typer.Option("--user", "-u", help="Only this user's jobs.")] = None,
    name: Annotated[str | None, typer.Option("--name", "-n", help="Only jobs of this name.")] = None,
    tag: Annotated[str | None, typer.Option(help="Only jobs with this tag.")] = None,
    array: Annotated[
        int | None, typer.Option(parser=plain_id, help="Only the tasks of this job array (its id).")
    ] = None,
    limit: Annotated[int, typer.Option(help="At most this many (newest).")] = 1000,
    before: Annotated[
        int | None, typer.Option(parser=plain_id, help="Only jobs with a lower id: the page before one shown.")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """List jobs with state, node, attempts, exit code and why they wait; an array's task shows as
    ARRAY_TASK (Slurm's way) beside its job id. Filters as squeue's: -t/--states, -u, -n."""
    params: dict[str, Any] = {"state": job_states(state)}
    filters = (("user", user), ("name", name), ("tag", tag), ("array", array), ("before", before))
    params.update({key: value for key, value in filters if value is not None})
    rows, more = listed("/api/jobs", params, limit)
    # Said on stderr with --json too: a script reading stdout would take a cut listing for the whole.
    cut = (
        f"the newest {counted(len(rows), 'job')} shown; older ones: --before {rows[0]['id']} (or a larger --limit)"
        if more
        else ""
    )
    if as_json:
        print_json(rows)
        if more:
            err.print(escape(cut), highlight=False)
        return
    now = time.time()
    table = Table(show_edge=False, header_style="bold")
    tasks = any(j.get("array_task_id") is not None for j in rows)
    columns = ("id", *(("task",) if tasks else ()), "name", "state", "node", "tries", "exit", "resources")
    for column in (*columns, "age", "run", "reason"):
        table.add_column(column, overflow="fold")
    for j in rows:
        run_time = (j["finished_at"] or now) - j["started_at"] if j["started_at"] else None
        table.add_row(
            str(j["id"]),
            *((array_task_text(j),) if tasks else ()),
            j["name"] or " ".join(j["command"])[:30],
            Text.assemble(styled(j["state"]), (" held", "yellow") if j["held"] else ""),
            j["node"] or "-",
            str(j["attempts"]),
            exit_text(j, short=True),
            resources_text(j["resources"], j["nodes"]),
            ago(now - j["submitted_at"]),
            ago(run_time),
            # A claimed job's reason is why it waits in an executor's queue: Slurm's (squeue's
            # NODELIST(REASON)); the claim clears any other. A job that can never run says so, as
            # `corral job` and `corral explain` do.
            ("UNPLACEABLE: " if j["unplaceable"] and j["state"] == "queued" else "")
            + (j["wait_reason"] if j["state"] in ("queued", "claimed", "failed", "cancelled") else ""),
        )
    console.print(table)
    if more:
        err.print(escape(cut), highlight=False)


def array_task_text(job: dict[str, Any]) -> str:
    """A task of a job array as Slurm shows it, ARRAY_TASK ("-" for a job of no array)."""
    if job.get("array_task_id") is None:
        return "-"
    return f"{job['array_job_id']}_{job['array_task_id']}"


@app.command("job")
def show_job(
    job_id: JobArg,
    as_json: JsonFlag = False,
    script: Annotated[
        bool,
        typer.Option(
            "--script", help="Print the job's batch script as it was submitted (as scontrol write batch_script ID -)."
        ),
    ] = False,
) -> None:
    """Show one job with its attempts."""
    j = call("GET", f"/api/jobs/{job_id}")
    if script:
        if j.get("script") is None:
            fail(f"job {j['id']} is no batch script: its command is {' '.join(j['command'])}")
        sys.stdout.write(j["script"])
        return
    if as_json:
        print_json(j)
        return
    console.print(
        Text.assemble(
            (f"job {j['id']}", "bold"),
            f" {j['name']}  ",
            styled(j["state"]),
            ("  held", "yellow") if j["held"] else "",
            f"  priority {j['priority']}",
            f"  user {j['user']}" if j["user"] else "",
            f"  tags {', '.join(j['tags'])}" if j["tags"] else "",
        )
    )
    console.print(f"  command    {' '.join(j['command'])}", highlight=False)
    if j.get("script_bytes") is not None:
        console.print(f"  script     {j['command'][0]} ({counted(j['script_bytes'], 'byte')})", highlight=False)
    if j.get("image"):
        console.print(f"  image      {j['image']}", highlight=False)
    if j.get("chdir"):
        console.print(f"  chdir      {j['chdir']}", highlight=False)
    if j.get("separate_stderr"):
        console.print("  stderr     kept apart (corral logs --stderr)", highlight=False)
    console.print(f"  resources  {resources_text(j['resources'], j['nodes'])}")
    console.print(
        f"  submitted  {when(j['submitted_at'])}   started {when(j['started_at'])}   finished {when(j['finished_at'])}"
    )
    # Preemptions are no failures (they spend no retry budget) but are counted all the same, as
    # Slurm's Restarts: one per attempt that ended so.
    preempted = sum(1 for a in j["attempt_list"] or () if a["state"] == "preempted")
    console.print(
        f"  exit code  {exit_text(j)}   node {j['node'] or '-'}   "
        # Each non-zero exit reruns the job while it has retries left (corral.core.retry.after_exit).
        f"attempts {j['attempts']} (retries {min(j['nonzero_exits'], j['max_retries'])} of {j['max_retries']},"
        f" temporary failures {j['temp_failures']}" + (f", preempted {preempted}" if preempted else "") + ")"
    )
    limit = format_duration(j["time_limit"]) if j.get("time_limit") else "none"
    console.print(f"  time limit {limit}")
    if j.get("signal"):
        console.print(f"  signal     {signal_shown(j['signal'], j.get('time_limit'))}", highlight=False)
    console.print(f"  on node failure  {j['on_node_failure'] or 'the system default (policy.retry.on_node_failure)'}")
    if j.get("array_task_id") is not None:
        throttle = f"at most {j['array_throttle']} at once" if j["array_throttle"] else "no throttle"
        # The spec's ids only: its %N is the throttle it was submitted with, which `corral throttle`
        # may since have changed ("0-5%2; at most 3 at once" contradicted itself).
        ids = str(j["array"]).partition("%")[0]
        console.print(
            f"  array      task {array_task_text(j)} of array {j['array_job_id']} ({ids}; {throttle})",
            highlight=False,
        )
    if j["executor_ref"]:  # executor = "slurm": what `scontrol show job` takes
        console.print(f"  slurm job  {j['executor_ref']}", highlight=False)
    if j.get("locality"):
        console.print(f"  locality   {locality_text(j['locality'])}", highlight=False)
    asks = constraints_text(j)
    if asks:
        console.print(f"  runs on    {asks}", highlight=False)
    if j.get("dependency"):
        console.print(f"  dependency {j['dependency']}", highlight=False)
        for d in j.get("depends_on") or []:
            console.print(f"    {d['kind']} job {d['job_id']} ({d['state']})", highlight=False)
    if j.get("needed_by"):
        needed = ", ".join(f"{d['job_id']} ({d['kind']}, {d['state']})" for d in j["needed_by"])
        console.print(f"  needed by  {needed}", highlight=False)
    if j.get("cancelled_by"):
        # Who asked (the job.cancel_requested event says it too, among the others).
        asked = "cancelled by" if j["state"] == "cancelled" else "cancel requested by"
        console.print(f"  {asked} {j['cancelled_by']}", highlight=False)
    for told in j.get("signals") or []:
        # (As `corral events --job N --kind job.signal` lists them.)
        console.print(
            f"  {SIGNAL_EVENT_WORDS.get(told['kind'], told['kind'])} {when(told['at'])}: {told['message']}",
            highlight=False,
        )
    if j["wait_reason"] and j["state"] in ("queued", "claimed"):
        console.print(f"  waiting    {'UNPLACEABLE: ' if j['unplaceable'] else ''}{j['wait_reason']}", highlight=False)
    elif j["wait_reason"] and j["state"] in ("complete", "failed", "cancelled"):
        console.print(f"  ended      {j['wait_reason']}{not_retried(j)}", highlight=False)
    measured = [a for a in j["attempt_list"] or () if used_known(a)]
    if measured:
        # seff's figures: what its runs used of what it asked for, the whole job's (all its runs).
        runs = f" ({counted(len(measured), 'attempt')})" if len(measured) > 1 else ""
        console.print(f"  used       {used_text(measured, j['resources'], j['nodes'])}{runs}", highlight=False)
    if j["attempt_list"]:
        table = Table(show_edge=False, header_style="bold")
        in_slurm = any(a["executor_ref"] for a in j["attempt_list"])
        columns = ("attempt", "state", "nodes", *(("slurm job",) if in_slurm else ()), "exit", "started", "finished")
        for column in (*columns, "reason"):
            table.add_column(column)
        for a in j["attempt_list"]:
            table.add_row(
                str(a["id"]),
                a["state"],
                ",".join(a["nodes"]),
                *((a["executor_ref"] or "-",) if in_slurm else ()),
                exit_text(a, short=True),
                when(a["started_at"]),
                when(a["finished_at"]),
                a["reason"],
            )
        console.print(table)
        if len(measured) > 1:
            for a in measured:
                said = used_text([a], j["resources"], j["nodes"])
                console.print(f"  attempt {a['id']} used  {said}", highlight=False)


# How `corral job` heads each of a job's signal events.
SIGNAL_EVENT_WORDS = {
    "job.signal_requested": "signal asked",
    "job.signalled": "signalled",
    "job.signal_dropped": "signal dropped",
}


def used_known(attempt: dict[str, Any]) -> bool:
    """Whether its node said what the run used (a server before it says nothing)."""
    return attempt.get("cpu_seconds") is not None or attempt.get("max_rss_mib") is not None


def _cpu_time(seconds: float) -> str:
    # A short run's to the tenth: "CPU 2s of 4s" said nothing of a 1.5 s against 4.2 s.
    return f"{seconds:.1f}s" if seconds < 10 else ago(seconds)


def used_text(attempts: list[dict[str, Any]], asked: dict[str, Any], nodes: int = 1) -> str:
    """What runs used of what their job asked for, as seff says it: `CPU 12m30s of 40m00s (31%), peak
    RAM 1.2G of 4G (30%)`. CPU efficiency is the CPU time over the run time times the vCPUs asked
    (of the runs whose CPU time and run time are known), memory efficiency the highest peak RSS over
    the RAM asked. Both are of the node that runs the command: a gang's other nodes are not measured."""
    timed = [a for a in attempts if a.get("cpu_seconds") is not None]
    cpu = sum(a["cpu_seconds"] for a in timed)
    # (A run whose start was never reported has no run time: then no efficiency, only the CPU time.)
    ran = all(a["started_at"] is not None and a["finished_at"] is not None for a in timed)
    cpu_asked = sum(a["finished_at"] - a["started_at"] for a in timed) * asked["vcpus"] if ran else 0.0
    parts = []
    if timed:
        of = f" of {_cpu_time(cpu_asked)} ({cpu / cpu_asked:.0%})" if cpu_asked > 0 else ""
        parts.append(f"CPU {_cpu_time(cpu)}{of}")
    else:
        parts.append("CPU not known")
    peaks = [a["max_rss_mib"] for a in attempts if a.get("max_rss_mib") is not None]
    if peaks:
        ram_asked = asked["ram_mib"]
        of = f" of {mib_text(ram_asked)} ({max(peaks) / ram_asked:.0%})" if ram_asked > 0 else ""
        parts.append(f"peak RAM {mib_text(max(peaks))}{of}")
    else:
        parts.append("peak RAM not known")
    text = ", ".join(parts)
    if nodes > 1:
        where = ",".join(sorted({a["node"] for a in attempts}))
        text += f" (on {where}, where the command runs; the gang's {counted(nodes - 1, 'other node')} not measured)"
    return text


def mib_text(mib: float) -> str:
    """`512M`, `1.2G`, `4G`: as resources_text writes RAM, to a tenth of a GiB from 1 GiB on."""
    if mib < 1024:
        return f"{mib:.0f}M"
    return f"{mib / 1024:.1f}".removesuffix(".0") + "G"


def exit_text(ended: dict[str, Any], short: bool = False) -> str:
    """A job's or an attempt's exit code, and the signal that killed it, which 137 alone does not
    tell from an exit with 137: "137 (killed by signal 9 (SIGKILL))"; `short`: "137 (SIGKILL)"."""
    if ended["exit_code"] is None:
        return "-"
    number = ended.get("exit_signal")  # (a server before it sends none)
    if not number:
        return str(ended["exit_code"])
    if short:
        return f"{ended['exit_code']} ({signal_name(number) or f'signal {number}'})"
    return f"{ended['exit_code']} (killed by {signal_text(number)})"


def not_retried(j: dict[str, Any]) -> str:
    """Why a job that failed on a non-zero exit was not run again: the first thing an on-call asks
    of it, which its attempts alone do not say (`exit 3` reads the same with retries left)."""
    if j["state"] != "failed" or j["exit_code"] in (None, 0) or not str(j["wait_reason"]).startswith("exit "):
        return ""
    if not j["max_retries"]:
        return "; not retried: the job asked for no retries (corral submit --max-retries N)"
    return f"; not retried: the retries it asked for (--max-retries {j['max_retries']}) are used up"


@app.command()
def logs(
    job_id: JobArg,
    attempt: Annotated[
        int | None,
        typer.Option(
            parser=plain_id,
            help="An attempt by its id, as corral job ID lists them (ids count over all jobs; default: the last).",
        ),
    ] = None,
    all_attempts: Annotated[bool, typer.Option("--all", help="Every attempt, each with a header.")] = False,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow",
            "-f",
            help="Keep printing the output as it comes (tail -f), through retries, until the job (or the"
            " --attempt given) ends.",
        ),
    ] = False,
    stderr: Annotated[
        bool,
        typer.Option(
            "--stderr",
            help="The job's stderr, which a job submitted with --separate-stderr keeps apart from its output"
            " (as sbatch --error's file).",
        ),
    ] = False,
) -> None:
    """Print a job's output (or with --stderr its stderr kept apart)."""
    stream = "stderr" if stderr else "output"
    if follow:
        if all_attempts:
            fail("--follow prints each attempt as it comes: not with --all")
        follow_logs(job_id, attempt, stream)
        return
    params: dict[str, Any] = {"all_attempts": all_attempts}
    if stderr:
        params["stream"] = stream  # (not sent for the output: a server before streams knows no such parameter)
    if attempt is not None:
        params["attempt"] = attempt
    data = call("GET", f"/api/jobs/{job_id}/logs", params=params)
    sys.stdout.buffer.write(data if isinstance(data, bytes) else json.dumps(data).encode())
    sys.stdout.flush()


FOLLOW_EVERY = 1.0  # seconds between two looks at a followed job
TERMINAL = frozenset(state.value for state in JobState if state.terminal)


def follow_logs(job_id: str, attempt_id: int | None, stream: str = "output") -> None:
    """Print the output (or the stderr kept apart: `stream`) of a job's attempts as it arrives, the
    next attempt's (a retry, a requeue) after a header, until the job has ended (or the attempt asked
    for has). The job's state is read before its output: an attempt's finish is reported only after
    both its streams got through, so the output read after an end is the whole of it."""
    extra = {"stream": stream} if stream != "output" else {}
    current: int | None = None
    offset = 0
    told_waiting = False
    notice = AwayNotice()
    while True:
        job = notice.look(f"/api/jobs/{job_id}")
        if job is None:
            continue
        if stream == "stderr" and not job.get("separate_stderr"):
            # At once, not when its first attempt starts and the server refuses its stderr.
            fail(
                f"job {job_id} keeps its stderr in its output (read that); a job submitted with separate_stderr"
                " (corral submit --separate-stderr) keeps it apart"
            )
        attempts = job["attempt_list"]
        if attempt_id is not None:
            chosen = [a for a in attempts if a["id"] == attempt_id]
            if not chosen:
                theirs = ", ".join(str(a["id"]) for a in attempts) or "none yet"
                fail(
                    f"job {job_id} has no attempt {attempt_id}"
                    f" (its attempts: {theirs}; as corral job {job_id} lists them)"
                )
            attempts = chosen
        # The rest of the attempt followed so far (it may have ended since), then each later one whole.
        missed = False
        for each in attempts:
            if current is not None and each["id"] < current:
                continue
            if each["id"] != current:
                if current is not None:
                    sys.stdout.write(f"==> attempt {each['id']} on {each['node'] or '-'} <==\n")
                current, offset = each["id"], 0
            data = notice.look(f"/api/jobs/{job_id}/logs", params={"attempt": current, "offset": offset, **extra})
            if data is None:
                missed = True  # read on from `offset` once it answers
                break
            sys.stdout.flush()
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
            offset += len(data)
        if missed:
            continue
        ended = attempts[-1]["finished_at"] is not None if attempt_id is not None else job["state"] in TERMINAL
        if not attempts and (ended or not told_waiting):
            reason = f": {job['wait_reason']}" if job["wait_reason"] else ""
            what = "it never ran" if ended else "waiting for it to start"
            err.print(escape(f"job {job_id} is {job['state']}{reason}; {what}"), highlight=False)
            told_waiting = True
        if ended:
            return
        time.sleep(FOLLOW_EVERY)


@app.command()
def cancel(
    job_ids: Annotated[
        list[str] | None, typer.Argument(parser=job_name, metavar="JOB...", help=ACT_HELP, show_default=False)
    ] = None,
    state: Annotated[
        list[str] | None,
        typer.Option("--state", "-t", help="Every open job in this state (queued, claimed, running); repeatable."),
    ] = None,
    user: Annotated[str | None, typer.Option("--user", "-u", help="Every open job of this user.")] = None,
    name: Annotated[str | None, typer.Option("--name", "-n", help="Every open job of this name.")] = None,
    tag: Annotated[str | None, typer.Option(help="Every open job with this tag.")] = None,
    array: Annotated[
        int | None, typer.Option(parser=plain_id, help="Every open task of this job array (its id).")
    ] = None,
    signal: Annotated[
        str | None,
        typer.Option(
            "--signal",
            "-s",
            metavar="SIG",
            help="Do not cancel: send the running jobs' commands this signal (USR1, SIGUSR1 or 10), to their"
            " whole process group (Slurm's default is the job steps, which corral's jobs have none of)."
            " KILL and STOP are refused: corral cancel or requeue ends a run. A job that does not run is"
            " said by id and state, and the command exits 1.",
            show_default=False,
        ),
    ] = None,
    batch: Annotated[
        bool,
        typer.Option(
            "--batch", "-b", help="With --signal: the main process alone (the batch script's shell, or the program)."
        ),
    ] = False,
) -> None:
    """Cancel jobs, also while they run: by id (a job array's id: every open task of it, as Slurm's
    scancel ARRAY_ID; ARRAY_TASK: that task), or every open job matching all the filters given
    (Slurm's scancel -t/--state, -u/--user, -n/--name; and a tag). With --signal (scancel -s), send
    the running ones a signal instead, and cancel nothing (a command that dies of it ends as any run
    killed by a signal does)."""
    filtered = bool(state) or any(value is not None for value in (user, name, tag, array))
    if not job_ids and not filtered:
        fail("give job ids, or --state, --user, --name, --tag or --array")
    if batch and signal is None:
        fail("--batch says where a --signal goes: give --signal SIG too (without it, cancel cancels)")
    states = job_states(state)
    if signal is not None:
        send_signal(job_ids or [], filtered, states, user, name, tag, array, signal, batch)
        return
    if ended := [s for s in states if JobState(s).terminal]:
        # Matched nothing, and said "cancel requested for 0 jobs" as if none were in that state.
        fail(f"--state {ended[0]}: a finished job cannot be cancelled; give queued, claimed or running (PD, R)")
    if filtered:
        filters = {"states": states or None, "user": user, "name": name, "tag": tag, "array": array}
        # Only the filters given: a server from before a filter existed (tag, array) refuses it as
        # unknown, even as null.
        body = {field: value for field, value in filters.items() if value is not None}
        result = call("POST", "/api/jobs/cancel", json=body)
        ids = result["ids"]
        sys.stdout.write(f"cancel requested for {counted(len(ids), 'job')}")
        sys.stdout.write(f": {', '.join(map(str, ids))}\n" if ids else "\n")
    if job_ids:
        each_job(job_ids, "cancel", lambda r: "cancel requested" if r["changed"] else f"already {r['state']}")


def send_signal(
    job_ids: list[str],
    filtered: bool,
    states: list[str],
    user: str | None,
    name: str | None,
    tag: str | None,
    array: int | None,
    given: str,
    batch: bool,
) -> None:
    """`corral cancel --signal`: the signal requested for each running job picked; each that does
    not run said by id and state, as scancel says each it refuses, and exit 1 if any."""
    try:
        number = parse_signal(given)
    except ValueError as exc:
        fail(f"--signal: {exc}")
    body = {"signal": given.strip(), "batch": batch}
    shown = signal_name(number) or f"signal {number}"
    to = "main process" if batch else "process group"
    refused = 0
    if filtered:
        filters = {"states": states or None, "user": user, "name": name, "tag": tag, "array": array}
        body.update({field: value for field, value in filters.items() if value is not None})
        result = call("POST", "/api/jobs/signal", json=body)
        ids = result["ids"]
        sys.stdout.write(f"{shown} requested for the {to} of {counted(len(ids), 'job')}")
        sys.stdout.write(f": {', '.join(map(str, ids))}\n" if ids else "\n")
        for state_name, not_running in result["not_running"].items():
            for job_id in not_running:
                error(f"{job_id}: {state_name}: not running, not signalled")
                refused += 1
    for job_id in job_ids:
        try:
            result = request("POST", f"/api/jobs/{job_id}/signal", json=body)
        except Refused as exc:
            error(f"{job_id}: {exc}")
            refused += 1
            continue
        if not answers_for_array(result):
            sys.stdout.write(f"{job_id}: {shown} requested for the {to} of attempt {result['attempt_id']}\n")
            continue
        sys.stdout.write(array_said(f"{shown} requested for", result) + "\n")
        for why, ids in result["unchanged"].items():
            if not JobState(why).terminal:  # (an array's finished tasks are not what it names)
                for task_id in ids:
                    error(f"{task_id}: {why}: not running, not signalled")
                    refused += 1
    if refused:
        raise typer.Exit(1)


@app.command()
def hold(
    job_ids: Annotated[list[str], typer.Argument(parser=job_name, metavar="JOB...", help=ACT_HELP)],
    reason: Annotated[str, typer.Option(help="Why; shown as the job's wait reason.")] = "",
) -> None:
    """Hold queued jobs (Slurm's `scontrol hold`) until `corral release`.

    A held job stays queued, but is not run, and no instance is booted for it. In front of Slurm, a
    claimed job (pending in Slurm) is taken back from Slurm's queue and held. A job array's id holds
    each of its queued tasks and says what the others are doing."""

    def said(result: dict[str, Any]) -> str:
        if result.get("taken_back"):
            return "pending in Slurm: the next pass takes it back from Slurm's queue and holds it" + (
                "" if result["changed"] else " (asked already)"
            )
        return "held" if result["changed"] else "already held"

    each_job(job_ids, "hold", said, {"reason": reason})


@app.command()
def requeue(
    job_ids: Annotated[list[str], typer.Argument(parser=job_name, metavar="JOB...", help=ACT_HELP)],
    hold: Annotated[
        bool, typer.Option("--hold", help="Hold them once queued, until `corral release` (scontrol requeuehold).")
    ] = False,
) -> None:
    """Stop claimed or running jobs and queue them again, or queue finished ones again (Slurm's
    `scontrol requeue`).

    A run is killed; the job waits in the queue as before and runs again, counting no failure. A
    finished job (complete, failed, cancelled) is queued again at once, as a job submitted now. A job
    array's id: each of its tasks."""
    each_job(
        job_ids,
        "requeue",
        lambda r: (
            ("queued again" if r["state"] == "queued" else "requeue requested")
            if r["changed"]
            else "requeue already requested"
            if r["state"] in ("claimed", "running")
            else f"{r['state']}: nothing to requeue"
        ),
        {"hold": hold},
    )


@app.command()
def release(
    job_ids: Annotated[list[str], typer.Argument(parser=job_name, metavar="JOB...", help=ACT_HELP)],
) -> None:
    """Release held jobs (Slurm's `scontrol release`): they run as any queued job. A job array's
    id: each of its held tasks."""
    each_job(job_ids, "release", lambda r: "released" if r["changed"] else f"not held ({r['state']})")


# What each command did to a job array's tasks, said as "held 7 of array 12's 10 tasks; ...".
ARRAY_DONE = {
    "cancel": "cancel requested for",
    "hold": "held",
    "release": "released",
    "requeue": "requeued",
    "update": "updated",
}


def each_job(job_ids: list[str], action: str, said: Callable[[dict[str, Any]], str], body: Any = None) -> None:
    """POST /api/jobs/ID/`action` for each job, saying `said(result)` of each (of a job array's
    id, what it did to the array's tasks); one id that is refused (a typo, a job of another corral,
    a job in the wrong state) spares none after it, and the command exits 1 at the end."""
    refused = 0
    for job_id in job_ids:
        try:
            result = request("POST", f"/api/jobs/{job_id}/{action}", json=body)
        except Refused as exc:
            error(f"{job_id}: {exc}")
            refused += 1
            continue
        if answers_for_array(result):
            sys.stdout.write(array_said(ARRAY_DONE[action], result) + "\n")
        else:
            sys.stdout.write(f"{job_id}: {said(result)}\n")
    if refused:
        raise typer.Exit(1)


def answers_for_array(result: dict[str, Any]) -> bool:
    """Whether the API answered for a whole job array (ArrayActionOut): a job's own answer names
    the array it is a task of too (`array_job_id`), so that key alone does not tell."""
    return "unchanged" in result and "tasks" in result


def array_said(done: str, result: dict[str, Any], detail: str = "") -> str:
    """'held 7 of array 12's 10 tasks; 3 already running': what a command given a job array's id
    did to its tasks (the API's ArrayActionOut), with the kinds of change when there are several
    and, after `detail`, the tasks left as they were and why."""
    changed = result["changed"]
    said = f"{done} {sum(map(len, changed.values()))} of array {result['array_job_id']}'s"
    said += f" {counted(result['tasks'], 'task')}"
    if len(changed) > 1:
        said += " (" + ", ".join(f"{len(ids)} {kind}" for kind, ids in changed.items()) + ")"
    said += detail
    if result["unchanged"]:
        said += "; " + ", ".join(f"{len(ids)} {why}" for why, ids in result["unchanged"].items())
    return said


@app.command()
def priority(
    job_id: ActArg,
    value: Annotated[
        int, typer.Argument(metavar="PRIORITY", help="The new priority: higher runs first; 0 cancels the job.")
    ],
) -> None:
    """Set a job's priority; 0 cancels it (seed 001). A job array's id: each of its tasks not
    finished (12_3: that task alone)."""
    j = call("PATCH", f"/api/jobs/{job_id}", json={"priority": value})
    if answers_for_array(j):
        sys.stdout.write(array_said(f"priority {value} set on", j) + "\n")
    elif j["priority"] != value:  # a finished job keeps its own
        sys.stdout.write(f"{job_id}: already {j['state']}\n")
    else:
        sys.stdout.write(f"{job_id}: priority {j['priority']}\n")


@app.command()
def throttle(
    array_job_id: Annotated[
        int, typer.Argument(parser=plain_id, metavar="ARRAY", help="The job array's id (its first task's job id).")
    ],
    value: Annotated[
        int, typer.Argument(metavar="N", help="At most this many tasks claimed or running at once; 0: no limit.")
    ],
) -> None:
    """Change a job array's throttle (Slurm's scontrol update JobId=A ArrayTaskThrottle=N).

    Tasks already running go on; no more start than the new throttle allows."""
    if value < 0:
        fail(f"throttle {value}: give a number of tasks, or 0 for no limit")
    result = call("PATCH", f"/api/arrays/{array_job_id}", json={"throttle": value})
    limit = f"at most {result['throttle']} at once" if result["throttle"] else "no limit"
    sys.stdout.write(f"array {array_job_id}: {limit} ({result['open']} of its {result['tasks']} tasks open)\n")


@app.command()
def update(
    job_id: ActArg,
    name: Annotated[str | None, typer.Option("--name", "--job-name", "-J", help="A new name.")] = None,
    vcpus: Annotated[
        str | None, typer.Option("--vcpus", "--cpus-per-task", "-c", help="vCPUs per node (queued jobs only).")
    ] = None,
    ram: Annotated[
        str | None, typer.Option("--ram", "--mem", help="RAM per node, e.g. 4GiB (queued jobs only).")
    ] = None,
    scratch: Annotated[
        str | None, typer.Option("--scratch", "--tmp", help="Scratch per node (queued jobs only).")
    ] = None,
    gpus: Annotated[str | None, typer.Option("--gpus", "-G", help="GPUs per node (queued jobs only).")] = None,
    nodes: Annotated[str | None, typer.Option("--nodes", "-N", help="Nodes of a gang (queued jobs only).")] = None,
    time_limit: Annotated[
        str | None,
        typer.Option(
            help="A new time limit (2h, 1:30:00; 0: none), or +D to add D to the one it has (Slurm's TimeLimit=+);"
            " only an admin lengthens one.",
        ),
    ] = None,
    slurm_time: SlurmTimeOption = None,
    not_before: Annotated[
        str | None,
        typer.Option(
            "--not-before",
            "--begin",
            "-b",
            help="Not before this time, ISO 8601 or now+D (queued jobs only); 'now' for no wait.",
        ),
    ] = None,
    max_retries: Annotated[str | None, typer.Option(help="Retries after a non-zero exit.")] = None,
    reservation: Annotated[
        str | None,
        typer.Option(help="An admin reservation in force (Slurm's ReservationName=); '' for none (queued jobs only)."),
    ] = None,
    signal: Annotated[
        str | None,
        typer.Option(
            "--signal",
            metavar="[B:]SIG[@TIME]",
            help="A signal before the time limit, as sbatch's --signal; '' for none (queued jobs only).",
        ),
    ] = None,
) -> None:
    """Change what a job asked for (Slurm's scontrol update JobId=).

    Resources, nodes, a requested start and an admin reservation only while it is queued: a job
    that asked for more than any instance type holds can be made placeable without losing its id
    (or the jobs that depend on it). Its time limit (also +D, as Slurm's TimeLimit=+2:00:00),
    retries and name also while it runs. Every change is an event (job.updated). A job array's id
    changes each task whose state takes the change, and says which did not; a value refused changes
    no task."""
    given = {
        "name": name,
        "vcpus": vcpus,
        "ram": ram,
        "scratch": scratch,
        "gpus": gpus,
        "nodes": nodes,
        "not_before": None if not_before is None else _start_time(not_before),
        "max_retries": max_retries,
        "reservation": reservation,
        "signal": signal,
    }
    body: dict[str, Any] = {key: value for key, value in given.items() if value is not None}
    time_limit = _time_limit_given(time_limit, slurm_time)
    if time_limit is not None:
        if time_limit.startswith("+"):
            body["time_limit_add"] = time_limit[1:]
        else:
            body["time_limit"] = time_limit
    if not body:
        fail("nothing to change: give --time-limit, --vcpus, --ram, --name, ... (corral update --help)")
    try:
        result = request("POST", f"/api/jobs/{job_id}/update", json=body)
    except Refused as exc:
        # The API names a body's field ("body.ram: ..."), the store a spec's ("ram: ..."): as options here.
        fail(re.sub(r"(?:body\.)?\b(" + "|".join(given) + r"|time_limit(?:_add)?)\b:", _as_option, str(exc)))
    if answers_for_array(result):
        sys.stdout.write(array_said("updated", result, _array_changes(result["changes"])) + "\n")
        return
    changes = result["changes"]
    if not changes:
        sys.stdout.write(f"{job_id}: nothing changed (it had those already)\n")
        return
    said = ", ".join(
        f"{key} {_update_value(key, old)} -> {_update_value(key, new)}" for key, (old, new) in changes.items()
    )
    if result.get("taken_back"):
        said += " (it was pending in Slurm: the next pass takes it back and submits it again)"
    sys.stdout.write(f"{job_id}: {said}\n")


def _array_changes(by_task: dict[str, dict[str, list[Any]]]) -> str:
    """': vcpus 2 -> 8', the changes an array's tasks took; several kinds (a time limit added to
    limits that differed) each once, the first few."""
    kinds = list(
        dict.fromkeys(
            ", ".join(f"{key} {_update_value(key, old)} -> {_update_value(key, new)}" for key, (old, new) in c.items())
            for c in by_task.values()
        )
    )
    if not kinds:
        return ""
    shown = kinds[:3] + ([f"{len(kinds) - 3} more kinds (corral events --kind job.updated)"] if len(kinds) > 3 else [])
    return ": " + " | ".join(shown)


def _as_option(match: re.Match[str]) -> str:
    field = match[1].removesuffix("_add")
    return f"--{field.replace('_', '-')}:"


def _update_value(key: str, value: Any) -> str:
    if value is None or (key in ("time_limit", "reservation", "signal") and not value):
        return "none"
    if key == "time_limit":
        return ago(value)
    if key == "not_before":
        return when(value)
    if key in ("ram", "scratch"):
        return f"{value:g} MiB"
    return f"{value:g}" if isinstance(value, float) else str(value)


@app.command()
def explain(job_id: JobArg, as_json: JsonFlag = False) -> None:
    """Why a job waits, or where it was placed and why.

    A waiting job: every filter, how many nodes each removed, the nearest miss. A placed job: how
    the top nodes scored."""
    data = call("GET", f"/api/jobs/{job_id}/explain")
    if as_json:
        print_json(data)
        return
    console.print(Text.assemble((f"job {job_id}", "bold"), " ", styled(data["state"])))
    if data["wait_reason"]:
        console.print(f"  {'UNPLACEABLE: ' if data['unplaceable'] else ''}{data['wait_reason']}", highlight=False)
    detail = data["explanation"] or {}
    if detail.get("at"):
        # Rewritten whenever a pass finds it changed: this is when the fleet last looked like this.
        console.print(f"  as of {when(detail['at'])}", style="dim", highlight=False)
    if detail.get("filters"):
        print_filter_explanation(detail)
    elif detail.get("top"):
        print_placement_scores(detail)
    elif not data["wait_reason"]:
        console.print("  no explanation recorded")


def constraints_text(j: dict[str, Any]) -> str:
    """What a job asks of a node besides room, as the placement filters read it ("accel=a10|l4;
    not capacity=spot; platform >= 1.10; reservation team-a; CPU-capped; exclusive")."""

    def values(value: str | list[str]) -> str:
        return value if isinstance(value, str) else "|".join(value)

    parts = [f"{key}={values(value)}" for key, value in (j.get("traits") or {}).items()]
    parts += [f"not {key}={values(value)}" for key, value in (j.get("forbidden_traits") or {}).items()]
    if j.get("min_platform"):
        parts.append(f"platform >= {j['min_platform']}")
    if j.get("reservation"):
        parts.append(f"reservation {j['reservation']}")
    if j.get("cpu_capped"):
        parts.append("CPU-capped")
    if j.get("exclusive"):
        parts.append("exclusive")  # (Slurm's --exclusive: alone on its nodes)
    return "; ".join(parts)


def print_filter_explanation(detail: dict[str, Any]) -> None:
    if not detail.get("nodes"):
        # A table of every filter removing 0 of 0 nodes, for a job of an elastic fleet that has
        # none up, hid the one line that says why it waits.
        console.print(f"  request {detail.get('request', '?')}: no live node to filter", highlight=False)
        if detail.get("reason"):
            console.print(f"  reason: {detail['reason']}", highlight=False)
        return
    console.print(
        f"  request {detail.get('request', '?')}, availability {detail.get('availability', '?')}: "
        f"{detail.get('survivors', 0)} of {detail.get('nodes', 0)} nodes pass every filter"
    )
    table = Table(show_edge=False, header_style="bold")
    for column in ("filter", "code", "removed", "fail", "sample nodes", "detail"):
        table.add_column(column, overflow="fold")
    for f in detail["filters"]:
        style = "" if f.get("failed") else "dim"
        table.add_row(
            # With seed 003's name (DAPI's hard-filter-min-ram), which a user may know it by.
            f["filter"] + (f"\n({f['seed']})" if f.get("seed") else ""),
            f["code"],
            str(f.get("removed", 0)),
            str(f.get("failed", 0)),
            ", ".join(f.get("sample", [])),
            f.get("detail", ""),
            style=style,
        )
    console.print(table)
    if detail.get("reason"):
        console.print(f"  reason: {detail['reason']}", highlight=False)
    nearest = detail.get("nearest")
    if nearest:
        console.print(f"  nearest miss: {nearest['node']} fails {', '.join(nearest['fails'])}", highlight=False)
    locality = detail.get("locality")
    if locality:
        # Soft hints fail no node, so their row says nothing: what they resolved to is here.
        parts = [f"{'strict' if locality.get('strict') else 'preferred'}, {locality.get('level', 'server')} level"]
        for key, label in (
            ("near_running", "near"),
            ("far_running", "far from"),
            ("not_running", "not running, so ignored"),
            ("not_understood", "not understood, so ignored"),
        ):
            if locality.get(key):
                parts.append(f"{label}: {', '.join(locality[key])}")
        console.print(f"  locality: {'; '.join(parts)}", highlight=False)


def print_placement_scores(detail: dict[str, Any]) -> None:
    console.print(f"  placed on {', '.join(detail.get('placed_on', []))}")
    names = sorted({name for node in detail["top"] for name in node.get("scores", {})})
    table = Table(show_edge=False, header_style="bold")
    for column in ("node", "score", *names):
        table.add_column(column, justify="right")
    for node in detail["top"]:
        label = node["node"] + (" *" if node.get("chosen") else "")
        scores = node.get("scores", {})
        table.add_row(label, f"{node['score']:.3f}", *(f"{scores.get(n, 0.0):.2f}" for n in names))
    console.print(table)
    for note in detail.get("notes", []):
        # Locality hints that were dropped or constrained nothing: the job ran, but not as asked.
        console.print(f"  note: {note}", highlight=False)


@app.command()
def nodes(
    all_nodes: Annotated[bool, typer.Option("--all", help="Include nodes that are gone.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """List instances with type, zone, market (spot or on-demand), state, age, idle time, running jobs, price
    and the corral version of their agent."""
    rows = call("GET", "/api/nodes", params={"all": all_nodes})
    if as_json:
        print_json(rows)
        return
    table = Table(show_edge=False, header_style="bold")
    columns = ("node", "instance", "type", "zone", "market", "state", "age", "idle", "jobs", "load", "$/h", "agent")
    for column in (*columns, "note"):
        table.add_column(column)
    for n in rows:
        table.add_row(
            n["id"],
            n["instance_id"] or "-",
            n["instance_type"],
            n.get("zone") or "-",
            n.get("market") or "-",
            styled(n["state"]),
            ago(n["age"]),
            ago(n["idle_for"]),
            str(n["running"]),
            f"{n['used_vcpus']:.1f}/{n['resources']['vcpus']:g}",
            f"{n['price_per_hour']:.3f}",
            n.get("agent_version") or "-",
            node_note(n),
        )
    console.print(table)
    hourly = sum(n["price_per_hour"] for n in rows if n["state"] != "gone")
    console.print(f"{counted(sum(1 for n in rows if n['state'] != 'gone'), 'live node')}, ${hourly:.3f}/hour")


def node_note(row: dict[str, Any], now: float | None = None) -> str:
    """corral.placement.attributes.service_notes, the reason of its state, then what corral will do
    about a silent agent and when (the server's outlook)."""
    notes = attr.service_notes(row["attributes"], time.time() if now is None else now, when)
    return "; ".join(note for note in (*notes, row["reason"], row.get("outlook", "")) if note)


@app.command()
def dashboard() -> None:
    """Print the address of the dashboard: the system at a glance in a browser (status, queue, nodes,
    recent events), refreshed every few seconds.

    The address carries the API token once: the page trades it for a cookie. Open it on the machine
    (or through a tunnel to it): the server listens on 127.0.0.1 by default."""
    me = call("GET", "/api/whoami")
    if not me["admin"]:
        # The page would only say "not signed in": it shows every job and the fleet's bill.
        fail(f"the dashboard is the operator's and the admins' (you are user {me['name']}): corral jobs, queue, nodes")
    with client() as http:
        token = http.headers.get("Authorization", "").removeprefix("Bearer ")
        address = http.base_url.join("/dashboard").copy_add_param("token", token)
    sys.stdout.write(f"{address}\n")


@app.command()
def status(as_json: JsonFlag = False) -> None:
    """The system at a glance: jobs, the longest wait, the fleet and its bill.

    Also the instance types backed off (after capacity errors, or instances that never paired; `corral
    backoff clear` ends a back-off), a pause of every boot after the cloud refused boots for no one
    type's fault (an instance profile, a security group, credentials), and the dispatchers sharing
    the store."""
    report = call("GET", "/api/status")
    if as_json:
        print_json(report)
        return
    now = report["now"]
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    jobs = report["jobs"]
    counts = [Text.assemble((f"{jobs[state]} ", ""), styled(state)) for state in jobs]
    if report["held"]:
        counts.append(Text.assemble((f"{report['held']} ", ""), ("held", "yellow")))
    grid.add_row("jobs", Text(", ").join(counts) if counts else Text("none"))
    oldest = report["oldest_wait"]
    grid.add_row("oldest wait", "no job that could run is waiting" if oldest is None else ago(oldest))
    nodes = report["nodes"]
    live = sum(nodes.values())
    by_state = Text(", ").join(Text.assemble((f"{count} ", ""), styled(state)) for state, count in nodes.items())
    size = f"{counted(live, 'node')}, {report['vcpus']:g} vcpus, ${report['cost_per_hour']:.3f}/hour"
    grid.add_row("fleet", Text.assemble(size, ": " if live else "", by_state))
    limits = [f"{report['max_instances']} instances"]
    if report.get("max_vcpus") is not None:
        limits.append(f"{report['max_vcpus']:g} vcpus")
    if report.get("max_cost_per_hour") is not None:
        limits.append(f"${report['max_cost_per_hour']:.3f}/hour")
    limits += [f"{count} {name}" for name, count in report.get("type_max_instances", {}).items()]
    if report["max_instances"] or len(limits) > 1:  # (nothing to say in front of Slurm)
        grid.add_row("at most", ", ".join(limits))
    for entry in report["fleet"]:
        grid.add_row("", f"{entry['instance_type']}: {entry['nodes']}, ${entry['price_per_hour']:.3f}/hour")
    for backoff in report["backoffs"]:
        grid.add_row(
            "backed off", f"{backoff['instance_type']} for {ago(backoff['until'] - now)} more: {backoff['reason']}"
        )
    if report["backoffs"]:
        grid.add_row("", "fixed what failed it? `corral backoff clear TYPE` tries it again now")
    if report.get("boots_paused_until") is not None:
        left = ago(report["boots_paused_until"] - now)
        grid.add_row("boots paused", Text.assemble((f"for {left} more: ", "red"), report["boots_paused_reason"]))
    if report["failing_checks"]:
        kept = report["failing_checks_in_service"]
        failing = report["failing_checks"]
        grid.add_row(
            "health",
            Text.assemble(
                "1 node fails its health check" if failing == 1 else f"{failing} nodes fail their health check",
                (f" ({kept} kept in service: more than health_check.max_unhealthy fail at once)", "red")
                if kept
                else "",
            ),
        )
    for dispatcher in report["dispatchers"]:
        heard = f"heartbeat {ago(now - dispatcher['last_heartbeat'])} ago"
        stale = (" (stale: its claims are released)", "red") if dispatcher["stale"] else ""
        if dispatcher.get("stopped_at") is not None:
            # A clean stop, not a crash: what it left behind is in its event dispatcher.stopped.
            heard, stale = f"stopped {ago(now - dispatcher['stopped_at'])} ago", ""
        grid.add_row(
            "dispatcher",
            Text.assemble(
                f"{dispatcher['id']} on {dispatcher['host'] or '?'} pid {dispatcher['pid'] or '?'}, {heard}", stale
            ),
        )
    grid.add_row("store", f"{report['store_id']} (its instances' corral-store tag)")
    console.print(grid)


@app.command("usage")
def usage(
    since: Annotated[
        str, typer.Option(help="Start: a time ago (7d, 12h) or an ISO 8601 time, e.g. 2026-11-01.")
    ] = "1d",
    until: Annotated[str | None, typer.Option(help="End, as --since (default: now).")] = None,
    by: Annotated[str, typer.Option(help="Group the work by 'user', 'tag' or 'job'.")] = "user",
    limit: Annotated[int, typer.Option(help="Show the largest this many groups (the totals count all).")] = 20,
    as_json: JsonFlag = False,
) -> None:
    """What the fleet billed in a window, and whose work it ran (Slurm's sreport and sacct).

    Each group's jobs, vcpu-hours and GPU-hours, and its share of the bill: an attempt is charged
    the share of its node it asked for (vcpus, RAM or GPUs, the largest) at the node's price, for
    the time it ran. What no job was charged is idle or booting nodes and room no job asked for.

    And how much of what it asked for it used, as seff says it of a job: CPU eff is the CPU time
    used over the vcpus asked times the run time, RAM eff the peak RSS over the RAM asked, each
    run weighed by what it reserved (vcpu-hours; RAM-hours), over the runs whose node measured
    them ("measured": runs before accounting or still running have no measurement, and do not
    count as 0%; in front of Slurm a run's peak RAM is not known). A run the window cuts is credited
    its CPU time pro rata."""
    now = time.time()
    params: dict[str, Any] = {"since": _moment("--since", since, now), "by": by, "limit": limit}
    if until is not None:
        params["until"] = _moment("--until", until, now)
    end = params.get("until", now)
    if params["since"] >= end:
        # Said here, in the times given: the API's refusal speaks in epoch seconds (1.79568e+09).
        fail(
            f"--since {since!r} is {when(params['since'])}, which must be before until"
            f" ({'--until ' + repr(until) + ' is ' if until is not None else 'now, '}{when(end)})"
        )
    report = call("GET", "/api/usage", params=params)
    if as_json:
        print_json(report)
        return
    span = report["until"] - report["since"]
    console.print(f"usage from {when(report['since'])} to {when(report['until'])} ({ago(span)})", highlight=False)
    billed = report["billed"]
    # The total counts each job and run once, whatever --limit shows (and a job under two tags once).
    total = report.get("total")  # (a server before it sends none)
    rows = [*report["rows"], *([total] if total and report["rows"] else [])]
    # A fleet without GPUs has a column of 0.0 there: left out, the table fits in 100 columns.
    gpus = any(row["gpu_hours"] > 0 for row in rows)
    table = Table(show_edge=False, header_style="bold")
    columns = [report["by"], "jobs", "vcpu-hours", *(["gpu-hours"] if gpus else []), "cost", "of the bill"]
    for column in [*columns, "CPU eff", "RAM eff", "measured"]:
        table.add_column(column, justify="left" if column == report["by"] else "right")
    for row in rows:
        if row is total:
            table.add_section()
        table.add_row(
            row["key"],
            f"{row['jobs']:,}",
            f"{row['vcpu_hours']:,.1f}",
            *([f"{row['gpu_hours']:,.1f}"] if gpus else []),
            money(row["cost"]),
            f"{row['cost'] / billed:.0%}" if billed else "-",
            *efficiency_cells(row),
        )
    if report["rows"]:
        console.print(table)
    else:
        console.print("no job ran in this window")
    fleet = Table(show_edge=False, header_style="bold")
    for column in ("instance type", "instances", "instance-hours", "billed", "used by jobs"):
        fleet.add_column(column, justify="left" if column == "instance type" else "right")
    for kind in report["types"]:
        fleet.add_row(
            kind["instance_type"],
            f"{kind['instances']:,}",
            f"{kind['instance_hours']:,.1f}",
            money(kind["billed"]),
            f"{kind['used'] / kind['billed']:.0%}" if kind["billed"] else "-",
        )
    if report["types"]:
        console.print(fleet)
    used_share = f" ({report['used'] / billed:.0%})" if billed else ""
    console.print(
        f"{counted(report['jobs'], 'job')} ran; the fleet billed {money(billed)},"
        f" of which jobs used {money(report['used'])}"
        f"{used_share}; {money(report['unattributed'])} went to idle and booting nodes and room no job asked for",
        highlight=False,
    )


def efficiency_cells(row: dict[str, Any]) -> list[str]:
    """A usage row's CPU and RAM efficiency and its measured runs: "-" where none was measured,
    not 0%; "3/4" where some of its runs were not (a server before accounting sends nothing)."""
    if "measured" not in row:
        return ["-", "-", "-"]
    cpu, ram = row["cpu_efficiency"], row["ram_efficiency"]
    return [
        "-" if cpu is None else f"{cpu:.0%}",
        "-" if ram is None else f"{ram:.0%}",
        f"{row['measured']:,}/{row['attempts']:,}",
    ]


def _moment(option: str, value: str, now: float) -> float:
    """Epoch seconds from "7d" (that long before now) or an ISO 8601 time."""
    try:
        return now - parse_duration(value)
    except ValueError:
        pass
    from corral.jobspec import to_epoch

    try:
        return float(to_epoch(value))
    except ValueError:
        fail(f"{option}: {value!r} is neither a time ago (e.g. 7d, 12h) nor an ISO 8601 time (e.g. 2026-11-01)")


@app.command("share")
def share(as_json: JsonFlag = False) -> None:
    """Each user's fair-share standing (Slurm's sshare): shares, decayed usage, the factor.

    With policy.placement.queue.order = "fairshare", queued jobs of one priority go in this order:
    the users who used least for their shares first. Usage is what their runs held (vCPUs by
    default), halved every half-life, as of the last calc time."""
    report = call("GET", "/api/share")
    if as_json:
        print_json(report)
        return
    table = Table(show_edge=False, header_style="bold")
    for column in ("user", "shares", "norm shares", "usage (h)", "norm usage", "factor", "queued", "running"):
        table.add_column(column, justify="left" if column == "user" else "right")
    for row in report["rows"]:
        table.add_row(
            row["user"] or "(no user)",
            f"{row['shares']:g}",
            f"{row['norm_shares']:.3f}",
            f"{row['usage'] / 3600:,.{1 if row['usage'] >= 36_000 else 3}f}",
            f"{row['norm_usage']:.3f}",
            f"{row['factor']:.3f}",
            f"{row['queued']:,}",
            f"{row['running']:,}",
        )
    if report["rows"]:
        console.print(table)
    else:
        console.print("no user has run or queued a job")
    note = {
        "fairshare": "the queue is in this order within each priority",
        "multifactor": "the factor weighs in each queued job's score (corral queue)",
    }.get(report["order"], f'queue.order is "{report["order"]}": this standing does not order the queue')
    console.print(
        f"usage as of {when(report['calc_time'])}, half-life {ago(report['half_life'])}; {note}", highlight=False
    )


@app.command("queue")
def queue(
    limit: Annotated[int, typer.Option(help="At most this many, from the front.")] = 50,
    as_json: JsonFlag = False,
) -> None:
    """The queued jobs in the order the next pass takes them, with the factors that order them
    (Slurm's sprio): priority, then under queue.order = "multifactor" a score of age and fair share.

    Held jobs are left out; a job that cannot run yet (a dependency, a start asked for) keeps its
    place and says why it waits."""
    report = call("GET", "/api/queue", params={"limit": limit})
    if as_json:
        print_json(report)
        return
    rows = report["rows"]
    factors = [
        (key, title)
        for key, title in (("age", "age"), ("fairshare", "fair share"), ("score", "score"))
        if any(row[key] is not None for row in rows)
    ]
    tasks = any(row["array_task_id"] is not None for row in rows)
    table = Table(show_edge=False, header_style="bold")
    columns = ("#", "id", *(("task",) if tasks else ()), "user", "name", "priority")
    for column in (*columns, *(title for _, title in factors), "waited", "reason"):
        table.add_column(column, justify="left" if column in ("task", "user", "name", "waited", "reason") else "right")
    now = time.time()
    for row in rows:
        table.add_row(
            str(row["position"]),
            str(row["id"]),
            *((array_task_text(row),) if tasks else ()),
            row["user"] or "-",
            row["name"] or "-",
            str(row["priority"]),
            *(f"{row[key]:,.0f}" if key == "score" else f"{row[key]:.3f}" for key, _ in factors),
            ago(now - row["submitted_at"]),
            row["wait_reason"],
        )
    if rows:
        console.print(table)
    shown = f"{len(rows):,} of {report['queued']:,} queued" if report["queued"] > len(rows) else ""
    order = report["order"]
    if order == "multifactor":
        how = (
            f"multifactor: priority, then score = {report['weight_age']:g} × age + {report['weight_fairshare']:g}"
            f" × fair share (age 1 at {ago(report['max_age'])}), as of {when(report['calc_time'])}"
        )
    elif order == "fairshare":
        how = f"fairshare: priority, then the user's usage per share (factor as of {when(report['calc_time'])})"
    else:
        how = {"priority": "priority, then submission", "submit": "submission"}.get(order, order)
    console.print(f"{shown + '; ' if shown else ''}order: {how}" if rows else "no job is queued", highlight=False)


@app.command("node")
def show_node(
    node_id: Annotated[
        str, typer.Argument(metavar="NODE", help="The node's id, as corral nodes lists it (n-1a2b3c4d).")
    ],
    changes: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="KEY=VALUE",
            help="KEY=VALUE attributes to set (KEY=A,B sets a list), e.g. drain=true held=true next_reboot=2026-12-01.",
        ),
    ] = None,
    unset: Annotated[list[str] | None, typer.Option("--unset", help="Remove this attribute; repeatable.")] = None,
    rack: Annotated[str | None, typer.Option(help="The rack the node is in (rack-level locality).")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Show a live node's attributes and rack, or change them.

    A drain (drain=true: no new work, shut down once empty; drain=now: shut down at once, its work
    handled as a failed node's; drain=false: back in service), an operator hold (held=true), a
    seed-002 category, an admin reservation, a planned reboot (next_reboot), a hardware class
    (hardware_priority), any trait. Placement and the lifecycle read them from the next pass."""
    attributes: dict[str, str | list[str]] = {}
    for change in changes or []:
        key, sep, value = change.partition("=")
        if not sep or not key:
            fail(f"not KEY=VALUE: {change!r}")
        attributes[key] = value.split(",") if "," in value else value
    if not node_id.strip() or "/" in node_id:
        # It would name another route of the API ('' is /api/nodes, which answers with a redirect).
        fail(f"no live node {node_id!r} (corral nodes lists them)")
    body = {"set": attributes, "unset": unset or [], "rack": rack}
    try:
        row = request("PATCH", f"/api/nodes/{node_id}", json=body)
    except Refused as exc:
        # A bad value names the attribute as typed (drain=soon), not the API's body field ("set: drain: ...").
        fail(re.sub(r"(^|\n  )set: ", r"\1", str(exc)))
    for warning in row.pop("warnings", []):
        err.print(escape(f"warning: {warning}"), highlight=False)
    if as_json:
        print_json(row)
        return
    sys.stdout.write(f"node {row['id']} {row['state']} ({row['instance_type']}), rack {row['rack'] or '-'}\n")
    for label, text in (("reason", row["reason"]), ("outlook", row.get("outlook", ""))):
        if text:
            sys.stdout.write(f"  {label}: {text}\n")
    if row["state"] == "gone":
        # Its record keeps only how it was shut down; why it went down is in its events.
        sys.stdout.write(
            f"  gone after {ago(row['age'])}: what happened to it and its jobs, corral events --node {row['id']}\n"
        )
    for key, value in sorted(row["attributes"].items()):
        sys.stdout.write(f"  {key} = {value if isinstance(value, str) else ','.join(value)}\n")


@app.command()
def events(
    job: Annotated[
        str | None, typer.Option(parser=job_name, help="Only this job's events (12, or a task: 12_3).")
    ] = None,
    node: Annotated[str | None, typer.Option(help="Only this node's events.")] = None,
    kind: Annotated[str | None, typer.Option(help="Kind or its start, e.g. job.requeued, job.cancel or node.")] = None,
    since: Annotated[
        str | None, typer.Option(help="Only events since: a time ago (2h, 7d) or an ISO 8601 time (2026-11-01T02:00).")
    ] = None,
    until: Annotated[str | None, typer.Option(help="Only events before this time, as --since.")] = None,
    before: Annotated[
        int | None,
        typer.Option(parser=plain_id, help="Only events older than this event id: the page before one shown."),
    ] = None,
    after: Annotated[
        int | None,
        typer.Option(
            parser=plain_id,
            help="Only events newer than this event id, the oldest --limit of them: the next page of a follower.",
        ),
    ] = None,
    limit: Annotated[int, typer.Option(help="The newest this many (with --after: the oldest).")] = 200,
    as_json: JsonFlag = False,
) -> None:
    """List state changes of jobs and nodes, oldest first: the newest --limit of those that match
    (sacct -S/-E's window with --since/--until; --before pages back, --after forward)."""
    now = time.time()
    params: dict[str, Any] = {"limit": limit}
    if job is not None and "_" in job:
        job = str(call("GET", f"/api/jobs/{job}")["id"])  # an array's task: its events are its job id's
    for key, value in (("job", job), ("node", node), ("kind", kind), ("before", before), ("after", after)):
        if value is not None:
            params[key] = value
    if since is not None:
        params["since"] = _moment("--since", since, now)
    if until is not None:
        params["until"] = _moment("--until", until, now)
        if since is not None and params["since"] >= params["until"]:
            fail(
                f"--since {since!r} is {when(params['since'])}, which must be before"
                f" --until {until!r} ({when(params['until'])})"
            )
    rows, more = listed("/api/events", params, limit, oldest=after is not None)
    cut = ""
    if more and after is not None:
        cut = f"the oldest {len(rows):,} events after {after} shown; newer ones: --after {rows[-1]['id']}"
    elif more:
        cut = f"the newest {len(rows):,} events shown; older ones: --before {rows[0]['id']} (or a larger --limit)"
    if as_json:
        print_json(rows)
        if more:  # on stderr, as below: a script reading stdout would take a cut listing for the whole
            err.print(escape(cut), highlight=False)
        return
    table = Table(show_edge=False, header_style="bold")
    for column in ("time", "kind", "job", "node", "message"):
        table.add_column(column, overflow="fold")
    for e in rows:
        table.add_row(when(e["at"]), e["kind"], str(e["job_id"] or ""), e["node_id"] or "", e["message"])
    console.print(table)
    if more:
        err.print(escape(cut), highlight=False)
    if not rows and job is not None:
        try:
            request("GET", f"/api/jobs/{job}")
        except Refused as exc:
            # A job id mistyped would read as "nothing happened to it"; a purged job has no events either.
            err.print(escape(f"no events: {exc}"), highlight=False)
    if not rows and kind and "%" not in kind:
        kinds = call("GET", "/api/events/kinds")
        if not any(known.startswith(kind) for known in kinds):
            # A misspelt kind would read as "nothing happened" (a kind may also just not have happened yet).
            recorded = ", ".join(kinds) or "none yet"
            err.print(escape(f"no event of a kind starting {kind!r} was recorded; the kinds recorded: {recorded}"))


@backoff_app.command("clear")
def backoff_clear(
    instance_types: Annotated[
        list[str] | None, typer.Argument(help="Instance types (their names in the config).")
    ] = None,
    all_types: Annotated[bool, typer.Option("--all", help="Every instance type backed off.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """End the back-off of instance types, and forget their failed boots in a row: after fixing what
    failed them (the AMI, a quota, a security group), try them again now rather than when the
    back-off ends (Slurm's `scontrol update nodename=... state=resume`).

    A pass is woken at once, so a job waiting for the type can boot it now. An event
    `type.backoff_cleared` records each. A type that is not backed off, or not in the config, is
    refused, naming it, and nothing is changed. `corral status` lists the back-offs in force."""
    if all_types and instance_types:
        fail("give instance types or --all, not both")
    if not all_types and not instance_types:
        fail("name the instance types whose back-off ends, or give --all")
    body: dict[str, Any] = {"all": True} if all_types else {"instance_types": instance_types}
    result = call("POST", "/api/backoffs/clear", json=body)
    if as_json:
        print_json(result)
        return
    if not result["cleared"]:
        sys.stdout.write("no instance type was backed off\n")
    for backoff in result["cleared"]:
        failures = backoff["boot_failures"]
        row = f"; {counted(failures, 'failed boot')} in a row forgotten" if failures else ""
        sys.stdout.write(f"{backoff['instance_type']}: back-off cleared (was until {when(backoff['until'])}{row})\n")


@notify_app.command("skip")
def notify_skip(
    to: Annotated[
        int | None,
        typer.Option(help="The event to have handled last (default: the newest); an earlier one replays the rest."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Move the notifier past a backlog (to the newest event), or back to replay what was missed.

    Forward, the events skipped are never notified. Back, the events after --to are notified
    again with rearm and thresholds started over: what a webhook that was down never got."""
    result = call("POST", "/api/notify/skip", json={"to": to})
    if as_json:
        print_json(result)
        return
    was, now_at = result["was"], result["to"]
    if was is None:
        console.print(f"the notifier had not run; it starts after event {now_at}", highlight=False)
    elif now_at >= was:
        console.print(f"moved from event {was} to {now_at}: {now_at - was} events not notified", highlight=False)
    else:
        console.print(f"moved back from event {was} to {now_at}: {was - now_at} events notified again", highlight=False)


@notify_app.command("status")
def notify_status(as_json: JsonFlag = False) -> None:
    """Show the notifier's place in the event log, its rules, and whom each rule keeps quiet (rearm)."""
    data = call("GET", "/api/notify")
    if as_json:
        print_json(data)
        return
    newest = data["newest_event_id"]
    if not data["rules"]:
        console.print("no [[notify]] rules in the running corral's config: nothing is notified")
    if data["last_event_id"] is None:
        console.print(f"the notifier has not run yet (newest event {newest}); it starts from the newest event")
    else:
        console.print(
            f"handled events up to {data['last_event_id']} (newest {newest}, {data['waiting']} waiting),"
            f" moved {when(data['moved_at'])}; {data.get('sending', 0)} being sent",
            highlight=False,
        )
    if data["rules"]:
        table = Table(show_edge=False, header_style="bold")
        for column in ("rule", "on", "action", "rearm", "threshold"):
            table.add_column(column, overflow="fold")
        counts = data["threshold_counts"]
        for r in data["rules"]:
            rearm = f"{ago(r['rearm'])} per {r['rearm_per']}" if r["rearm"] else "-"
            threshold = (
                f"{r['threshold']} in {ago(r['window'])} (now {counts.get(r['name'], 0)})" if r["threshold"] else "-"
            )
            table.add_row(r["name"], ", ".join(r["on"]), r["action"], rearm, threshold)
        console.print(table)
    now = time.time()
    for q in data["quiet"]:
        if q["until"] > now:
            line = f"quiet for {q['subject']} until {when(q['until'])} ({q['suppressed']} suppressed so far)"
        else:  # rearmed, with a count the next notification for the subject carries
            line = f"rearmed for {q['subject']}; its next notification carries {q['suppressed']} suppressed"
        console.print(f"  {q['rule']}: {line}", highlight=False)
    for r in data.get("retrying", []):
        about = ", ".join(f"{k.split('_')[0]} {r[k]}" for k in ("node_id", "job_id") if r[k] is not None)
        failed = f"failed {r['tries']} times ({r['error']})" if r["tries"] else "not sent before a stop"
        console.print(
            f"  {r['rule']}: event {r['event_id']} ({r['kind']}{', ' + about if about else ''}) {failed};"
            f" next try {when(r['due'])}",
            highlight=False,
        )


@app.command()
def retention(
    jobs_after: Annotated[
        float | None,
        typer.Option(parser=duration, metavar="DURATION", help="Try this retention.jobs_after (e.g. 90d) instead."),
    ] = None,
    output_after: Annotated[
        float | None, typer.Option(parser=duration, metavar="DURATION", help="Try this retention.output_after.")
    ] = None,
    events_after: Annotated[
        float | None, typer.Option(parser=duration, metavar="DURATION", help="Try this retention.events_after.")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Show what the next retention sweep would delete, deleting nothing: by the running corral's
    [retention], or by the values given, to try one before setting it (admin)."""
    params = {
        key: value
        for key, value in (("jobs_after", jobs_after), ("output_after", output_after), ("events_after", events_after))
        if value is not None
    }
    data = call("GET", "/api/retention", params=params)
    if as_json:
        print_json(data)
        return
    if not data["configured"] and not params:
        console.print("[retention] deletes nothing: every job, event and output is kept (try --jobs-after 90d)")
        return
    source = "the values given, and the running corral's [retention] for the others" if params else "[retention]"
    every = format_duration(data["interval"])
    console.print(f"by {source}, the next sweep (every {every}) would delete:", highlight=False)
    table = Table(show_edge=False, header_style="bold")
    for column in ("what", "kept for", "deleted"):
        table.add_column(column)
    if data["jobs_after"] is not None:
        kept = data["jobs_ended"] - data["jobs"]
        why = f" ({kept:,} more ended, kept: an open job depends on them, or their array has not all ended)"
        table.add_row("ended jobs", format_duration(data["jobs_after"]), f"{data['jobs']:,}" + (why if kept else ""))
    if data["outputs"] is not None:
        kept_for = format_duration(data["output_after"] or data["jobs_after"])
        table.add_row("job output here", kept_for, f"{data['outputs']:,} jobs'")
    if data["events_after"] is not None:
        table.add_row("events", format_duration(data["events_after"]), f"{data['events']:,}")
    console.print(table)


@config_app.command("check")
def config_check(
    file: Annotated[Path, typer.Argument(metavar="FILE", help="The TOML or YAML config file to check.")],
) -> None:
    """Validate a config file; errors name the key and the reason."""
    from corral.config import ConfigError, load_config

    try:
        config = load_config(file)
    except ConfigError as exc:
        fail(str(exc), 2)
    types = len(config.instance_types)
    store = without_password(config.store_url)
    console.print(f"{file}: OK ({types} instance type{'' if types == 1 else 's'}, store {store})")
    from corral.notifier import missing_programs

    for warning in config.warnings() + missing_programs(config.notify):
        console.print(Text.assemble(("warning", "yellow"), f": {warning}"))


@config_app.command("show")
def config_show(
    file: Annotated[
        Path | None,
        typer.Argument(metavar="FILE", help="A TOML or YAML config file (default: the embedded defaults)."),
    ] = None,
) -> None:
    """Print the effective configuration (defaults filled in) as JSON."""
    from corral.config import ConfigError, load_config

    try:
        config = load_config(file)
    except ConfigError as exc:
        fail(str(exc), 2)
    shown = config.model_dump(mode="json")
    if shown["store"]["url"] is not None:  # (pasted into tickets and chats: as config errors show it)
        shown["store"]["url"] = without_password(shown["store"]["url"])
    print_json(shown)


@config_app.command("reference")
def config_reference() -> None:
    """Print the configuration reference (Markdown) generated from the models."""
    from corral.config import reference_markdown

    sys.stdout.write(reference_markdown())


register_simulate(app)


if __name__ == "__main__":  # python -m corral.cli, as the `corral` script
    app()


@users_app.command("add")
def users_add(
    name: Annotated[str, typer.Argument(help="The user's name, as their login name (letters, digits, _ . -).")],
    admin: Annotated[bool, typer.Option("--admin", help="An admin: may do what the operator's token does.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Add a user and print their token, this once (corral keeps only its hash). The user puts it in
    ~/.config/corral/token (mode 0600) or CORRAL_TOKEN. Needs an admin's token."""
    result = call("POST", "/api/users", json={"name": name, "admin": admin})
    if as_json:
        print_json(result)
        return
    sys.stdout.write(f"{result['token']}\n")
    err.print(
        f"user {name} added{' (admin)' if admin else ''}: the token above is shown once; give it to them, to put"
        " in their ~/.config/corral/token (mode 0600) or CORRAL_TOKEN, with the server's address in CORRAL_URL",
        highlight=False,
    )
    for warning in result.get("warnings", []):
        err.print(Text.assemble(("warning", "yellow"), f": {warning}"), highlight=False)


@users_app.command("list")
def users_list(as_json: JsonFlag = False) -> None:
    """The users, with when each was added and last used their token (to the minute)."""
    rows = call("GET", "/api/users")
    if as_json:
        print_json(rows)
        return
    table = Table("NAME", "ADMIN", "CREATED", "LAST USED")
    for row in rows:
        table.add_row(row["name"], "yes" if row["admin"] else "", when(row["created_at"]), when(row["last_used_at"]))
    console.print(table)


@users_app.command("remove")
def users_remove(name: Annotated[str, typer.Argument(help="The user's name.")]) -> None:
    """Remove a user: their token is refused from the next request on. Their jobs stay, and run
    (`corral cancel --user NAME` ends them). Needs an admin's token."""
    call("DELETE", f"/api/users/{urllib.parse.quote(name, safe='')}")
    sys.stdout.write(f"user {name} removed: their token is refused\n")


@users_app.command("whoami")
def users_whoami() -> None:
    """Who your token says you are."""
    me = call("GET", "/api/whoami")
    sys.stdout.write(f"{me['name'] or 'the operator'}{' (admin)' if me['admin'] else ''}\n")
