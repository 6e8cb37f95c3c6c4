"""Execute an HTTP target once and classify what happened (``outcome.py`` has the rules).

Secret header values (``SecretRef``) are resolved here, at call time, from the worker's own
secrets (``secret_store.py``); a secret the worker cannot produce fails the attempt as retryable
(another worker, or this one once the operator adds it, may have it), and whatever the attempt
reports afterwards has the values used replaced by ``[secret]``.

The whole exchange runs under one total deadline (the target's timeout): per-phase timeouts
(connect, each read) would let a target that trickles one byte every few seconds hold a slot
forever. The response body is not read; the status and ``Retry-After`` are all the decision
needs, and not buffering it keeps a hostile target from filling the worker's memory.
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from yarl import URL

from duetime.egress.ssrf import TargetRefused
from duetime.model import HttpTarget

from .headers import InvalidHeader, http_headers
from .http1 import ResponseError
from .outcome import AttemptOutcome, final, http_outcome, retryable
from .secret_store import SecretStore, SecretUnavailable, redact
from .transport import HttpClient

__all__ = ["HttpExecutor"]

_ALLOWED_SCHEMES = frozenset({"http", "https"})
_DEFAULT_TIMEOUT = timedelta(seconds=30)


def _utc_now() -> datetime:
    return datetime.now(UTC)


class _InvalidTarget(ValueError):
    pass


# Remembered per URL: every call parses its target's, and a job's runs all call the same one.
@functools.lru_cache(maxsize=1024)
def _target_url(text: str) -> URL:
    try:
        url = URL(text)
    except (ValueError, TypeError) as exc:
        raise _InvalidTarget(f"invalid target: {exc}") from exc
    if url.scheme not in _ALLOWED_SCHEMES or not url.host:
        # The URL itself stays out of the message: it may carry a token in its query.
        raise _InvalidTarget(
            f"invalid target: only http(s) URLs with a host can be targets, "
            f"not scheme {url.scheme!r}"
        )
    return url


class HttpExecutor:
    """Calls HTTP targets with duetime's headers through the guarded client."""

    def __init__(
        self,
        client: HttpClient,
        user_agent: str,
        now: Callable[[], datetime] = _utc_now,
        secrets: SecretStore | None = None,
    ) -> None:
        self._client = client
        self._user_agent = user_agent
        self._now = now
        # Without a store every reference fails the attempt as "not found".
        if secrets is None:
            secrets = SecretStore(directory=None, environ={}, worker_id="-")
        self._secrets = secrets

    def _url(self, target: HttpTarget) -> URL:
        return _target_url(target.url)

    async def prewarm(self, target: HttpTarget, count: int) -> int:
        """Open up to ``count`` connections to the target's host ahead of its calls."""
        try:
            url = self._url(target)
        except _InvalidTarget:
            return 0  # its call fails, and says why
        return await self._client.prewarm(url, count)

    async def execute(
        self,
        target: HttpTarget,
        *,
        run_id: uuid.UUID,
        attempt: int,
        fencing_token: int,
        scheduled_for: datetime,
        callback_token: uuid.UUID | None = None,
        resume: str | None = None,
    ) -> AttemptOutcome:
        """Send the request once; never raises for anything the target or network does.

        ``callback_token`` and ``resume`` are the async-target headers (``headers.py``); the
        token is never part of what this returns, so it cannot reach a log or a run's error.
        """
        try:
            url = self._url(target)
            job_headers, secrets = self._secrets.resolve(target.headers)
            headers = http_headers(
                job_headers,
                run_id=run_id,
                attempt=attempt,
                fencing_token=fencing_token,
                scheduled_for=scheduled_for,
                user_agent=self._user_agent,
                callback_token=callback_token,
                resume=resume,
            )
        except _InvalidTarget as exc:
            return final(str(exc))
        except InvalidHeader as exc:
            return final(f"invalid target: {exc}")
        except TargetRefused as exc:
            return final(str(exc))
        except SecretUnavailable as exc:
            return retryable(str(exc))
        if not secrets:
            return await self._send(target, url, headers)
        try:
            outcome = await self._send(target, url, headers)
        except Exception as exc:
            # An unexpected error is logged by the attempt runner with its repr, which may quote
            # a header value: pass on its type and its redacted text only.
            raise RuntimeError(redact(repr(exc), secrets)) from None
        if outcome.error is None:
            return outcome
        return replace(outcome, error=redact(outcome.error, secrets))

    async def _send(
        self, target: HttpTarget, url: URL, headers: Sequence[tuple[str, str]]
    ) -> AttemptOutcome:
        timeout = target.timeout if target.timeout > timedelta(0) else _DEFAULT_TIMEOUT
        seconds = timeout.total_seconds()
        body = target.body.encode("utf-8") if target.body is not None else None
        try:
            async with asyncio.timeout(seconds):
                response = await self._client.request(target.method.upper(), url, headers, body)
        except TargetRefused as exc:
            return final(str(exc))
        except TimeoutError:
            return retryable(f"timed out after {seconds:g}s")
        except ResponseError as exc:
            return retryable(f"invalid response: {exc}")
        except OSError as exc:
            # connect/read/write errors, TLS failures, a connection closed before the answer
            return retryable(f"{type(exc).__name__}: {exc}".rstrip(": "))
        except ValueError as exc:  # a method or URL that cannot be sent
            return final(f"invalid request: {exc}")
        return http_outcome(response.status, response.reason, response.retry_after, self._now())
