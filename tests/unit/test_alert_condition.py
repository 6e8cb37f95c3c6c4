"""When a condition alert fires and resolves (duetime.alerts.condition): named cases, properties."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from duetime.alerts import ConditionState, Transition, step

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
HOLD = timedelta(seconds=30)


def _run(observations: list[tuple[int, bool]], hold: timedelta = HOLD) -> list[object]:
    state, seen = ConditionState(), []
    for second, over in observations:
        state, transition = step(state, over, T0 + timedelta(seconds=second), hold)
        seen.append(transition)
    return seen


def test_fires_once_the_condition_held_for_the_hold_time() -> None:
    assert _run([(0, True), (15, True), (30, True), (45, True)]) == [
        None,
        None,
        Transition.FIRED,
        None,
    ]


def test_a_spike_shorter_than_the_hold_raises_nothing() -> None:
    assert _run([(0, True), (15, True), (20, False), (40, True), (60, True)]) == [None] * 5


def test_resolves_once_it_stayed_under_for_the_hold_time() -> None:
    seen = _run([(0, True), (30, True), (40, False), (50, True), (60, False), (90, False)])
    assert seen == [None, Transition.FIRED, None, None, None, Transition.RESOLVED]


def test_hold_zero_fires_and_resolves_at_the_first_check() -> None:
    assert _run([(0, True), (1, True), (2, False)], hold=timedelta(0)) == [
        Transition.FIRED,
        None,
        Transition.RESOLVED,
    ]


def test_each_episode_gets_the_next_number() -> None:
    state = ConditionState()
    episodes = []
    for second, over in enumerate([True, False, True, False, True]):
        state, transition = step(state, over, T0 + timedelta(seconds=second), timedelta(0))
        if transition is Transition.FIRED:
            episodes.append(state.episode)
    assert episodes == [1, 2, 3]


def test_a_negative_hold_is_refused() -> None:
    with pytest.raises(ValueError):
        step(ConditionState(), True, T0, timedelta(seconds=-1))


@given(
    overs=st.lists(st.booleans(), max_size=60),
    gaps=st.lists(st.integers(min_value=0, max_value=40), min_size=60, max_size=60),
    hold=st.integers(min_value=0, max_value=60),
)
def test_transitions_alternate_and_follow_the_measurement(
    overs: list[bool], gaps: list[int], hold: int
) -> None:
    state, now, last = ConditionState(), T0, None
    fired = 0
    for over, gap in zip(overs, gaps, strict=False):
        now += timedelta(seconds=gap)
        state, transition = step(state, over, now, timedelta(seconds=hold))
        if transition is not None:
            assert transition is not last  # never two firings (or resolutions) in a row
            assert (transition is Transition.FIRED) == over
            last = transition
            fired += transition is Transition.FIRED
        assert state.episode == fired
        assert state.firing == (last is Transition.FIRED)
