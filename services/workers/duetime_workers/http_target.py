"""Execute an HTTP target once and classify what happened (``outcome.py`` has the rules).

The whole exchange runs under one total deadline (the target's timeout): httpx's own timeouts
are per phase (connect, each read), so a target that trickles one byte every few seconds would
otherwise hold a slot forever. The response body is not read; the status and ``Retry-After`` are
all the decision needs, and not buffering it keeps a hostile target from filling the worker's
memory.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import httpx

from duetime.model import HttpTarget

from .headers import InvalidHeader, http_headers
from .outcome import AttemptOutcome, final, http_outcome, retryable
from .ssrf import TargetRefused

__all__ = ["HttpExecutor"]

_ALLOWED_SCHEMES = frozenset({"http", "https"})
_DEFAULT_TIMEOUT = timedelta(seconds=30)


def _utc_now() -> datetime:
    return datetime.now(UTC)


class HttpExecutor:
    """Calls HTTP targets with duetime's headers through the guarded client."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        user_agent: str,
        now: Callable[[], datetime] = _utc_now,
    ) -> None:
        self._client = client
        self._user_agent = user_agent
        self._now = now

    def _request(
        self,
        target: HttpTarget,
        *,
        run_id: uuid.UUID,
        attempt: int,
        scheduled_for: datetime,
        timeout: float,
    ) -> httpx.Request:
        url = httpx.URL(target.url)
        if url.scheme not in _ALLOWED_SCHEMES or not url.host:
            # The URL itself stays out of the message: it may carry a token in its query.
            raise httpx.UnsupportedProtocol(
                f"only http(s) URLs with a host can be targets, not scheme {url.scheme!r}"
            )
        headers = http_headers(
            target.headers,
            run_id=run_id,
            attempt=attempt,
            scheduled_for=scheduled_for,
            user_agent=self._user_agent,
        )
        body = target.body.encode("utf-8") if target.body is not None else None
        return self._client.build_request(
            target.method.upper(), url, headers=headers, content=body, timeout=timeout
        )

    async def execute(
        self, target: HttpTarget, *, run_id: uuid.UUID, attempt: int, scheduled_for: datetime
    ) -> AttemptOutcome:
        """Send the request once; never raises for anything the target or network does."""
        timeout = target.timeout if target.timeout > timedelta(0) else _DEFAULT_TIMEOUT
        seconds = timeout.total_seconds()
        try:
            request = self._request(
                target,
                run_id=run_id,
                attempt=attempt,
                scheduled_for=scheduled_for,
                timeout=seconds,
            )
        except (InvalidHeader, httpx.InvalidURL, httpx.UnsupportedProtocol, ValueError) as exc:
            return final(f"invalid target: {exc}")
        try:
            async with asyncio.timeout(seconds):
                response = await self._client.send(request, stream=True, follow_redirects=False)
                try:
                    return http_outcome(
                        response.status_code,
                        response.reason_phrase,
                        response.headers.get("retry-after"),
                        self._now(),
                    )
                finally:
                    await response.aclose()
        except TargetRefused as exc:
            return final(str(exc))
        except (TimeoutError, httpx.TimeoutException):
            return retryable(f"timed out after {seconds:g}s")
        except (httpx.UnsupportedProtocol, httpx.LocalProtocolError) as exc:
            return final(f"invalid request: {exc}")
        except httpx.TransportError as exc:  # connect/read/write errors, remote protocol errors
            return retryable(f"{type(exc).__name__}: {exc}".rstrip(": "))
