"""Properties of cron occurrences around DST transitions, checked against a brute-force oracle.

Uniformly random dates almost never land on a transition, so the generators pick a zone and a
year, look up that year's transitions and start the search within a day of one of them.
"""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from schedule_kit import (
    NAMED_ZONES,
    CronSets,
    chain,
    oracle,
    transitions_in_year,
    utc,
)

from duetime.schedule import (
    DstGap,
    DstOverlap,
    ScheduleSpec,
    available_zones,
    compile_schedule,
    validate_time_zone,
    zone_transitions,
)

# Zones with unusual transitions on top of the named ones: midnight changes (Havana, Beirut),
# negative DST (Dublin, Casablanca), a 2-hour shift (Troll), a whole skipped day (Apia 2011),
# half-hour offsets (St Johns, Adelaide, Tehran).
EXTRA_ZONES = (
    "America/Havana",
    "Asia/Beirut",
    "Europe/Dublin",
    "Africa/Casablanca",
    "Antarctica/Troll",
    "Pacific/Apia",
    "America/St_Johns",
    "Australia/Adelaide",
    "Asia/Tehran",
    "America/Nuuk",
    "America/Asuncion",
)
ZONES = NAMED_ZONES + EXTRA_ZONES

ALL = frozenset(range(60))


def _options(*pairs: tuple[str, set[int] | range]) -> list[tuple[str, frozenset[int]]]:
    return [(text, frozenset(values)) for text, values in pairs]


MINUTES = _options(
    ("*", range(60)),
    ("*/5", range(0, 60, 5)),
    ("*/15", range(0, 60, 15)),
    ("0", {0}),
    ("30", {30}),
    ("0,30", {0, 30}),
    ("15,45", {15, 45}),
    ("45", {45}),
    ("59", {59}),
    ("1", {1}),
    ("*/7", range(0, 60, 7)),
)
HOURS = _options(
    ("*", range(24)),
    ("*", range(24)),
    ("0", {0}),
    ("1", {1}),
    ("2", {2}),
    ("3", {3}),
    ("23", {23}),
    ("0-3", range(4)),
    ("*/2", range(0, 24, 2)),
    ("1,2,3", {1, 2, 3}),
    ("22-23", {22, 23}),
)
# (text, values, starts with "*")
DAYS = [("*", frozenset(range(1, 32)), True)] * 4 + [
    ("*/2", frozenset(range(1, 32, 2)), True),
    ("1-15", frozenset(range(1, 16)), False),
    ("8", frozenset({8}), False),
]
WEEKDAYS = [("*", frozenset(range(7)), True)] * 4 + [
    ("0", frozenset({0}), False),
    ("1-5", frozenset(range(1, 6)), False),
    ("SAT,SUN", frozenset({6, 0}), False),
]


@st.composite
def cron_sets(draw: st.DrawFn) -> CronSets:
    minute_text, minutes = draw(st.sampled_from(MINUTES))
    hour_text, hours = draw(st.sampled_from(HOURS))
    day_text, days, day_star = draw(st.sampled_from(DAYS))
    week_text, weekdays, week_star = draw(st.sampled_from(WEEKDAYS))
    return CronSets(
        f"{minute_text} {hour_text} {day_text} * {week_text}",
        minutes,
        hours,
        days,
        weekdays,
        day_star,
        week_star,
    )


@st.composite
def near_transition(draw: st.DrawFn, zones: tuple[str, ...] = ZONES) -> tuple[str, datetime]:
    """A zone and an instant within a day before (or after) one of its transitions."""
    zone = draw(st.sampled_from(zones))
    year = draw(st.integers(2000, 2037))
    transitions = transitions_in_year(zone, year)
    if transitions:
        anchor = draw(st.sampled_from(transitions)).at - timedelta(days=1)
    else:
        anchor = utc(year, 1, 1)
    return zone, anchor + timedelta(seconds=draw(st.integers(0, 2 * 86_400)))


gaps: st.SearchStrategy[DstGap] = st.sampled_from(["shift", "skip"])
overlaps: st.SearchStrategy[DstOverlap] = st.sampled_from(["once", "twice"])


@settings(max_examples=250, deadline=None)
@given(cron_sets(), near_transition(), gaps, overlaps)
def test_occurrences_match_the_brute_force_oracle(
    sets: CronSets, where: tuple[str, datetime], gap: DstGap, overlap: DstOverlap
) -> None:
    zone_name, start = where
    end = start + timedelta(days=2)
    schedule = compile_schedule(ScheduleSpec("cron", sets.text, zone_name, gap, overlap))
    actual = list(chain(schedule, start, end))
    zone = validate_time_zone(zone_name)
    assert actual == oracle(sets, zone, gap, overlap, start, end)

    # The same facts, stated one by one.
    assert all(a < b for a, b in itertools.pairwise(actual)), "strictly increasing"
    shifted = {
        transition.at
        for transition in zone_transitions(zone, start - timedelta(days=1), end)
        if transition.is_gap
    }
    for instant in actual:
        wall = instant.astimezone(zone).replace(tzinfo=None, fold=0)
        assert sets.matches(wall) or (gap == "shift" and instant in shifted)
    if overlap == "once":
        walls = [instant.astimezone(zone).replace(tzinfo=None, fold=0) for instant in actual]
        assert len(walls) == len(set(walls)), "a wall time ran twice under 'once'"


@settings(max_examples=150, deadline=None)
@given(cron_sets(), near_transition(), gaps, overlaps, st.integers(0, 2 * 86_400_000))
def test_next_after_is_the_same_from_anywhere_between_occurrences(
    sets: CronSets,
    where: tuple[str, datetime],
    gap: DstGap,
    overlap: DstOverlap,
    offset_ms: int,
) -> None:
    zone_name, start = where
    schedule = compile_schedule(ScheduleSpec("cron", sets.text, zone_name, gap, overlap))
    probe = start + timedelta(milliseconds=offset_ms)
    expected = oracle(
        sets, validate_time_zone(zone_name), gap, overlap, probe, probe + timedelta(days=2)
    )
    found = schedule.next_after(probe)
    if expected:
        assert found == expected[0]
    else:
        assert found is None or found >= probe + timedelta(days=2)


SECOND_FIELDS = [
    ("*/20", frozenset(range(0, 60, 20))),
    ("0", frozenset({0})),
    ("*", frozenset(range(60))),
    ("30", frozenset({30})),
]


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(SECOND_FIELDS),
    st.sampled_from(MINUTES),
    near_transition(NAMED_ZONES[:6]),
    gaps,
    overlaps,
)
def test_seconds_schedules_against_the_oracle(
    second_field: tuple[str, frozenset[int]],
    minute_field: tuple[str, frozenset[int]],
    where: tuple[str, datetime],
    gap: DstGap,
    overlap: DstOverlap,
) -> None:
    zone_name, start = where
    transitions = transitions_in_year(zone_name, start.year)
    if transitions:  # stay close: the oracle walks every second
        start = min(transitions, key=lambda t: abs(t.at - start)).at - timedelta(minutes=5)
    end = start + timedelta(minutes=75)
    sets = CronSets(
        f"{second_field[0]} {minute_field[0]} * * * *",
        minute_field[1],
        frozenset(range(24)),
        frozenset(range(1, 32)),
        frozenset(range(7)),
        True,
        True,
        second_field[1],
    )
    schedule = compile_schedule(ScheduleSpec("cron", sets.text, zone_name, gap, overlap))
    zone = validate_time_zone(zone_name)
    expected = oracle(sets, zone, gap, overlap, start, end, step=timedelta(seconds=1))
    assert list(chain(schedule, start, end)) == expected


@pytest.mark.parametrize(("gap", "overlap"), [("shift", "once"), ("skip", "twice")])
def test_every_tzdata_zone_follows_the_rule(gap: DstGap, overlap: DstOverlap) -> None:
    """Every zone of the pinned tzdata, at each of its 2024-2025 transitions."""
    sets = CronSets(
        "*/15 * * * *",
        frozenset(range(0, 60, 15)),
        frozenset(range(24)),
        frozenset(range(1, 32)),
        frozenset(range(7)),
        True,
        True,
    )
    checked = 0
    for zone_name in sorted(available_zones()):
        zone = validate_time_zone(zone_name)
        schedule = compile_schedule(ScheduleSpec("cron", sets.text, zone_name, gap, overlap))
        for transition in zone_transitions(
            zone, utc(2024, 1, 1), utc(2026, 1, 1), step=timedelta(days=1)
        ):
            start = transition.at - timedelta(hours=3)
            end = transition.at + timedelta(hours=3)
            expected = oracle(sets, zone, gap, overlap, start, end)
            assert list(chain(schedule, start, end)) == expected, (zone_name, transition)
            checked += 1
    assert checked > 100  # the sweep really visited the DST zones
