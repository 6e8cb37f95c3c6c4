"""Parse cron text into sets of allowed values, with errors that name the field and the reason.

Grammar (Vixie cron, plus an optional leading seconds field)::

    expression := macro | [second] minute hour day-of-month month day-of-week
    field      := item ("," item)*
    item       := "*" ["/" step] | value ["-" value] ["/" step]
    value      := ASCII digits | a three-letter name (JAN..DEC, SUN..SAT; any case)

``N/step`` means ``N-max/step``. In day-of-week both 0 and 7 are Sunday. Quartz extensions
(``L``, ``W``, ``#``, ``?``) and ``@reboot`` are refused rather than approximated: a schedule that
silently means something else is worse than one that does not compile.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from duetime.errors import ScheduleError

__all__ = ["MAX_EXPRESSION_LENGTH", "CronFields", "parse_cron"]

MAX_EXPRESSION_LENGTH = 512

_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_WEEKDAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
# Longest month, with February at 29 so that "29 2" (leap day) stays valid.
_MAX_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)

_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

_ITEM = re.compile(
    r"(?:(?P<star>\*)|(?P<low>[0-9]+|[A-Za-z]+)(?:-(?P<high>[0-9]+|[A-Za-z]+))?)"
    r"(?:/(?P<step>[0-9]+))?",
    re.ASCII,
)
_QUARTZ_L_W = re.compile(r"[0-9]*L|L-[0-9]+|[0-9]+W|LW", re.ASCII | re.IGNORECASE)


@dataclass(frozen=True)
class _Rule:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()
    name_base: int = 0


_SECOND = _Rule("second", 0, 59)
_MINUTE = _Rule("minute", 0, 59)
_HOUR = _Rule("hour", 0, 23)
_DAY_OF_MONTH = _Rule("day-of-month", 1, 31)
_MONTH = _Rule("month", 1, 12, _MONTHS, 1)
_DAY_OF_WEEK = _Rule("day-of-week", 0, 7, _WEEKDAYS, 0)


@dataclass(frozen=True)
class CronFields:
    """The allowed values of each field, sorted, plus Vixie's "starts with *" flags.

    Attributes:
        seconds: Allowed seconds; ``(0,)`` for a five-field expression.
        minutes: Allowed minutes.
        hours: Allowed hours.
        days: Allowed days of the month.
        months: Allowed months (1-12).
        weekdays: Allowed days of the week, 0 = Sunday ... 6 = Saturday.
        day_of_month_star: The day-of-month field starts with ``*`` (``*`` or ``*/n``).
        day_of_week_star: The day-of-week field starts with ``*``.
        has_seconds: The expression had six fields.
    """

    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: tuple[int, ...]
    months: tuple[int, ...]
    weekdays: tuple[int, ...]
    day_of_month_star: bool
    day_of_week_star: bool
    has_seconds: bool

    @property
    def day_or(self) -> bool:
        """Vixie rule: both day fields restricted means a day matches if either field does."""
        return not (self.day_of_month_star or self.day_of_week_star)


def _fail(reason: str) -> ScheduleError:
    return ScheduleError("schedule", reason)


def _value(token: str, rule: _Rule, field_text: str) -> int:
    if token.isdigit():
        number = int(token)
    elif rule.names and token.upper() in rule.names:
        number = rule.names.index(token.upper()) + rule.name_base
    elif rule.names:
        raise _fail(
            f"{rule.name} field {field_text!r}: unknown name {token!r} "
            f"(expected {rule.names[0]}..{rule.names[-1]})"
        )
    else:
        raise _fail(
            f"{rule.name} field {field_text!r}: names are only allowed for month and "
            f"day-of-week, got {token!r}"
        )
    if not rule.low <= number <= rule.high:
        raise _fail(
            f"{rule.name} field {field_text!r}: {number} is out of range {rule.low}-{rule.high}"
        )
    return number


def _explain_bad_item(item: str, rule: _Rule, field_text: str) -> ScheduleError:
    prefix = f"{rule.name} field {field_text!r}"
    if not item:
        return _fail(f"{prefix}: empty list item")
    if "#" in item:
        return _fail(f"{prefix}: '#' (n-th weekday of the month) is not supported")
    if "?" in item:
        return _fail(f"{prefix}: '?' is Quartz syntax; use '*'")
    if _QUARTZ_L_W.fullmatch(item):
        return _fail(f"{prefix}: 'L' and 'W' (last day, nearest weekday) are not supported")
    if item.startswith("-") or "--" in item:
        return _fail(f"{prefix}: negative numbers are not allowed")
    return _fail(f"{prefix}: cannot read {item!r}; expected *, N, N-M, or a step such as */5")


def _parse_field(field_text: str, rule: _Rule) -> tuple[int, ...]:
    values: set[int] = set()
    for item in field_text.split(","):
        match = None if _QUARTZ_L_W.fullmatch(item) else _ITEM.fullmatch(item)
        if match is None:
            raise _explain_bad_item(item, rule, field_text)
        if match["star"]:
            low, high = rule.low, rule.high
        else:
            low = _value(match["low"], rule, field_text)
            if match["high"] is not None:
                high = _value(match["high"], rule, field_text)
            elif match["step"] is not None:
                high = rule.high  # "N/step" = "N-max/step", as in most cron implementations
            else:
                high = low
        if low > high:
            raise _fail(f"{rule.name} field {field_text!r}: range {low}-{high} runs backwards")
        step = 1
        if match["step"] is not None:
            step = int(match["step"])
            span = rule.high - rule.low + 1
            if step < 1:
                raise _fail(f"{rule.name} field {field_text!r}: step must be at least 1")
            if step > span:
                raise _fail(
                    f"{rule.name} field {field_text!r}: step {step} is larger than the "
                    f"field's range {rule.low}-{rule.high}"
                )
        values.update(range(low, high + 1, step))
    if rule is _DAY_OF_WEEK and 7 in values:
        values.discard(7)
        values.add(0)
    return tuple(sorted(values))


def _check_fires(fields: CronFields) -> None:
    if fields.day_or:
        return  # any listed weekday comes round every week
    # Both day fields must match; every valid (month, day) lands on every weekday eventually.
    for month in fields.months:
        if any(day <= _MAX_DAYS[month - 1] for day in fields.days):
            return
    days = ",".join(str(day) for day in fields.days)
    months = ",".join(_MONTHS[month - 1] for month in fields.months)
    raise _fail(f"never fires: day-of-month {days} does not occur in {months}")


def parse_cron(expression: str) -> CronFields:
    """Parse a 5- or 6-field cron expression or an @macro.

    Raises:
        ScheduleError: With field "schedule" and a reason naming the cron field at fault.
    """
    if not isinstance(expression, str):
        raise _fail(f"must be a string, not {type(expression).__name__}")
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise _fail(
            f"is {len(expression)} characters long; at most {MAX_EXPRESSION_LENGTH} allowed"
        )
    for char in expression:
        if not char.isascii():
            raise _fail(
                f"contains the non-ASCII character {char!r} (U+{ord(char):04X}); "
                "cron uses ASCII digits and English names"
            )
        if not char.isprintable() and char not in " \t":
            raise _fail(f"contains the control character U+{ord(char):04X}")
    text = expression.strip()
    if not text:
        raise _fail("is empty; expected a cron expression such as '0 9 * * MON-FRI'")
    if text.startswith("@"):
        if text.lower() == "@reboot":
            raise _fail("@reboot is not a time schedule; duetime has no boot event")
        macro = _MACROS.get(text.lower())
        if macro is None:
            raise _fail(f"unknown macro {text!r}; expected one of {', '.join(_MACROS)}")
        text = macro
    parts = text.split()
    if len(parts) not in (5, 6):
        raise _fail(
            f"expected 5 fields (minute hour day-of-month month day-of-week) "
            f"or 6 with seconds first, got {len(parts)}"
        )
    has_seconds = len(parts) == 6
    if not has_seconds:
        parts.insert(0, "0")
    rules = (_SECOND, _MINUTE, _HOUR, _DAY_OF_MONTH, _MONTH, _DAY_OF_WEEK)
    seconds, minutes, hours, days, months, weekdays = (
        _parse_field(part, rule) for part, rule in zip(parts, rules, strict=True)
    )
    fields = CronFields(
        seconds=seconds,
        minutes=minutes,
        hours=hours,
        days=days,
        months=months,
        weekdays=weekdays,
        day_of_month_star=parts[3].startswith("*"),
        day_of_week_star=parts[5].startswith("*"),
        has_seconds=has_seconds,
    )
    _check_fires(fields)
    return fields
