"""Request dependencies: the runtime, and the kinds of caller (the operator with the API token, a
user with their own token, an agent with its node secret)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Header, HTTPException, Request

from corral.server.app import Caller, Runtime, bearer_token, caller_for


def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


def get_caller(
    request: Request,
    runtime: Annotated[Runtime, Depends(get_runtime)],
    authorization: Annotated[str | None, Header()] = None,
) -> Caller:
    known = getattr(request.state, "caller", None)  # found by GuardBodies for a request with a body
    if isinstance(known, Caller):
        return known
    caller = caller_for(authorization, runtime)
    if isinstance(caller, str):
        raise HTTPException(401, caller)
    return caller


def require_user(
    runtime: Annotated[Runtime, Depends(get_runtime)], _caller: Annotated[Caller, Depends(get_caller)]
) -> Runtime:
    return runtime


def require_admin(
    request: Request,
    runtime: Annotated[Runtime, Depends(get_runtime)],
    caller: Annotated[Caller, Depends(get_caller)],
) -> Runtime:
    """Slurm's AdminLevel: nodes, reservations, the fleet's back-offs, the notifier and the users
    are the operator's, or an admin user's."""
    if not caller.admin:
        raise HTTPException(
            403,
            f"Access/permission denied: {request.method} {request.url.path} is for an admin (the data directory's"
            f" token, or a user added with --admin); you are user {caller.name}",
        )
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
AdminRuntime = Annotated[Runtime, Depends(require_admin)]
CallerOf = Annotated[Caller, Depends(get_caller)]
AgentNode = Annotated[dict[str, Any], Depends(require_node)]
AnyRuntime = Annotated[Runtime, Depends(get_runtime)]
