"""A stand-in for EC2's instance metadata service (IMDSv2) over real HTTP: AWS cannot be made to
send a spot interruption notice, so this is the boundary the agent is tested at."""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class ImdsState:
    notice: dict[str, str] | None = None  # what spot/instance-action answers once set
    tokens: set[str] = field(default_factory=set)
    token_puts: int = 0
    asked: int = 0


@contextmanager
def fake_imds() -> Iterator[tuple[str, ImdsState]]:
    state = ImdsState()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _answer(self, status: int, body: str = "") -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_PUT(self) -> None:  # noqa: N802 - http.server's name
            if self.path != "/latest/api/token" or not self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                self._answer(400)
                return
            token = secrets.token_hex(8)
            state.tokens.add(token)
            state.token_puts += 1
            self._answer(200, token)

        def do_GET(self) -> None:  # noqa: N802
            if self.headers.get("X-aws-ec2-metadata-token") not in state.tokens:
                self._answer(401)
                return
            if self.path != "/latest/meta-data/spot/instance-action":
                self._answer(404)
                return
            state.asked += 1
            if state.notice is None:
                self._answer(404)
            else:
                self._answer(200, json.dumps(state.notice))

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state
    finally:
        server.shutdown()
        server.server_close()
