"""One log line per event: a stable event name, then ``key=value`` context fields.

Operators grep and alert on the event names (``run.claimed``, ``lease.lost``), so they are part of
the interface and never change wording. Fields with spaces or quotes are JSON-quoted so a line
splits unambiguously. The fields are also attached to the record (``extra``) for handlers that
emit structured output.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

__all__ = ["configure_logging", "event", "logger"]

logger = logging.getLogger("duetime.worker")


def _format(value: Any) -> str:
    text = str(value)
    if not text or any(c in text for c in ' "=\n\r\t'):
        return json.dumps(text, ensure_ascii=False)
    return text


def event(name: str, level: int = logging.INFO, /, **fields: Any) -> None:
    """Log event ``name`` with its context fields (None values are left out)."""
    if not logger.isEnabledFor(level):
        return
    shown = {k: v for k, v in fields.items() if v is not None}
    line = " ".join([name, *(f"{k}={_format(v)}" for k, v in shown.items())])
    logger.log(level, line, extra={"event": name, "fields": shown})


def configure_logging(level: str = "INFO") -> None:
    """Send logs to stderr, one line each, with a UTC timestamp."""
    handler = logging.StreamHandler(sys.stderr)
    formatter = logging.Formatter(
        "%(asctime)s.%(msecs)03dZ %(levelname)s %(name)s %(message)s", "%Y-%m-%dT%H:%M:%S"
    )
    formatter.converter = time.gmtime
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # httpx logs every request with its full URL at INFO; job URLs may carry tokens in the
    # query string, and run.* events already say what happened.
    for noisy in ("httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
