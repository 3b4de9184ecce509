"""A real moto server for the ec2 driver's tests, and faults injected at boto3's HTTP boundary.

moto answers EC2's API as EC2 does, but never runs out of capacity, hits a quota or throttles. Those
faults are injected where botocore sends a request (its `before-send` event): the handler answers
chosen requests with the HTTP status and error document EC2 itself sends, and botocore parses and
retries that response as it would EC2's. Everything else goes to moto.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import boto3
from botocore.awsrequest import AWSResponse

from tests.support import wait_until

REGION = "us-east-1"
# Real EC2 messages, so that what an operator reads in corral's events is what EC2 says.
MESSAGES = {
    "InsufficientInstanceCapacity": (
        "We currently do not have sufficient {type} capacity in the Availability Zone you requested (us-east-1a)."
        " Our system will be working on provisioning additional capacity. You can currently get {type} capacity"
        " by not specifying an Availability Zone in your request or choosing us-east-1b, us-east-1c."
    ),
    "VcpuLimitExceeded": (
        "You have requested more vCPU capacity than your current vCPU limit of 32 allows for the instance bucket"
        " that the specified instance type belongs to."
    ),
    "RequestLimitExceeded": "Request limit exceeded.",
    "InvalidParameterValue": "Value (x) for parameter foo is invalid.",
    "AuthFailure.ServiceLinkedRoleCreationNotPermitted": (
        "The provided credentials do not have permission to create the service-linked role for EC2 Spot Instances."
    ),
}
# EC2's answers to a launch of an instance type it will not boot as configured (HTTP 400): a name
# it does not know, and a type whose AMI is of another architecture.
UNKNOWN_TYPE = "Invalid value '{type}' for InstanceType."
WRONG_ARCHITECTURE = (
    "The architecture 'arm64' of the specified instance type does not match the architecture 'x86_64' of the"
    " specified AMI. Specify an instance type and an AMI that have matching architectures, and try again. You can"
    " use 'describe-instance-types' or 'describe-images' to discover the architecture of the instance type or AMI."
)
# EC2 answers capacity errors as server errors (HTTP 500), throttling with 503, refused permissions with
# 403, the rest with 400.
STATUS = {
    "InsufficientInstanceCapacity": 500,
    "RequestLimitExceeded": 503,
    "AuthFailure.ServiceLinkedRoleCreationNotPermitted": 403,
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_moto(log: Path) -> Iterator[str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )

    def up() -> bool:
        assert proc.poll() is None, f"moto server exited: {log.read_text()[-2000:]}"
        try:
            urllib.request.urlopen(url + "/moto-api/", timeout=1).close()
        except (urllib.error.URLError, OSError):
            return False
        return True

    try:
        wait_until(up, 60, "the moto server", interval=0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def moto_client(url: str) -> Any:
    return boto3.client("ec2", region_name=REGION, endpoint_url=url)


@dataclass
class Injected:
    """The requests a fault answered (each a dict of the query's parameters)."""

    calls: list[dict[str, str]] = field(default_factory=list)
    seen: list[dict[str, str]] = field(default_factory=list)  # every request of the operation


class _Body:
    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self.body


def error_response(url: str, code: str, message: str, status: int) -> AWSResponse:
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors>"
        "<RequestID>0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0</RequestID></Response>"
    ).encode()
    return AWSResponse(url, status, {"Content-Type": "text/xml;charset=UTF-8"}, _Body(body))


def inject(
    client: Any,
    operation: str,
    code: str,
    when: Callable[[dict[str, str]], bool] = lambda params: True,
    times: int | None = None,
    message: str | None = None,
) -> Injected:
    """Answer `operation` requests for which `when(params)` holds with EC2's `code` error (at most
    `times` of them), saying `message` (default: EC2's usual words for the code); the others go on
    to moto."""
    record = Injected()

    def before_send(request: Any, **_: Any) -> AWSResponse | None:
        body = request.body
        text = body.decode() if isinstance(body, bytes) else str(body or "")
        params = {key: values[0] for key, values in parse_qs(text).items()}
        record.seen.append(params)
        if not when(params) or (times is not None and len(record.calls) >= times):
            return None
        record.calls.append(params)
        said = (message or MESSAGES.get(code, code)).format(type=params.get("InstanceType", ""))
        return error_response(request.url, code, said, STATUS.get(code, 400))

    client.meta.events.register(f"before-send.ec2.{operation}", before_send)
    return record
