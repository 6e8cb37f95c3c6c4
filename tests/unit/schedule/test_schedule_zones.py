"""Zone names: only IANA zones of the pinned tzdata, with errors that say what is wrong."""

from __future__ import annotations

import zoneinfo
from datetime import timedelta

import pytest
from schedule_kit import utc

from duetime.errors import ScheduleError
from duetime.schedule import (
    TZDATA_VERSION,
    ScheduleSpec,
    available_zones,
    compile_schedule,
    validate_time_zone,
    zone_transitions,
)


@pytest.mark.parametrize(
    "name",
    ["America/New_York", "Europe/Berlin", "Asia/Kolkata", "UTC", "Etc/GMT+5", "EST5EDT"],
)
def test_iana_names_are_accepted(name: str) -> None:
    zone = validate_time_zone(name)
    assert zone.key == name
    assert validate_time_zone(name) is zone  # loaded once, shared


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("", "is empty"),
        ("posixrules", "tzdata internal key"),
        ("Factory", "tzdata internal key"),
        ("../../etc/passwd", "is a path"),
        ("/usr/share/zoneinfo/UTC", "is a path"),
        ("Europe/../Europe/Berlin", "is a path"),
        ("C:\\Windows", "is a path"),
        ("Europe/Berlin\x00", "NUL character"),
        ("america/new_york", "case-sensitive: America/New_York"),
        ("EUROPE/BERLIN", "case-sensitive: Europe/Berlin"),
        ("Mars/Olympus_Mons", "unknown zone 'Mars/Olympus_Mons'"),
        ("+05:30", "unknown zone"),
        ("x" * 10_000, "characters long"),
    ],
)
def test_non_zones_are_refused_with_a_reason(name: str, reason: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        validate_time_zone(name)
    assert caught.value.field == "time_zone"
    assert reason in caught.value.reason


def test_compile_reports_the_zone_field() -> None:
    with pytest.raises(ScheduleError) as caught:
        compile_schedule(ScheduleSpec("cron", "0 0 * * *", "Europe/Berln"))
    assert caught.value.field == "time_zone"


def test_zone_list_is_the_pinned_tzdata() -> None:
    zones = available_zones()
    assert "Australia/Lord_Howe" in zones and "Pacific/Chatham" in zones
    assert not {"posixrules", "Factory"} & zones
    assert zones <= zoneinfo.available_timezones()
    assert TZDATA_VERSION[:4].isdigit()


def test_transitions_are_located_to_the_second() -> None:
    zone = validate_time_zone("America/New_York")
    found = zone_transitions(zone, utc(2024, 1, 1), utc(2025, 1, 1))
    assert [t.at for t in found] == [utc(2024, 3, 10, 7), utc(2024, 11, 3, 6)]
    spring, fall = found
    assert spring.is_gap and not fall.is_gap
    assert (spring.offset_before, spring.offset_after) == (timedelta(hours=-5), timedelta(hours=-4))
    assert spring.wall_start.isoformat() == "2024-03-10T02:00:00"
    assert spring.wall_end.isoformat() == "2024-03-10T03:00:00"
    assert fall.wall_start.isoformat() == "2024-11-03T01:00:00"
    assert fall.wall_end.isoformat() == "2024-11-03T02:00:00"


def test_lord_howe_moves_thirty_minutes() -> None:
    zone = validate_time_zone("Australia/Lord_Howe")
    found = zone_transitions(zone, utc(2024, 1, 1), utc(2025, 1, 1))
    assert [t.offset_after - t.offset_before for t in found] == [
        timedelta(minutes=-30),
        timedelta(minutes=30),
    ]


def test_zones_without_dst_have_no_transitions() -> None:
    for name in ("Asia/Kolkata", "Asia/Kathmandu", "UTC"):
        zone = validate_time_zone(name)
        assert zone_transitions(zone, utc(2020, 1, 1), utc(2030, 1, 1)) == []
