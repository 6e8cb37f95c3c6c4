"""Execute an HTTP target once and classify what happened (``outcome.py`` has the rules).

The whole exchange runs under one total deadline (the target's timeout): per-phase timeouts
(connect, each read) would let a target that trickles one byte every few seconds hold a slot
forever. The response body is not read; the status and ``Retry-After`` are all the decision
needs, and not buffering it keeps a hostile target from filling the worker's memory.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import aiohttp
from yarl import URL

from duetime.egress.resolver import refused
from duetime.egress.ssrf import TargetRefused
from duetime.model import HttpTarget

from .headers import InvalidHeader, http_headers
from .outcome import AttemptOutcome, final, http_outcome, retryable
from .transport import HttpClient

__all__ = ["HttpExecutor"]

_ALLOWED_SCHEMES = frozenset({"http", "https"})
_DEFAULT_TIMEOUT = timedelta(seconds=30)


def _utc_now() -> datetime:
    return datetime.now(UTC)


class _InvalidTarget(ValueError):
    pass


class HttpExecutor:
    """Calls HTTP targets with duetime's headers through the guarded client."""

    def __init__(
        self,
        client: HttpClient,
        user_agent: str,
        now: Callable[[], datetime] = _utc_now,
    ) -> None:
        self._client = client
        self._user_agent = user_agent
        self._now = now

    def _url(self, target: HttpTarget) -> URL:
        try:
            url = URL(target.url)
        except (ValueError, TypeError) as exc:
            raise _InvalidTarget(f"invalid target: {exc}") from exc
        if url.scheme not in _ALLOWED_SCHEMES or not url.host:
            # The URL itself stays out of the message: it may carry a token in its query.
            raise _InvalidTarget(
                f"invalid target: only http(s) URLs with a host can be targets, "
                f"not scheme {url.scheme!r}"
            )
        return url

    async def execute(
        self,
        target: HttpTarget,
        *,
        run_id: uuid.UUID,
        attempt: int,
        fencing_token: int,
        scheduled_for: datetime,
    ) -> AttemptOutcome:
        """Send the request once; never raises for anything the target or network does."""
        timeout = target.timeout if target.timeout > timedelta(0) else _DEFAULT_TIMEOUT
        seconds = timeout.total_seconds()
        try:
            url = self._url(target)
            headers = http_headers(
                target.headers,
                run_id=run_id,
                attempt=attempt,
                fencing_token=fencing_token,
                scheduled_for=scheduled_for,
                user_agent=self._user_agent,
            )
            self._client.guard.check_literal(url.raw_host or "")
        except _InvalidTarget as exc:
            return final(str(exc))
        except InvalidHeader as exc:
            return final(f"invalid target: {exc}")
        except TargetRefused as exc:
            return final(str(exc))
        body = target.body.encode("utf-8") if target.body is not None else None
        try:
            async with (
                asyncio.timeout(seconds),
                self._client.session.request(
                    target.method.upper(),
                    url,
                    headers=headers,
                    data=body,
                    allow_redirects=False,
                ) as response,
            ):
                return http_outcome(
                    response.status,
                    response.reason or "",
                    response.headers.get("Retry-After"),
                    self._now(),
                )
        except TargetRefused as exc:
            return final(str(exc))
        except TimeoutError:
            return retryable(f"timed out after {seconds:g}s")
        except aiohttp.InvalidURL as exc:
            return final(f"invalid request: {exc}")
        except (aiohttp.ClientError, OSError) as exc:
            # connect/read/write errors, TLS failures, remote protocol errors
            why = refused(exc)
            if why is not None:
                return final(str(why))
            return retryable(f"{type(exc).__name__}: {exc}".rstrip(": "))
        except ValueError as exc:  # aiohttp refuses a header or method it cannot send
            return final(f"invalid request: {exc}")
