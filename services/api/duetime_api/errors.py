"""How errors become HTTP answers: one JSON shape, the field named, never a traceback.

``{"error": CODE, "field": FIELD|null, "message": TEXT}`` with

- 400 ``invalid_input``: a request that duetime refuses (the job-file validation's field and
  message, or a parameter's name), never a 500;
- 401 ``unauthenticated``: no token, or one that is unknown, malformed or revoked (one answer for
  all, so a probe learns nothing about which);
- 403 ``forbidden``: an operator endpoint asked for with a tenant's token;
- 404 ``not_found``: no such job or run *for this token*: another tenant's is not found either;
- 409 ``conflict``: the request contradicts the stored state (an id taken, a run not dead,
  a stale version, a tenant's job quota);
- 503 ``unavailable``: PostgreSQL or the broker failed; try again.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DataError, IntegrityError
from starlette.exceptions import HTTPException as StarletteHTTPException

from duetime.errors import DuetimeError, InvalidInput, NotFound, QuotaExceeded, StoreError
from duetime.logs import event

from .access_log import redact_path

__all__ = ["ERROR_RESPONSES", "ApiError", "install_error_handlers"]

log = logging.getLogger("duetime.api")

_CODES = {
    400: "invalid_input",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    503: "unavailable",
}

_ERROR_SCHEMA = {
    "type": "object",
    "required": ["error", "message"],
    "properties": {
        "error": {"type": "string"},
        "field": {"type": ["string", "null"]},
        "message": {"type": "string"},
    },
}
#: The error answers every endpoint may give, for the OpenAPI document.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {
        "description": code.replace("_", " "),
        "content": {"application/json": {"schema": _ERROR_SCHEMA}},
    }
    for status, code in _CODES.items()
    if status != 405
}


class ApiError(Exception):
    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field


def _answer(status: int, message: str, field: str | None = None, **headers: str) -> JSONResponse:
    body = {"error": _CODES.get(status, "error"), "field": field, "message": message}
    return JSONResponse(body, status_code=status, headers=headers or None)


def _location(loc: Any) -> str:
    """A pydantic error location as a field name: ``("query", "limit")`` -> ``limit``."""
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    return ".".join(parts) or "body"


def _first_line(exc: BaseException) -> str:
    """The driver's message without the statement and parameters SQLAlchemy appends."""
    original = getattr(exc, "orig", None) or exc
    return str(original).splitlines()[0][:300] if str(original) else type(original).__name__


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_request: Request, exc: ApiError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else {}
        return _answer(exc.status, exc.message, exc.field, **headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        field = _location(first.get("loc", ()))
        return _answer(400, f"{field}: {first.get('msg', 'invalid')}", field)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # Starlette's own 400 is a body it could not parse (too deeply nested JSON, say).
        return _answer(exc.status_code, str(exc.detail), "body" if exc.status_code == 400 else None)

    @app.exception_handler(QuotaExceeded)
    async def _quota(_request: Request, exc: QuotaExceeded) -> JSONResponse:
        message = f"tenant {exc.tenant} may have at most {exc.max_jobs} jobs; it has {exc.jobs}"
        return _answer(409, f"job.tenant: {message}", "job.tenant")

    @app.exception_handler(InvalidInput)
    async def _invalid(_request: Request, exc: InvalidInput) -> JSONResponse:
        return _answer(400, str(exc), exc.field or None)

    @app.exception_handler(NotFound)
    async def _not_found(_request: Request, exc: NotFound) -> JSONResponse:
        return _answer(404, str(exc))

    @app.exception_handler(DuetimeError)
    async def _failed(request: Request, exc: DuetimeError) -> JSONResponse:
        if isinstance(exc, StoreError) and isinstance(exc.__cause__, (DataError, IntegrityError)):
            # PostgreSQL refused the request's data itself (a check, a type): the request is
            # at fault, not the database, and sending it again would fail the same way.
            event(
                log,
                "api.data_refused",
                logging.WARNING,
                path=redact_path(request.url.path),
                error=exc,
            )
            return _answer(400, f"the database refused the data: {_first_line(exc.__cause__)}")
        # The database or the broker failed: the request was fine, the answer is "try again".
        event(
            log, "api.request_failed", logging.ERROR, path=redact_path(request.url.path), error=exc
        )
        return _answer(503, f"{type(exc).__name__}: try again later")
