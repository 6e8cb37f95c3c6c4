"""The port shard ownership needs from its lease store (etcd), and what it returns.

One lease per member: the member key and every shard key the member holds are attached to it, so
when the member dies its keys vanish with the lease, all at once, TTL after its last keepalive.
A shard key is taken only if absent (a create-if-absent transaction), and its create revision is
the shard's fencing token: fixed while the key exists, larger for every later owner.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["LeaseView", "ShardKey", "ShardLeaseBackend"]


@dataclass(frozen=True)
class ShardKey:
    """A shard key as stored: who holds it, under which lease, since which revision."""

    shard: int
    member: str
    lease: int
    create_revision: int


@dataclass(frozen=True)
class LeaseView:
    """One consistent read of the members and the shard keys (a single range read)."""

    members: frozenset[str]
    shards: dict[int, ShardKey]


class ShardLeaseBackend(Protocol):
    """Every call may raise ``duetime.errors.CoordError`` (etcd unreachable or timed out)."""

    async def grant(self, ttl_seconds: int) -> int:
        """A new lease; returns its id."""
        ...

    async def keepalive(self, lease: int) -> int:
        """Refresh ``lease`` once; returns the TTL it has now, <= 0 if it is already gone."""
        ...

    async def join(self, member: str, lease: int) -> None:
        """Put the member key on ``lease`` (announces the member; it goes with the lease)."""
        ...

    async def view(self) -> LeaseView:
        """The live members and the held shard keys."""
        ...

    async def acquire(self, shard: int, member: str, lease: int) -> int | None:
        """Create the shard key on ``lease`` if absent; returns its create revision (the fencing
        token), or ``None`` if another lease holds it. A retried call that finds the key already
        on ``lease`` returns that key's revision."""
        ...

    async def release(self, shard: int, token: int) -> bool:
        """Delete the shard key only if its create revision is still ``token``."""
        ...

    async def revoke(self, lease: int) -> None:
        """End ``lease`` now, deleting every key on it (a clean stop hands shards over at once)."""
        ...

    async def close(self) -> None: ...
