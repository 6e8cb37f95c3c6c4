"""The timing wheel: named cases for each level and the overflow, then properties against a model.

The properties are the dispatcher's contract: every item is released exactly once, never before
its due instant, by the first advance at or after it, and in due order.

The second half tests the dispatcher's holding (duetime_dispatcher.holding and .ledger), the pure
layer on top of the wheel: de-duplication, in-order acks, retries and revocation.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from duetime.model import HttpTarget, RunEvent
from duetime.timing_wheel import TimingWheel
from duetime_dispatcher.holding import Holding, Outcome, Release, Source
from duetime_dispatcher.ledger import OffsetLedger

T0 = datetime(2026, 12, 2, 0, 0, tzinfo=UTC)
MS = timedelta(milliseconds=1)


def wheel(**kwargs: object) -> TimingWheel[str, str]:
    return TimingWheel(T0, **kwargs)  # type: ignore[arg-type]


def test_releases_at_due_instant_not_before() -> None:
    w = wheel()
    w.add("a", T0 + 25 * MS, "a")
    assert w.advance(T0 + 24 * MS) == []
    assert w.advance(T0 + timedelta(milliseconds=24, microseconds=999)) == []
    assert w.advance(T0 + 25 * MS) == ["a"]
    assert len(w) == 0
    assert w.advance(T0 + 1000 * MS) == []


def test_exact_within_a_tick() -> None:
    """Two items in the same 10 ms tick: each waits for its own instant."""
    w = wheel()
    w.add("late", T0 + 17 * MS, "late")
    w.add("early", T0 + 13 * MS, "early")
    assert w.advance(T0 + 12 * MS) == []
    assert w.advance(T0 + 13 * MS) == ["early"]  # exactly at its instant, "late" still held
    assert w.advance(T0 + 16 * MS) == []
    assert w.advance(T0 + 17 * MS) == ["late"]


def test_release_order_is_due_order_then_addition_order() -> None:
    w = wheel()
    w.add("c", T0 + timedelta(seconds=3), "c")
    w.add("a", T0 + timedelta(seconds=1), "a")
    w.add("b1", T0 + timedelta(seconds=2), "b1")
    w.add("b2", T0 + timedelta(seconds=2), "b2")
    assert w.advance(T0 + timedelta(hours=1)) == ["a", "b1", "b2", "c"]


def test_duplicate_key_is_a_noop() -> None:
    w = wheel()
    assert w.add("run:1", T0 + timedelta(seconds=5), "first")
    assert not w.add("run:1", T0 + timedelta(seconds=1), "second")
    assert len(w) == 1
    assert w.get("run:1") == "first"
    assert w.advance(T0 + timedelta(seconds=2)) == []
    assert w.advance(T0 + timedelta(seconds=5)) == ["first"]
    # Once released the key is free again: dedup of released items is the caller's business.
    assert w.add("run:1", T0 + timedelta(seconds=6), "again")


def test_past_due_item_is_released_at_next_advance() -> None:
    w = wheel()
    w.advance(T0 + timedelta(seconds=10))
    w.add("old", T0 - timedelta(days=3), "old")
    w.add("now", T0 + timedelta(seconds=10), "now")
    assert w.next_due() == T0 - timedelta(days=3)
    assert w.advance(T0 + timedelta(seconds=10)) == ["old", "now"]


@pytest.mark.parametrize(
    "delay",
    [
        pytest.param(timedelta(seconds=2), id="level-0"),
        pytest.param(timedelta(minutes=5), id="level-1"),
        pytest.param(timedelta(hours=30), id="level-2"),
        pytest.param(timedelta(days=200), id="level-3"),
        pytest.param(timedelta(days=900), id="overflow"),
    ],
)
def test_each_level_cascades_to_the_exact_instant(delay: timedelta) -> None:
    w = wheel()
    due = T0 + delay + timedelta(microseconds=1234)
    w.add("x", due, "x")
    nxt = w.next_due()
    assert nxt is not None and nxt <= due
    assert w.advance(due - timedelta(microseconds=1)) == []
    assert w.advance(due) == ["x"]
    assert w.next_due() is None


def test_small_wheel_overflow_and_boundaries() -> None:
    """A tiny wheel (4 slots x 2 levels = 16 ticks) makes every boundary and the overflow busy."""
    w: TimingWheel[int, int] = TimingWheel(T0, tick=MS, slots=4, levels=2)
    for n in range(0, 100):
        w.add(n, T0 + n * MS, n)
    released: list[int] = []
    for step in range(0, 101, 3):
        released += w.advance(T0 + step * MS)
    assert released == list(range(100))


def test_remove_from_slot_ready_and_overflow() -> None:
    w: TimingWheel[str, str] = TimingWheel(T0, tick=MS, slots=4, levels=1)
    w.add("slot", T0 + 2 * MS, "slot")
    w.add("ready", T0 + timedelta(microseconds=10), "ready")
    w.add("far", T0 + 100 * MS, "far")
    w.advance(T0)  # "ready" is in the current tick now, due in 10 us
    assert w.remove("slot") == "slot"
    assert w.remove("ready") == "ready"
    assert w.remove("far") == "far"
    assert w.remove("far") is None
    assert len(w) == 0
    assert w.next_due() is None
    assert w.advance(T0 + timedelta(days=1)) == []
    # A removed key can be held again.
    assert w.add("far", T0 + timedelta(days=2), "far2")
    assert w.advance(T0 + timedelta(days=2)) == ["far2"]


def test_next_due_is_a_lower_bound_that_converges() -> None:
    w = wheel()
    due = T0 + timedelta(minutes=7, milliseconds=3, microseconds=7)
    w.add("a", due, "a")
    seen = 0
    while (nxt := w.next_due()) is not None:
        assert nxt <= due
        got = w.advance(nxt)
        seen += 1
        assert seen < 10
        if got:
            assert got == ["a"] and nxt == due


def test_time_going_backwards_keeps_latest_now() -> None:
    w = wheel()
    w.advance(T0 + timedelta(seconds=5))
    w.add("a", T0 + timedelta(seconds=4), "a")
    assert w.advance(T0 + timedelta(seconds=1)) == ["a"]  # due before the latest now seen


def test_rejects_naive_datetimes_and_bad_shapes() -> None:
    w = wheel()
    with pytest.raises(ValueError, match="aware"):
        w.add("a", datetime(2026, 1, 1), "a")
    with pytest.raises(ValueError, match="power of two"):
        TimingWheel(T0, slots=100)
    with pytest.raises(ValueError, match="levels"):
        TimingWheel(T0, levels=0)


def test_a_spike_in_one_tick() -> None:
    w: TimingWheel[int, int] = wheel()  # type: ignore[assignment]
    due = T0 + timedelta(hours=1)
    for n in range(20_000):
        w.add(n, due + timedelta(microseconds=n % 7), n)
    assert w.advance(due - MS) == []
    out = w.advance(due + MS)
    assert sorted(out) == list(range(20_000))
    assert [n % 7 for n in out] == sorted(n % 7 for n in out)


# -- properties ------------------------------------------------------------------------------

_offsets = st.integers(min_value=-5_000_000, max_value=4 * 3600 * 1_000_000)  # microseconds
_ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 40), _offsets),
        st.tuples(st.just("remove"), st.integers(0, 40), st.just(0)),
        # Steps forward: small ones exercise level 0, big ones the cascades.
        st.tuples(
            st.just("advance"),
            st.just(0),
            st.one_of(st.integers(0, 30_000), st.integers(0, 2 * 3600 * 1_000_000)),
        ),
    ),
    max_size=120,
)


@settings(max_examples=400, deadline=None)
@given(
    ops=_ops,
    shape=st.sampled_from([(10_000, 256, 4), (1_000, 4, 2), (7, 2, 3), (10_000, 8, 1)]),
)
def test_matches_a_model(ops: list[tuple[str, int, int]], shape: tuple[int, int, int]) -> None:
    tick_us, slots, levels = shape
    w: TimingWheel[int, tuple[int, int]] = TimingWheel(
        T0, tick=timedelta(microseconds=tick_us), slots=slots, levels=levels
    )
    model: dict[int, tuple[int, int]] = {}  # key -> (due_us, addition seq)
    released_count: dict[tuple[int, int], int] = {}
    now_us = 0
    seq = 0
    for op, key, value in ops:
        if op == "add":
            seq += 1
            added = w.add(key, T0 + timedelta(microseconds=value), (key, seq))
            assert added == (key not in model)
            if added:
                model[key] = (value, seq)
        elif op == "remove":
            got = w.remove(key)
            expected = model.pop(key, None)
            assert got == (None if expected is None else (key, expected[1]))
        else:
            now_us += value
            out = w.advance(T0 + timedelta(microseconds=now_us))
            due_now = sorted(
                ((due, s, k) for k, (due, s) in model.items() if due <= now_us),
            )
            # Released exactly the items due at or before now (so: at the first advance at or
            # after their due instant, never before it), in due order, ties in addition order.
            assert out == [(k, s) for _, s, k in due_now]
            for k, s in out:
                released_count[(k, s)] = released_count.get((k, s), 0) + 1
                del model[k]
        assert len(w) == len(model)
        nxt = w.next_due()
        if model:
            assert nxt is not None
            assert nxt <= T0 + timedelta(microseconds=min(d for d, _ in model.values()))
        else:
            assert nxt is None
    # Drain everything: each item released exactly once overall.
    out = w.advance(T0 + timedelta(days=365 * 3))
    for k, s in out:
        released_count[(k, s)] = released_count.get((k, s), 0) + 1
        del model[k]
    assert not model
    assert all(count == 1 for count in released_count.values())


# -- the dispatcher's holding, built on the wheel ---------------------------------------------
# (duetime_dispatcher.holding and .ledger are pure: they are tested here with fake ack tokens and
# a fake clock. The faust glue around them is covered by tests/integration/test_dispatcher.py.)

S = timedelta(seconds=1)


def run_due(due: datetime, n: int = 0, attempt: int = 1) -> RunEvent:
    return RunEvent(
        run_id=uuid.UUID(int=n + 1),
        job_id=f"job-{n}",
        tenant="team-a",
        scheduled_for=due,
        due_at=due,
        attempt=attempt,
        max_attempts=3,
        target_service="svc",
        target=HttpTarget(url="https://example.com/hook"),
        lease=timedelta(seconds=60),
        heartbeat_interval=timedelta(seconds=20),
    )


def src(offset: int, partition: int = 0, topic: str = "runs.due.10s") -> Source:
    return Source(topic, partition, offset)


def token(source: Source) -> str:
    return f"{source.topic}/{source.partition}@{source.offset}"


def receive(h: Holding[str], source: Source, run: RunEvent | None, now: datetime = T0) -> Outcome:
    return h.receive(source, run, token(source), now)


def deliver_all(h: Holding[str], now: datetime) -> list[str]:
    """Release what is due at ``now``, confirm every delivery, return the tokens to ack."""
    for release in h.due(now):
        h.delivered(release, now)
    return h.ackable()


def test_holding_releases_at_due_and_acks_only_after_delivery() -> None:
    h: Holding[str] = Holding(T0)
    assert receive(h, src(0), run_due(T0 + 5 * S)) is Outcome.HELD
    assert h.ackable() == []
    assert h.due(T0 + 4 * S) == []
    [release] = h.due(T0 + 5 * S + 3 * MS)
    assert release.taken_at == T0 + 5 * S + 3 * MS
    assert h.ackable() == []  # in flight: the broker has not acknowledged it yet
    # Lateness runs until the broker acknowledged the release: publishing is part of it.
    assert h.delivered(release, T0 + 5 * S + 7 * MS) == 7 * MS
    assert h.ackable() == ["runs.due.10s/0@0"]
    assert h.counters.released == 1
    assert h.counters.lateness_max_ms == 7.0


def test_holding_never_acks_past_a_held_run() -> None:
    """A run due in an hour pins its partition: later records are released but not acked."""
    h: Holding[str] = Holding(T0)
    receive(h, src(0), run_due(T0 + timedelta(hours=1), n=0))
    for offset in (1, 2, 3):
        receive(h, src(offset), run_due(T0 + offset * S, n=offset))
    receive(h, src(0, partition=1), run_due(T0 + 2 * S, n=9))
    assert deliver_all(h, T0 + 10 * S) == ["runs.due.10s/1@0"]
    assert h.counters.released == 4
    assert h.unacked == 4
    assert h.oldest_unacked(("runs.due.10s", 0)) == 0
    assert deliver_all(h, T0 + timedelta(hours=1)) == [f"runs.due.10s/0@{n}" for n in range(4)]
    assert h.unacked == 0


def test_holding_drops_duplicates_and_acks_them_in_offset_order() -> None:
    h: Holding[str] = Holding(T0)
    run = run_due(T0 + 5 * S)
    assert receive(h, src(0), run) is Outcome.HELD
    assert receive(h, src(1), run) is Outcome.DUPLICATE
    # The same key on another partition (another tier topic) is acked at once.
    assert receive(h, src(0, topic="runs.due.5m"), run) is Outcome.DUPLICATE
    assert h.ackable() == ["runs.due.5m/0@0"]
    # Another attempt of the same run is a different key.
    assert receive(h, src(2), run_due(T0 + 5 * S, attempt=2)) is Outcome.HELD
    assert deliver_all(h, T0 + 5 * S) == [
        "runs.due.10s/0@0",
        "runs.due.10s/0@1",
        "runs.due.10s/0@2",
    ]
    assert h.counters.duplicates == 2
    assert h.counters.released == 2


def test_holding_dedup_window_after_release() -> None:
    h: Holding[str] = Holding(T0, dedup_window=60 * S)
    run = run_due(T0 + S)
    receive(h, src(0), run)
    deliver_all(h, T0 + S)
    # A copy read again soon after (e.g. after a rebalance, offsets not yet committed) is dropped.
    assert receive(h, src(1), run) is Outcome.DUPLICATE
    assert deliver_all(h, T0 + 30 * S) == ["runs.due.10s/0@1"]
    # A deliberate re-publish after the window (the planner's sweeper) goes through.
    h.due(T0 + 62 * S)
    assert receive(h, src(2), run) is Outcome.HELD
    assert deliver_all(h, T0 + 62 * S) == ["runs.due.10s/0@2"]
    assert h.counters.released == 2


def test_holding_acks_undecodable_records_in_order() -> None:
    h: Holding[str] = Holding(T0)
    assert receive(h, src(0), None) is Outcome.UNDECODABLE
    assert h.ackable() == ["runs.due.10s/0@0"]
    receive(h, src(1), run_due(T0 + 5 * S))
    assert receive(h, src(2), None) is Outcome.UNDECODABLE
    assert h.ackable() == []  # behind the held run
    assert deliver_all(h, T0 + 5 * S) == ["runs.due.10s/0@1", "runs.due.10s/0@2"]
    assert h.counters.undecodable == 2


def test_holding_retries_a_failed_release() -> None:
    h: Holding[str] = Holding(T0)
    receive(h, src(0), run_due(T0 + S))
    [release] = h.due(T0 + S)
    h.failed(release, T0 + S + 10 * MS)
    assert h.ackable() == []
    assert h.held == 1 and h.in_flight == 0
    assert h.due(T0 + S + 1009 * MS) == []  # retried after retry_interval (1 s), not in a loop
    [again] = h.due(T0 + S + 1010 * MS)
    assert again.run == release.run
    h.delivered(again, T0 + 2 * S)
    assert h.ackable() == ["runs.due.10s/0@0"]
    assert h.counters.release_failures == 1
    assert h.counters.released == 1


def test_holding_revoke_drops_held_runs_and_stale_deliveries() -> None:
    h: Holding[str] = Holding(T0)
    receive(h, src(0, partition=0), run_due(T0 + S, n=0))
    receive(h, src(1, partition=0), run_due(T0 + timedelta(hours=1), n=1))
    receive(h, src(0, partition=1), run_due(T0 + timedelta(hours=1), n=2))
    [in_flight] = h.due(T0 + S)
    assert h.revoke({("runs.due.10s", 0)}) == 1
    assert h.held == 1  # partition 1 kept
    h.delivered(in_flight, T0 + S)  # the broker has it, but its partition is someone else's now
    assert h.ackable() == []
    # The same records read again after the partition comes back are new work.
    assert receive(h, src(1, partition=0), run_due(T0 + timedelta(hours=1), n=1)) is Outcome.HELD
    assert h.revoke({("runs.due.10s", 0), ("runs.due.10s", 1)}) == 2
    assert h.held == 0 and h.unacked == 0
    assert h.counters.dropped_on_revoke == 3


def test_holding_rereads_a_revoked_in_flight_run_as_new_work() -> None:
    """Revoked while its release was being published, then read again: if that release fails,
    the run must still be released (it is held again, not dropped as a copy)."""
    h: Holding[str] = Holding(T0)
    run = run_due(T0 + S)
    receive(h, src(0), run)
    [in_flight] = h.due(T0 + S)
    h.revoke({("runs.due.10s", 0)})
    assert receive(h, src(0), run) is Outcome.HELD  # the partition came back: read again
    h.failed(in_flight, T0 + S)  # the old release fails: nothing to retry, its record is gone
    [again] = h.due(T0 + S)
    assert again.source == src(0) and again.claim is not in_flight.claim
    h.delivered(again, T0 + S)
    assert h.ackable() == ["runs.due.10s/0@0"]


def test_holding_ignores_records_it_already_tracks() -> None:
    h: Holding[str] = Holding(T0)
    receive(h, src(5), run_due(T0 + S))
    assert receive(h, src(5), run_due(T0 + S)) is Outcome.REDELIVERED
    assert receive(h, src(3), None) is Outcome.REDELIVERED
    assert h.counters.redelivered == 2
    assert deliver_all(h, T0 + S) == ["runs.due.10s/0@5"]


def test_holding_acks_runs_due_beyond_max_hold_without_holding_them() -> None:
    """A run due in two days would pin its partition for two days; the planner re-publishes it."""
    h: Holding[str] = Holding(T0, max_hold=timedelta(hours=2))
    assert receive(h, src(0), run_due(T0 + timedelta(days=2))) is Outcome.TOO_FAR
    assert receive(h, src(1), run_due(T0 + timedelta(hours=2))) is Outcome.HELD
    assert h.ackable() == ["runs.due.10s/0@0"]
    assert h.held == 1 and h.counters.too_far == 1
    # Measured from the time of reading, not from the wheel's start.
    later = T0 + timedelta(days=1, hours=23)
    assert receive(h, src(2), run_due(T0 + timedelta(days=2), n=5), now=later) is Outcome.HELD


def test_ledger_partial_revoke_keeps_other_partitions() -> None:
    ledger: OffsetLedger[int] = OffsetLedger()
    a = ledger.track(("t", 0), 0, 10)
    b = ledger.track(("t", 1), 0, 20)
    assert a is not None and b is not None
    assert ledger.drop([("t", 0)]) == 1
    ledger.settle(a)
    ledger.settle(b)
    assert ledger.ackable() == [20]
    assert len(ledger) == 0


_steps = st.lists(
    st.one_of(
        # receive: partition, run number (duplicates when numbers repeat), due offset in ms
        st.tuples(st.just("recv"), st.integers(0, 2), st.integers(0, 12), st.integers(-500, 5000)),
        st.tuples(st.just("garbage"), st.integers(0, 2), st.just(0), st.just(0)),
        st.tuples(st.just("tick"), st.just(0), st.just(0), st.integers(0, 1500)),
        st.tuples(st.just("fail_next"), st.just(0), st.just(0), st.just(0)),
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(steps=_steps)
def test_holding_properties(steps: list[tuple[str, int, int, int]]) -> None:
    """Acks come in offset order per partition and only for settled records; every distinct run
    is released exactly once, never before it is due."""
    h: Holding[str] = Holding(T0, dedup_window=timedelta(hours=1))
    now = T0
    next_offset = [0, 0, 0]
    fail_next = False
    settled: set[str] = set()  # tokens whose record is done: released, duplicate or garbage
    held: set[int] = set()
    released: dict[int, int] = {}
    acked: dict[int, list[int]] = {0: [], 1: [], 2: []}

    def settle_due(at: datetime, allow_failure: bool) -> None:
        nonlocal fail_next
        for release in h.due(at):
            assert release.run.due_at <= at
            if allow_failure and fail_next:
                fail_next = False
                h.failed(release, at)
                continue
            number = int(release.run.job_id.removeprefix("job-"))
            released[number] = released.get(number, 0) + 1
            settled.add(token(release.source))
            h.delivered(release, at)
        for tok in h.ackable():
            assert tok in settled
            place = tok.split("/")[1]
            partition, offset = (int(x) for x in place.split("@"))
            acked[partition].append(offset)

    for op, partition, number, value in steps:
        if op in ("recv", "garbage"):
            source = src(next_offset[partition], partition=partition)
            next_offset[partition] += 1
            run = None if op == "garbage" else run_due(T0 + value * MS, n=number)
            outcome = receive(h, source, run)
            if outcome is Outcome.HELD:
                assert number not in held
                held.add(number)
            else:
                assert outcome is (Outcome.UNDECODABLE if run is None else Outcome.DUPLICATE)
                settled.add(token(source))
        elif op == "fail_next":
            fail_next = True
        else:
            now += value * MS
        settle_due(now, allow_failure=True)
    settle_due(now + timedelta(hours=2), allow_failure=False)
    assert set(released) == held
    assert all(count == 1 for count in released.values())
    for partition, offsets in acked.items():
        assert offsets == list(range(next_offset[partition]))
    assert h.unacked == 0 and h.held == 0 and h.in_flight == 0


_revoke_steps = st.lists(
    st.one_of(
        st.tuples(st.just("recv"), st.integers(0, 1), st.integers(0, 9), st.integers(-500, 4000)),
        st.tuples(st.just("garbage"), st.integers(0, 1), st.just(0), st.just(0)),
        st.tuples(st.just("tick"), st.just(0), st.just(0), st.integers(0, 1500)),
        # resolve the publisher's outstanding releases: 0 = all delivered, 1 = all refused
        st.tuples(st.just("outcomes"), st.just(0), st.just(0), st.integers(0, 1)),
        st.tuples(st.just("revoke"), st.integers(0, 1), st.just(0), st.just(0)),
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(steps=_revoke_steps)
def test_holding_loses_nothing_across_revocations(steps: list[tuple[str, int, int, int]]) -> None:
    """Revocations (with releases still in flight) and re-reads from the committed offset: every
    run read is released at least once, never early, and the committed offsets only grow
    through a contiguous prefix of each partition."""
    h: Holding[str] = Holding(T0, dedup_window=timedelta(hours=1))
    now = T0
    log: dict[int, list[RunEvent | None]] = {0: [], 1: []}  # each partition's records
    acked: dict[int, list[int]] = {0: [], 1: []}
    outstanding: list[Release[str]] = []
    released: set[int] = set()
    read: set[int] = set()

    def ack() -> None:
        for tok in h.ackable():
            partition, offset = (int(x) for x in tok.split("/")[1].split("@"))
            assert offset == len(acked[partition]), "acks must be the next offset, in order"
            acked[partition].append(offset)

    def deliver(release: Release[str], at: datetime) -> None:
        released.add(int(release.run.job_id.removeprefix("job-")))
        h.delivered(release, at)

    for op, partition, number, value in steps:
        if op in ("recv", "garbage"):
            run = None if op == "garbage" else run_due(T0 + value * MS, n=number)
            log[partition].append(run)
            offset = len(log[partition]) - 1
            receive(h, src(offset, partition=partition), run, now)
            if run is not None:
                read.add(number)
        elif op == "tick":
            now += value * MS
            for release in h.due(now):
                assert release.run.due_at <= now
                outstanding.append(release)
        elif op == "outcomes":
            for release in outstanding:
                if value:
                    h.failed(release, now)
                else:
                    deliver(release, now)
            outstanding.clear()
        else:  # revoke, then the partition comes back and is read from the committed offset
            h.revoke({("runs.due.10s", partition)})
            for offset in range(len(acked[partition]), len(log[partition])):
                receive(h, src(offset, partition=partition), log[partition][offset], now)
        ack()
    for release in outstanding:
        deliver(release, now)
    now += timedelta(hours=2)
    for release in h.due(now):
        deliver(release, now)
    ack()
    assert read <= released
    for partition in (0, 1):
        assert acked[partition] == list(range(len(log[partition])))
