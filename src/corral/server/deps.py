"""Request dependencies: the runtime, and the two kinds of caller (user with the API token, agent
with its node secret)."""

from __future__ import annotations

import hmac
from typing import Annotated, Any

from fastapi import Depends, Header, HTTPException, Request

from corral.server.app import Runtime


def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


def _bearer(authorization: str | None) -> str:
    if not authorization or not authorization.lower().startswith("bearer "):
        raise HTTPException(401, "missing bearer token")
    return authorization.split(" ", 1)[1].strip()


def require_user(
    runtime: Annotated[Runtime, Depends(get_runtime)], authorization: Annotated[str | None, Header()] = None
) -> Runtime:
    # As bytes: compare_digest raises TypeError (a 500) on a str that is not ASCII, and a header may be any latin-1.
    if not hmac.compare_digest(_bearer(authorization).encode(), runtime.api_token.encode()):
        raise HTTPException(401, "wrong API token (see CORRAL_HOME/token)")
    return runtime


def require_node(
    runtime: Annotated[Runtime, Depends(get_runtime)], authorization: Annotated[str | None, Header()] = None
) -> dict[str, Any]:
    node = runtime.store.node_for_secret(_bearer(authorization))
    if node is None:
        raise HTTPException(401, "unknown node secret")
    return node


UserRuntime = Annotated[Runtime, Depends(require_user)]
AgentNode = Annotated[dict[str, Any], Depends(require_node)]
AnyRuntime = Annotated[Runtime, Depends(get_runtime)]
