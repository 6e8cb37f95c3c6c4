"""The worker's log lines: ``duetime.logs`` bound to the ``duetime.worker`` logger.

``event("run.claimed", run_id=...)`` is ``duetime.logs.event(logger, "run.claimed", ...)``: the
same stable event names, fields and formats (text or JSON lines, ``DUETIME_LOG_FORMAT``) as every
other service, without passing the logger at each of the worker's many call sites.
"""

from __future__ import annotations

import logging
from typing import IO, Any

from duetime import logs

__all__ = ["configure_logging", "event", "logger"]

logger = logging.getLogger("duetime.worker")


def event(name: str, level: int = logging.INFO, /, **fields: Any) -> None:
    """Log event ``name`` with its context fields (None values are left out)."""
    logs.event(logger, name, level, **fields)


def configure_logging(level: str = "INFO", stream: IO[str] | None = None) -> None:
    """Send logs to stderr, one line each, in the project's format (``duetime.logs``)."""
    logs.configure_logging("worker", level, stream=stream)
