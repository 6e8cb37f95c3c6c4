"""Structured log lines: a stable event name first, then ``key=value`` context fields.

``event(log, "run.released", run_id=..., attempt=2)`` writes ``run.released run_id=... attempt=2``.
Services call ``configure_logging(service)`` once; every line carries the service name.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

__all__ = ["configure_logging", "event"]


def _format_value(value: Any) -> str:
    text = str(value)
    if not text or any(ch.isspace() for ch in text) or "=" in text or '"' in text:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return text


def event(logger: logging.Logger, name: str, level: int = logging.INFO, **fields: Any) -> None:
    if logger.isEnabledFor(level):
        rendered = " ".join(f"{k}={_format_value(v)}" for k, v in fields.items() if v is not None)
        logger.log(level, "%s %s" % (name, rendered) if rendered else name)  # noqa: UP031


def configure_logging(service: str, level: str | None = None) -> None:
    chosen = (level or os.environ.get("DUETIME_LOG_LEVEL", "INFO")).upper()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter(
            f"%(asctime)s.%(msecs)03d %(levelname)s {service} %(message)s", "%Y-%m-%dT%H:%M:%S"
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(chosen)
    # Third-party clients are chatty at INFO; keep their warnings.
    for noisy in ("aiokafka", "faust", "mode", "httpx", "httpcore", "sqlalchemy"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
