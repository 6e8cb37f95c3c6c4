"""The forecast chart: runs due per minute ahead as a server-rendered SVG bar chart.

One bar per minute (1,440 for a day) drawn as two paths, ordinary minutes and pile-ups, so a
day's chart is a few tens of kilobytes and needs no script. The y axis is linear on purpose: the
point of the chart is to make a midnight spike stand out against the steady load, and a log
scale would flatten it. The peak is labelled, and the ``<svg>`` carries it as data attributes
(``data-peak-runs``, ``data-peak-minute``) for tests and scrapers.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from html import escape

from duetime.forecast import ForecastResult

__all__ = ["MinuteTotals", "forecast_svg", "minute_totals"]

_WIDTH = 960
_HEIGHT = 260
_LEFT = 56
_RIGHT = 12
_TOP = 28
_BOTTOM = 36


@dataclass(frozen=True)
class MinuteTotals:
    """Runs due in each minute from ``start``, every target and tenant added up, and the
    minutes that are a pile-up on some target."""

    start: datetime
    minutes: int
    runs: list[float]
    pile_ups: frozenset[int]

    @property
    def peak_index(self) -> int | None:
        """The first busiest minute, None when nothing is due."""
        peak = max(self.runs, default=0.0)
        return None if peak <= 0 else self.runs.index(peak)

    def minute_at(self, index: int) -> datetime:
        return self.start + timedelta(minutes=index)


def minute_totals(result: ForecastResult) -> MinuteTotals:
    minutes = max(1, int((result.end - result.start).total_seconds() // 60))
    runs = [0.0] * minutes
    for load in result.loads:
        index = int((load.minute - result.start).total_seconds() // 60)
        if 0 <= index < minutes:
            runs[index] += load.runs
    pile_ups: set[int] = set()
    for pile_up in result.pile_ups:
        index = int((pile_up.minute - result.start).total_seconds() // 60)
        if 0 <= index < minutes:
            pile_ups.add(index)
    return MinuteTotals(result.start, minutes, runs, frozenset(pile_ups))


def _number(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 or value == int(value) else f"{value:,.1f}"


def _bars(totals: MinuteTotals, indexes: list[int], peak: float) -> str:
    plot_w = _WIDTH - _LEFT - _RIGHT
    plot_h = _HEIGHT - _TOP - _BOTTOM
    base = _TOP + plot_h
    parts = []
    for i in indexes:
        x = _LEFT + (i + 0.5) * plot_w / totals.minutes
        # A minute with any run is at least one pixel tall, so a lone run is not invisible.
        height = max(1.0, totals.runs[i] / peak * plot_h)
        parts.append(f"M{x:.2f} {base}V{base - height:.2f}")
    return "".join(parts)


def forecast_svg(totals: MinuteTotals) -> str:
    """The chart as an inline ``<svg>`` element (times in UTC)."""
    plot_w = _WIDTH - _LEFT - _RIGHT
    plot_h = _HEIGHT - _TOP - _BOTTOM
    base = _TOP + plot_h
    peak_index = totals.peak_index
    peak = totals.runs[peak_index] if peak_index is not None else 0.0
    stroke = max(1.0, plot_w / totals.minutes)
    attributes = f'data-total="{sum(totals.runs):.3f}"'
    if peak_index is not None:
        minute = totals.minute_at(peak_index)
        attributes += f' data-peak-runs="{peak:g}" data-peak-minute="{minute.isoformat()}"'
    out = [
        f'<svg class="forecast" role="img" viewBox="0 0 {_WIDTH} {_HEIGHT}" '
        f'xmlns="http://www.w3.org/2000/svg" {attributes}>',
        "<title>Runs due per minute (UTC)</title>",
        f'<line class="axis" x1="{_LEFT}" y1="{base}" x2="{_WIDTH - _RIGHT}" y2="{base}"/>',
    ]
    # Hour ticks every 3 hours; a midnight (UTC) tick also names the day.
    first_hour = totals.start.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    tick = first_hour
    end = totals.minute_at(totals.minutes)
    while tick < end:
        index = (tick - totals.start).total_seconds() / 60
        x = _LEFT + index * plot_w / totals.minutes
        if tick.hour % 3 == 0:
            label = tick.strftime("%H:%M")
            if tick.hour == 0:
                label = tick.strftime("%a %d %b 00:00")
            out.append(
                f'<line class="tick" x1="{x:.2f}" y1="{_TOP}" x2="{x:.2f}" y2="{base + 4}"/>'
                f'<text class="tick-label" x="{x:.2f}" y="{base + 18}" '
                f'text-anchor="middle">{escape(label)}</text>'
            )
        tick += timedelta(hours=1)
    if peak_index is None:
        out.append(
            f'<text class="empty" x="{_LEFT + plot_w / 2}" y="{_TOP + plot_h / 2}" '
            'text-anchor="middle">nothing due in this period</text>'
        )
    else:
        for fraction in (0.5, 1.0):
            y = base - fraction * plot_h
            out.append(
                f'<line class="grid" x1="{_LEFT}" y1="{y:.2f}" x2="{_WIDTH - _RIGHT}" '
                f'y2="{y:.2f}"/><text class="y-label" x="{_LEFT - 6}" y="{y + 4:.2f}" '
                f'text-anchor="end">{_number(peak * fraction)}</text>'
            )
        busy = [i for i, runs in enumerate(totals.runs) if runs > 0]
        normal = [i for i in busy if i not in totals.pile_ups]
        piled = [i for i in busy if i in totals.pile_ups]
        if normal:
            out.append(
                f'<path class="bars" stroke-width="{stroke:.2f}" '
                f'd="{_bars(totals, normal, peak)}"/>'
            )
        if piled:
            out.append(
                f'<path class="bars pile-up" stroke-width="{stroke:.2f}" '
                f'd="{_bars(totals, piled, peak)}"/>'
            )
        x = _LEFT + (peak_index + 0.5) * plot_w / totals.minutes
        anchor = "end" if x > _WIDTH * 0.7 else "start"
        shift = -6 if anchor == "end" else 6
        label = f"peak {_number(peak)} runs at {totals.minute_at(peak_index):%H:%M} UTC"
        out.append(
            f'<text class="peak-label" x="{x + shift:.2f}" y="{_TOP - 10}" '
            f'text-anchor="{anchor}">{escape(label)}</text>'
        )
    out.append(
        f'<text class="y-label" x="{_LEFT - 6}" y="{_TOP - 10}" text-anchor="end">runs/min</text>'
    )
    out.append("</svg>")
    return "".join(out)
