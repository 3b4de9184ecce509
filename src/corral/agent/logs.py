"""Structured logs: one JSON object per line on stderr, so that an operator can grep or jq them."""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

LOG = logging.getLogger("corral.agent")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            data.update(fields)
        if record.exc_info:
            data["exc"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)


def setup(level: str = "info") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # httpx logs every request at INFO: a ping every two seconds would drown the agent's own events.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpcore").setLevel(logging.WARNING)


def event(level: int, msg: str, **fields: Any) -> None:
    LOG.log(level, msg, extra={"fields": fields})


def info(msg: str, **fields: Any) -> None:
    event(logging.INFO, msg, **fields)


def warning(msg: str, **fields: Any) -> None:
    event(logging.WARNING, msg, **fields)


def error(msg: str, **fields: Any) -> None:
    event(logging.ERROR, msg, **fields)
