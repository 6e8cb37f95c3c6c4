"""Cron grammar: Vixie day matching, names, Sunday as 0 or 7, seconds, macros, and errors."""

from __future__ import annotations

from datetime import datetime

import pytest
from schedule_kit import utc

from duetime.errors import ScheduleError
from duetime.schedule import ScheduleSpec, compile_schedule


def fires(expression: str, after: datetime, count: int, zone: str = "UTC") -> list[datetime]:
    schedule = compile_schedule(ScheduleSpec("cron", expression, zone))
    return [item.scheduled_for for item in schedule.occurrences(after, count)]


def days(expression: str, after: datetime, count: int) -> list[int]:
    return [instant.day for instant in fires(expression, after, count)]


def test_day_of_month_or_day_of_week_when_both_are_restricted() -> None:
    # December 2024: Fridays are 6, 13, 20, 27; the 13th is also listed by day-of-month.
    assert days("0 0 13 * FRI", utc(2024, 12, 1), 5) == [6, 13, 20, 27, 3]
    assert fires("0 0 13 * FRI", utc(2025, 1, 10), 2) == [utc(2025, 1, 13), utc(2025, 1, 17)]


def test_day_fields_are_anded_when_one_starts_with_a_star() -> None:
    # Vixie marks "*/2" as starred: odd days AND Mondays (Dec 2024 Mondays: 2, 9, 16, 23, 30).
    assert days("0 0 */2 * MON", utc(2024, 12, 1), 2) == [9, 23]
    assert days("0 0 1 * *", utc(2024, 12, 5), 1) == [1]


def test_explicit_full_range_counts_as_restricted() -> None:
    # "1-31" does not start with "*", so day-of-month OR Monday: every day.
    assert days("0 0 1-31 * MON", utc(2024, 12, 1), 3) == [2, 3, 4]


@pytest.mark.parametrize("sunday", ["0", "7", "SUN", "sun", "Sun"])
def test_sunday_is_zero_or_seven_or_its_name(sunday: str) -> None:
    assert fires(f"0 12 * * {sunday}", utc(2024, 12, 2), 2) == [
        utc(2024, 12, 8, 12),
        utc(2024, 12, 15, 12),
    ]


def test_weekday_range_ending_on_seven_includes_sunday() -> None:
    assert days("0 0 * * 5-7", utc(2024, 12, 1), 4) == [6, 7, 8, 13]


def test_month_and_weekday_names_in_ranges_and_lists() -> None:
    assert [d.month for d in fires("0 0 1 jan,JUL *", utc(2024, 2, 1), 3)] == [7, 1, 7]
    assert days("0 9 * * mon-fri", utc(2024, 12, 6, 10), 3) == [9, 10, 11]


def test_ranges_steps_and_lists() -> None:
    minutes = [d.minute for d in fires("5-20/5,45 * * * *", utc(2024, 1, 1), 5)]
    assert minutes == [5, 10, 15, 20, 45]
    assert [d.minute for d in fires("50/4 * * * *", utc(2024, 1, 1), 3)] == [50, 54, 58]


def test_six_fields_put_seconds_first() -> None:
    assert [d.second for d in fires("*/20 * * * * *", utc(2024, 1, 1), 4)] == [20, 40, 0, 20]
    assert fires("15 30 9 * * *", utc(2024, 1, 1), 1) == [utc(2024, 1, 1, 9, 30, 15)]


@pytest.mark.parametrize(
    ("macro", "expected"),
    [
        ("@hourly", utc(2024, 5, 5, 11)),
        ("@daily", utc(2024, 5, 6)),
        ("@midnight", utc(2024, 5, 6)),
        ("@weekly", utc(2024, 5, 12)),
        ("@monthly", utc(2024, 6, 1)),
        ("@yearly", utc(2025, 1, 1)),
        ("@annually", utc(2025, 1, 1)),
        ("@DAILY", utc(2024, 5, 6)),
    ],
)
def test_macros(macro: str, expected: datetime) -> None:
    assert fires(macro, utc(2024, 5, 5, 10, 30), 1) == [expected]


def test_leap_day_fires_every_four_years_skipping_2100() -> None:
    assert [d.year for d in fires("0 0 29 2 *", utc(2090, 1, 1), 3)] == [2092, 2096, 2104]


def test_next_after_is_strict_and_ignores_sub_second_parts() -> None:
    schedule = compile_schedule(ScheduleSpec("cron", "0 * * * *"))
    assert schedule.next_after(utc(2024, 1, 1, 10)) == utc(2024, 1, 1, 11)
    almost = datetime(2024, 1, 1, 9, 59, 59, 999_999, tzinfo=utc(2024, 1, 1).tzinfo)
    assert schedule.next_after(almost) == utc(2024, 1, 1, 10)


def test_end_of_time_returns_none() -> None:
    schedule = compile_schedule(ScheduleSpec("cron", "0 0 1 1 *"))
    assert schedule.next_after(utc(9999, 6, 1)) is None


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("", "is empty"),
        ("   ", "is empty"),
        ("* * * *", "expected 5 fields"),
        ("* * * * * * *", "got 7"),
        ("60 * * * *", "minute field '60': 60 is out of range 0-59"),
        ("0 24 * * *", "hour field '24': 24 is out of range 0-23"),
        ("0 0 0 * *", "day-of-month field '0': 0 is out of range 1-31"),
        ("0 0 * 13 *", "month field '13': 13 is out of range 1-12"),
        ("0 0 * * 8", "day-of-week field '8': 8 is out of range 0-7"),
        ("60 0 * * * *", "second field '60'"),
        ("*/0 * * * *", "step must be at least 1"),
        ("*/61 * * * *", "step 61 is larger than the field's range 0-59"),
        ("30-10 * * * *", "range 30-10 runs backwards"),
        ("1,,2 * * * *", "empty list item"),
        ("-1 * * * *", "negative numbers are not allowed"),
        ("0 0 L * *", "'L' and 'W'"),
        ("0 0 15W * *", "'L' and 'W'"),
        ("0 0 * * 5L", "'L' and 'W'"),
        ("0 0 * * 5#3", "'#' (n-th weekday"),
        ("0 0 ? * *", "'?' is Quartz syntax"),
        ("@reboot", "@reboot is not a time schedule"),
        ("@often", "unknown macro"),
        ("0 0 31 2 *", "never fires: day-of-month 31 does not occur in FEB"),
        ("0 0 30,31 2 *", "never fires"),
        ("0 0 31 4,6,9,11 *", "never fires"),
        ("0 0 * * MOX", "unknown name 'MOX' (expected SUN..SAT)"),
        ("0 0 * FOO *", "unknown name 'FOO' (expected JAN..DEC)"),
        ("MON * * * *", "names are only allowed for month and day-of-week"),
        ("\u0663 * * * *", "non-ASCII character '\u0663' (U+0663)"),
        ("\uff11 * * * *", "non-ASCII"),
        ("0 0 * * *\x00", "control character U+0000"),
        ("5" * 10_240, "is 10240 characters long"),
        ("0\u20030 * * *", "non-ASCII"),
        ("a-b * * * *", "names are only allowed"),
        ("1.5 * * * *", "cannot read '1.5'"),
    ],
)
def test_invalid_expressions_name_the_field_and_reason(expression: str, reason: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        compile_schedule(ScheduleSpec("cron", expression))
    assert caught.value.field == "schedule"
    assert reason in caught.value.reason


def test_never_firing_check_allows_the_either_day_rule() -> None:
    # 31 February never exists, but Vixie's OR makes every Monday of February fire.
    assert fires("0 0 31 2 MON", utc(2024, 12, 1), 2) == [utc(2025, 2, 3), utc(2025, 2, 10)]
