"""The worker's HTTP/1.1 client: pooled keep-alive connections to SSRF-approved addresses only.

A worker at a spike is bound by the CPU it spends per target call. A general-purpose client
(aiohttp) cost ~130 µs of CPU per request on this path; this one costs ~50 µs, because a target
call needs much less than a general client does: send one request, read the status line and the
headers, and never hand the body to anyone.

What it does:

- **Connections** go only to the addresses ``GuardedResolver.addresses`` approved for the host
  (resolved once per new connection, every address checked, then connected to exactly those, in
  order), so a DNS answer cannot change between the check and the connect. TLS uses the URL's
  host name for SNI and the certificate check.
- **Keep-alive**: a connection whose response was framed by ``Content-Length`` (or has no body:
  ``HEAD``, 204, 304) goes back to an idle pool per (scheme, host, port) once that body has been
  read and dropped. A response with ``Transfer-Encoding``, without a length, with a body over
  ``_DISCARD_LIMIT`` or with ``Connection: close`` closes its connection instead: the status is
  known by then, and closing is cheaper than parsing a body nobody reads.
- **A request fails on a reused connection** that the server closed before answering a single
  byte (it closed an idle connection as we wrote): it is sent again once on a new connection.
  Every request duetime sends carries an ``Idempotency-Key``, the condition under which clients
  such as Go's ``net/http`` replay a request on that error.
- **Warm-up** (``prewarm``): connections opened ahead of requests known to come, such as the
  runs claimed ahead of a due instant (docs/claim-ahead.md), go to the idle pool, so the first
  requests at the due instant do not each wait for a handshake. They count towards the idle
  cap and its timeout like any idle connection.
- **Bounded**: at most ``max_connections`` requests in flight, and at most as many idle
  connections, each closed after ``idle_timeout``. A response head over ``_MAX_HEAD`` bytes is a
  protocol error. The caller bounds the whole exchange with its own timeout; a cancelled exchange
  aborts its connection.
- Interim responses (1xx other than 101) are skipped; a ``101`` or a malformed head is a
  ``ResponseError``.
"""

from __future__ import annotations

import asyncio
import base64
import re
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass

from yarl import URL

from duetime.egress.resolver import GuardedResolver

__all__ = ["Http1Client", "Response", "ResponseError", "ServerDisconnected"]

_MAX_HEAD = 64 * 1024
_DISCARD_LIMIT = 1024 * 1024
_BODY_DEADLINE = 10.0  # a body still arriving after this is not worth its connection
_DEFAULT_PORTS = {"http": 80, "https": 443}
_NO_BODY_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
_METHOD = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_STATUS_LINE = re.compile(r"^HTTP/1\.([01]) ([0-9]{3})(?: (.*))?$")


@dataclass(frozen=True, slots=True)
class Response:
    """What a target call needs of a response: the status, its reason, ``Retry-After``."""

    status: int
    reason: str
    retry_after: str | None


class ResponseError(Exception):
    """The target's answer is not HTTP/1.x this client can read."""


class ServerDisconnected(ConnectionError):
    """The connection closed before a whole response head arrived."""


class _Connection(asyncio.Protocol):
    """One connection; one exchange at a time. Parses response heads, drops bodies."""

    def __init__(self, key: tuple[str, str, int], pool: Http1Client) -> None:
        self.key = key
        self._pool = pool
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._waiter: asyncio.Future[Response] | None = None
        self._head_only = False
        self._remaining = 0  # body bytes still to drop before the connection is reusable
        self._reusable = False
        self._late: asyncio.TimerHandle | None = None
        self.received = False  # any byte of the current exchange's answer
        self.closed = False
        self.idle_since = 0.0

    # asyncio.Protocol ---------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._pool.forget(self)
        if self._waiter is None:
            return
        if self.received:
            self._fail(exc or ServerDisconnected("the server closed the connection mid-answer"))
            return
        closed = ServerDisconnected("the server closed the connection before answering")
        closed.__cause__ = exc
        self._fail(closed)

    def eof_received(self) -> bool | None:
        return None  # close our side too

    def data_received(self, data: bytes) -> None:
        if self._waiter is None:
            if self._remaining:
                self._drop_body(data)
            else:
                self.abort()  # unsolicited bytes: the framing cannot be trusted any more
            return
        self.received = True
        self._buffer += data
        try:
            self._parse()
        except ResponseError as exc:
            self._fail(exc)
            self.abort()

    # the exchange -------------------------------------------------------------------------
    def exchange(self, request: bytes, *, head_only: bool) -> asyncio.Future[Response]:
        assert self._transport is not None and self._waiter is None
        loop = asyncio.get_running_loop()
        self._waiter = loop.create_future()
        self._head_only = head_only
        self.received = False
        self._buffer.clear()
        self._transport.write(request)
        return self._waiter

    def abort(self) -> None:
        self.closed = True
        if self._late is not None:
            self._late.cancel()
            self._late = None
        if self._transport is not None:
            self._transport.abort()

    def close(self) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.close()

    def _fail(self, exc: BaseException) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def _parse(self) -> None:
        while self._waiter is not None:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buffer) > _MAX_HEAD:
                    raise ResponseError(f"response head over {_MAX_HEAD} bytes")
                return
            head = bytes(self._buffer[:end]).decode("latin-1")
            del self._buffer[: end + 4]
            self._answer(head)

    def _answer(self, head: str) -> None:
        lines = head.split("\r\n")
        matched = _STATUS_LINE.match(lines[0])
        if matched is None:
            raise ResponseError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
        minor, status, reason = int(matched[1]), int(matched[2]), matched[3] or ""
        if status == 101:
            raise ResponseError("the target switched protocols (101)")
        if status < 200:
            return  # an interim answer (100 Continue, 103 Early Hints): the real one follows
        length: int | None = None
        chunked = False
        connection = ""
        retry_after: str | None = None
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep:
                continue  # obsolete line folding: a continuation of a header we do not read
            name = name.strip().lower()
            value = value.strip()
            if name == "content-length":
                if not value.isdigit() or (length is not None and int(value) != length):
                    raise ResponseError(f"invalid Content-Length {value[:40]!r}")
                length = int(value)
            elif name == "transfer-encoding":
                chunked = True
            elif name == "connection":
                connection = value.lower()
            elif name == "retry-after":
                retry_after = value
        keep_alive = "keep-alive" in connection if minor == 0 else "close" not in connection
        if self._head_only or status in (204, 304):
            body = 0
        elif chunked or length is None or length > _DISCARD_LIMIT:
            body = -1  # framed some other way, or too long to bother: close after the head
        else:
            body = length
        self._reusable = keep_alive and body >= 0
        self._remaining = max(body, 0)
        leftover = bytes(self._buffer)
        self._buffer.clear()
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(Response(status, reason, retry_after))
        if not self._reusable:
            self.close()
        elif leftover:
            self._drop_body(leftover)
        elif not self._remaining:
            self._pool.release(self)
        if self._remaining and not self.closed:
            loop = asyncio.get_running_loop()
            self._late = loop.call_later(_BODY_DEADLINE, self.abort)

    def _drop_body(self, data: bytes) -> None:
        if len(data) > self._remaining:
            self.abort()  # more than the body: the framing cannot be trusted
            return
        self._remaining -= len(data)
        if not self._remaining:
            if self._late is not None:
                self._late.cancel()
                self._late = None
            self._pool.release(self)


class Http1Client:
    """Pooled HTTP/1.1 requests to SSRF-approved addresses (see the module docstring).

    Create and use it on one event loop.
    """

    def __init__(
        self,
        guard: GuardedResolver,
        *,
        max_connections: int,
        ssl_context: ssl.SSLContext,
        idle_timeout: float = 15.0,
    ) -> None:
        self.guard = guard
        self._ssl = ssl_context
        self._max = max_connections
        self._in_flight = asyncio.Semaphore(max_connections)
        self._idle_timeout = idle_timeout
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}
        self._idle_count = 0
        self._opening: dict[tuple[str, str, int], int] = {}  # warm-ups under way, per key
        self._closed = False

    async def request(
        self,
        method: str,
        url: URL,
        headers: Sequence[tuple[str, str]],
        body: bytes | None,
    ) -> Response:
        """Send one request and return the answer's head.

        Raises:
            ValueError: the method or URL cannot be sent.
            TargetRefused: the SSRF policy refused the host's addresses.
            ResponseError: the answer is not HTTP/1.x.
            OSError: connecting, TLS or the connection failed.
        """
        if self._closed:
            raise RuntimeError("the HTTP client is closed")
        if not _METHOD.match(method):
            raise ValueError(f"invalid method {method[:40]!r}")
        host = url.raw_host
        if url.scheme not in _DEFAULT_PORTS or not host:
            raise ValueError("only http(s) URLs with a host can be requested")
        port = url.port or _DEFAULT_PORTS[url.scheme]
        key = (url.scheme, host, port)
        request = _serialize(method, url, host, port, headers, body)
        head_only = method == "HEAD"
        async with self._in_flight:
            connection = self._take_idle(key)
            reused = connection is not None
            if connection is None:
                connection = await self._connect(key)
            try:
                return await _exchange(connection, request, head_only)
            except ServerDisconnected:
                if not reused or connection.received:
                    raise
            # The server closed an idle connection as we wrote to it: once more, on a new one.
            return await _exchange(await self._connect(key), request, head_only)

    async def prewarm(self, url: URL, count: int) -> int:
        """Open connections to ``url``'s host until ``count`` are idle for it (never beyond
        the idle cap); returns how many were opened. A connection that cannot be opened is
        not an error here: the request that needs it opens its own, and reports why not."""
        host = url.raw_host
        if self._closed or url.scheme not in _DEFAULT_PORTS or not host:
            return 0
        key = (url.scheme, host, url.port or _DEFAULT_PORTS[url.scheme])
        opening = self._opening.get(key, 0)
        idle = len(self._idle.get(key, ()))
        wanted = min(count - idle, self._max - self._idle_count) - opening
        if wanted <= 0:
            return 0
        self._opening[key] = opening + wanted
        try:
            opened = await asyncio.gather(
                *(self._connect(key) for _ in range(wanted)), return_exceptions=True
            )
        finally:
            self._opening[key] -= wanted
        connections = [c for c in opened if isinstance(c, _Connection)]
        for connection in connections:
            self.release(connection)
        return len(connections)

    def release(self, connection: _Connection) -> None:
        """A connection whose exchange is over, body dropped: keep it for the next request."""
        if self._closed or connection.closed or self._idle_count >= self._max:
            connection.close()
            return
        connection.idle_since = time.monotonic()
        self._idle.setdefault(connection.key, []).append(connection)
        self._idle_count += 1

    def forget(self, connection: _Connection) -> None:
        """A connection that closed: out of the idle pool if it was there."""
        idle = self._idle.get(connection.key)
        if idle and connection in idle:
            idle.remove(connection)
            self._idle_count -= 1

    def _take_idle(self, key: tuple[str, str, int]) -> _Connection | None:
        idle = self._idle.get(key)
        oldest = time.monotonic() - self._idle_timeout
        while idle:
            connection = idle.pop()
            self._idle_count -= 1
            if connection.closed:
                continue
            if connection.idle_since < oldest:
                connection.close()
                continue
            return connection
        return None

    async def _connect(self, key: tuple[str, str, int]) -> _Connection:
        scheme, host, port = key
        addresses = await self.guard.addresses(host, port)
        loop = asyncio.get_running_loop()
        tls = scheme == "https"
        failures: list[str] = []
        for address in addresses:
            try:
                _transport, connection = await loop.create_connection(
                    lambda: _Connection(key, self),
                    host=str(address),
                    port=port,
                    ssl=self._ssl if tls else None,
                    server_hostname=host if tls else None,
                )
            except OSError as exc:
                failures.append(f"{address}: {exc}")
                continue
            return connection
        raise ConnectionError(f"cannot connect to {host}:{port}: {'; '.join(failures)}")

    async def aclose(self) -> None:
        self._closed = True
        for idle in self._idle.values():
            for connection in idle:
                connection.close()
        self._idle.clear()
        self._idle_count = 0


async def _exchange(connection: _Connection, request: bytes, head_only: bool) -> Response:
    """One exchange on ``connection``; a connection whose exchange failed is aborted."""
    try:
        return await connection.exchange(request, head_only=head_only)
    except BaseException:
        connection.abort()
        raise


def _serialize(
    method: str,
    url: URL,
    host: str,
    port: int,
    headers: Sequence[tuple[str, str]],
    body: bytes | None,
) -> bytes:
    authority = f"[{host}]" if ":" in host else host
    if port != _DEFAULT_PORTS[url.scheme]:
        authority = f"{authority}:{port}"
    lines = [f"{method} {url.raw_path_qs or '/'} HTTP/1.1", f"Host: {authority}"]
    have_type = False
    have_auth = False
    for name, value in headers:
        lowered = name.lower()
        have_type = have_type or lowered == "content-type"
        have_auth = have_auth or lowered == "authorization"
        lines.append(f"{name}: {value}")
    if url.raw_user is not None:
        if have_auth:
            raise ValueError("a URL with credentials and an Authorization header")
        pair = f"{url.user or ''}:{url.password or ''}".encode()
        lines.append(f"Authorization: Basic {base64.b64encode(pair).decode('ascii')}")
    if body is not None:
        if not have_type:
            lines.append("Content-Type: application/octet-stream")
        lines.append(f"Content-Length: {len(body)}")
    elif method not in _NO_BODY_METHODS:
        lines.append("Content-Length: 0")
    lines.append("\r\n")
    head = "\r\n".join(lines).encode("utf-8")
    return head + body if body else head
