"""`corral submit` whose answer is lost: the connection drops after the server queued the jobs, or
the server answers 503 (its store unreachable). The CLI sends the same submission again, with the
same key, and the jobs are queued once. Through a real TCP proxy between the real `corral` command
and a served app, which loses the first answer."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.server.cli import corral
from tests.support import http_proxy, served_app

UNAVAILABLE = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: 69\r\n"
    b"connection: close\r\n\r\n"
    b'{"detail": "the store is unreachable (test): try again shortly"}     '
)


@contextmanager
def losing_proxy(backend: str, first: str) -> Iterator[str]:
    """A proxy to `backend` whose first request is answered badly: 'drop' forwards it and closes
    the connection without the answer; '503' answers 503 without forwarding it."""
    served = 0

    def answer(asked: bytes, forward: Callable[[bytes], bytes]) -> bytes | None:
        nonlocal served
        served += 1
        if served == 1 and first == "503":
            return UNAVAILABLE
        answered = forward(asked)
        return None if served == 1 and first == "drop" else answered  # drop: queued, the client never hears so

    with http_proxy(backend, answer) as address:
        yield address


def test_a_submission_whose_answer_was_lost_is_sent_again_and_queued_once(tmp_path: Path) -> None:
    with served_app(tmp_path) as (url, store), losing_proxy(url, "drop") as lossy:
        done = corral(lossy, "submit", "--array", "0-1", "--", "true")
        ids = [int(i) for i in done.stdout.split()]
        assert [row["id"] for row in store.list_job_rows()] == ids  # the two tasks, once
        assert "was lost" in done.stderr and "sending it again in" in done.stderr


def test_a_submission_answered_503_is_sent_again_until_the_store_is_back(tmp_path: Path) -> None:
    with served_app(tmp_path) as (url, store), losing_proxy(url, "503") as lossy:
        done = corral(lossy, "submit", "--", "true")
        assert [row["id"] for row in store.list_job_rows()] == [int(done.stdout)]
        assert "corral answered 503: the store is unreachable (test): try again shortly: sending it again" in (
            done.stderr
        )
