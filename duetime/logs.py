"""Structured log lines for the whole project: a stable event name, then context fields.

``event(log, "run.released", run_id=..., attempt=2)`` logs event ``run.released`` with its fields
(None values are left out). Operators grep and alert on the event names (``run.dead``,
``lease.expired``), so they are part of the interface and never change wording
(docs/metrics.md, "Logs", lists the main ones). Two formats, chosen by ``DUETIME_LOG_FORMAT``:

- ``text`` (default, for a terminal): ``2026-12-03T18:00:00.123Z INFO planner run.released
  run_id=... attempt=2``; a value with spaces, quotes, ``=`` or control characters is
  JSON-quoted, so a line splits unambiguously.
- ``json`` (for a log pipeline): one JSON object per line, ``{"ts": ..., "level": ...,
  "service": ..., "logger": ..., "event": ..., <fields>}``. A field whose name is one of those
  keys gets a trailing ``_``. Lines of third-party libraries have ``"event": "log"`` and their
  ``"message"``; an exception's traceback is in ``"exception"``.

The fields are also attached to the record (``record.event``, ``record.fields``) for handlers and
tests. Services call ``configure_logging(service)`` once at start.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import IO, Any

__all__ = ["LOG_FORMAT_ENV", "JsonFormatter", "configure_logging", "event", "format_value"]

LOG_FORMAT_ENV = "DUETIME_LOG_FORMAT"
_FORMATS = ("text", "json")
_RESERVED = frozenset({"ts", "level", "service", "logger", "event", "message", "exception"})
# Third-party clients are chatty at INFO; keep their warnings. httpx logs every request with its
# full URL at INFO, and job URLs may carry tokens in the query string.
_NOISY = ("aiokafka", "faust", "mode", "httpx", "httpcore", "sqlalchemy")


def format_value(value: Any) -> str:
    """A field's value in a text line: bare, or JSON-quoted when it would not split cleanly."""
    text = str(value)
    if not text or any(c in text for c in ' "=\n\r\t') or not text.isprintable():
        return json.dumps(text, ensure_ascii=False)
    return text


def event(logger: logging.Logger, name: str, level: int = logging.INFO, **fields: Any) -> None:
    """Log event ``name`` with its context fields (None values are left out)."""
    if not logger.isEnabledFor(level):
        return
    shown = {k: v for k, v in fields.items() if v is not None}
    line = " ".join([name, *(f"{k}={format_value(v)}" for k, v in shown.items())])
    logger.log(level, line, extra={"event": name, "fields": shown})


def _json_value(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)  # UUIDs, datetimes, exceptions, paths


class JsonFormatter(logging.Formatter):
    """One JSON object per record (see the module docstring for the keys)."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        moment = time.gmtime(record.created)
        doc: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", moment) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "service": self.service,
            "logger": record.name,
        }
        name = getattr(record, "event", None)
        fields = getattr(record, "fields", None)
        if isinstance(name, str) and isinstance(fields, dict):
            doc["event"] = name
            for key, value in fields.items():
                doc[f"{key}_" if key in _RESERVED else key] = _json_value(value)
        else:
            doc["event"] = "log"
            doc["message"] = record.getMessage()
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, ensure_ascii=False)


def _text_formatter(service: str) -> logging.Formatter:
    formatter = logging.Formatter(
        f"%(asctime)s.%(msecs)03dZ %(levelname)s {service} %(message)s", "%Y-%m-%dT%H:%M:%S"
    )
    formatter.converter = time.gmtime
    return formatter


def configure_logging(
    service: str,
    level: str | None = None,
    log_format: str | None = None,
    stream: IO[str] | None = None,
) -> None:
    """Send every log record to stderr in the chosen format, one line each.

    Args:
        service: the name every line carries (``planner``, ``worker``, ...).
        level: default ``DUETIME_LOG_LEVEL`` or INFO.
        log_format: ``text`` or ``json``; default ``DUETIME_LOG_FORMAT`` or ``text``. An
            unknown one falls back to text with a ``log.format_unknown`` warning rather than
            stop a service over its logs.
        stream: where the lines go (default stderr).
    """
    chosen = (level or os.environ.get("DUETIME_LOG_LEVEL", "INFO")).upper()
    wanted = (log_format or os.environ.get(LOG_FORMAT_ENV, "") or "text").strip().lower()
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter(service) if wanted == "json" else _text_formatter(service))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(chosen)
    for noisy in _NOISY:
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
    if wanted not in _FORMATS:
        event(
            logging.getLogger("duetime"),
            "log.format_unknown",
            logging.WARNING,
            format=wanted,
            known=",".join(_FORMATS),
        )
