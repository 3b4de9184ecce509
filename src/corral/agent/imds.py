"""EC2's instance metadata service (IMDSv2), for the one thing the agent asks it: whether the cloud
has given notice that it takes this spot instance back (`spot/instance-action`, two minutes ahead).

AWS answers 404 until it gives notice, then `{"action": "terminate" | "stop" | "hibernate",
"time": "2026-11-26T06:30:00Z"}`. IMDSv2 wants a session token (a PUT) first; a token lasts six
hours, and is fetched again when refused. Any failure to reach the service is "no notice": the
agent asks again at its next ping, and an instance off EC2 simply never hears of one.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass

import httpx

TOKEN_PATH = "/latest/api/token"
NOTICE_PATH = "/latest/meta-data/spot/instance-action"
TOKEN_TTL_SECONDS = 21600
TIMEOUT = httpx.Timeout(2.0)


@dataclass(frozen=True, slots=True)
class Notice:
    action: str  # terminate, stop or hibernate
    time: str  # when, as AWS writes it (ISO 8601, UTC)


class Imds:
    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")
        self._token: str | None = None
        self._lock = threading.Lock()

    def interruption(self) -> Notice | None:
        """The cloud's notice that it takes this instance back, or None (none given, or the service
        cannot be asked now)."""
        with self._lock, httpx.Client(base_url=self.base_url, timeout=TIMEOUT) as client:
            try:
                for fresh in (False, True):
                    if fresh or self._token is None:
                        answer = client.put(
                            TOKEN_PATH, headers={"X-aws-ec2-metadata-token-ttl-seconds": str(TOKEN_TTL_SECONDS)}
                        )
                        answer.raise_for_status()
                        self._token = answer.text.strip()
                    answer = client.get(NOTICE_PATH, headers={"X-aws-ec2-metadata-token": self._token})
                    if answer.status_code == 401 and not fresh:
                        continue  # the token expired: one more try with a new one
                    if answer.status_code != 200:
                        return None
                    return _notice(answer.text)
            except httpx.HTTPError:
                return None
        return None


def _notice(text: str) -> Notice | None:
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    action, when = data.get("action"), data.get("time")
    if not isinstance(action, str) or not isinstance(when, str):
        return None
    return Notice(action, when)
