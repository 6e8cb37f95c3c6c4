"""The worker's HTTP client: connects only to addresses the SSRF policy approved, and pins them.

The guard is ``duetime.egress.resolver.GuardedResolver`` (resolve once, check every address,
connect to exactly those). Redirects are not followed at all, and environment proxies are ignored
(``trust_env=False``) because a proxy would connect on our behalf.

aiohttp rather than httpx: on this path httpx (through anyio) cost about six times the CPU per
request, and a worker process at a spike is bound by exactly that CPU.
"""

from __future__ import annotations

import ssl

import aiohttp

from duetime.egress.resolver import GuardedResolver, Resolver, system_resolver

__all__ = ["HttpClient", "make_http_client"]


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
