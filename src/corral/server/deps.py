"""Request dependencies: the runtime, and the two kinds of caller (user with the API token, agent
with its node secret)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Header, HTTPException, Request

from corral.server.app import Runtime, bearer_refusal


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
    refusal = bearer_refusal(authorization, runtime.api_token)
    if refusal is not None:
        raise HTTPException(401, refusal)
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
