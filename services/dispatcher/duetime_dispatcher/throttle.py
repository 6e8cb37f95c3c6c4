"""Per-target throttling with per-tenant fairness: the dispatcher's side of flow control.

A run due for a target with limits (``duetime.flow``; ``duetime targets set``) is not released
at once: it waits here, in its target's queue, until a grant from PostgreSQL allows it
(``duetime.store.flow.grant``, shared by every dispatcher). A run of a target without limits
never enters, and costs nothing.

Inside a target, runs wait per tenant and leave in **weighted round robin**: each turn a tenant
may send up to its weight (``tenants.fairness_weight``, default 1) of its oldest runs before the
next tenant's turn, and the turn carries over from one grant to the next. So a tenant with 10
runs is not stuck behind another tenant's 5,000 at a throttled target: its runs leave within the
first few grants whatever the other's backlog. Inside a tenant, runs leave in the order they fell
due (FIFO).

**Catch-up drain.** A run planned after its time (missed during an outage or while the planner
was stopped; the planner marks it ``duetime-catch-up``) first waits in the ``@catch-up`` queue,
whose rate is the global drain rate (``duetime targets set @catch-up --rate R``), and only then
in its own target's queue if that target has limits. So the backlog of an outage leaves at the
drain rate and never above any target's limit, while runs that are on time never queue behind
it (they do not enter ``@catch-up``).

Pure: no clock, no I/O. The dispatcher asks :meth:`Throttle.requests` for the candidates of the
next grant, runs the grant on its database thread, and hands the counts to
:meth:`Throttle.granted`, which returns the releases to publish and keeps the rest in front.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Generic, TypeVar

from duetime.flow import CATCH_UP, DEFAULT_TARGET, TargetLimit
from duetime.store.flow import Candidate, GrantRequest

from .holding import Release
from .ledger import Partition

__all__ = ["FairQueue", "Throttle"]

T = TypeVar("T")
Item = TypeVar("Item")

_UNKNOWN_TENANT = ""
_MS = timedelta(milliseconds=1)


class FairQueue(Generic[Item]):
    """FIFO queues per tenant, taken from in weighted round robin."""

    def __init__(self) -> None:
        self._tenants: OrderedDict[str, deque[Item]] = OrderedDict()
        self._credit = 0  # what the tenant at the head may still take in its current turn
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def add(self, tenant: str, item: Item) -> None:
        queue = self._tenants.get(tenant)
        if queue is None:
            queue = self._tenants[tenant] = deque()
        queue.append(item)
        self._size += 1

    def take(self, count: int, weights: Mapping[str, int]) -> list[tuple[str, Item]]:
        """Up to ``count`` items in weighted round robin order, removed from the queue."""
        taken: list[tuple[str, Item]] = []
        tenants = self._tenants
        while tenants and len(taken) < count:
            tenant, queue = next(iter(tenants.items()))
            if self._credit <= 0:
                self._credit = max(1, weights.get(tenant, 1))
            while queue and self._credit > 0 and len(taken) < count:
                taken.append((tenant, queue.popleft()))
                self._credit -= 1
            if not queue:
                del tenants[tenant]
                self._credit = 0
            elif self._credit <= 0:
                tenants.move_to_end(tenant)  # its turn is over: next tenant
        self._size -= len(taken)
        return taken

    def put_back(self, items: list[tuple[str, Item]]) -> None:
        """Return items :meth:`take` gave out but that may not leave yet, in front, in order.

        Turns are not rewound (a tenant whose runs were put back may lose the rest of its
        turn to the next tenant); that only happens when a grant fell short, and it moves no
        tenant's runs behind another's for longer than one turn.
        """
        for tenant, item in reversed(items):
            queue = self._tenants.get(tenant)
            if queue is None:
                queue = self._tenants[tenant] = deque()
                self._tenants.move_to_end(tenant, last=False)
            queue.appendleft(item)
            self._size += 1

    def remove_if(self, drop: Iterable[Item]) -> list[Item]:
        """Remove the given items (by identity); returns those found."""
        unwanted = {id(item) for item in drop}
        removed: list[Item] = []
        for tenant in list(self._tenants):
            queue = self._tenants[tenant]
            kept = deque(item for item in queue if id(item) not in unwanted)
            removed.extend(item for item in queue if id(item) in unwanted)
            if kept:
                self._tenants[tenant] = kept
            else:
                del self._tenants[tenant]
        self._size -= len(removed)
        return removed

    def items(self) -> list[Item]:
        return [item for queue in self._tenants.values() for item in queue]


class Throttle(Generic[T]):
    """Releases waiting for a grant, per target; see the module's docstring.

    Args:
        max_request: the most candidates asked for per target and grant.
    """

    def __init__(self, max_request: int = 2000) -> None:
        self.max_request = max_request
        self._limits: dict[str, TargetLimit] = {}
        self._limited: set[str] = set()  # targets with a row whose limits (or the default's) bind
        self._default_limited = False  # whether targets without a row are limited by '*'
        self._weights: dict[str, int] = {}
        self._queues: dict[str, FairQueue[Release[T]]] = {}
        self._asked: dict[str, list[tuple[str, Release[T]]]] = {}
        self.throttled_total = 0  # releases that had to wait for a grant, since start

    # -- configuration -------------------------------------------------------------------------

    def set_limits(self, limits: Mapping[str, TargetLimit], weights: Mapping[str, int]) -> None:
        """The targets' own limits (``*`` = the default) and the tenants' weights, as read now.

        A target whose limits were removed lets its waiting runs go at the next grant (the
        database grants everything to a target without limits)."""
        self._limits = dict(limits)
        self._weights = dict(weights)
        default = self._limits.get(DEFAULT_TARGET, TargetLimit())
        self._default_limited = default.limited
        self._limited = {
            name
            for name, limit in self._limits.items()
            if name != DEFAULT_TARGET and limit.over(default).limited
        }

    def limited(self, target_service: str | None) -> bool:
        """Whether runs of the target wait for grants (a set lookup: it runs per release)."""
        if target_service is None:
            return False
        if target_service in self._limited:
            return True
        return self._default_limited and target_service not in self._limits

    # -- the flow ------------------------------------------------------------------------------

    def admit(self, releases: list[Release[T]]) -> list[Release[T]]:
        """The releases that may go at once; the others wait for a grant."""
        if not self._limited and not self._default_limited:
            return releases
        drain = CATCH_UP in self._limited
        if drain and len(self._limited) == 1 and not self._default_limited:
            # Only the @catch-up drain binds (the usual case): one pass in C for a spike's
            # releases, which are seldom catch-up runs, instead of a call per release.
            waiting = [r for r in releases if r.routed.catch_up and not r.drained]
            if not waiting:
                return releases
            for release in waiting:
                self._wait(CATCH_UP, release)
            return [r for r in releases if not r.routed.catch_up or r.drained]
        free: list[Release[T]] = []
        for release in releases:
            routed = release.routed
            if drain and routed.catch_up and not release.drained:
                self._wait(CATCH_UP, release)
            elif self.limited(routed.target_service):
                self._wait(routed.target_service, release)
            else:
                free.append(release)
        return free

    def _wait(self, target: str | None, release: Release[T]) -> None:
        assert target is not None
        queue = self._queues.get(target)
        if queue is None:
            queue = self._queues[target] = FairQueue()
        queue.add(release.routed.tenant or _UNKNOWN_TENANT, release)
        self.throttled_total += 1

    def requests(self) -> list[GrantRequest]:
        """The next grant's candidates: per waiting target, its runs in fair order."""
        requests: list[GrantRequest] = []
        for target, queue in self._queues.items():
            if not queue or target in self._asked:
                continue
            asked = queue.take(self.max_request, self._weights)
            self._asked[target] = asked
            # The drain is a rate only: its grants take no in-flight slot (the run's own target
            # takes one when the run passes its queue).
            slots = target != CATCH_UP
            candidates = [
                Candidate(
                    r.routed.run_id, r.routed.attempt, slot=slots and r.routed.emission is None
                )
                for _tenant, r in asked
            ]
            requests.append(GrantRequest(target, candidates))
        return requests

    def granted(self, counts: Mapping[str, int], now: datetime) -> list[Release[T]]:
        """The grant's answer at ``now``: the allowed prefix of each request leaves (stamped with
        how long it waited), the rest waits in front. A target missing from ``counts`` (the grant
        failed) gets nothing this time."""
        leaving: list[Release[T]] = []
        drained: list[Release[T]] = []
        for target, asked in self._asked.items():
            count = max(0, min(counts.get(target, 0), len(asked)))
            for _tenant, release in asked[:count]:
                waited = (now - release.taken_at) / _MS
                release.throttled_ms = max(0, int(waited))
                if target == CATCH_UP:
                    release.drained = True
                    drained.append(release)
                else:
                    leaving.append(release)
            if count < len(asked):
                self._queues[target].put_back(asked[count:])
        self._asked.clear()
        for release in drained:  # through the drain: next, the run's own target's limits
            if self.limited(release.routed.target_service):
                self._wait(release.routed.target_service, release)
                self.throttled_total -= 1  # one run, counted once
            else:
                leaving.append(release)
        for target in [t for t, q in self._queues.items() if not q]:
            del self._queues[target]
        return leaving

    def revoke(self, partitions: Iterable[Partition]) -> int:
        """Forget the waiting releases read from ``partitions`` (their records come again)."""
        revoked = set(partitions)
        dropped = 0
        for queue in self._queues.values():
            gone = [r for r in queue.items() if r.source.tp in revoked]
            dropped += len(queue.remove_if(gone))
        return dropped

    def shed(self, count: int) -> list[Release[T]]:
        """Give up the ``count`` releases that fell due last (latest first), for back-pressure:
        the planner's sweeper publishes them again once they are plausibly lost."""
        waiting = sorted(
            (r for q in self._queues.values() for r in q.items()),
            key=lambda r: r.routed.due_at,
            reverse=True,
        )[:count]
        for queue in self._queues.values():
            queue.remove_if(waiting)
        return waiting

    # -- state ---------------------------------------------------------------------------------

    @property
    def waiting(self) -> int:
        # Snapshots (list() of a dict view is one C call under the GIL): the metrics endpoint
        # reads this from its own thread while the event loop adds targets.
        return sum(len(q) for q in list(self._queues.values())) + sum(
            len(a) for a in list(self._asked.values())
        )

    def waiting_per_target(self) -> dict[str, int]:
        return {t: len(q) + len(self._asked.get(t, ())) for t, q in self._queues.items()}

    def oldest_wait(self, now: datetime) -> timedelta:
        """How long the oldest waiting run has been due (zero when none waits)."""
        oldest = min(
            (r.routed.due_at for q in self._queues.values() for r in q.items()), default=None
        )
        return max(timedelta(0), now - oldest) if oldest is not None else timedelta(0)
