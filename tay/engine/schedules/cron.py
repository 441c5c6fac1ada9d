"""Five-field Unix cron with fixed UTC offsets: parsing, matching and the next occurrence.

Grammar (one field per position, separated by whitespace):

    minute 0-59 | hour 0-23 | day-of-month 1-31 | month 1-12 | day-of-week 0-7 (7 = Sunday)
    field := "*" | part ("," part)*
    part  := ("*" | N | N "-" M) ["/" S]        N <= M, S >= 1, decimal digits only

No names, no ``L``/``W``/``#``/``?``. A step always walks from the part's start to the end of
its range (``5/10`` in the minute field means 5,15,25,...; the usual cron reading).

Day rule (Unix): only a field written literally as ``*`` is unrestricted. When both day fields
are restricted a day matches if EITHER matches; otherwise the restricted one decides. We
rewrite every parsed field as an explicit list for ``croniter`` (which computes the next time)
so its own shorthands (``*/1`` counting as ``*``, names, ``L``) never reach it, and we encode
the day rule ourselves instead of trusting croniter's ``day_or`` heuristics.

Time zones are fixed offsets only: ``+00`` (default), ``+HH``, ``-HH``, ``+HH:MM``, ``Z``,
``UTC``. Named zones are refused: a schedule must never shift with someone's DST table.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone


from tay._frozen import Frozen, LazyPattern, set_field
from tay.failures import RequestRefused

MINUTE_MS = 60_000
# The search for a next occurrence gives up after this span: such an expression is invalid.
SEARCH_LIMIT_MS = 5 * 366 * 86_400_000
# The last minute whose wall-clock fields Python's datetime (and so croniter) can compute,
# a day short of 9999-12-31 so that no time zone offset carries it past the end.
LAST_COMPUTABLE_MS = 253_402_128_000_000  # 9999-12-30T00:00:00Z

_FIELDS = (  # (name, low, high)
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day_of_month", 1, 31),
    ("month", 1, 12),
    ("day_of_week", 0, 7),
)
_PART = LazyPattern(r"(\*|(\d{1,2})(?:-(\d{1,2}))?)(?:/(\d{1,3}))?")
_OFFSET = LazyPattern(r"([+-])(\d{2})(?::(\d{2}))?")
DEFAULT_TIMEZONE = "+00"


def _invalid(message: str, **details: object) -> RequestRefused:
    return RequestRefused(message, code="invalid_schedule", **details)


class CronSpec(Frozen):
    """A parsed expression: the allowed values of each field and which day fields restrict."""

    __slots__ = ("expression", "minutes", "hours", "days", "months", "weekdays",
                 "day_of_month_restricted", "day_of_week_restricted")
    expression: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0..6, Sunday = 0
    day_of_month_restricted: bool
    day_of_week_restricted: bool

    def __init__(self, expression: str, minutes: frozenset[int], hours: frozenset[int],
                 days: frozenset[int], months: frozenset[int], weekdays: frozenset[int],
                 day_of_month_restricted: bool, day_of_week_restricted: bool) -> None:
        set_field(self, "expression", expression)
        set_field(self, "minutes", minutes)
        set_field(self, "hours", hours)
        set_field(self, "days", days)
        set_field(self, "months", months)
        set_field(self, "weekdays", weekdays)
        set_field(self, "day_of_month_restricted", day_of_month_restricted)
        set_field(self, "day_of_week_restricted", day_of_week_restricted)

    def day_matches(self, day: int, weekday: int) -> bool:
        """The Unix day rule; ``weekday`` is 0..6 with Sunday = 0."""
        by_dom = day in self.days
        by_dow = weekday in self.weekdays
        if self.day_of_month_restricted and self.day_of_week_restricted:
            return by_dom or by_dow
        return by_dom and by_dow

    def matches(self, local: datetime) -> bool:
        """Whether the wall-clock minute ``local`` matches (seconds are ignored)."""
        return (
            local.minute in self.minutes
            and local.hour in self.hours
            and local.month in self.months
            and self.day_matches(local.day, local.isoweekday() % 7)
        )

    def croniter_expression(self) -> str:
        """An explicit-list expression whose croniter meaning equals ours."""
        every_day = (self.day_of_month_restricted and self.day_of_week_restricted) and (
            len(self.days) == 31 or len(self.weekdays) == 7
        )
        dom = "*" if every_day or not self.day_of_month_restricted else _join(self.days)
        dow = "*" if every_day or not self.day_of_week_restricted else _join(self.weekdays)
        return " ".join(
            (_join(self.minutes), _join(self.hours), dom, _join(self.months), dow)
        )


def _join(values: frozenset[int]) -> str:
    return ",".join(str(value) for value in sorted(values))


def _parse_field(text: str, name: str, low: int, high: int) -> frozenset[int] | None:
    """Allowed values of one field, or None for a literal ``*`` (unrestricted)."""
    if text == "*":
        return None
    values: set[int] = set()
    for part in text.split(","):
        match = _PART.fullmatch(part)
        if match is None:
            raise _invalid(f"cron field {name}: cannot parse {part!r}", field=name)
        star, first, last, step = match.groups()
        if star == "*":
            start, stop = low, high
        else:
            start = int(first)
            stop = int(last) if last is not None else (high if step else start)
            if not (low <= start <= high and low <= stop <= high):
                raise _invalid(f"cron field {name}: {part!r} is outside {low}-{high}", field=name)
            if start > stop:
                raise _invalid(f"cron field {name}: range {part!r} runs backwards", field=name)
        stride = int(step) if step is not None else 1
        if stride < 1:
            raise _invalid(f"cron field {name}: step in {part!r} must be >= 1", field=name)
        values.update(range(start, stop + 1, stride))
    return frozenset(values)


def parse_cron(expression: str) -> CronSpec:
    """Parse a five-field expression; refuses anything else with ``invalid_schedule``."""
    if not isinstance(expression, str):
        raise _invalid("cron must be a string", field="cron")
    fields = expression.split()
    if len(fields) != 5:
        raise _invalid(f"cron needs 5 fields, got {len(fields)}", field="cron")
    parsed = [
        _parse_field(text, name, low, high) for text, (name, low, high) in zip(fields, _FIELDS)
    ]
    full = [frozenset(range(low, high + 1)) for _, low, high in _FIELDS]
    minutes, hours, days, months, weekdays = (
        value if value is not None else every for value, every in zip(parsed, full)
    )
    return CronSpec(
        expression=expression,
        minutes=minutes,
        hours=hours,
        days=days,
        months=months,
        weekdays=frozenset(day % 7 for day in weekdays),
        day_of_month_restricted=parsed[2] is not None,
        day_of_week_restricted=parsed[4] is not None,
    )


def parse_timezone(text: object) -> int:
    """The fixed UTC offset of ``text`` in minutes; named zones are ``invalid_schedule``."""
    if not isinstance(text, str):
        raise _invalid("timezone must be a string", field="timezone")
    if text in ("Z", "UTC"):
        return 0
    match = _OFFSET.fullmatch(text)
    if match is None:
        raise _invalid(
            f"timezone {text!r} is not a fixed offset (+HH, +HH:MM, Z, UTC)", field="timezone"
        )
    sign, hours, minutes = match.groups()
    if int(hours) > 23 or (minutes is not None and int(minutes) > 59):
        raise _invalid(f"timezone {text!r} is out of range", field="timezone")
    total = int(hours) * 60 + int(minutes or 0)
    return -total if sign == "-" else total


def next_after(spec: CronSpec, offset_minutes: int, instant_ms: int) -> int | None:
    """The first whole minute strictly after ``instant_ms`` whose local fields match.

    None when there is none within ``SEARCH_LIMIT_MS`` (for example ``0 0 30 2 *``).
    """
    # imported here: croniter (with dateutil) is a fifth of the engine's import time, and
    # a restart replays schedules without computing any cron time
    from croniter import croniter
    from croniter.croniter import CroniterBadDateError

    if instant_ms >= LAST_COMPUTABLE_MS:
        return None  # past the calendar datetime can compute: the sequence ends here
    zone = timezone(timedelta(minutes=offset_minutes))
    minute_start = instant_ms - instant_ms % MINUTE_MS
    base = datetime.fromtimestamp(minute_start // 1000, tz=timezone.utc).astimezone(zone)
    try:
        found = croniter(
            spec.croniter_expression(), base, max_years_between_matches=6
        ).get_next(datetime)
    except (CroniterBadDateError, ValueError, OverflowError):  # no match before year 9999
        return None
    found_ms = int(found.timestamp()) * 1000
    if found_ms - instant_ms > SEARCH_LIMIT_MS:
        return None
    return found_ms


def first_at_or_after_minute(spec: CronSpec, offset_minutes: int, start_ms: int) -> int | None:
    """The first matching minute at or after the start of the minute containing ``start_ms``."""
    minute_start = start_ms - start_ms % MINUTE_MS
    return next_after(spec, offset_minutes, minute_start - MINUTE_MS)
