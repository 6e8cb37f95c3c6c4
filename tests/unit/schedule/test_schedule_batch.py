"""The batch API: one compile per distinct spec, the same answers as one-by-one."""

from __future__ import annotations

from datetime import timedelta

import pytest
from schedule_kit import utc

from duetime.errors import ScheduleError
from duetime.schedule import ScheduleCache, ScheduleSpec, compile_schedule, next_fires

SPECS = [
    ScheduleSpec("cron", "0 0 * * *", "Asia/Kolkata"),
    ScheduleSpec("cron", "30 2 * * *", "Europe/Berlin", dst_gap="skip"),
    ScheduleSpec("cron", "*/5 * * * *", "America/New_York"),
    ScheduleSpec("interval", "PT90S"),
    ScheduleSpec("at", "2025-03-30T00:00:00Z"),
]


def test_batch_matches_one_by_one() -> None:
    pairs = [
        (spec, utc(2025, 3, 29, 18) + timedelta(minutes=37 * n))
        for n in range(40)
        for spec in SPECS
    ]
    expected = [compile_schedule(spec).next_after(after) for spec, after in pairs]
    assert next_fires(pairs) == expected
    assert None in expected  # the one-off is over for later afters


def test_cache_compiles_each_spec_once() -> None:
    cache = ScheduleCache()
    pairs = [(SPECS[n % 3], utc(2025, 1, 1)) for n in range(3000)]
    first = next_fires(pairs, cache)
    assert len(cache) == 3
    assert cache.get(SPECS[0]) is cache.get(ScheduleSpec("cron", "0 0 * * *", "Asia/Kolkata"))
    assert first[:3] == [utc(2025, 1, 1, 18, 30), utc(2025, 1, 1, 1, 30), utc(2025, 1, 1, 0, 5)]


def test_cache_is_bounded() -> None:
    cache = ScheduleCache(max_size=2)
    for spec in SPECS[:4]:
        cache.get(spec)
    assert len(cache) == 2


def test_invalid_spec_stops_the_batch() -> None:
    with pytest.raises(ScheduleError):
        next_fires([(ScheduleSpec("cron", "61 * * * *"), utc(2025, 1, 1))])
