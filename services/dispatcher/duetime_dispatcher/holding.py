"""The dispatcher's core: hold runs until due, drop duplicates, and say which records may be acked.

Pure and clock-free (every method that needs the time takes ``now``), so unit tests drive it with
a fake clock and fake tokens; the faust glue in :mod:`duetime_dispatcher.app` feeds it events.

A record's life::

    receive --held--> (wheel) --due--> in flight --delivered--> settled --ackable--> acked
       |                 |                 |
       |                 +--shed--> settled|+--failed--> (wheel again, retried after a pause)
       +--duplicate / undecodable / too far--> settled at once (acked behind its partition's
                                               earlier records)

What is held is a :class:`~duetime_dispatcher.routing.Routed` record: the routing fields and the
record's bytes, never a decoded run, so holding a run costs little more than its record.

De-duplication is on ``(run_id, attempt)``: a run held or in flight drops later copies, and so does
one released less than ``dedup_window`` ago. The window covers the commit lag (records released
and acked but not yet committed are read again after a rebalance); it is kept short because a run
the planner re-publishes on purpose (its sweeper, when nothing claimed the run) must get through.
Downstream, the worker's claim compare-and-set drops whatever duplicates remain.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from operator import attrgetter, itemgetter
from typing import Any, Generic, TypeVar

from duetime.timing_wheel import TimingWheel

from .ledger import Claim, OffsetLedger, Partition
from .routing import Routed, RunKey

__all__ = ["Counters", "Holding", "Outcome", "Release", "RunKey", "Source"]

T = TypeVar("T")

_MS = timedelta(milliseconds=1)
_US = timedelta(microseconds=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_NO_LEAD = timedelta(0)
_KEY = attrgetter("key")
_FIRST = itemgetter(0)


class Outcome(StrEnum):
    """What :meth:`Holding.receive` did with a record."""

    HELD = "held"
    DUPLICATE = "duplicate"
    UNDECODABLE = "undecodable"
    #: The consumer went back over a record already tracked; nothing to do.
    REDELIVERED = "redelivered"
    #: Due further out than ``max_hold``: acked, not held (the planner re-publishes it).
    TOO_FAR = "too_far"
    #: Its run is already past this attempt (the database says so): acked, not released.
    HANDLED = "handled"


@dataclass(frozen=True, slots=True)
class Source:
    """Where a record was read: the context of every log line about it."""

    topic: str
    partition: int
    offset: int

    @property
    def tp(self) -> Partition:
        return (self.topic, self.partition)


@dataclass(eq=False, slots=True)
class Release(Generic[T]):
    """A run taken off the wheel at ``taken_at`` and handed to the publisher.

    Not frozen, and its key is a plain attribute: a spike creates one per run at the due
    instant, and a frozen dataclass's ``__init__`` (``object.__setattr__`` per field) costs
    several times as much.
    """

    routed: Routed
    source: Source
    taken_at: datetime
    claim: Claim[T]
    key: RunKey
    throttled_ms: int = 0  # how long a grant kept it waiting after ``taken_at``
    drained: bool = False  # a catch-up run that has passed the @catch-up drain
    #: Where the broker's answer for its record goes (the publisher's list, set as it produces).
    reports: list[tuple[Release[T], Any]] | None = None

    def __call__(self, err: Any, _msg: Any) -> None:
        """librdkafka's delivery report for this release's record: ``err`` is None when the
        broker acknowledged it.

        The release is its own callback: a closure per record would be one more allocation per
        produce call at the due instant (about a fifth of a spike's produce time)."""
        reports = self.reports
        if reports is not None:
            reports.append((self, err))


@dataclass(slots=True)
class Counters:
    """Running totals since start; the ``dispatcher.stats`` log line prints them."""

    received: int = 0
    released: int = 0
    duplicates: int = 0
    undecodable: int = 0
    redelivered: int = 0
    too_far: int = 0
    handled: int = 0
    release_failures: int = 0
    dropped_on_revoke: int = 0
    shed: int = 0
    rerouted: int = 0
    lateness_max_ms: float = 0.0
    lateness_total_ms: float = 0.0

    @property
    def lateness_mean_ms(self) -> float:
        return self.lateness_total_ms / self.released if self.released else 0.0


@dataclass(eq=False, slots=True)
class _Held(Generic[T]):
    routed: Routed
    source: Source
    claim: Claim[T]
    key: RunKey


class Holding(Generic[T]):
    """Runs held until due, keyed by ``(run_id, attempt)``; ``T`` is the ack token (an event).

    Args:
        start_at: the instant the holding starts at (the wheel's origin).
        dedup_window: how long a released key still drops copies.
        max_hold: the furthest ahead of ``now`` a run may be due and still be held.
        retry_interval: how long after a refused release it is tried again.
        remember_max: a cap on released keys remembered, whatever their age (bounds memory in a
            spike: 100k runs a second for a 60 s window would otherwise be 6M keys).
        tick: the timing wheel's resolution.
    """

    def __init__(
        self,
        start_at: datetime,
        *,
        dedup_window: timedelta = timedelta(seconds=60),
        max_hold: timedelta = timedelta(hours=2),
        retry_interval: timedelta = timedelta(seconds=1),
        remember_max: int = 1_000_000,
        tick: timedelta = timedelta(milliseconds=10),
        prepare: timedelta = timedelta(0),
    ) -> None:
        self._now = start_at
        self._tick = tick
        self._prepare = prepare  # the wheel works this far ahead (see TimingWheel.advance)
        self._wheel: TimingWheel[RunKey, _Held[T]] = TimingWheel(start_at, tick=tick)
        self._ledger: OffsetLedger[T] = OffsetLedger()
        self._in_flight: dict[RunKey, Release[T]] = {}
        # Staged (:meth:`stage`): taken off the wheel before their due instant, released at it.
        # In due order from ``_staged_head``, with their due instants (µs since the epoch).
        self._staged: list[Release[T]] = []
        self._staged_due: list[int] = []
        self._staged_head = 0
        self._staged_keys: dict[RunKey, Release[T]] = {}
        self._staged_revoked = False  # a revoke since they were staged: check each one
        self._released: OrderedDict[RunKey, datetime] = OrderedDict()
        self._dedup_window = dedup_window
        self._max_hold = max_hold
        self._retry_interval = retry_interval
        self._remember_max = remember_max
        self.counters = Counters()

    # -- reading -------------------------------------------------------------------------------

    def receive(
        self,
        source: Source,
        routed: Routed | None,
        token: T,
        now: datetime,
        lead: timedelta = _NO_LEAD,
        handled: bool = False,
    ) -> Outcome:
        """Take one record read from ``source`` at ``now``; ``routed`` is None for poison.
        It is released ``lead`` before its due instant (a run a worker claims ahead);
        ``handled``: its run is already past its attempt, so it is acked and not released.

        Records of one partition must come in offset order.
        """
        claim = self._ledger.track(source.tp, source.offset, token)
        if claim is None:
            self.counters.redelivered += 1
            return Outcome.REDELIVERED
        self.counters.received += 1
        if routed is None:
            self.counters.undecodable += 1
            self._ledger.settle(claim)
            return Outcome.UNDECODABLE
        if handled:
            self.counters.handled += 1
            self._ledger.settle(claim)
            return Outcome.HANDLED
        key = routed.key
        if (
            key in self._wheel
            or key in self._in_flight
            or key in self._released
            or key in self._staged_keys
        ):
            self.counters.duplicates += 1
            self._ledger.settle(claim)
            return Outcome.DUPLICATE
        if routed.due_at - now > self._max_hold:
            # Held, it would pin its partition's committed offset until it is due. The planner
            # publishes only what is due within its lookahead, and its sweeper re-publishes any
            # run that is due and unclaimed, so acking it loses nothing.
            self.counters.too_far += 1
            self._ledger.settle(claim)
            return Outcome.TOO_FAR
        self._wheel.add(key, routed.due_at - lead, _Held(routed, source, claim, key))
        return Outcome.HELD

    # -- releasing -----------------------------------------------------------------------------

    def stage(self, now: datetime, until: datetime) -> int:
        """Take the runs due up to ``until`` (at most ``now + prepare``) off the wheel ahead of
        their due instant, so that at that instant :meth:`take_due` only slices a list and the
        produce calls are all that is left (docs/dispatcher.md, "Staged ahead").

        Until then they still count as held: a copy read meanwhile is dropped, and a revoke of
        their partition drops them. Returns how many were staged."""
        self._now = max(self._now, now)
        dues, held = self._wheel.take_ahead(now, until, self._prepare)
        if not held:
            return 0
        staged = [Release(h.routed, h.source, now, h.claim, h.key) for h in held]
        self._staged_keys.update(zip(map(_KEY, staged), staged, strict=True))
        if self._staged_head:
            del self._staged[: self._staged_head], self._staged_due[: self._staged_head]
            self._staged_head = 0
        if self._staged_due and dues[0] < self._staged_due[-1]:
            # A run read after an earlier staging and due before runs it staged: merged in due
            # order, or the slice taken at its instant would take those later runs early.
            merged = sorted(
                zip(self._staged_due + dues, self._staged + staged, strict=True), key=_FIRST
            )
            self._staged_due = [due for due, _release in merged]
            self._staged = [release for _due, release in merged]
        else:
            self._staged += staged
            self._staged_due += dues
        return len(staged)

    def take_due(self, now: datetime) -> list[Release[T]]:
        """Take every run due at ``now`` off the wheel (the staged ones first), in due order,
        *not yet* in flight.

        The caller publishes them first and then calls :meth:`track`, so that a spike's produce
        calls start before its bookkeeping; it must not yield to the event loop in between
        (a record read meanwhile would find the run neither held nor in flight)."""
        self._now = max(self._now, now)
        self._forget_old_releases()
        staged = self._take_staged(now) if self._staged_keys else []
        fresh = [
            Release(held.routed, held.source, now, held.claim, held.key)
            for held in self._wheel.advance(now, self._prepare)
        ]
        return staged + fresh if staged and fresh else staged or fresh

    def _take_staged(self, now: datetime) -> list[Release[T]]:
        head = self._staged_head
        cut = bisect_right(self._staged_due, (now - _EPOCH) // _US, lo=head)
        if cut == head:
            return []
        taken = self._staged[head:cut]
        keys = self._staged_keys
        if self._staged_revoked:
            taken = [release for release in taken if keys.get(release.key) is release]
        if cut == len(self._staged):
            self._staged, self._staged_due, self._staged_head = [], [], 0
            self._staged_keys, self._staged_revoked = {}, False
        else:
            self._staged_head = cut
            for release in taken:
                del keys[release.key]
        for release in taken:
            release.taken_at = now
        return taken

    def track(self, releases: list[Release[T]]) -> None:
        """Hold ``releases`` (from :meth:`take_due`) as in flight, until the broker answers."""
        self._in_flight.update(zip(map(_KEY, releases), releases, strict=True))

    def delivered(self, release: Release[T], now: datetime, *, settle: bool = True) -> timedelta:
        """The broker acknowledged the release at ``now``: remember its key, settle its record
        (unless ``settle`` is False: more work is left before it may be acked, see
        :meth:`settle`).

        Returns the run's lateness, ``now - due_at``: the run counts as released when it is on
        its topic, so the time spent publishing is part of it. A run released ahead (for a
        worker to claim it ahead) has a negative lateness.
        """
        key = release.key
        in_flight = self._in_flight
        if in_flight.get(key) is release:
            del in_flight[key]
        released = self._released
        if key in released:
            released.move_to_end(key)
        released[key] = now
        if len(released) > self._remember_max:
            released.popitem(last=False)
        if settle:
            self._ledger.settle(release.claim)
        counters = self.counters
        counters.released += 1
        lateness = now - release.routed.due_at
        lateness_ms = lateness / _MS
        counters.lateness_total_ms += lateness_ms
        if lateness_ms > counters.lateness_max_ms:
            counters.lateness_max_ms = lateness_ms
        return lateness

    def failed(self, release: Release[T], now: datetime) -> None:
        """The broker refused the release at ``now``: hold the run again, to retry it after
        ``retry_interval`` (a refusal the producer reports at once would otherwise be retried in
        a busy loop)."""
        key = release.key
        if self._in_flight.get(key) is release:
            del self._in_flight[key]
        self.counters.release_failures += 1
        if not release.claim.dropped:
            held = _Held(release.routed, release.source, release.claim, key)
            self._wheel.add(key, max(release.routed.due_at, now + self._retry_interval), held)

    def reroute(self, release: Release[T], routed: Routed) -> None:
        """The release could not go where it was going (a Kafka target's topic refused it): hold
        it again as ``routed`` (same key), released again at once (it is already due)."""
        key = release.key
        if self._in_flight.get(key) is release:
            del self._in_flight[key]
        self.counters.rerouted += 1
        if not release.claim.dropped:
            self._wheel.add(key, routed.due_at, _Held(routed, release.source, release.claim, key))

    def abandon(self, release: Release[T]) -> None:
        """Give the release up unreleased (throttled and shed for back-pressure): its record is
        settled, so it is acked, and the planner's sweeper publishes the run again later."""
        key = release.key
        if self._in_flight.get(key) is release:
            del self._in_flight[key]
        self._ledger.settle(release.claim)
        self.counters.shed += 1

    def settle(self, release: Release[T]) -> None:
        """The work after a delivered release is done too: its record may be acked."""
        self._ledger.settle(release.claim)

    def shed(self, count: int) -> list[Routed]:
        """Stop holding the ``count`` runs due last and settle their records (acked without a
        release: the planner's sweeper re-publishes them once due; see
        :mod:`duetime_dispatcher.backpressure`). Returns them, latest first."""
        shed: list[Routed] = []
        for key in self._wheel.furthest(count):
            held = self._wheel.remove(key)
            if held is not None:
                self._ledger.settle(held.claim)
                shed.append(held.routed)
        self.counters.shed += len(shed)
        return shed

    def ackable(self) -> list[T]:
        """Tokens that may be acked now: the settled prefix of each partition, in offset order."""
        return self._ledger.ackable()

    # -- rebalancing ---------------------------------------------------------------------------

    def revoke(self, partitions: Iterable[Partition]) -> int:
        """Drop everything read from ``partitions``; returns how many runs were held.

        Nothing of theirs was acked past the oldest held run, so the next owner (often this same
        process, after an eager rebalance) reads them again from the committed offset.
        """
        revoked = set(partitions)
        # Every held run has an unacked record in the ledger, so when no other partition has one,
        # the whole wheel goes (the usual case: an eager rebalance revokes everything).
        keep_some = bool(self._ledger.partitions() - revoked)
        self._ledger.drop(revoked)
        dropped = 0
        if not keep_some:
            dropped = len(self._wheel)
            self._wheel = TimingWheel(self._now, tick=self._tick)
        else:
            for key in self._wheel:
                held = self._wheel.get(key)
                if held is not None and held.source.tp in revoked:
                    self._wheel.remove(key)
                    dropped += 1
        # Releases still being published no longer stand for their records: if the partition
        # comes back and the record is read again, it must be held again, not dropped as a copy
        # of a release that may yet fail (and, its record revoked, would not be retried).
        for key, release in list(self._in_flight.items()):
            if release.source.tp in revoked:
                del self._in_flight[key]
        # Staged runs are held: theirs go too (take_due leaves them out from now on).
        for key, release in list(self._staged_keys.items()):
            if release.source.tp in revoked:
                del self._staged_keys[key]
                self._staged_revoked = True
                dropped += 1
        if self._staged_revoked and not self._staged_keys:
            self._staged, self._staged_due, self._staged_head = [], [], 0
            self._staged_revoked = False
        self.counters.dropped_on_revoke += dropped
        return dropped

    # -- state ---------------------------------------------------------------------------------

    def next_due(self, stage_ahead: timedelta = timedelta(0)) -> datetime | None:
        """When :meth:`take_due` (or :meth:`stage`) should next be called: never later than the
        earliest due_at of a staged run, ``stage_ahead`` before the earliest one on the wheel,
        and ``prepare`` ahead of the wheel's next cascade (its work is done before the due
        instant)."""
        wheel = self._wheel.next_due(self._prepare, stage_ahead)
        if not self._staged_keys:
            return wheel
        staged = _EPOCH + self._staged_due[self._staged_head] * _US
        return staged if wheel is None else min(staged, wheel)

    @property
    def held(self) -> int:
        """Runs not yet released: on the wheel, or staged."""
        return len(self._wheel) + len(self._staged_keys)

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    @property
    def unacked(self) -> int:
        """Records read and not yet acked (held, in flight, or waiting behind one that is)."""
        return len(self._ledger)

    def oldest_unacked(self, partition: Partition) -> int | None:
        return self._ledger.oldest_unacked(partition)

    def _forget_old_releases(self) -> None:
        horizon = self._now - self._dedup_window
        released = self._released
        while released:
            key, released_at = next(iter(released.items()))
            if released_at > horizon:
                break
            del released[key]
