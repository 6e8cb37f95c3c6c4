"""The reaper's view of running attempts, built from ``runs.heartbeats`` and ``runs.results``.

One *watch* per run: the attempt the stream last showed running and the latest lease expiry a
heartbeat announced for it. Watches sit in a timing wheel at ``lease_expires_at + grace``; when
one comes due the reaper asks PostgreSQL, which alone judges expiry by its own clock (``due``,
then ``gone`` / ``alive`` with the answer). The book never expires anything itself.

Records arrive at least once and in no reliable order across the two topics, so folding is
forgiving:

- a heartbeat *extends*: the watch keeps the latest expiry seen for its attempt, and an older or
  repeated heartbeat changes nothing. Extending does not touch the wheel: when the old deadline
  comes, the watch is put back at its new one (one wheel operation per lease period, not one per
  heartbeat);
- a heartbeat of a later attempt *replaces* the watch (attempt n + 1 can only be claimed once
  attempt n has ended); one of an earlier attempt is ignored;
- a result whose attempt ended in the database (``succeeded``, ``scheduled``, ``dead``) *removes*
  the watch, and is remembered for a while (``ended_memory`` runs), so that a heartbeat of that
  attempt read after its result does not bring it back. A result a worker announces after losing
  its lease (state ``unknown``) changes nothing: the attempt may still be running in the database
  until the reaper ends it.

Offsets. A heartbeat's record is needed until its watch is gone or a later record has taken over
its deadline: after a restart the reaper reads again from the committed offset, and that must
show every attempt still watched. So a heartbeat partition's committable offset is the oldest
record still backing a watch (or, with none, the one after the last record read); results and
undecodable records are committable once read. Watches of a revoked partition are dropped: the
reaper that gets the partition reads them again from there.

Pure: the caller passes ``now`` as an instant on the database's clock (``DbClock`` estimates it),
so deadlines written by PostgreSQL compare with it directly.
"""

from __future__ import annotations

import heapq
import uuid
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from duetime.events import RunHeartbeat, RunResult
from duetime.timing_wheel import TimingWheel

__all__ = ["ENDED_STATES", "LeaseBook", "Partition", "Watch"]

Partition = tuple[str, int]

# A result in one of these states means the database has ended the attempt.
ENDED_STATES = frozenset({"succeeded", "scheduled", "dead"})


@dataclass(eq=False, slots=True)
class Watch:
    """One run's attempt as the stream last showed it running."""

    run_id: uuid.UUID
    scheduled_for: datetime
    attempt: int
    lease_expires_at: datetime  # the latest expiry announced, on the database clock
    partition: Partition  # where the record that announced it came from
    offset: int
    armed_at: datetime | None = None  # when the wheel gives it back; None while being judged


class LeaseBook:
    """Watches of running attempts; see the module docstring.

    Args:
        start_at: the first ``now`` (database clock).
        grace: how long after a lease's expiry the reaper asks about it, so that a small error
            in the estimate of the database clock does not make it ask too early.
        recheck: the shortest wait before asking again about a lease the database still holds.
        ended_memory: how many ended attempts are remembered against late heartbeats.
    """

    def __init__(
        self,
        start_at: datetime,
        *,
        grace: timedelta = timedelta(milliseconds=200),
        recheck: timedelta = timedelta(milliseconds=500),
        ended_memory: int = 100_000,
    ) -> None:
        if grace < timedelta(0) or recheck <= timedelta(0) or ended_memory < 1:
            raise ValueError("grace must be >= 0, recheck > 0 and ended_memory >= 1")
        self.grace = grace
        self.recheck = recheck
        self._ended_memory = ended_memory
        self._wheel: TimingWheel[uuid.UUID, uuid.UUID] = TimingWheel(start_at)
        self._watches: dict[uuid.UUID, Watch] = {}
        self._ended: OrderedDict[uuid.UUID, int] = OrderedDict()
        self._next: dict[Partition, int] = {}  # one past the last offset read, per partition
        self._backing: dict[Partition, list[tuple[int, uuid.UUID]]] = {}  # heaps of (offset, run)

    def __len__(self) -> int:
        return len(self._watches)

    def get(self, run_id: uuid.UUID) -> Watch | None:
        return self._watches.get(run_id)

    # folding records ----------------------------------------------------------------------
    def heartbeat(self, beat: RunHeartbeat, partition: Partition, offset: int) -> bool:
        """Fold one heartbeat; True if it started or extended a watch."""
        self._read(partition, offset)
        run_id = beat.run_id
        ended = self._ended.get(run_id)
        if ended is not None and beat.attempt <= ended:
            return False
        watch = self._watches.get(run_id)
        if watch is not None and beat.attempt < watch.attempt:
            return False
        if watch is not None and beat.attempt == watch.attempt:
            if beat.lease_expires_at < watch.lease_expires_at:
                return False
            watch.lease_expires_at = beat.lease_expires_at
            watch.partition, watch.offset = partition, offset
            self._back(watch)
            return True
        if watch is not None:  # a later attempt: the earlier one has ended
            self._end(run_id, watch.attempt)
            self._forget(watch)
        watch = Watch(
            run_id=run_id,
            scheduled_for=beat.scheduled_for,
            attempt=beat.attempt,
            lease_expires_at=beat.lease_expires_at,
            partition=partition,
            offset=offset,
        )
        self._watches[run_id] = watch
        self._back(watch)
        self._arm(watch, beat.lease_expires_at + self.grace)
        return True

    def result(self, result: RunResult, partition: Partition, offset: int) -> bool:
        """Fold one result; True if it removed a watch."""
        self._read(partition, offset)
        if result.state not in ENDED_STATES:
            return False
        watch = self._watches.get(result.run_id)
        if watch is not None and watch.attempt > result.attempt:
            return False
        self._end(result.run_id, result.attempt)
        if watch is None:
            return False
        self._forget(watch)
        return True

    def skip(self, partition: Partition, offset: int) -> None:
        """A record that carries nothing for the book (undecodable): only its position counts."""
        self._read(partition, offset)

    # due leases and the database's verdicts -------------------------------------------------
    def next_due(self) -> datetime | None:
        """When ``due`` may next return something (never later than that), or None."""
        return self._wheel.next_due()

    def due(self, now: datetime) -> list[Watch]:
        """Watches whose lease (plus the grace) has passed by ``now``, in deadline order.

        They leave the wheel until a verdict (``gone``, ``alive``, ``retry``) says what to do
        with them; they stay in the book and keep backing their offsets."""
        out: list[Watch] = []
        for run_id in self._wheel.advance(now):
            watch = self._watches.get(run_id)
            if watch is None:
                continue
            watch.armed_at = None
            fire_at = watch.lease_expires_at + self.grace
            if fire_at > now:  # extended by a heartbeat since it was armed
                self._arm(watch, fire_at)
                continue
            out.append(watch)
        return out

    def gone(self, watch: Watch) -> None:
        """The attempt is no longer running in the database: it ended, or the reaper (this one
        or another) has just ended it."""
        if self._watches.get(watch.run_id) is not watch:
            return  # replaced by a later attempt meanwhile
        self._end(watch.run_id, watch.attempt)
        self._forget(watch)

    def alive(self, watch: Watch, lease_expires_at: datetime, now: datetime) -> None:
        """The database still holds the lease (until ``lease_expires_at``): look again then,
        and not before ``recheck`` from ``now``."""
        if self._watches.get(watch.run_id) is not watch:
            return
        if lease_expires_at > watch.lease_expires_at:
            watch.lease_expires_at = lease_expires_at
        self._arm(watch, max(watch.lease_expires_at + self.grace, now + self.recheck))

    def retry(self, watches: Iterable[Watch], at: datetime) -> None:
        """No verdict (the database could not be asked): look again at ``at``."""
        for watch in watches:
            if self._watches.get(watch.run_id) is watch:
                self._arm(watch, at)

    # partitions and offsets ---------------------------------------------------------------
    def revoke(self, partitions: Iterable[Partition]) -> int:
        """Drop everything read from ``partitions``; returns how many watches went."""
        gone = set(partitions)
        dropped = [w for w in self._watches.values() if w.partition in gone]
        for watch in dropped:
            self._forget(watch)
        for partition in gone:
            self._next.pop(partition, None)
            self._backing.pop(partition, None)
        return len(dropped)

    def positions(self) -> dict[Partition, int]:
        """The offset each partition read from may be committed at (see the module docstring)."""
        out: dict[Partition, int] = {}
        for partition, after_last in self._next.items():
            heap = self._backing.get(partition)
            while heap and not self._backs(heap[0], partition):
                heapq.heappop(heap)
            out[partition] = heap[0][0] if heap else after_last
        return out

    # internals ----------------------------------------------------------------------------
    def _read(self, partition: Partition, offset: int) -> None:
        if offset + 1 > self._next.get(partition, -1):
            self._next[partition] = offset + 1

    def _back(self, watch: Watch) -> None:
        heapq.heappush(self._backing.setdefault(watch.partition, []), (watch.offset, watch.run_id))

    def _backs(self, entry: tuple[int, uuid.UUID], partition: Partition) -> bool:
        offset, run_id = entry
        watch = self._watches.get(run_id)
        return watch is not None and watch.partition == partition and watch.offset == offset

    def _arm(self, watch: Watch, at: datetime) -> None:
        if watch.armed_at is not None:
            if watch.armed_at <= at:
                return  # it comes back earlier anyway, and is put back at its deadline then
            self._wheel.remove(watch.run_id)
        added = self._wheel.add(watch.run_id, at, watch.run_id)
        assert added, "a run is in the wheel only while its watch is armed"
        watch.armed_at = at

    def _forget(self, watch: Watch) -> None:
        del self._watches[watch.run_id]
        if watch.armed_at is not None:
            self._wheel.remove(watch.run_id)
            watch.armed_at = None

    def _end(self, run_id: uuid.UUID, attempt: int) -> None:
        if self._ended.get(run_id, 0) >= attempt:
            return
        self._ended[run_id] = attempt
        self._ended.move_to_end(run_id)
        while len(self._ended) > self._ended_memory:
            self._ended.popitem(last=False)
