"""The dashboard's forecast chart: minutes added up, the peak found and labelled, pile-ups red."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from duetime.forecast import ForecastResult, MinuteLoad, PileUp
from duetime_api.dashboard.chart import forecast_svg, minute_totals

START = datetime(2026, 12, 3, 19, 7, tzinfo=UTC)
MIDNIGHT = datetime(2026, 12, 4, 0, 0, tzinfo=UTC)


def _result(loads: list[MinuteLoad], pile_ups: tuple[PileUp, ...] = ()) -> ForecastResult:
    return ForecastResult(START, START + timedelta(hours=24), tuple(loads), pile_ups)


def test_series_of_a_minute_add_up_and_the_midnight_spike_is_the_peak() -> None:
    loads = [
        MinuteLoad(START + timedelta(minutes=m), "steady.example", "acme", 2.0)
        for m in range(0, 1440, 5)
    ]
    loads += [
        MinuteLoad(MIDNIGHT, "billing.example", "acme", 900.0),
        MinuteLoad(MIDNIGHT, "billing.example", "globex", 100.0),
    ]
    totals = minute_totals(_result(loads))
    assert totals.minutes == 1440
    midnight = int((MIDNIGHT - START).total_seconds() // 60)
    assert totals.runs[midnight] == 1000.0  # both tenants; the steady job is not on that minute
    assert totals.peak_index == midnight
    svg = forecast_svg(totals)
    assert f'data-peak-minute="{MIDNIGHT.isoformat()}"' in svg
    assert 'data-peak-runs="1000"' in svg
    assert "peak 1,000 runs at 00:00 UTC" in svg
    assert "Fri 04 Dec 00:00" in svg  # the midnight tick names the day
    # One vertical bar per busy minute, the spike at full height (from the axis to the top).
    [bars] = re.findall(r'<path class="bars" [^>]*d="([^"]+)"', svg)
    assert bars.count("M") == 288 + 1
    assert 'class="bars pile-up"' not in svg


def test_pile_up_minutes_are_drawn_apart() -> None:
    loads = [MinuteLoad(MIDNIGHT, "slow.example", "acme", 10.0)]
    loads.append(MinuteLoad(START, "slow.example", "acme", 1.0))
    pile = PileUp(MIDNIGHT, "slow.example", 10.0, 0.02)
    totals = minute_totals(_result(loads, (pile,)))
    svg = forecast_svg(totals)
    [piled] = re.findall(r'<path class="bars pile-up" [^>]*d="([^"]+)"', svg)
    [normal] = re.findall(r'<path class="bars" [^>]*d="([^"]+)"', svg)
    assert piled.count("M") == 1 and normal.count("M") == 1


def test_nothing_due_says_so() -> None:
    totals = minute_totals(_result([]))
    assert totals.peak_index is None
    svg = forecast_svg(totals)
    assert "nothing due in this period" in svg and "data-peak-minute" not in svg


def test_labels_are_escaped() -> None:
    # Times are the only text drawn from data; a peak label is built from numbers and a time.
    totals = minute_totals(_result([MinuteLoad(START, "<b>", "acme", 1.5)]))
    svg = forecast_svg(totals)
    assert "<b>" not in svg and "peak 1.5 runs at 19:07 UTC" in svg
