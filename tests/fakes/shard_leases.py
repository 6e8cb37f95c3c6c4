"""An in-memory etcd for shard ownership: the ``ShardLeaseBackend`` port with etcd's rules.

Leases expire ``ttl`` after their last grant or keepalive by a clock the test moves
(``advance``), deleting every key on them; every put and delete raises the store revision, and a
key's create revision is the revision that created it. ``fail`` makes every call raise
``CoordError`` (etcd unreachable) until cleared. tests/integration/test_shard_leases.py runs the
same contract suite against it and the real etcd adapter.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from duetime.coord.backend import LeaseView, ShardKey
from duetime.errors import CoordError

__all__ = ["FakeEtcd"]


@dataclass
class _Key:
    value: str
    lease: int
    create_revision: int


@dataclass
class FakeEtcd:
    now: float = 0.0
    revision: int = 1
    fail: bool = False
    keys: dict[str, _Key] = field(default_factory=dict)
    # lease id -> (ttl, deadline)
    leases: dict[int, tuple[int, float]] = field(default_factory=dict)
    calls: int = 0
    _next_lease: int = 100

    def advance(self, seconds: float) -> None:
        self.now += seconds
        for lease, (_ttl, deadline) in list(self.leases.items()):
            if deadline <= self.now:
                self._end(lease)

    def _end(self, lease: int) -> None:
        self.leases.pop(lease, None)
        for name in [k for k, v in self.keys.items() if v.lease == lease]:
            del self.keys[name]
            self.revision += 1

    def _check(self) -> None:
        self.calls += 1
        if self.fail:
            raise CoordError("etcd unreachable (fake)")

    async def grant(self, ttl_seconds: int) -> int:
        self._check()
        self._next_lease += 1
        self.leases[self._next_lease] = (ttl_seconds, self.now + ttl_seconds)
        return self._next_lease

    async def keepalive(self, lease: int) -> int:
        self._check()
        if lease not in self.leases:
            return 0
        ttl, _ = self.leases[lease]
        self.leases[lease] = (ttl, self.now + ttl)
        return ttl

    def _put(self, name: str, value: str, lease: int) -> int:
        if lease not in self.leases:
            raise CoordError(f"lease {lease} not found (fake)")
        self.revision += 1
        old = self.keys.get(name)
        created = old.create_revision if old else self.revision
        self.keys[name] = _Key(value, lease, created)
        return self.revision

    async def join(self, member: str, lease: int) -> None:
        self._check()
        self._put(f"members/{member}", member, lease)

    async def view(self) -> LeaseView:
        self._check()
        members = {k.value for n, k in self.keys.items() if n.startswith("members/")}
        shards: dict[int, ShardKey] = {}
        for name, key in self.keys.items():
            if name.startswith("shards/"):
                shard = int(name.split("/")[1])
                shards[shard] = ShardKey(shard, key.value, key.lease, key.create_revision)
        return LeaseView(frozenset(members), shards)

    async def acquire(self, shard: int, member: str, lease: int) -> int | None:
        self._check()
        name = f"shards/{shard:03d}"
        held = self.keys.get(name)
        if held is not None:
            return held.create_revision if held.lease == lease else None
        return self._put(name, member, lease)

    async def release(self, shard: int, token: int) -> bool:
        self._check()
        name = f"shards/{shard:03d}"
        held = self.keys.get(name)
        if held is None or held.create_revision != token:
            return False
        del self.keys[name]
        self.revision += 1
        return True

    async def revoke(self, lease: int) -> None:
        self._check()
        self._end(lease)

    async def close(self) -> None:
        return None
