"""The timing wheel: named cases for each level and the overflow, then properties against a model.

The properties are the dispatcher's contract: every item is released exactly once, never before
its due instant, by the first advance at or after it, and in due order. The dispatcher's holding
on top of the wheel is tested in test_dispatcher_holding.py.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from duetime.timing_wheel import TimingWheel

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


def test_a_spike_prepared_ahead_is_released_on_time_by_a_slice() -> None:
    """advance(now, prepare) does the cascades and the sort of a spike ahead of time, releases
    nothing early, and next_due(prepare) wakes the caller ``prepare`` before the spike's tick."""
    w: TimingWheel[int, int] = wheel()  # type: ignore[assignment]
    midnight = T0 + timedelta(hours=1)  # a tick at the start of a level-1 span: cascades there
    lead = timedelta(seconds=1)
    for n in range(5_000):
        w.add(n, midnight + timedelta(microseconds=n % 3), n)
    wakes: list[datetime] = []
    while (wake := w.next_due(lead)) != midnight:  # the cascades, each at least lead ahead
        assert wake is not None and wake <= midnight - lead and len(wakes) < 10
        assert w.advance(wake, lead) == []
        wakes.append(wake)
    # All prepared: the next wake-up is the exact instant, and nothing else is left to do.
    assert wakes[-1] >= midnight - lead - timedelta(seconds=3)
    assert w._batch and len(w._batch) == 5_000  # sorted ahead, nothing left in the slots
    assert w.remove(4_999) == 4_999  # a prepared item can still be removed
    w.add(10_000, midnight - MS, 10_000)  # and one added due sooner goes before them
    assert w.advance(midnight - MS, lead) == [10_000]
    out = w.advance(midnight + MS, lead)
    assert sorted(out) == list(range(4_999))
    assert [n % 3 for n in out] == sorted(n % 3 for n in out)


def test_take_ahead_takes_what_is_due_by_until_without_moving_the_wheels_now() -> None:
    w = wheel()
    lead = timedelta(seconds=1)
    w.add("late", T0 - MS, "late")  # already due: comes first
    w.add("a", T0 + 300 * MS, "a")
    w.add("b", T0 + 200 * MS, "b")
    w.add("c", T0 + 700 * MS, "c")
    dues, items = w.take_ahead(T0, T0 + 500 * MS, lead)
    assert items == ["late", "b", "a"]
    assert dues == [
        (d - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
        for d in (T0 - MS, T0 + 200 * MS, T0 + 300 * MS)
    ]
    assert "a" not in w and len(w) == 1
    # The wheel's now is still T0: an item added later, due before until, waits for its instant.
    w.add("d", T0 + 100 * MS, "d")
    assert w.advance(T0 + 50 * MS, lead) == []
    assert w.advance(T0 + 100 * MS, lead) == ["d"]
    assert w.advance(T0 + 700 * MS, lead) == ["c"]
    with pytest.raises(ValueError, match="at most now"):
        w.take_ahead(T0, T0 + 2 * lead, lead)


def test_a_caller_taking_items_ahead_is_woken_only_when_there_is_work() -> None:
    """next_due(prepare, ahead) for a caller that takes items ``ahead`` of their instant: it
    wakes ``ahead`` before the first ready item and ``prepare`` before a tick's work, never
    ``ahead`` before that (the tick's work is not due then: woken, it would find nothing to do,
    and be woken again at once, spinning until the work came due)."""
    w = wheel()
    lead, ahead = timedelta(seconds=1), timedelta(milliseconds=500)
    dues = [T0 + timedelta(milliseconds=7 * n + 3) for n in range(400)]  # over 2.8 s
    for n, due in enumerate(dues):
        w.add(str(n), due, str(n))
    now, taken, wakes = T0, {}, 0
    while (wake := w.next_due(lead, ahead)) is not None:
        assert wake > now or wakes == 0, "woken with nothing to do"
        now, wakes = max(now, wake), wakes + 1
        _, items = w.take_ahead(now, now + ahead, lead)
        taken |= dict.fromkeys(items, now)
    assert sorted(taken, key=int) == [str(n) for n in range(400)]
    # Every item taken ahead of its instant, by at most ``ahead`` (one wake per ready item
    # at most, and one per tick's work).
    for n, due in enumerate(dues):
        assert due - ahead <= taken[str(n)] <= due
    assert wakes <= 2 * len(dues)


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
    # The work done ahead of time changes nothing of what is released when.
    prepare_us=st.sampled_from([0, 5_000, 1_000_000, 3 * 3600 * 1_000_000]),
)
def test_matches_a_model(
    ops: list[tuple[str, int, int]], shape: tuple[int, int, int], prepare_us: int
) -> None:
    tick_us, slots, levels = shape
    prepare = timedelta(microseconds=prepare_us)
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
            out = w.advance(T0 + timedelta(microseconds=now_us), prepare)
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
        nxt = w.next_due(prepare)
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


def test_furthest_names_the_items_due_last() -> None:
    w = wheel()
    for n, delay in enumerate((5, 1, 9, 3, 9)):
        w.add(f"k{n}", T0 + delay * timedelta(seconds=1), f"v{n}")
    assert w.furthest(3) == ["k4", "k2", "k0"]  # latest first; a tie: the last added first
    assert w.furthest(0) == []
    assert sorted(w.furthest(10)) == ["k0", "k1", "k2", "k3", "k4"]
    assert len(w) == 5  # naming them takes nothing off the wheel
