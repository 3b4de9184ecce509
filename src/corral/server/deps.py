"""Request dependencies: the runtime, and the two kinds of caller (user with the API token, agent
with its node secret)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Header, HTTPException, Request

from corral.server.app import Runtime, bearer_refusal, bearer_token


def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


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
    secret = bearer_token(authorization)
    if secret is None:
        raise HTTPException(401, "missing bearer token")
    node = runtime.store.node_for_secret(secret)
    if node is None:
        raise HTTPException(401, "unknown node secret")
    return node


UserRuntime = Annotated[Runtime, Depends(require_user)]
AgentNode = Annotated[dict[str, Any], Depends(require_node)]
AnyRuntime = Annotated[Runtime, Depends(get_runtime)]
