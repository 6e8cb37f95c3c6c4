"""The dispatcher's holding (duetime_dispatcher.holding and .ledger): the pure layer on the wheel.

De-duplication, in-order acks, retries, revocation and shedding, with fake ack tokens and a fake
clock. The faust glue around them is covered by tests/integration/test_dispatcher.py.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from duetime_dispatcher.holding import Holding, Outcome, Release, Source
from duetime_dispatcher.ledger import OffsetLedger
from duetime_dispatcher.routing import Routed

T0 = datetime(2026, 12, 2, 0, 0, tzinfo=UTC)
MS = timedelta(milliseconds=1)

S = timedelta(seconds=1)


def run_due(due: datetime, n: int = 0, attempt: int = 1) -> Routed:
    """Run number ``n`` due at ``due``, as routed from its headers (the bytes do not matter)."""
    run_id = uuid.UUID(int=n + 1)
    return Routed(str(run_id).encode(), attempt, due, "http", b"value-%d" % n, [])


def run_number(routed: Routed) -> int:
    return routed.run_id.int - 1


def src(offset: int, partition: int = 0, topic: str = "runs.due.10s") -> Source:
    return Source(topic, partition, offset)


def token(source: Source) -> str:
    return f"{source.topic}/{source.partition}@{source.offset}"


def receive(h: Holding[str], source: Source, run: Routed | None, now: datetime = T0) -> Outcome:
    return h.receive(source, run, token(source), now)


def due(h: Holding[str], now: datetime) -> list[Release[str]]:
    """Take what is due at ``now`` and hold it in flight, as the dispatcher's release round does
    around its produce calls."""
    releases = h.take_due(now)
    h.track(releases)
    return releases


def deliver_all(h: Holding[str], now: datetime) -> list[str]:
    """Release what is due at ``now``, confirm every delivery, return the tokens to ack."""
    for release in due(h, now):
        h.delivered(release, now)
    return h.ackable()


def test_holding_releases_at_due_and_acks_only_after_delivery() -> None:
    h: Holding[str] = Holding(T0)
    assert receive(h, src(0), run_due(T0 + 5 * S)) is Outcome.HELD
    assert h.ackable() == []
    assert due(h, T0 + 4 * S) == []
    [release] = due(h, T0 + 5 * S + 3 * MS)
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
    due(h, T0 + 62 * S)
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
    [release] = due(h, T0 + S)
    h.failed(release, T0 + S + 10 * MS)
    assert h.ackable() == []
    assert h.held == 1 and h.in_flight == 0
    assert due(h, T0 + S + 1009 * MS) == []  # retried after retry_interval (1 s), not in a loop
    [again] = due(h, T0 + S + 1010 * MS)
    assert again.routed == release.routed
    h.delivered(again, T0 + 2 * S)
    assert h.ackable() == ["runs.due.10s/0@0"]
    assert h.counters.release_failures == 1
    assert h.counters.released == 1


def test_holding_revoke_drops_held_runs_and_stale_deliveries() -> None:
    h: Holding[str] = Holding(T0)
    receive(h, src(0, partition=0), run_due(T0 + S, n=0))
    receive(h, src(1, partition=0), run_due(T0 + timedelta(hours=1), n=1))
    receive(h, src(0, partition=1), run_due(T0 + timedelta(hours=1), n=2))
    [in_flight] = due(h, T0 + S)
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
    [in_flight] = due(h, T0 + S)
    h.revoke({("runs.due.10s", 0)})
    assert receive(h, src(0), run) is Outcome.HELD  # the partition came back: read again
    h.failed(in_flight, T0 + S)  # the old release fails: nothing to retry, its record is gone
    [again] = due(h, T0 + S)
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


def test_holding_acks_a_record_whose_run_is_already_handled_without_releasing_it() -> None:
    """A late record the database says its run is past: acked in offset order, never released,
    and a later copy of the same run is not taken for a duplicate of it."""
    h: Holding[str] = Holding(T0)
    assert receive(h, src(0), run_due(T0 - S, n=1)) is Outcome.HELD
    handled = h.receive(src(1), run_due(T0 - S, n=2), token(src(1)), T0, handled=True)
    assert handled is Outcome.HANDLED
    assert h.held == 1 and h.counters.handled == 1
    assert h.ackable() == []  # behind the held run 1
    assert [run_number(r.routed) for r in due(h, T0)] == [1]
    assert receive(h, src(2), run_due(T0 - S, n=2)) is Outcome.HELD


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
        # stage what is due within the next value ms (the dispatcher's stage_ahead)
        st.tuples(st.just("stage"), st.just(0), st.just(0), st.integers(0, 1000)),
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(steps=_steps)
def test_holding_properties(steps: list[tuple[str, int, int, int]]) -> None:
    """Acks come in offset order per partition and only for settled records; every distinct run
    is released exactly once, never before it is due; staging ahead changes none of it."""
    h: Holding[str] = Holding(T0, dedup_window=timedelta(hours=1), prepare=S)
    now = T0
    next_offset = [0, 0, 0]
    fail_next = False
    settled: set[str] = set()  # tokens whose record is done: released, duplicate or garbage
    held: set[int] = set()
    released: dict[int, int] = {}
    acked: dict[int, list[int]] = {0: [], 1: [], 2: []}

    def settle_due(at: datetime, allow_failure: bool) -> None:
        nonlocal fail_next
        for release in due(h, at):
            assert release.routed.due_at <= at
            if allow_failure and fail_next:
                fail_next = False
                h.failed(release, at)
                continue
            n = run_number(release.routed)
            released[n] = released.get(n, 0) + 1
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
        elif op == "stage":
            h.stage(now, now + value * MS)
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
        st.tuples(st.just("stage"), st.just(0), st.just(0), st.integers(0, 1000)),
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(steps=_revoke_steps)
def test_holding_loses_nothing_across_revocations(steps: list[tuple[str, int, int, int]]) -> None:
    """Revocations (with releases still in flight) and re-reads from the committed offset: every
    run read is released at least once, never early, and the committed offsets only grow
    through a contiguous prefix of each partition. Runs staged ahead are revoked with the rest."""
    h: Holding[str] = Holding(T0, dedup_window=timedelta(hours=1), prepare=S)
    now = T0
    log: dict[int, list[Routed | None]] = {0: [], 1: []}  # each partition's records
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
        released.add(run_number(release.routed))
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
            for release in due(h, now):
                assert release.routed.due_at <= now
                outstanding.append(release)
        elif op == "outcomes":
            for release in outstanding:
                if value:
                    h.failed(release, now)
                else:
                    deliver(release, now)
            outstanding.clear()
        elif op == "stage":
            h.stage(now, now + value * MS)
        else:  # revoke, then the partition comes back and is read from the committed offset
            h.revoke({("runs.due.10s", partition)})
            for offset in range(len(acked[partition]), len(log[partition])):
                receive(h, src(offset, partition=partition), log[partition][offset], now)
        ack()
    for release in outstanding:
        deliver(release, now)
    now += timedelta(hours=2)
    for release in due(h, now):
        deliver(release, now)
    ack()
    assert read <= released
    for partition in (0, 1):
        assert acked[partition] == list(range(len(log[partition])))


def test_holding_sheds_the_runs_due_last_and_acks_them_in_order() -> None:
    """Shedding frees the cap from the far end: the runs due soonest stay, and a shed record
    is acked like a settled one (behind any held record before it on its partition)."""
    h: Holding[str] = Holding(T0)
    for offset, delay in enumerate((30, 10, 50, 20, 40)):
        receive(h, src(offset), run_due(T0 + delay * S, n=offset))
    shed = h.shed(2)
    assert [run_number(r) for r in shed] == [2, 4]  # due at +50 s and +40 s, latest first
    assert h.held == 3 and h.counters.shed == 2
    assert h.ackable() == []  # offsets 2 and 4 wait behind the held offset 0
    assert deliver_all(h, T0 + 30 * S) == [f"runs.due.10s/0@{n}" for n in range(5)]
    assert h.shed(5) == []


def test_holding_settles_an_emitted_run_only_when_told() -> None:
    """A release whose work goes on after the broker's ack (a Kafka target's database write)
    counts as released for de-duplication at once, but is acked only once settled."""
    h: Holding[str] = Holding(T0)
    run = run_due(T0 + S)
    receive(h, src(0), run)
    [release] = due(h, T0 + S)
    h.delivered(release, T0 + S, settle=False)
    assert h.ackable() == []
    assert receive(h, src(1), run) is Outcome.DUPLICATE
    h.settle(release)
    assert h.ackable() == ["runs.due.10s/0@0", "runs.due.10s/0@1"]


def test_runs_taken_due_are_in_flight_once_tracked() -> None:
    """The dispatcher produces a round's runs between take_due and track (with no await between
    them); once tracked, a copy read again is a duplicate, and delivery acks as before."""
    h: Holding[str] = Holding(T0)
    receive(h, src(0), run_due(T0 + S))
    receive(h, src(1), run_due(T0 + S, 1))
    taken = h.take_due(T0 + S)
    assert [run_number(r.routed) for r in taken] == [0, 1]
    assert h.held == 0 and h.in_flight == 0
    h.track(taken)
    assert h.in_flight == 2
    assert receive(h, src(2), run_due(T0 + S)) is Outcome.DUPLICATE
    for release in taken:
        h.delivered(release, T0 + S)
    assert h.in_flight == 0
    assert h.ackable() == [token(src(0)), token(src(1)), token(src(2))]


def test_runs_staged_ahead_are_released_at_their_instant_and_still_count_as_held() -> None:
    h: Holding[str] = Holding(T0, prepare=S)
    for n in range(3):
        receive(h, src(n), run_due(T0 + 5 * S, n=n))
    receive(h, src(3), run_due(T0 + 9 * S, n=3))
    assert h.stage(T0 + 4 * S, T0 + 5 * S) == 3
    assert h.held == 4 and h.in_flight == 0
    assert h.next_due() == T0 + 5 * S  # the staged runs' instant
    # A copy read while staged is dropped; one due sooner than them goes first, at its instant.
    assert receive(h, src(4), run_due(T0 + 5 * S, n=1), T0 + 4 * S) is Outcome.DUPLICATE
    assert receive(h, src(5), run_due(T0 + 4500 * MS, n=5), T0 + 4 * S) is Outcome.HELD
    assert due(h, T0 + 4400 * MS) == []
    assert [run_number(r.routed) for r in due(h, T0 + 4500 * MS)] == [5]
    [a, b, c] = due(h, T0 + 5 * S + 2 * MS)
    assert [run_number(r.routed) for r in (a, b, c)] == [0, 1, 2]
    assert a.taken_at == T0 + 5 * S + 2 * MS  # taken when released, not when staged
    assert h.held == 1 and h.in_flight == 4  # with run 5, not yet delivered


def test_a_run_staged_after_later_ones_is_released_at_its_instant_and_they_at_theirs() -> None:
    """Read after a staging and due before the runs it staged, a run staged next goes in due
    order: the slice at its instant takes it alone, not the later runs early."""
    h: Holding[str] = Holding(T0, prepare=S)
    receive(h, src(0), run_due(T0 + 2 * MS, n=0))
    assert h.stage(T0, T0 + 2 * MS) == 1
    receive(h, src(1), run_due(T0 + 1 * MS, n=1))
    assert h.stage(T0, T0 + 1 * MS) == 1
    assert [run_number(r.routed) for r in due(h, T0 + 1 * MS)] == [1]
    assert [run_number(r.routed) for r in due(h, T0 + 2 * MS)] == [0]


def test_a_revoke_drops_staged_runs_and_a_reread_copy_is_released_once() -> None:
    h: Holding[str] = Holding(T0, prepare=S)
    receive(h, src(0, partition=0), run_due(T0 + 5 * S, n=0))
    receive(h, src(0, partition=1), run_due(T0 + 5 * S, n=1))
    assert h.stage(T0 + 4 * S, T0 + 5 * S) == 2
    assert h.revoke({("runs.due.10s", 1)}) == 1
    assert h.held == 1
    # Partition 1 comes back and its record is read again: held anew, released once.
    assert receive(h, src(0, partition=1), run_due(T0 + 5 * S, n=1), T0 + 4 * S) is Outcome.HELD
    released = due(h, T0 + 5 * S)
    assert sorted(run_number(r.routed) for r in released) == [0, 1]
    assert h.held == 0
