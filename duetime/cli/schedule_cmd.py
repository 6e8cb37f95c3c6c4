"""`duetime schedule`: see when a schedule fires, and what DST does to it, before deploying it.

* ``duetime schedule preview --cron EXPR --tz ZONE [--count N] [--json]`` lists the next
  occurrences (also ``--interval PT5M [--start ISO]`` and ``--at ISO``), with a note wherever
  DST moved, merged, doubled or dropped one.
* ``duetime schedule lint --cron EXPR --tz ZONE`` lists the dates in the next 12 months on
  which DST changes what the schedule does.

Bad input raises ScheduleError, which ``duetime.cli.main`` prints on one line with exit code 2.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import Any

from duetime.errors import ScheduleError
from duetime.schedule import (
    TZDATA_VERSION,
    DstEffect,
    Occurrence,
    Schedule,
    ScheduleKind,
    ScheduleSpec,
    compile_schedule,
)

__all__ = ["register"]

_MAX_COUNT = 1000


def register(sub: Any) -> None:
    """Add ``schedule preview`` and ``schedule lint`` to the main parser's sub-commands."""
    parser = sub.add_parser(
        "schedule",
        help="preview a schedule's next occurrences and lint it for DST surprises",
        description="Preview and lint schedules: cron in an IANA zone, intervals, instants.",
    )
    actions = parser.add_subparsers(
        dest="schedule_command", required=True, parser_class=type(parser)
    )
    preview = actions.add_parser(
        "preview",
        help="print the next occurrences",
        description="Print the next occurrences, in UTC and on the zone's wall clock.",
    )
    source = preview.add_mutually_exclusive_group(required=True)
    source.add_argument("--cron", metavar="EXPR", help="cron expression (5 or 6 fields, @daily)")
    source.add_argument("--interval", metavar="DURATION", help="ISO-8601 duration, e.g. PT5M")
    source.add_argument("--at", metavar="INSTANT", help="one instant, e.g. 2025-06-01T09:00:00Z")
    _add_common(preview)
    preview.add_argument(
        "--count", type=int, default=10, help=f"how many occurrences (1-{_MAX_COUNT}; 10)"
    )
    preview.set_defaults(func=_preview)

    lint = actions.add_parser(
        "lint",
        help="list the dates in the next 12 months on which DST changes the schedule",
        description="List the dates in the next 12 months on which DST shifts, skips or "
        "doubles a cron schedule's runs.",
    )
    lint.add_argument("--cron", metavar="EXPR", required=True, help="cron expression")
    _add_common(lint)
    lint.set_defaults(func=_lint)


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tz", metavar="ZONE", help="IANA zone (required with --cron)")
    parser.add_argument("--dst-gap", choices=("shift", "skip"), default="shift")
    parser.add_argument("--dst-overlap", choices=("once", "twice"), default="once")
    parser.add_argument(
        "--start", metavar="INSTANT", help="interval anchor; for cron, the earliest run"
    )
    parser.add_argument(
        "--after", metavar="INSTANT", help="start strictly after this UTC instant (default: now)"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _instant(text: str | None, field: str, default: datetime) -> datetime:
    if text is None:
        return default
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ScheduleError(
            field, f"{text!r} is not an ISO-8601 instant such as 2025-01-31T09:00:00Z"
        ) from None
    # Documented as a UTC instant: a value without an offset is read as UTC.
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _spec(args: argparse.Namespace) -> ScheduleSpec:
    cron = getattr(args, "cron", None)
    interval = getattr(args, "interval", None)
    kind: ScheduleKind
    if cron is not None:
        if args.tz is None:
            raise ScheduleError(
                "time_zone", "--tz is required with --cron (an IANA name such as Europe/Berlin)"
            )
        kind, expression = "cron", cron
    elif interval is not None:
        kind, expression = "interval", interval
    else:
        kind, expression = "at", args.at
    start_at = None if args.start is None else _instant(args.start, "start_at", datetime.now(UTC))
    return ScheduleSpec(
        kind=kind,
        expression=expression,
        time_zone=args.tz or "UTC",
        dst_gap=args.dst_gap,
        dst_overlap=args.dst_overlap,
        start_at=start_at,
    )


def _utc_text(instant: datetime) -> str:
    return instant.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _describe(spec: ScheduleSpec) -> str:
    if spec.kind == "cron":
        rule = f"DST gap: {spec.dst_gap}, overlap: {spec.dst_overlap}"
        return f"cron {spec.expression!r} in {spec.time_zone} ({rule})"
    return f"{spec.kind} {spec.expression!r}"


def _occurrence_json(occurrence: Occurrence) -> dict[str, str | None]:
    return {
        "scheduled_for": _utc_text(occurrence.scheduled_for),
        "local": occurrence.local.isoformat(),
        "note": occurrence.note,
    }


def _preview(args: argparse.Namespace) -> int:
    if not 1 <= args.count <= _MAX_COUNT:
        raise ScheduleError("count", f"must be between 1 and {_MAX_COUNT}, got {args.count}")
    spec = _spec(args)
    schedule: Schedule = compile_schedule(spec)
    after = _instant(args.after, "after", datetime.now(UTC))
    occurrences = schedule.occurrences(after, args.count)
    if args.json:
        print(json.dumps([_occurrence_json(item) for item in occurrences], indent=2))
        return 0
    print(f"{_describe(spec)}, after {_utc_text(after)}:")
    if not occurrences:
        print("  no occurrences: the schedule never fires after that instant")
    for item in occurrences:
        line = f"  {_utc_text(item.scheduled_for):<24}  {item.local.isoformat()}"
        print(f"{line}  {item.note}" if item.note else line)
    return 0


def _add_year(instant: datetime) -> datetime:
    try:
        return instant.replace(year=instant.year + 1)
    except ValueError:  # 29 February
        return instant.replace(year=instant.year + 1, day=28)


def _effect_json(effect: DstEffect) -> dict[str, object]:
    return {
        "date": effect.day.isoformat(),
        "effect": effect.kind,
        "walls": [wall.isoformat() for wall in effect.walls],
        "runs": [_utc_text(run) for run in effect.runs],
        "note": effect.note,
    }


def _lint(args: argparse.Namespace) -> int:
    spec = _spec(args)
    schedule = compile_schedule(spec)
    start = _instant(args.after, "after", datetime.now(UTC))
    end = _add_year(start)
    effects = schedule.dst_effects(start, end)
    if args.json:
        print(json.dumps([_effect_json(effect) for effect in effects], indent=2))
        return 0
    span = f"{start.date().isoformat()} to {end.date().isoformat()}"
    print(f"{_describe(spec)}, {span} (tzdata {TZDATA_VERSION}):")
    if not effects:
        print("  DST changes nothing for this schedule in that period")
    for effect in effects:
        print(f"  {effect.day.isoformat()}  {effect.kind:<8}  {effect.note}")
    return 0
