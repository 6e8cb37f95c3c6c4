"""The API's access log without secrets: a sign-in link's code is logged as ``<redacted>``.

uvicorn's access log line holds the method, the path with its query string and the status, never
a header, so a bearer token cannot reach it; the one secret that travels in a path is the code of
``duetime up``'s one-time sign-in link (docs/dashboard.md). A filter on the ``uvicorn.access``
logger replaces the code before any handler formats the record. uvicorn passes the path as the
third argument of its record (``'%s - "%s %s HTTP/%s" %d'``); a record of another shape is left
alone, and its message is redacted as a whole instead.
"""

from __future__ import annotations

import logging
import re

__all__ = ["REDACTED_PATH", "RedactSignInCodes", "install_access_log_redaction", "redact_path"]

ACCESS_LOGGER = "uvicorn.access"
REDACTED_PATH = "/ui/sign-in/<redacted>"
_SIGN_IN = re.compile(r"/ui/sign-in/[^\s\"?]*(\?[^\s\"]*)?")


def redact_path(text: str) -> str:
    """``text`` with every sign-in link's code (and query string) replaced."""
    return _SIGN_IN.sub(REDACTED_PATH, text)


class RedactSignInCodes(logging.Filter):
    """Rewrites an access log record so that no sign-in code is in its arguments or message."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and record.args:
            record.args = tuple(
                redact_path(arg) if isinstance(arg, str) else arg for arg in record.args
            )
        if isinstance(record.msg, str):
            record.msg = redact_path(record.msg)
        return True


def install_access_log_redaction() -> None:
    """Put the filter on uvicorn's access logger (once, however often this is called)."""
    logger = logging.getLogger(ACCESS_LOGGER)
    if not any(isinstance(f, RedactSignInCodes) for f in logger.filters):
        logger.addFilter(RedactSignInCodes())
