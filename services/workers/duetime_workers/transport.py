"""The worker's HTTP client: connects only to addresses the SSRF policy approved, and pins them.

Checking a URL's host and then letting the HTTP client resolve it again leaves a gap: a name
with a short TTL can answer a public address to the check and ``127.0.0.1`` to the connect (DNS
rebinding). So the check happens *inside* the connect: aiohttp asks this module's resolver for
the addresses of (host, port); the resolver resolves the host once, runs the policy over every
address, and hands aiohttp exactly those addresses to open the socket to. TLS still uses the
original host name for SNI and certificate checks, and the ``Host`` header comes from the URL,
so virtual hosting works unchanged. The DNS cache is off: every new connection resolves and
checks again.

aiohttp does not ask a resolver about IP literals, so :meth:`GuardedResolver.check_literal` runs
the same policy on a literal host before the request; odd IPv4 spellings (``0x7f000001``,
``127.1``) are parsed the way ``inet_aton`` would and checked the same way. Redirects are not
followed at all, and environment proxies are ignored (``trust_env=False``) because a proxy would
connect on our behalf.

aiohttp rather than httpx: on this path httpx (through anyio) cost about six times the CPU per
request, and a worker process at a spike is bound by exactly that CPU.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from .ssrf import IPAddress, TargetRefused, check_addresses, parse_ip_literal

__all__ = ["GuardedResolver", "HttpClient", "Resolver", "make_http_client", "system_resolver"]

Resolver = Callable[[str, int], Awaitable[list[IPAddress]]]


async def system_resolver(host: str, port: int) -> list[IPAddress]:
    """Resolve with the system resolver (getaddrinfo), without blocking the loop."""
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise OSError(f"cannot resolve {host!r}: {exc}") from exc
    seen: dict[IPAddress, None] = {}
    for _family, _type, _proto, _name, sockaddr in infos:
        seen.setdefault(ipaddress.ip_address(sockaddr[0]), None)
    return list(seen)


class GuardedResolver(AbstractResolver):
    """Resolves, applies the SSRF policy (unless disabled), and returns the approved addresses."""

    def __init__(self, *, allow_private: bool, resolver: Resolver = system_resolver) -> None:
        self.allow_private = allow_private
        self._resolver = resolver

    async def addresses(self, host: str, port: int) -> list[IPAddress]:
        """The addresses a connection to ``host`` may use (raises ``TargetRefused``)."""
        literal = parse_ip_literal(host)
        found = [literal] if literal is not None else await self._resolver(host, port)
        if self.allow_private:
            return found
        return check_addresses(host, found)

    def check_literal(self, host: str) -> None:
        """Refuse an IP-literal host the policy forbids (aiohttp never resolves literals)."""
        literal = parse_ip_literal(host.strip("[]"))
        if literal is not None and not self.allow_private:
            check_addresses(host, [literal])

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        return [
            ResolveResult(
                hostname=host,
                host=str(ip),
                port=port,
                family=socket.AF_INET6 if ip.version == 6 else socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
            for ip in await self.addresses(host, port)
        ]

    async def close(self) -> None:
        return None


class HttpClient:
    """The worker's shared HTTP session and the guard that approved its connections."""

    def __init__(self, session: aiohttp.ClientSession, guard: GuardedResolver) -> None:
        self.session = session
        self.guard = guard

    async def aclose(self) -> None:
        await self.session.close()


def make_http_client(
    *, allow_private: bool, max_connections: int, resolver: Resolver = system_resolver
) -> HttpClient:
    """The worker's shared HTTP client: guarded, keep-alive, no redirects, no environment proxies.

    Call it on the event loop that will use it. ``SSL_CERT_FILE``/``SSL_CERT_DIR`` are honoured
    (operators may add a CA).
    """
    guard = GuardedResolver(allow_private=allow_private, resolver=resolver)
    connector = aiohttp.TCPConnector(
        limit=max_connections,
        limit_per_host=0,
        resolver=guard,
        use_dns_cache=False,
        ssl=ssl.create_default_context(),
    )
    session = aiohttp.ClientSession(
        connector=connector,
        trust_env=False,
        auto_decompress=False,
        skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding"),
        timeout=aiohttp.ClientTimeout(total=None),
    )
    return HttpClient(session, guard)


def refused(exc: BaseException) -> TargetRefused | None:
    """The ``TargetRefused`` behind an aiohttp connection error, if that is what it was."""
    seen: Any = exc
    while seen is not None:
        if isinstance(seen, TargetRefused):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None
