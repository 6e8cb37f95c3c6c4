"""IANA zones from the pinned ``tzdata`` package, and the transitions between their offsets.

Why not ``ZoneInfo(name)``: it reads the host's ``/usr/share/zoneinfo`` first, so two machines with
different system tzdata would compute different instants for the same job, and it accepts keys that
are not zones (``posixrules``, ``Factory``). Every zone here is loaded from the ``tzdata`` wheel
pinned in the lock file, so the planner, dispatcher and workers agree wherever they run.
"""

from __future__ import annotations

import functools
import importlib
import importlib.resources
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from duetime.errors import ScheduleError

__all__ = [
    "TZDATA_VERSION",
    "ZoneTransition",
    "available_zones",
    "fixed_offset",
    "offset_at",
    "transition_between",
    "validate_time_zone",
    "zone_transitions",
]

# The IANA release inside the pinned tzdata wheel (the package ships no type stubs).
TZDATA_VERSION: str = str(importlib.import_module("tzdata").IANA_VERSION)

# Keys the tzdata package ships that are not places: "Factory" means "zone not configured".
_NOT_ZONES = frozenset({"Factory", "posixrules", "localtime"})
_MAX_NAME_LENGTH = 64
_ONE_SECOND = timedelta(seconds=1)


@functools.cache
def available_zones() -> frozenset[str]:
    """Return every zone name the pinned tzdata package ships, minus keys that are not zones."""
    listing = importlib.resources.files("tzdata").joinpath("zones").read_text(encoding="utf-8")
    return frozenset(name for name in listing.split() if name not in _NOT_ZONES)


@functools.cache
def _zones_by_folded_name() -> dict[str, str]:
    return {name.casefold(): name for name in available_zones()}


@functools.cache
def _load(name: str) -> ZoneInfo:
    # Loaded once per process: the returned object is shared so that datetimes compare cheaply.
    resource = importlib.resources.files("tzdata.zoneinfo").joinpath(name)
    with resource.open("rb") as stream:
        return ZoneInfo.from_file(stream, key=name)


def validate_time_zone(name: str) -> ZoneInfo:
    """Return the zone for an IANA name, or raise ScheduleError("time_zone", reason).

    Args:
        name: An IANA zone name such as ``Europe/Berlin``; case matters, as in tzdata.

    Raises:
        ScheduleError: For anything that is not a zone of the pinned tzdata: paths, NUL bytes,
            ``posixrules``/``Factory``, wrong case (with the correct spelling as a hint).
    """
    if not isinstance(name, str):
        raise ScheduleError("time_zone", f"must be a string, not {type(name).__name__}")
    if not name:
        raise ScheduleError("time_zone", "is empty; use an IANA name such as Europe/Berlin")
    if len(name) > _MAX_NAME_LENGTH:
        raise ScheduleError("time_zone", f"is {len(name)} characters long; zone names are short")
    if "\x00" in name:
        raise ScheduleError("time_zone", "contains a NUL character")
    if name.startswith(("/", ".", "\\")) or ".." in name or "\\" in name:
        raise ScheduleError("time_zone", f"{name!r} is a path, not an IANA zone name")
    if name in _NOT_ZONES:
        raise ScheduleError("time_zone", f"{name!r} is a tzdata internal key, not a zone")
    if name not in available_zones():
        suggestion = _zones_by_folded_name().get(name.casefold())
        if suggestion is not None:
            raise ScheduleError(
                "time_zone", f"unknown zone {name!r}; zone names are case-sensitive: {suggestion}"
            )
        raise ScheduleError(
            "time_zone",
            f"unknown zone {name!r} (not in tzdata {TZDATA_VERSION}); "
            "use an IANA name such as America/New_York",
        )
    return _load(name)


# Zones that are a fixed offset by definition in tzdata (the Etc area and its links).
_FIXED_LINKS = frozenset(
    {"UTC", "UCT", "GMT", "GMT0", "GMT+0", "GMT-0", "Greenwich", "Universal", "Zulu"}
)


def fixed_offset(zone: ZoneInfo) -> timedelta | None:
    """Return the offset of a zone that never changes it (``Etc/*``, ``UTC``), else None.

    Cron search skips the DST classification for these, the default zone included.
    """
    key = zone.key or ""
    if not (key.startswith("Etc/") or key in _FIXED_LINKS):
        return None
    return zone.utcoffset(datetime(2000, 1, 1))


def offset_at(zone: ZoneInfo, instant: datetime) -> timedelta:
    """Return the zone's UTC offset at ``instant`` (naive UTC)."""
    offset = zone.fromutc(instant.replace(tzinfo=zone)).utcoffset()
    assert offset is not None  # a ZoneInfo always has an offset
    return offset


@functools.lru_cache(maxsize=4096)
def transition_between(zone: ZoneInfo, start: datetime, end: datetime) -> datetime:
    """Return the first instant in (start, end] whose offset differs from the offset at start.

    Both bounds are naive UTC and the caller guarantees the offsets at the bounds differ. tzdata
    transitions fall on whole seconds, so a binary search to the second is exact.
    """
    before = offset_at(zone, start)
    # Work on whole seconds: a transition at a whole second cannot lie in the trimmed fractions.
    low = start.replace(microsecond=0)
    high = end if end.microsecond == 0 else end.replace(microsecond=0) + _ONE_SECOND
    # Invariant: offset(low) == before != offset(high).
    while high - low > _ONE_SECOND:
        middle = low + timedelta(seconds=int((high - low).total_seconds()) // 2)
        if offset_at(zone, middle) == before:
            low = middle
        else:
            high = middle
    return high


@dataclass(frozen=True)
class ZoneTransition:
    """A change of a zone's UTC offset.

    Attributes:
        at: The instant of the change, aware UTC.
        offset_before: The offset just before ``at``.
        offset_after: The offset from ``at`` on.
    """

    at: datetime
    offset_before: timedelta
    offset_after: timedelta

    @property
    def is_gap(self) -> bool:
        """True when clocks jump forward, so some wall times do not exist."""
        return self.offset_after > self.offset_before

    @property
    def wall_start(self) -> datetime:
        """The first naive wall time affected (start of the gap or of the repeated span)."""
        naive = self.at.replace(tzinfo=None)
        return naive + min(self.offset_before, self.offset_after)

    @property
    def wall_end(self) -> datetime:
        """The first naive wall time after the gap or the repeated span."""
        naive = self.at.replace(tzinfo=None)
        return naive + max(self.offset_before, self.offset_after)


def zone_transitions(
    zone: ZoneInfo, start: datetime, end: datetime, step: timedelta = timedelta(hours=1)
) -> list[ZoneTransition]:
    """List the offset changes of ``zone`` in [start, end), aware UTC bounds.

    The zone is probed every ``step`` and each change located to the second. zoneinfo does not
    expose its transition table; two changes less than ``step`` apart would cancel out, and in
    tzdata changes are weeks or months apart, so an hour (or a day, for scans of many zones)
    finds them all.
    """
    cursor = start.astimezone(UTC).replace(tzinfo=None)
    stop = end.astimezone(UTC).replace(tzinfo=None)
    found: list[ZoneTransition] = []
    current = offset_at(zone, cursor)
    while cursor < stop:
        probe = min(cursor + step, stop)
        offset = offset_at(zone, probe)
        if offset != current:
            at = transition_between(zone, cursor, probe)
            if at < stop:
                found.append(ZoneTransition(at.replace(tzinfo=UTC), current, offset))
            current = offset
        cursor = probe
    return found
