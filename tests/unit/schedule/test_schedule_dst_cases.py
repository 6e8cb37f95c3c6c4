"""Named DST cases: each rule pinned in the zones people get wrong.

Expected instants are worked out by hand from the tzdata rules of each zone (noted per case),
not copied from the implementation.
"""

from __future__ import annotations

import itertools
from datetime import datetime

import pytest
from schedule_kit import utc

from duetime.schedule import DstGap, DstOverlap, ScheduleSpec, compile_schedule


def runs(
    expression: str,
    zone: str,
    after: datetime,
    until: datetime,
    gap: DstGap = "shift",
    overlap: DstOverlap = "once",
) -> list[datetime]:
    schedule = compile_schedule(ScheduleSpec("cron", expression, zone, gap, overlap))
    found = []
    cursor = schedule.next_after(after)
    while cursor is not None and cursor < until:
        found.append(cursor)
        cursor = schedule.next_after(cursor)
    return found


# --- America/New_York: EST -05:00 / EDT -04:00.
# 2024-03-10 02:00 -> 03:00, 2024-11-03 02:00 -> 01:00.


def test_new_york_fall_back_runs_once_by_default() -> None:
    # croniter fires twice here (01:00 -04:00 and 01:00 -05:00).
    found = runs("0 1 * * *", "America/New_York", utc(2024, 11, 2, 12), utc(2024, 11, 4, 12))
    assert found == [utc(2024, 11, 3, 5), utc(2024, 11, 4, 6)]


def test_new_york_fall_back_twice_runs_both_passes() -> None:
    found = runs(
        "0 1 * * *",
        "America/New_York",
        utc(2024, 11, 2, 12),
        utc(2024, 11, 4, 12),
        overlap="twice",
    )
    assert found == [utc(2024, 11, 3, 5), utc(2024, 11, 3, 6), utc(2024, 11, 4, 6)]


def test_new_york_quarter_hours_in_the_repeated_hour() -> None:
    after, until = utc(2024, 11, 3, 5, 20), utc(2024, 11, 3, 7, 20)
    once = runs("*/15 * * * *", "America/New_York", after, until)
    # 01:30 and 01:45 EDT, then the repeated 01:xx EST are dropped, then 02:00 EST onwards.
    assert once == [
        utc(2024, 11, 3, 5, 30),
        utc(2024, 11, 3, 5, 45),
        utc(2024, 11, 3, 7, 0),
        utc(2024, 11, 3, 7, 15),
    ]
    twice = runs("*/15 * * * *", "America/New_York", after, until, overlap="twice")
    # 01:30, 01:45 EDT; 01:00 ... 01:45 EST (06:00Z-06:45Z); 02:00, 02:15 EST.
    expected = ["05:30", "05:45", "06:00", "06:15", "06:30", "06:45", "07:00", "07:15"]
    assert [instant.strftime("%H:%M") for instant in twice] == expected


def test_new_york_spring_forward_shift_and_skip() -> None:
    after, until = utc(2024, 3, 9, 12), utc(2024, 3, 11, 12)
    # 02:30 does not exist on 2024-03-10: shift runs at 03:00 EDT = 07:00Z.
    assert runs("30 2 * * *", "America/New_York", after, until) == [
        utc(2024, 3, 10, 7),
        utc(2024, 3, 11, 6, 30),
    ]
    assert runs("30 2 * * *", "America/New_York", after, until, gap="skip") == [
        utc(2024, 3, 11, 6, 30)
    ]


def test_new_york_several_wall_times_in_one_gap_give_one_run() -> None:
    after, until = utc(2024, 3, 10, 6, 50), utc(2024, 3, 10, 7, 20)
    # 02:00, 02:10 ... 02:50 do not exist: one run at 03:00, merged with the regular 03:00.
    assert runs("*/10 * * * *", "America/New_York", after, until) == [
        utc(2024, 3, 10, 7, 0),
        utc(2024, 3, 10, 7, 10),
    ]
    assert runs("*/10 2 * * *", "America/New_York", after, until) == [utc(2024, 3, 10, 7)]
    assert runs("*/10 2 * * *", "America/New_York", after, until, gap="skip") == []


# --- America/Santiago: -04:00 / -03:00; changes at midnight local time.
# 2024-04-07 00:00 -03 -> 2024-04-06 23:00 -04; 2024-09-08 00:00 -04 -> 01:00 -03.


def test_santiago_repeated_hour_before_midnight_runs_once() -> None:
    # croniter fires twice on 2024-04-06.
    after, until = utc(2024, 4, 6), utc(2024, 4, 8, 12)
    assert runs("0 23 * * *", "America/Santiago", after, until) == [
        utc(2024, 4, 6, 2),
        utc(2024, 4, 7, 2),
        utc(2024, 4, 8, 3),
    ]
    assert runs("0 23 * * *", "America/Santiago", after, until, overlap="twice") == [
        utc(2024, 4, 6, 2),
        utc(2024, 4, 7, 2),
        utc(2024, 4, 7, 3),
        utc(2024, 4, 8, 3),
    ]


def test_santiago_missing_midnight_hour() -> None:
    after, until = utc(2024, 9, 2), utc(2024, 9, 16)
    # Sunday 2024-09-08 00:01 does not exist: shift = 01:00 -03 = 04:00Z; skip = next Sunday.
    assert runs("1 0 * * 0", "America/Santiago", after, until) == [
        utc(2024, 9, 8, 4),
        utc(2024, 9, 15, 3, 1),
    ]
    assert runs("1 0 * * 0", "America/Santiago", after, until, gap="skip") == [
        utc(2024, 9, 15, 3, 1)
    ]
    assert runs("0 0 * * *", "America/Santiago", utc(2024, 9, 7), utc(2024, 9, 9, 12)) == [
        utc(2024, 9, 7, 4),
        utc(2024, 9, 8, 4),
        utc(2024, 9, 9, 3),
    ]


# --- Europe/Berlin: CET +01:00 / CEST +02:00; 2025-03-30 02:00 -> 03:00, 2025-10-26 03:00 -> 02:00


def test_berlin_spring_forward() -> None:
    after, until = utc(2025, 3, 29, 12), utc(2025, 3, 31, 12)
    assert runs("30 2 * * *", "Europe/Berlin", after, until) == [
        utc(2025, 3, 30, 1),
        utc(2025, 3, 31, 0, 30),
    ]
    assert runs("30 2 * * *", "Europe/Berlin", after, until, gap="skip") == [
        utc(2025, 3, 31, 0, 30)
    ]


def test_berlin_fall_back() -> None:
    after, until = utc(2025, 10, 25, 12), utc(2025, 10, 26, 12)
    assert runs("30 2 * * *", "Europe/Berlin", after, until) == [utc(2025, 10, 26, 0, 30)]
    assert runs("30 2 * * *", "Europe/Berlin", after, until, overlap="twice") == [
        utc(2025, 10, 26, 0, 30),
        utc(2025, 10, 26, 1, 30),
    ]


# --- Europe/London: GMT +00:00 / BST +01:00; 2025-03-30 01:00 -> 02:00, 2025-10-26 02:00 -> 01:00


def test_london_both_transitions() -> None:
    assert runs("30 1 * * *", "Europe/London", utc(2025, 3, 29, 12), utc(2025, 3, 30, 12)) == [
        utc(2025, 3, 30, 1)
    ]
    fall = runs(
        "30 1 * * *",
        "Europe/London",
        utc(2025, 10, 25, 12),
        utc(2025, 10, 26, 12),
        overlap="twice",
    )
    assert fall == [utc(2025, 10, 26, 0, 30), utc(2025, 10, 26, 1, 30)]


# --- Australia/Lord_Howe: +10:30 / +11:00, a 30-minute shift.
# 2024-10-06 02:00 -> 02:30; 2025-04-06 02:00 -> 01:30.


def test_lord_howe_half_hour_gap() -> None:
    after, until = utc(2024, 10, 5), utc(2024, 10, 6, 12)
    assert runs("15 2 * * *", "Australia/Lord_Howe", after, until) == [utc(2024, 10, 5, 15, 30)]
    assert runs("15 2 * * *", "Australia/Lord_Howe", after, until, gap="skip") == []
    # 02:30 itself exists: unaffected.
    assert runs("30 2 * * *", "Australia/Lord_Howe", after, until) == [utc(2024, 10, 5, 15, 30)]


def test_lord_howe_half_hour_overlap() -> None:
    after, until = utc(2025, 4, 5, 12), utc(2025, 4, 5, 16)
    assert runs("45 1 * * *", "Australia/Lord_Howe", after, until) == [utc(2025, 4, 5, 14, 45)]
    assert runs("45 1 * * *", "Australia/Lord_Howe", after, until, overlap="twice") == [
        utc(2025, 4, 5, 14, 45),
        utc(2025, 4, 5, 15, 15),
    ]


# --- Pacific/Chatham: +12:45 / +13:45; 2024-09-29 02:45 -> 03:45, 2025-04-06 03:45 -> 02:45.


def test_chatham_quarter_to_gap_and_overlap() -> None:
    assert runs("0 3 * * *", "Pacific/Chatham", utc(2024, 9, 28), utc(2024, 9, 29)) == [
        utc(2024, 9, 28, 14)  # 03:00 does not exist: 03:45 +13:45
    ]
    assert runs(
        "0 3 * * *", "Pacific/Chatham", utc(2025, 4, 5), utc(2025, 4, 6), overlap="twice"
    ) == [utc(2025, 4, 5, 13, 15), utc(2025, 4, 5, 14, 15)]


# --- Zones without DST.


@pytest.mark.parametrize(
    ("zone", "midnight"),
    [("Asia/Kathmandu", utc(2025, 3, 29, 18, 15)), ("Asia/Kolkata", utc(2025, 3, 29, 18, 30))],
)
def test_zones_without_dst_are_plain_offsets(zone: str, midnight: datetime) -> None:
    found = runs("0 0 * * *", zone, utc(2025, 3, 29), utc(2025, 12, 31))
    assert found[0] == midnight
    assert len(found) == 277
    assert all((b - a).total_seconds() == 86_400 for a, b in itertools.pairwise(found))
    schedule = compile_schedule(ScheduleSpec("cron", "*/5 * * * *", zone))
    assert schedule.dst_effects(utc(2025, 1, 1), utc(2026, 1, 1)) == []


def test_seconds_schedules_follow_the_same_wall_clock_rule() -> None:
    after, until = utc(2024, 3, 10, 6, 59, 50), utc(2024, 3, 10, 7, 0, 25)
    assert runs("*/20 * * * * *", "America/New_York", after, until) == [
        utc(2024, 3, 10, 7, 0, 0),
        utc(2024, 3, 10, 7, 0, 20),
    ]


def test_occurrence_notes_explain_dst() -> None:
    schedule = compile_schedule(ScheduleSpec("cron", "30 2 * * *", "Europe/Berlin"))
    shifted = schedule.occurrences(utc(2025, 3, 29, 12), 2)
    assert shifted[0].note is not None and "02:30 does not exist on 2025-03-30" in shifted[0].note
    assert shifted[0].local.isoformat() == "2025-03-30T03:00:00+02:00"
    assert shifted[0].wall == datetime(2025, 3, 30, 2, 30)
    assert shifted[1].note is None
    skipping = compile_schedule(
        ScheduleSpec("cron", "30 2 * * *", "Europe/Berlin", dst_gap="skip")
    ).occurrences(utc(2025, 3, 29, 12), 1)
    assert skipping[0].note is not None and "skipped" in skipping[0].note
    twice = compile_schedule(
        ScheduleSpec("cron", "0 1 * * *", "America/New_York", dst_overlap="twice")
    ).occurrences(utc(2024, 11, 3), 2)
    assert [
        item.note is not None and item.note.endswith(suffix)
        for item, suffix in zip(twice, ("first (-04:00)", "second (-05:00)"), strict=True)
    ] == [True, True]


def test_dst_effects_for_lint() -> None:
    schedule = compile_schedule(ScheduleSpec("cron", "*/30 1-2 * * *", "America/New_York"))
    effects = schedule.dst_effects(utc(2024, 1, 1), utc(2025, 1, 1))
    assert [(effect.day.isoformat(), effect.kind) for effect in effects] == [
        ("2024-03-10", "shifted"),
        ("2024-11-03", "once"),
    ]
    assert effects[0].runs == (utc(2024, 3, 10, 7),)
    assert effects[1].runs == (utc(2024, 11, 3, 5), utc(2024, 11, 3, 5, 30))
    doubled = compile_schedule(
        ScheduleSpec("cron", "0 1 * * *", "America/New_York", "skip", "twice")
    ).dst_effects(utc(2024, 1, 1), utc(2025, 1, 1))
    assert [effect.kind for effect in doubled] == ["doubled"]
    skipped = compile_schedule(
        ScheduleSpec("cron", "0 2 * * *", "America/New_York", "skip", "twice")
    ).dst_effects(utc(2024, 1, 1), utc(2025, 1, 1))
    assert [(effect.kind, effect.runs) for effect in skipped] == [("skipped", ())]
    quiet = compile_schedule(ScheduleSpec("cron", "0 12 * * *", "America/New_York"))
    assert quiet.dst_effects(utc(2024, 1, 1), utc(2025, 1, 1)) == []


# --- Extremes: a skipped calendar day and a two-hour shift.


def test_samoa_skipped_the_whole_of_30_december_2011() -> None:
    # 2011-12-29 24:00 -10:00 became 2011-12-31 00:00 +14:00 (at 2011-12-30 10:00Z).
    after, until = utc(2011, 12, 29), utc(2011, 12, 31)
    assert runs("0 12 * * *", "Pacific/Apia", after, until) == [
        utc(2011, 12, 29, 22),
        utc(2011, 12, 30, 10),
        utc(2011, 12, 30, 22),
    ]
    assert runs("0 12 * * *", "Pacific/Apia", after, until, gap="skip") == [
        utc(2011, 12, 29, 22),
        utc(2011, 12, 30, 22),
    ]


def test_troll_moves_two_hours() -> None:
    # Antarctica/Troll: +00:00 / +02:00, changing at 01:00Z on the EU dates.
    assert runs("30 2 * * *", "Antarctica/Troll", utc(2025, 3, 29, 12), utc(2025, 3, 30, 12)) == [
        utc(2025, 3, 30, 1)
    ]
    assert runs(
        "30 1 * * *",
        "Antarctica/Troll",
        utc(2025, 10, 25, 12),
        utc(2025, 10, 26, 12),
        overlap="twice",
    ) == [utc(2025, 10, 25, 23, 30), utc(2025, 10, 26, 1, 30)]
