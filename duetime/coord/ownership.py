"""One member's shard ownership: its lease, the shards rendezvous hashing gives it, when to stop.

``ShardOwnership.step(now)`` does one round against the backend and is what tests call; the
runner repeats it every ``poll_interval``. ``current(now)`` is what the planner asks before each
planning round: the shards it may work and their fencing tokens, or nothing at all once the last
successful keepalive was *sent* more than ``ttl - margin`` ago (measured on the monotonic clock,
so a paused process sees the whole pause). etcd expires the lease ``ttl`` after that keepalive
reached it at the earliest, so the member has stopped before another can take its shards; the
fence in PostgreSQL covers a pause that falls between this check and a write.

A round:
1. grant a lease and put the member key (first round, or after the lease was found gone);
2. keep the lease alive every ``ttl / 3``; a keepalive answered with TTL <= 0 means etcd already
   expired it: every shard is dropped at once and a new lease is granted next round;
3. read members and shard keys in one range read and compute the wanted shards (rendezvous);
4. stop working, then release, shards held but no longer wanted (the key is deleted only if its
   create revision is still ours), so their new owner can take them on its next round;
5. take wanted shards whose key is absent, with a create-if-absent transaction on the lease.

Rebalancing is by polling (``poll_interval``, 1 s), not by watch: a takeover waits for the dead
member's lease to expire (up to ``ttl`` + ~0.3 s) and then at most one poll.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from types import MappingProxyType

from duetime.errors import ConfigError, CoordError
from duetime.logs import event
from duetime.sharding import SHARD_COUNT

from .backend import ShardLeaseBackend
from .rendezvous import assignment

__all__ = ["OwnershipConfig", "RoundResult", "ShardOwnership"]

log = logging.getLogger("duetime.coord")


@dataclass(frozen=True)
class OwnershipConfig:
    # The etcd lease's time to live; the member stops working its shards once its last
    # successful keepalive was sent more than ttl - margin ago.
    ttl: timedelta = timedelta(seconds=10)
    margin: timedelta = timedelta(seconds=2)
    poll_interval: timedelta = timedelta(seconds=1)
    shards: tuple[int, ...] = field(default_factory=lambda: tuple(range(SHARD_COUNT)))

    def __post_init__(self) -> None:
        if self.ttl < timedelta(seconds=2) or self.ttl.total_seconds() != int(
            self.ttl.total_seconds()
        ):
            raise ConfigError("shard lease ttl must be a whole number of seconds, at least 2")
        if not timedelta(0) < self.margin < self.ttl:
            raise ConfigError("shard lease margin must be positive and below the ttl")
        if self.poll_interval <= timedelta(0):
            raise ConfigError("shard poll interval must be positive")

    @property
    def keepalive_interval(self) -> float:
        return self.ttl.total_seconds() / 3

    @property
    def valid_for(self) -> float:
        return (self.ttl - self.margin).total_seconds()


@dataclass(frozen=True)
class RoundResult:
    """What one ``step`` did (shards by number)."""

    acquired: frozenset[int] = frozenset()
    released: frozenset[int] = frozenset()
    lost: frozenset[int] = frozenset()
    failed: str | None = None


_EMPTY: Mapping[int, int] = MappingProxyType({})


class ShardOwnership:
    def __init__(
        self, backend: ShardLeaseBackend, member: str, config: OwnershipConfig | None = None
    ) -> None:
        self.backend = backend
        self.member = member
        self.config = config or OwnershipConfig()
        self._lease: int | None = None
        self._last_ok: float | None = None  # when the last successful keepalive was sent
        self._last_refresh: float | None = None
        self._owned: Mapping[int, int] = _EMPTY
        self._lock = threading.Lock()

    @property
    def lease(self) -> int | None:
        return self._lease

    def current(self, now: float) -> Mapping[int, int]:
        """Shard -> fencing token this member may work at monotonic instant ``now``: empty once
        its last successful keepalive was sent more than ``ttl - margin`` before ``now``."""
        with self._lock:
            last_ok, owned = self._last_ok, self._owned
        if last_ok is None or now - last_ok > self.config.valid_for:
            return _EMPTY
        return owned

    def _set_owned(self, owned: Mapping[int, int]) -> None:
        with self._lock:
            self._owned = MappingProxyType(dict(owned))

    def _drop_all(self, reason: str) -> frozenset[int]:
        lost = frozenset(self._owned)
        self._set_owned({})
        if lost:
            level = logging.INFO if reason == "stopping" else logging.WARNING
            event(log, "shards.lost", level, count=len(lost), reason=reason)
        return lost

    async def step(self, now: float) -> RoundResult:
        try:
            return await self._step(now)
        except CoordError as exc:
            lost = frozenset[int]()
            if self._owned and (
                self._last_ok is None or now - self._last_ok > self.config.valid_for
            ):
                lost = self._drop_all("keepalive_overdue")
            event(log, "shards.etcd_failed", logging.WARNING, error=exc, member=self.member)
            return RoundResult(lost=lost, failed=str(exc))

    async def _step(self, now: float) -> RoundResult:
        cfg = self.config
        if self._lease is None:
            lease = await self.backend.grant(int(cfg.ttl.total_seconds()))
            await self.backend.join(self.member, lease)
            with self._lock:
                self._lease, self._last_ok, self._last_refresh = lease, now, now
            event(log, "shards.lease_granted", member=self.member, lease=lease)
        elif self._last_refresh is None or now - self._last_refresh >= cfg.keepalive_interval:
            self._last_refresh = now
            remaining = await self.backend.keepalive(self._lease)
            if remaining <= 0:
                # etcd expired the lease (we were paused or cut off): its keys are gone.
                lost = self._drop_all("lease_expired")
                with self._lock:
                    self._lease, self._last_ok = None, None
                return RoundResult(lost=lost)
            with self._lock:
                self._last_ok = now
        assert self._lease is not None and self._last_ok is not None
        if now - self._last_ok > cfg.valid_for:
            return RoundResult(lost=self._drop_all("keepalive_overdue"))
        return await self._rebalance(self._lease)

    async def _rebalance(self, lease: int) -> RoundResult:
        view = await self.backend.view()
        members = set(view.members)
        if self.member not in members:
            await self.backend.join(self.member, lease)
            members.add(self.member)
        wanted = assignment(members, self.config.shards)[self.member]
        previous = dict(self._owned)
        mine = {s: k.create_revision for s, k in view.shards.items() if k.lease == lease}
        keep = {s: t for s, t in mine.items() if s in wanted}
        unwanted = {s: t for s, t in mine.items() if s not in wanted}
        lost = frozenset(s for s in previous if s not in mine)
        # Stop working a shard before its key is given up.
        self._set_owned(keep)
        for shard, token in sorted(unwanted.items()):
            await self.backend.release(shard, token)
        acquired: set[int] = set()
        for shard in sorted(wanted - set(view.shards)):
            taken = await self.backend.acquire(shard, self.member, lease)
            if taken is not None:
                keep[shard] = taken
                acquired.add(shard)
                self._set_owned(keep)
        acquired |= {s for s in keep if s not in previous}
        if lost:
            event(log, "shards.lost", logging.WARNING, count=len(lost), reason="key_gone")
        if acquired or unwanted:
            event(
                log,
                "shards.rebalanced",
                member=self.member,
                members=len(members),
                owned=len(keep),
                acquired=len(acquired),
                released=len(unwanted),
            )
        return RoundResult(acquired=frozenset(acquired), released=frozenset(unwanted), lost=lost)

    async def stop(self) -> None:
        """Stop working every shard, then revoke the lease: the shards move at once."""
        self._drop_all("stopping")
        lease = self._lease
        self._lease = None
        if lease is not None:
            try:
                await self.backend.revoke(lease)
            except CoordError as exc:
                event(log, "shards.revoke_failed", logging.WARNING, error=exc)
