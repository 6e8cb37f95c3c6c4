"""The pinning resolver: resolve once, apply the SSRF policy, connect to exactly what passed.

Checking a URL's host and then letting the HTTP client resolve it again leaves a gap: a name
with a short TTL can answer a public address to the check and ``127.0.0.1`` to the connect (DNS
rebinding). So the check happens *inside* the connect: aiohttp asks this resolver for the
addresses of (host, port); the resolver resolves the host once, runs the policy over every
address, and hands aiohttp exactly those addresses to open the socket to. TLS still uses the
original host name for SNI and certificate checks, and the ``Host`` header comes from the URL,
so virtual hosting works unchanged. Use it with aiohttp's DNS cache off, so that every new
connection resolves and checks again.

aiohttp does not ask a resolver about IP literals, so :meth:`GuardedResolver.check_literal` runs
the same policy on a literal host before the request; odd IPv4 spellings (``0x7f000001``,
``127.1``) are parsed the way ``inet_aton`` would and checked the same way.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp.abc import AbstractResolver, ResolveResult

from .ssrf import IPAddress, TargetRefused, check_addresses, parse_ip_literal

__all__ = ["GuardedResolver", "Resolver", "refused", "system_resolver"]

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


def refused(exc: BaseException) -> TargetRefused | None:
    """The ``TargetRefused`` behind an aiohttp connection error, if that is what it was."""
    seen: Any = exc
    while seen is not None:
        if isinstance(seen, TargetRefused):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None
