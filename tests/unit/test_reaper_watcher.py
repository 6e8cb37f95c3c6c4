"""The stream's expiry round with an in-memory judge, and the estimate of the database clock."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from duetime.errors import StoreError
from duetime.events import RunHeartbeat
from duetime.store.leases import LeaseCheck
from duetime_reaper.expiry import ExpiryCounts, Judgement
from duetime_reaper.lease_book import LeaseBook
from duetime_reaper.watcher import DbClock, LeaseWatcher

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
HB = ("p.runs.heartbeats", 0)


def _s(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


class FakeJudge:
    """Plays the database: ``expires_at`` per run, judged against ``db_now``."""

    def __init__(self) -> None:
        self.expires_at: dict[uuid.UUID, datetime] = {}
        self.db_now = T0
        self.calls: list[int] = []
        self.fail = 0

    def judge(self, checks: Sequence[LeaseCheck]) -> Judgement:
        self.calls.append(len(checks))
        if self.fail:
            self.fail -= 1
            raise StoreError("database error: OperationalError: connection refused")
        ended: set[tuple[uuid.UUID, int]] = set()
        alive: dict[tuple[uuid.UUID, int], datetime] = {}
        for check in checks:
            expires = self.expires_at.get(check.run_id)
            if expires is None:
                continue  # no longer running
            if expires < self.db_now:
                ended.add((check.run_id, check.attempt))
                del self.expires_at[check.run_id]
            else:
                alive[(check.run_id, check.attempt)] = expires
        return Judgement(
            ended=frozenset(ended),
            alive=alive,
            locked_expired=frozenset(),
            counts=ExpiryCounts(expired=len(ended), retried=len(ended)),
        )


def _watched(count: int, expires_s: float) -> tuple[LeaseBook, FakeJudge, list[uuid.UUID]]:
    book = LeaseBook(T0, grace=timedelta(milliseconds=200), recheck=timedelta(milliseconds=500))
    judge = FakeJudge()
    runs = [uuid.UUID(int=n + 1) for n in range(count)]
    for offset, run_id in enumerate(runs):
        judge.expires_at[run_id] = _s(expires_s)
        beat = RunHeartbeat(run_id, T0, 1, "w", _s(expires_s), T0)
        book.heartbeat(beat, HB, offset)
    return book, judge, runs


def test_due_leases_are_judged_in_batches_and_the_expired_forgotten() -> None:
    book, judge, _runs = _watched(5, 3)
    watcher = LeaseWatcher(book, judge, batch_size=2)
    assert watcher.run_once(_s(3)).judged == 0
    judge.db_now = _s(3.3)
    stats = watcher.run_once(_s(3.3))
    assert (stats.judged, stats.expired, stats.alive, stats.gone) == (5, 5, 0, 0)
    assert judge.calls == [2, 2, 1]
    assert len(book) == 0
    assert book.positions() == {HB: 5}


def test_a_lease_renewed_in_the_database_is_judged_again_at_its_new_expiry() -> None:
    book, judge, [run] = _watched(1, 3)
    judge.expires_at[run] = _s(10)  # renewed; its heartbeat not read yet
    watcher = LeaseWatcher(book, judge, batch_size=10)
    judge.db_now = _s(3.3)
    assert watcher.run_once(_s(3.3)).alive == 1
    assert watcher.run_once(_s(10.1)).judged == 0
    judge.db_now = _s(10.3)
    assert watcher.run_once(_s(10.3)).expired == 1


def test_an_attempt_that_ended_is_forgotten_without_an_expiry() -> None:
    book, judge, [run] = _watched(1, 3)
    del judge.expires_at[run]  # completed; its result not read
    stats = LeaseWatcher(book, judge, batch_size=10).run_once(_s(3.3))
    assert (stats.gone, stats.expired) == (1, 0)
    assert len(book) == 0


def test_a_batch_the_database_cannot_judge_is_tried_again_after_a_pause() -> None:
    book, judge, _runs = _watched(3, 3)
    judge.fail = 1
    judge.db_now = _s(3.3)
    watcher = LeaseWatcher(book, judge, batch_size=10, retry_pause=timedelta(seconds=2))
    assert watcher.run_once(_s(3.3)).failed == 3
    assert len(book) == 3
    assert watcher.run_once(_s(5.2)).judged == 0
    judge.db_now = _s(5.3)
    assert watcher.run_once(_s(5.3)).expired == 3


def test_the_clock_estimate_follows_the_database_clock() -> None:
    local = [T0]
    clock = DbClock(lambda: local[0])
    assert clock.stale(timedelta(seconds=30))

    def read_db_clock() -> datetime:
        local[0] += timedelta(milliseconds=20)  # the round trip
        return T0 + timedelta(seconds=5, milliseconds=10)  # the database runs 5 s ahead

    clock.measure(read_db_clock)
    assert clock.offset == timedelta(seconds=5)
    assert clock.now() == T0 + timedelta(seconds=5, milliseconds=20)
    assert not clock.stale(timedelta(seconds=30))
    local[0] += timedelta(seconds=30)
    assert clock.stale(timedelta(seconds=30))
