"""The ``ShardLeaseBackend`` on etcd through aetcd (shared/ETCD.md: why this client, what it does).

Keys, under ``root`` (``/duetime/<topic prefix>planner/``, so stacks sharing an etcd stay apart):
``members/<member>`` and ``shards/<nnn>`` (value: the member), all on the member's one lease.
aetcd's errors are translated here into ``CoordError``; every call has the client's deadline.
Reads are linearizable (aetcd's default): a planner must not act on a stale follower's view.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable
from typing import Any, TypeVar
from urllib.parse import urlsplit

import aetcd

from duetime.errors import ConfigError, CoordError

from .backend import LeaseView, ShardKey

__all__ = ["EtcdBackend", "etcd_root", "parse_endpoint"]

T = TypeVar("T")


def etcd_root(topic_prefix: str) -> str:
    return f"/duetime/{topic_prefix}planner/"


def parse_endpoint(endpoints: str) -> tuple[str, int]:
    """The first of ``DUETIME_ETCD_ENDPOINTS`` (aetcd talks to one endpoint)."""
    first = endpoints.split(",")[0].strip()
    parts = urlsplit(first if "://" in first else f"http://{first}")
    if not parts.hostname or parts.port is None:
        raise ConfigError(f"etcd endpoint must be host:port or http://host:port, not {first!r}")
    return parts.hostname, parts.port


class EtcdBackend:
    """Create it inside the event loop that will use it (grpc.aio channels belong to a loop)."""

    def __init__(self, host: str, port: int, root: str, *, timeout: float = 2.0) -> None:
        self._client = aetcd.Client(host=host, port=port, timeout=timeout)
        self._root = root.encode()
        self._leases: dict[int, Any] = {}

    async def _call(self, what: str, awaitable: Awaitable[T]) -> T:
        try:
            return await awaitable
        except aetcd.exceptions.ClientError as exc:
            raise CoordError(f"etcd {what} failed: {type(exc).__name__}: {exc}") from exc
        except TimeoutError as exc:
            raise CoordError(f"etcd {what} timed out") from exc

    def _shard_key(self, shard: int) -> bytes:
        return self._root + b"shards/%03d" % shard

    async def grant(self, ttl_seconds: int) -> int:
        lease = await self._call("lease grant", self._client.lease(ttl_seconds))
        self._leases[lease.id] = lease
        return int(lease.id)

    async def keepalive(self, lease: int) -> int:
        response = await self._call("keepalive", self._leases[lease].refresh())
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
        held = self._leases.pop(lease, None)
        if held is not None:
            await self._call("revoke", held.revoke())

    async def close(self) -> None:
        with contextlib.suppress(aetcd.exceptions.ClientError):
            await self._client.close()
