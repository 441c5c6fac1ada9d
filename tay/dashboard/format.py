"""Formatting for the templates: times, durations, sizes, counts and JSON values.

Times on the wire are Unix milliseconds; pages show them in UTC (the server cannot know
the reader's zone without JavaScript) with a relative hint computed at render time.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import orjson
from markupsafe import Markup, escape

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def utc(ms: int | None) -> str:
    if ms is None:
        return "–"
    try:
        moment = dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)
    except (OverflowError, OSError, ValueError):
        return f"{ms} ms"
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def day(ms: int) -> str:
    """A UTC day's date (``ms``: its start)."""
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%Y-%m-%d")


def iso(ms: int | None) -> str:
    """The ``datetime`` attribute of a ``<time>`` element."""
    if ms is None:
        return ""
    try:
        return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat(
            timespec="milliseconds").replace("+00:00", "Z")
    except (OverflowError, OSError, ValueError):
        return ""


def duration(ms: int | float | None) -> str:
    """A compact duration: 850 ms, 12.4 s, 3 min 20 s, 5 h 02 min, 3 d 4 h."""
    if ms is None:
        return "–"
    ms = abs(ms)
    if ms < 1_000:
        return f"{ms:.0f} ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, seconds = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s" if seconds else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes:02d} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def axis_duration(ms: int) -> str:
    """A chart's grid label on a duration scale, in its largest whole unit: 750 ms, 1.5 s,
    45 s, 90 s, 10 min, 1 h, 2 d (the scale's steps make every label short:
    ``charts.latency``)."""
    for unit, name in ((86_400_000, "d"), (3_600_000, "h"), (60_000, "min"), (1_000, "s")):
        if ms >= unit and ms % unit == 0:
            return f"{ms // unit} {name}"
    if ms > 1_000 and ms % 100 == 0:
        return f"{ms / 1000:.1f} s"  # 1.5 s (a 500 ms step)
    return f"{ms} ms"


def axis_count(count: int) -> str:
    """A chart's grid label on a count scale, at most five characters, so that it fits the
    axis margin: 9999, 15k, 250k, 1.5M, 20M (a busy day's 1000000 did not)."""
    if count < 10_000:
        return str(count)
    for unit, name in ((1_000_000_000, "G"), (1_000_000, "M"), (1_000, "k")):
        if count >= unit:
            whole, rest = divmod(count, unit)
            return f"{whole}{name}" if not rest else f"{count / unit:.1f}{name}"
    return str(count)  # (not reached)


def relative(ms: int | None, now_ms: int) -> str:
    if ms is None:
        return ""
    delta = now_ms - ms
    if abs(delta) < 1_000:
        return "just now"
    return f"{duration(delta)} ago" if delta > 0 else f"in {duration(delta)}"


def size(count: int | None) -> str:
    if count is None:
        return "–"
    value = float(count)
    for unit in _UNITS:
        if abs(value) < 1024 or unit == _UNITS[-1]:
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def number(count: int | None) -> str:
    return "–" if count is None else f"{count:,}"


def percent(used: int | None, limit: int | None) -> str:
    if used is None or not limit:
        return ""
    return f"{100 * used / limit:.0f} %"


def pretty_json(value: Any) -> str:
    """A JSON value indented for reading (keys in their stored order)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode("utf-8")
    except TypeError:
        return repr(value)


def retention(value: Any) -> str:
    """A terminal retention as the store reports it: "infinity", {"hours": N}, {"minutes": N}."""
    if value == "infinity":
        return "forever (finished jobs never expire)"
    if isinstance(value, dict) and len(value) == 1:
        (unit, amount), = value.items()
        if unit in ("hours", "minutes") and type(amount) is int:
            return duration(amount * (3_600_000 if unit == "hours" else 60_000))
    return pretty_json(value)


def short_id(job_id: str | None) -> str:
    return "–" if not job_id else job_id[:12]


# ---- HTML snippets used in every table row: plain functions, since a Jinja macro call
# costs about ten times as much and a 50-row page makes a few hundred of them.

_NONE = Markup('<span class="muted">–</span>')


def badge(state: str) -> Markup:
    text = escape(state)
    return Markup(f'<span class="badge s-{text}">{text}</span>')


def _stamps(ms: int) -> tuple[str, str]:
    """(ISO 8601 for ``datetime``, readable UTC) from one conversion."""
    try:
        moment = dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)
    except (OverflowError, OSError, ValueError):
        return "", f"{ms} ms"
    text = moment.isoformat(sep=" ", timespec="milliseconds")  # 2026-01-02 03:04:05.678+00:00
    return f"{text[:10]}T{text[11:23]}Z", text[:19]


def when(ms: int | None, now_ms: int) -> Markup:
    """A relative time, the exact UTC time in its tooltip and ``datetime`` attribute."""
    if ms is None:
        return _NONE
    machine, readable = _stamps(ms)
    return Markup(f'<time datetime="{machine}" title="{readable} UTC">'
                  f'{relative(ms, now_ms)}</time>')


def at(ms: int | None, now_ms: int) -> Markup:
    """The exact UTC time, then the relative one."""
    if ms is None:
        return _NONE
    machine, readable = _stamps(ms)
    return Markup(f'<time datetime="{machine}">{readable}</time> '
                  f'<span class="muted">({relative(ms, now_ms)})</span>')


HELPERS = {"badge": badge, "when": when, "at": at, "relative": relative}
FILTERS = {"utc": utc, "day": day, "iso": iso, "duration": duration,
           "axis_duration": axis_duration, "axis_count": axis_count, "size": size,
           "number": number,
           "percent": percent, "pretty_json": pretty_json, "short_id": short_id,
           "retention": retention}
