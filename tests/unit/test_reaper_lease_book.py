"""The reaper's lease book: heartbeats and results folded into watches, due leases, offsets."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from duetime.events import RunHeartbeat, RunResult
from duetime_reaper.lease_book import LeaseBook, Partition

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
GRACE = timedelta(milliseconds=200)
RECHECK = timedelta(milliseconds=500)
HB: Partition = ("p.runs.heartbeats", 3)
RS: Partition = ("p.runs.results", 3)
RUN = uuid.UUID(int=1)


def _s(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _book(**kwargs: object) -> LeaseBook:
    return LeaseBook(T0, grace=GRACE, recheck=RECHECK, **kwargs)  # type: ignore[arg-type]


def _beat(expires_s: float, attempt: int = 1, run_id: uuid.UUID = RUN) -> RunHeartbeat:
    return RunHeartbeat(
        run_id=run_id,
        scheduled_for=T0,
        attempt=attempt,
        worker="w1",
        lease_expires_at=_s(expires_s),
        sent_at=_s(0),
    )


def _result(attempt: int = 1, state: str = "succeeded", run_id: uuid.UUID = RUN) -> RunResult:
    return RunResult(
        run_id=run_id,
        job_id="j",
        tenant="t",
        target_service="svc",
        scheduled_for=T0,
        attempt=attempt,
        worker="w1",
        outcome="fenced" if state == "unknown" else "succeeded",
        state=state,
        started_at=T0,
        finished_at=T0,
    )


def _due_ids(book: LeaseBook, seconds: float) -> list[tuple[uuid.UUID, int]]:
    return [(w.run_id, w.attempt) for w in book.due(_s(seconds))]


def test_a_watch_comes_due_after_its_lease_and_the_grace() -> None:
    book = _book()
    assert book.heartbeat(_beat(3), HB, 10)
    assert _due_ids(book, 3.1) == []
    assert book.next_due() is not None and book.next_due() <= _s(3.2)  # type: ignore[operator]
    assert _due_ids(book, 3.2) == [(RUN, 1)]
    assert len(book) == 1  # still watched while the database is asked
    assert _due_ids(book, 10) == []  # but not handed out twice


def test_a_heartbeat_extends_the_lease() -> None:
    book = _book()
    book.heartbeat(_beat(3), HB, 10)
    assert book.heartbeat(_beat(5), HB, 11)
    assert _due_ids(book, 4) == []
    assert _due_ids(book, 5.1) == []
    assert _due_ids(book, 5.2) == [(RUN, 1)]


def test_repeated_and_out_of_order_heartbeats_change_nothing() -> None:
    book = _book()
    book.heartbeat(_beat(5), HB, 11)
    assert not book.heartbeat(_beat(3), HB, 10)  # an older heartbeat read late
    watch = book.get(RUN)
    assert watch is not None and watch.lease_expires_at == _s(5)
    assert book.heartbeat(_beat(5), HB, 12)  # a copy: same deadline, newer record
    assert _due_ids(book, 5.1) == []
    assert _due_ids(book, 5.2) == [(RUN, 1)]


def test_a_later_attempt_replaces_the_watch_and_keeps_its_own_deadline() -> None:
    book = _book()
    book.heartbeat(_beat(60), HB, 10)  # attempt 1: a long lease
    assert book.heartbeat(_beat(3, attempt=2), HB, 11)  # attempt 2: a short one
    assert _due_ids(book, 3.2) == [(RUN, 2)]
    # attempt 1 has ended (attempt 2 could not be claimed otherwise): its heartbeats are stale
    assert not book.heartbeat(_beat(90, attempt=1), HB, 12)
    assert _due_ids(book, 100) == []


def test_a_result_removes_the_watch() -> None:
    book = _book()
    book.heartbeat(_beat(3), HB, 10)
    assert book.result(_result(state="scheduled"), RS, 4)
    assert len(book) == 0
    assert _due_ids(book, 10) == []


def test_a_heartbeat_read_after_its_attempts_result_is_ignored() -> None:
    book = _book()
    assert not book.result(_result(attempt=1), RS, 4)  # nothing watched yet
    assert not book.heartbeat(_beat(3, attempt=1), HB, 10)
    assert len(book) == 0
    assert book.heartbeat(_beat(8, attempt=2), HB, 11)  # the retry is watched
    assert _due_ids(book, 8.2) == [(RUN, 2)]


def test_a_result_of_a_lost_lease_keeps_the_watch() -> None:
    # The worker gave up (self-fenced, or its completion was rejected): the attempt may still be
    # running in the database until the reaper ends it.
    book = _book()
    book.heartbeat(_beat(3), HB, 10)
    assert not book.result(_result(state="unknown"), RS, 4)
    assert _due_ids(book, 3.2) == [(RUN, 1)]


def test_a_result_of_an_earlier_attempt_keeps_the_watch() -> None:
    book = _book()
    book.heartbeat(_beat(3, attempt=2), HB, 10)
    assert not book.result(_result(attempt=1, state="scheduled"), RS, 4)
    assert _due_ids(book, 3.2) == [(RUN, 2)]


def test_alive_looks_again_at_the_databases_deadline_but_not_at_once() -> None:
    book = _book()
    book.heartbeat(_beat(3), HB, 10)
    [watch] = book.due(_s(3.2))
    book.alive(watch, _s(9), now=_s(3.2))  # renewed in PostgreSQL; its heartbeat not read yet
    assert _due_ids(book, 9.1) == []
    [watch] = book.due(_s(9.2))
    # A deadline the database reports as passed (the row was locked): not before ``recheck``.
    book.alive(watch, _s(9), now=_s(9.2))
    assert _due_ids(book, 9.6) == []
    assert _due_ids(book, 9.7) == [(RUN, 1)]


def test_gone_forgets_the_attempt_for_good() -> None:
    book = _book()
    book.heartbeat(_beat(3), HB, 10)
    [watch] = book.due(_s(3.2))
    book.gone(watch)
    assert len(book) == 0
    assert not book.heartbeat(_beat(3), HB, 10)  # the same record, read again
    assert book.heartbeat(_beat(9, attempt=2), HB, 11)


def test_retry_looks_again_when_asked() -> None:
    book = _book()
    book.heartbeat(_beat(3), HB, 10)
    watches = book.due(_s(3.2))
    book.retry(watches, _s(5))
    assert _due_ids(book, 4.9) == []
    assert _due_ids(book, 5) == [(RUN, 1)]


def test_a_verdict_on_a_replaced_watch_is_ignored() -> None:
    book = _book()
    book.heartbeat(_beat(3), HB, 10)
    [old] = book.due(_s(3.2))
    book.heartbeat(_beat(20, attempt=2), HB, 11)
    book.gone(old)
    book.alive(old, _s(50), now=_s(3.3))
    watch = book.get(RUN)
    assert watch is not None and (watch.attempt, watch.lease_expires_at) == (2, _s(20))
    assert _due_ids(book, 20.2) == [(RUN, 2)]


def test_revoked_partitions_drop_their_watches_and_positions() -> None:
    book = _book()
    other: Partition = ("p.runs.heartbeats", 5)
    second = uuid.UUID(int=2)
    book.heartbeat(_beat(3), HB, 10)
    book.heartbeat(_beat(3, run_id=second), other, 7)
    assert book.revoke([HB, RS]) == 1
    assert book.get(RUN) is None and book.get(second) is not None
    assert set(book.positions()) == {other}
    assert _due_ids(book, 3.2) == [(second, 1)]
    # Assigned again later, the partition is read again from its committed offset.
    assert book.heartbeat(_beat(3), HB, 10)


def test_offsets_are_held_at_the_oldest_record_still_backing_a_watch() -> None:
    book = _book()
    book.heartbeat(_beat(3), HB, 10)
    book.heartbeat(_beat(3, run_id=uuid.UUID(int=2)), HB, 11)
    book.heartbeat(_beat(4), HB, 12)  # RUN's deadline now comes from offset 12
    book.result(_result(attempt=7, run_id=uuid.UUID(int=9)), RS, 40)
    book.skip(RS, 41)  # an undecodable record
    assert book.positions() == {HB: 11, RS: 42}
    book.result(_result(run_id=uuid.UUID(int=2)), RS, 42)
    assert book.positions() == {HB: 12, RS: 43}
    book.result(_result(), RS, 43)
    assert book.positions() == {HB: 13, RS: 44}


def test_a_watch_being_judged_still_holds_its_offset() -> None:
    book = _book()
    book.heartbeat(_beat(3), HB, 10)
    book.heartbeat(_beat(30, run_id=uuid.UUID(int=2)), HB, 11)
    [watch] = book.due(_s(3.2))
    assert book.positions() == {HB: 10}
    book.gone(watch)
    assert book.positions() == {HB: 11}


def test_ended_attempts_are_remembered_up_to_a_bound() -> None:
    book = _book(ended_memory=2)
    runs = [uuid.UUID(int=n) for n in range(1, 4)]
    for offset, run_id in enumerate(runs):
        book.result(_result(run_id=run_id), RS, offset)
    # The oldest is forgotten: its late heartbeat makes a watch, which the database will judge.
    assert book.heartbeat(_beat(3, run_id=runs[0]), HB, 1)
    assert not book.heartbeat(_beat(3, run_id=runs[2]), HB, 2)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"grace": timedelta(seconds=-1)},
        {"recheck": timedelta(0)},
        {"ended_memory": 0},
    ],
)
def test_settings_are_checked(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        LeaseBook(T0, **kwargs)  # type: ignore[arg-type]


# A record: (kind, run index, attempt, deadline in seconds or result state).
_records = st.lists(
    st.one_of(
        st.tuples(
            st.just("beat"),
            st.integers(0, 3),
            st.integers(1, 3),
            st.integers(1, 30),
        ),
        st.tuples(
            st.just("result"),
            st.integers(0, 3),
            st.integers(1, 3),
            st.sampled_from(["succeeded", "scheduled", "dead", "unknown"]),
        ),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(_records, st.integers(0, 40))
def test_properties_of_any_record_sequence(
    records: list[tuple[str, int, int, object]], at: int
) -> None:
    book = _book()
    latest: dict[tuple[int, int], datetime] = {}  # (run, attempt) -> latest deadline announced
    for offset, (kind, run, attempt, value) in enumerate(records):
        run_id = uuid.UUID(int=run + 1)
        if kind == "beat":
            assert isinstance(value, int)
            book.heartbeat(_beat(value, attempt=attempt, run_id=run_id), HB, offset)
            key = (run, attempt)
            latest[key] = max(latest.get(key, _s(value)), _s(value))
        else:
            assert isinstance(value, str)
            book.result(_result(attempt=attempt, state=value, run_id=run_id), RS, offset)
    now = _s(at)
    for watch in book.due(now):
        # Never due before the latest deadline any heartbeat announced for it, plus the grace.
        assert latest[(watch.run_id.int - 1, watch.attempt)] + GRACE <= now
    # At most one watch per run, and the committed offset never passes a record still backing
    # one: after a restart, reading from there shows every watched attempt again.
    position = book.positions().get(HB)
    for run in range(4):
        watch = book.get(uuid.UUID(int=run + 1))
        if watch is not None:
            assert position is not None and position <= watch.offset
