"""Plain-words notes that explain what DST did to an occurrence (for preview and lint)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

__all__ = ["clock_text", "offset_text", "walls_text"]


def clock_text(wall: datetime) -> str:
    """Render a wall time as ``HH:MM``, or ``HH:MM:SS`` when the seconds matter."""
    return wall.strftime("%H:%M:%S" if wall.second else "%H:%M")


def offset_text(offset: timedelta) -> str:
    """Render a UTC offset as ``+05:45`` (seconds only for historical offsets that have them)."""
    seconds = int(offset.total_seconds())
    sign = "-" if seconds < 0 else "+"
    hours, rest = divmod(abs(seconds), 3600)
    text = f"{sign}{hours:02d}:{rest // 60:02d}"
    return text + (f":{rest % 60:02d}" if rest % 60 else "")


def walls_text(walls: Sequence[datetime], singular: str, plural: str) -> str:
    """Describe the affected wall times of one transition: ``02:30 does not exist on ...``."""
    day = walls[0].date().isoformat()
    if len(walls) == 1:
        return f"{clock_text(walls[0])} {singular} on {day}"
    first, last = clock_text(walls[0]), clock_text(walls[-1])
    if len(walls) == 2:
        return f"{first} and {last} {plural} on {day}"
    return f"{len(walls)} times from {first} to {last} {plural} on {day}"
