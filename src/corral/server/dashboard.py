"""The dashboard: one page, served by the server at /dashboard, with what `corral status`, `corral
queue`, `corral nodes` and `corral events` say, and charts of the jobs and the fleet over the last
two hours, refreshed every few seconds. Read-only, and built
from the API's own answers (corral.server.api), so it says what the CLI says.

A browser cannot send the API's bearer token: `corral dashboard` prints the page's address with the
token once (`/dashboard?token=...`), which the page trades for a cookie (HttpOnly, SameSite=Strict,
for this path only) and leaves the address bar without it.
"""

from __future__ import annotations

import time
from html import escape
from typing import Annotated, Any

from fastapi import APIRouter, Cookie, Depends, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from corral.core.units import format_duration
from corral.placement.attributes import service_notes
from corral.server import api
from corral.server.app import Runtime, caller_for
from corral.server.deps import get_runtime

router = APIRouter()

COOKIE = "corral_token"
# The page runs no script, loads nothing and is framed by no one: a name a user wrote that escaping
# missed could not run, nor could the page be laid under another site's clicks. No Referer carries
# the address (the first one holds the token).
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
REFRESH_SECONDS = 5
QUEUE_ROWS = 25
EVENT_ROWS = 30
STATE_COLOURS = {
    "queued": "#b58900",
    "claimed": "#268bd2",
    "running": "#2aa198",
    "complete": "#859900",
    "failed": "#dc322f",
    "cancelled": "#6c71c4",
    "booting": "#268bd2",
    "idle": "#b58900",
    "busy": "#2aa198",
    "draining": "#cb4b16",
    "shutting_down": "#6c71c4",
    "down": "#dc322f",
}
STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; margin-bottom: 0.2em; } h2 { font-size: 1.05em; margin-top: 1.6em; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { padding: 0.2em 0.7em; border-bottom: 1px solid #ddd; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
.state { font-weight: 600; } .dim { color: #777; font-size: 0.85em; }
"""


def _authorised(runtime: Runtime, token: str | None) -> bool:
    """The page shows every job and node, and the fleet's bill: the operator's, or an admin's."""
    if token is None:
        return False
    caller = caller_for(f"Bearer {token}", runtime)
    return not isinstance(caller, str) and caller.admin


@router.get("/dashboard", include_in_schema=False)
def dashboard(
    request: Request,
    runtime: Annotated[Runtime, Depends(get_runtime)],
    token: Annotated[str | None, Query()] = None,
    cookie: Annotated[str | None, Cookie(alias=COOKIE)] = None,
) -> Response:
    if token is not None:
        if not _authorised(runtime, token):
            return _refused()
        # The token leaves the address (and the browser's history) for a cookie of this page alone.
        moved = RedirectResponse("/dashboard", status_code=303, headers=SECURITY_HEADERS)
        # Over HTTPS, Secure: a browser sends a cookie without it to any port of the host over
        # plain HTTP (another service's, or an address an attacker sends it to), in the clear.
        secure = request.url.scheme == "https"
        moved.set_cookie(COOKIE, token, httponly=True, samesite="strict", path="/dashboard", secure=secure)
        return moved
    if not _authorised(runtime, cookie):
        return _refused()
    return HTMLResponse(_page(runtime), headers=SECURITY_HEADERS)


def _refused() -> HTMLResponse:
    body = "<p>Open the dashboard with the address <code>corral dashboard</code> prints (it carries the API token).</p>"
    return HTMLResponse(
        _document("corral: not signed in", body, refresh=False), status_code=401, headers=SECURITY_HEADERS
    )


def _page(runtime: Runtime) -> str:
    now = time.time()
    status = api.status(runtime)
    queue = api.queue_order(runtime, limit=QUEUE_ROWS)
    nodes = api.list_nodes(runtime, all_nodes=False)
    events = api.list_events(runtime, job=None, node=None, kind=None, limit=EVENT_ROWS)
    dispatcher = runtime.loop.dispatcher_id if runtime.loop is not None else "-"
    parts = [
        f"<h1>corral</h1><p class='dim'>dispatcher {escape(dispatcher)}, {escape(_when(now))};"
        f" refreshed every {REFRESH_SECONDS} s</p>",
        _summary(status.model_dump()),
        _charts(list(runtime.history)),
        f"<h2>Queue ({queue.queued:,} queued, order {escape(queue.order)})</h2>",
        _table(
            ["#", "job", "user", "name", "priority", "score", "waited", "reason"],
            [
                [
                    str(row.position),
                    str(row.id) if row.array_task_id is None else f"{row.id} ({row.array_job_id}_{row.array_task_id})",
                    row.user or "-",
                    row.name or "-",
                    str(row.priority),
                    "-" if row.score is None else f"{row.score:,.0f}",
                    format_duration(now - row.submitted_at),
                    row.wait_reason,
                ]
                for row in queue.rows
            ],
            numeric={0, 4, 5},
        ),
        f"<h2>Nodes ({len(nodes)})</h2>",
        _table(
            ["node", "type", "zone", "market", "state", "age", "jobs", "load", "$/h", "note"],
            [
                [
                    node.id,
                    node.instance_type,
                    node.zone or "-",
                    node.market or "-",
                    _state(node.state),
                    format_duration(node.age),
                    str(node.running),
                    f"{node.used_vcpus:.1f}/{node.resources.vcpus:g}",
                    f"{node.price_per_hour:.3f}",
                    # What `corral nodes` notes: a drain, a hold, a reservation, then the reason.
                    "; ".join([*service_notes(node.attributes, now, _when), *([node.reason] if node.reason else [])]),
                ]
                for node in nodes
            ],
            numeric={5, 6, 7, 8},
            markup={4},
        ),
        "<h2>Recent events</h2>",
        _table(
            ["time", "kind", "job", "node", "message"],
            [
                [_when(event.at), event.kind, str(event.job_id or ""), event.node_id or "", event.message]
                for event in reversed(events)
            ],
        ),
    ]
    return _document("corral", "\n".join(parts), refresh=True)


def _summary(status: dict[str, Any]) -> str:
    jobs = ", ".join(f"{count:,} {_state(state)}" for state, count in status["jobs"].items()) or "none"
    if status["held"]:
        jobs += f", {status['held']:,} held"
    oldest = status["oldest_wait"]
    live = sum(status["nodes"].values())
    fleet = f"{live} node{'' if live == 1 else 's'}, {status['vcpus']:g} vcpus, ${status['cost_per_hour']:.3f}/hour"
    if live:
        fleet += ": " + ", ".join(f"{count} {_state(state)}" for state, count in status["nodes"].items())
    rows = [
        ("jobs", jobs),
        ("oldest wait", "no job that could run is waiting" if oldest is None else escape(format_duration(oldest))),
        ("fleet", fleet),
    ]
    rows += [
        ("backed off", escape(f"{b['instance_type']} until {_when(b['until'])}: {b['reason']}"))
        for b in status["backoffs"]
    ]
    if status.get("boots_paused_until") is not None:
        paused = f"until {_when(status['boots_paused_until'])}: {status['boots_paused_reason']}"
        rows.append(("boots paused", escape(paused)))
    return "<table>" + "".join(f"<tr><th>{name}</th><td>{value}</td></tr>" for name, value in rows) + "</table>"


def _charts(history: list[tuple[float, int, int, int, float]]) -> str:
    """The last samples the server took (Runtime.history) as line charts: the jobs, the fleet."""
    if len(history) < 2:
        return "<p class='dim'>charts: a sample every few seconds of passes; two are needed</p>"
    times = [sample[0] for sample in history]
    jobs = _chart(
        "jobs", times, [("queued", [s[1] for s in history], "#b58900"), ("running", [s[2] for s in history], "#2aa198")]
    )
    fleet = _chart(
        "fleet",
        times,
        [("nodes", [s[3] for s in history], "#268bd2"), ("$/hour", [s[4] for s in history], "#dc322f")],
    )
    return f"<div>{jobs}{fleet}</div>"


def _chart(title: str, times: list[float], series: list[tuple[str, list[float], str]]) -> str:
    """An inline SVG of lines, each series scaled to its own peak (named in its legend)."""
    width, height, left, top = 460, 120, 4, 18
    start, span = times[0], (times[-1] - times[0]) or 1.0

    def x(t: float) -> float:
        return left + (t - start) / span * (width - 2 * left)

    lines, legend = [], []
    for i, (label, values, colour) in enumerate(series):
        peak = max(values) or 1.0
        points = []
        for t, value in zip(times, values, strict=True):
            y = top + (1 - value / peak) * (height - top - 4)
            points.append(f"{x(t):.1f},{y:.1f}")
        lines.append(f"<polyline fill='none' stroke='{colour}' stroke-width='1.5' points='{' '.join(points)}'/>")
        shown = f"{max(values):,.3f}" if label.startswith("$") else f"{max(values):,.0f}"
        legend.append(
            f"<text x='{left + 150 * i}' y='12' font-size='11' fill='{colour}'>{escape(label)} (peak {shown})</text>"
        )
    axis = (
        f"<text x='{width - left}' y='{height}' font-size='10' text-anchor='end' fill='#777'>"
        f"{escape(title)}: the last {escape(format_duration(span))}</text>"
    )
    return (
        f"<svg width='{width}' height='{height + 4}' style='margin-right:1.5em' role='img'>"
        f"{''.join(legend)}{''.join(lines)}{axis}</svg>"
    )


def _state(state: str) -> str:
    colour = STATE_COLOURS.get(state, "#222")
    return f"<span class='state' style='color:{colour}'>{escape(state)}</span>"


def _table(
    header: list[str], rows: list[list[str]], numeric: set[int] | None = None, markup: set[int] | None = None
) -> str:
    """`markup`: the columns whose cells are HTML already (made here); every other cell is escaped."""
    if not rows:
        return "<p class='dim'>none</p>"
    numeric, markup = numeric or set(), markup or set()
    head = "".join(f"<th>{escape(name)}</th>" for name in header)
    body = "".join(
        "<tr>"
        + "".join(
            f"<td{' class=n' if i in numeric else ''}>{cell if i in markup else escape(cell)}</td>"
            for i, cell in enumerate(row)
        )
        + "</tr>"
        for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _when(timestamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp))


def _document(title: str, body: str, refresh: bool) -> str:
    meta = f"<meta http-equiv='refresh' content='{REFRESH_SECONDS}'>" if refresh else ""
    return (
        f"<!doctype html><html><head><meta charset='utf-8'>{meta}<title>{escape(title)}</title>"
        f"<style>{STYLE}</style></head><body>{body}</body></html>"
    )
