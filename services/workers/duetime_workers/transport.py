"""An httpx transport that connects only to addresses the SSRF policy approved, and pins them.

Checking a URL's host and then letting the HTTP client resolve it again leaves a gap: a name
with a short TTL can answer a public address to the check and ``127.0.0.1`` to the connect (DNS
rebinding). So the check happens *inside* the connect: httpcore asks this module's network
backend for a TCP connection to (host, port); the backend resolves the host once, runs the
policy over every address, and opens the socket to one of those exact addresses. TLS still uses
the original host name for SNI and certificate checks (httpcore passes it to ``start_tls``), and
the ``Host`` header comes from the URL, so virtual hosting works unchanged.

Because the check sits at the connect, it also covers every way httpx could pick a host
(``user@host`` tricks, odd IPv4 spellings, IDNA); redirects are not followed at all, and
environment proxies are ignored (``trust_env=False``) because a proxy would connect on our behalf.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable

import httpcore
import httpx

from .ssrf import IPAddress, check_addresses, parse_ip_literal

__all__ = ["GuardedBackend", "Resolver", "make_http_client", "system_resolver"]

Resolver = Callable[[str, int], Awaitable[list[IPAddress]]]


async def system_resolver(host: str, port: int) -> list[IPAddress]:
    """Resolve with the system resolver (getaddrinfo), without blocking the loop."""
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise httpcore.ConnectError(f"cannot resolve {host!r}: {exc}") from exc
    seen: dict[IPAddress, None] = {}
    for _family, _type, _proto, _name, sockaddr in infos:
        seen.setdefault(ipaddress.ip_address(sockaddr[0]), None)
    return list(seen)


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """Resolves, applies the SSRF policy (unless disabled), and connects to an approved address."""

    def __init__(
        self,
        *,
        allow_private: bool,
        resolver: Resolver = system_resolver,
        inner: httpcore.AsyncNetworkBackend | None = None,
    ) -> None:
        self._allow_private = allow_private
        self._resolver = resolver
        self._inner = inner or httpcore.AnyIOBackend()

    async def addresses(self, host: str, port: int) -> list[IPAddress]:
        """The addresses a connection to ``host`` may use (raises ``TargetRefused``)."""
        literal = parse_ip_literal(host)
        found = [literal] if literal is not None else await self._resolver(host, port)
        if self._allow_private:
            return found
        return check_addresses(host, found)

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        last: Exception | None = None
        for ip in await self.addresses(host, port):
            try:
                return await self._inner.connect_tcp(
                    str(ip),
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc  # try the next approved address, like getaddrinfo-order fallback
        assert last is not None  # addresses() never returns an empty list
        raise last

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("unix sockets are not a valid job target")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _GuardedTransport(httpx.AsyncHTTPTransport):
    """``AsyncHTTPTransport`` whose connection pool uses ``GuardedBackend``.

    httpx 0.28 has no public switch for the network backend, so the pool httpx built is
    replaced by an identical one that uses ours (same TLS context and limits).
    """

    def __init__(self, backend: GuardedBackend, limits: httpx.Limits) -> None:
        super().__init__(trust_env=False, limits=limits, retries=0)
        # trust_env here only means SSL_CERT_FILE/SSL_CERT_DIR: operators may add a CA.
        ssl_context = httpx.create_ssl_context(trust_env=True)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=backend,
        )


def make_http_client(
    *, allow_private: bool, max_connections: int, resolver: Resolver = system_resolver
) -> httpx.AsyncClient:
    """The worker's shared HTTP client: guarded, no redirects, no environment proxies."""
    limits = httpx.Limits(
        max_connections=max_connections, max_keepalive_connections=max_connections
    )
    backend = GuardedBackend(allow_private=allow_private, resolver=resolver)
    return httpx.AsyncClient(
        transport=_GuardedTransport(backend, limits),
        follow_redirects=False,
        trust_env=False,
    )
