"""The ``ShardLeaseBackend`` on etcd through aetcd (an asyncio client of etcd's gRPC API).

Keys, under ``root`` (``/duetime/<topic prefix>planner/``, so stacks sharing an etcd stay apart):
``members/<member>`` and ``shards/<nnn>`` (value: the member), all on the member's one lease.
aetcd's errors are translated here into ``CoordError``; every call has the client's deadline.
Reads are linearizable (aetcd's default): a planner must not act on a stale follower's view.

aetcd talks to one endpoint. With several (``DUETIME_ETCD_ENDPOINTS=a:2379,b:2379,c:2379``) a
call that fails moves the adapter to the next endpoint for the calls that follow, so the loss of
the member it talked to costs one failed call, not the lease: leases and keys are the cluster's,
and a keepalive through another member refreshes the same lease.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Sequence
from typing import TypeVar
from urllib.parse import urlsplit

import aetcd

from duetime.errors import ConfigError, CoordError

from .backend import LeaseView, ShardKey

__all__ = ["EtcdBackend", "etcd_root", "parse_endpoint", "parse_endpoints"]

T = TypeVar("T")


def etcd_root(topic_prefix: str) -> str:
    return f"/duetime/{topic_prefix}planner/"


def parse_endpoints(endpoints: str) -> list[tuple[str, int]]:
    """Every endpoint of ``DUETIME_ETCD_ENDPOINTS`` (comma-separated host:port or URLs)."""
    found = []
    for item in endpoints.split(","):
        text = item.strip()
        if not text:
            continue
        parts = urlsplit(text if "://" in text else f"http://{text}")
        if not parts.hostname or parts.port is None:
            raise ConfigError(f"etcd endpoint must be host:port or http://host:port, not {text!r}")
        found.append((parts.hostname, parts.port))
    if not found:
        raise ConfigError("no etcd endpoint given")
    return found


def parse_endpoint(endpoints: str) -> tuple[str, int]:
    """The first of ``DUETIME_ETCD_ENDPOINTS``."""
    return parse_endpoints(endpoints)[0]


class EtcdBackend:
    """Create it inside the event loop that will use it (grpc.aio channels belong to a loop)."""

    def __init__(
        self,
        host: str,
        port: int,
        root: str,
        *,
        timeout: float = 2.0,
        more: Sequence[tuple[str, int]] = (),
    ) -> None:
        self._endpoints = [(host, port), *more]
        self._current = 0
        self._timeout = timeout
        self._client = aetcd.Client(host=host, port=port, timeout=timeout)
        self._root = root.encode()
        self._leases: set[int] = set()

    @classmethod
    def from_endpoints(cls, endpoints: str, root: str, *, timeout: float = 2.0) -> EtcdBackend:
        (host, port), *more = parse_endpoints(endpoints)
        return cls(host, port, root, timeout=timeout, more=more)

    @property
    def endpoint(self) -> tuple[str, int]:
        return self._endpoints[self._current]

    async def _call(self, what: str, awaitable: Awaitable[T]) -> T:
        try:
            return await awaitable
        except aetcd.exceptions.ClientError as exc:
            await self._next_endpoint()
            raise CoordError(f"etcd {what} failed: {type(exc).__name__}: {exc}") from exc
        except TimeoutError as exc:
            await self._next_endpoint()
            raise CoordError(f"etcd {what} timed out") from exc

    async def _next_endpoint(self) -> None:
        if len(self._endpoints) == 1:
            return
        with contextlib.suppress(aetcd.exceptions.ClientError):
            await self._client.close()
        self._current = (self._current + 1) % len(self._endpoints)
        host, port = self._endpoints[self._current]
        self._client = aetcd.Client(host=host, port=port, timeout=self._timeout)

    def _shard_key(self, shard: int) -> bytes:
        return self._root + b"shards/%03d" % shard

    async def grant(self, ttl_seconds: int) -> int:
        lease = await self._call("lease grant", self._client.lease(ttl_seconds))
        self._leases.add(int(lease.id))
        return int(lease.id)

    async def keepalive(self, lease: int) -> int:
        response = await self._call("keepalive", self._client.refresh_lease(lease))
        return int(response.TTL)

    async def join(self, member: str, lease: int) -> None:
        key = self._root + b"members/" + member.encode()
        await self._call("join", self._client.put(key, member.encode(), lease=lease))

    async def view(self) -> LeaseView:
        result = await self._call("range read", self._client.get_prefix(self._root))
        members: set[str] = set()
        shards: dict[int, ShardKey] = {}
        for kv in result:
            name = kv.key[len(self._root) :].decode()
            kind, _, rest = name.partition("/")
            if kind == "members":
                members.add(rest)
            elif kind == "shards" and rest.isdigit():
                shard = int(rest)
                shards[shard] = ShardKey(shard, kv.value.decode(), kv.lease, kv.create_revision)
        return LeaseView(frozenset(members), shards)

    async def acquire(self, shard: int, member: str, lease: int) -> int | None:
        key = self._shard_key(shard)
        tx = self._client.transactions
        ok, responses = await self._call(
            "acquire",
            self._client.transaction(
                compare=[tx.create(key) == 0],
                success=[tx.put(key, member.encode(), lease=lease)],
                failure=[tx.get(key)],
            ),
        )
        if ok:
            return int(responses[0].response_put.header.revision)
        # A retried transaction whose first try succeeded finds the key on our own lease.
        for _value, kv in responses[0] if responses else ():
            if kv.lease == lease:
                return int(kv.create_revision)
        return None

    async def release(self, shard: int, token: int) -> bool:
        key = self._shard_key(shard)
        tx = self._client.transactions
        ok, _ = await self._call(
            "release",
            self._client.transaction(
                compare=[tx.create(key) == token], success=[tx.delete(key)], failure=[]
            ),
        )
        return bool(ok)

    async def revoke(self, lease: int) -> None:
        if lease in self._leases:
            self._leases.discard(lease)
            await self._call("revoke", self._client.revoke_lease(lease))

    async def close(self) -> None:
        with contextlib.suppress(aetcd.exceptions.ClientError):
            await self._client.close()
