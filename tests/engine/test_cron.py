"""Cron parsing, the Unix day rule, fixed offsets and next-occurrence search."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tay.engine.schedules.cron import (
    MINUTE_MS,
    first_at_or_after_minute,
    next_after,
    parse_cron,
    parse_timezone,
)
from tay.failures import RequestRefused


def utc_ms(*parts: int) -> int:
    return int(datetime(*parts, tzinfo=timezone.utc).timestamp() * 1000)


def test_weekday_minute_after_seconds_past():
    # protocol.md §4.3: 15 9 * * 1-5 after 2026-01-02 09:14:31Z -> 09:15Z
    spec = parse_cron("15 9 * * 1-5")
    assert next_after(spec, 0, utc_ms(2026, 1, 2, 9, 14, 31)) == utc_ms(2026, 1, 2, 9, 15)


def test_fixed_offset_plus_two():
    spec = parse_cron("0 9 * * *")
    assert next_after(spec, parse_timezone("+02"), utc_ms(2026, 1, 1, 6, 30)) == utc_ms(2026, 1, 1, 7)


def test_both_day_fields_restricted_match_either():
    # 2026-01-01 is a Thursday; the 13th is a Tuesday, the first Monday is the 5th.
    spec = parse_cron("0 0 13 * 1")
    assert next_after(spec, 0, utc_ms(2026, 1, 1)) == utc_ms(2026, 1, 5)


def test_next_is_strictly_after_an_exact_minute():
    spec = parse_cron("* * * * *")
    assert next_after(spec, 0, utc_ms(2026, 1, 1, 0, 0)) == utc_ms(2026, 1, 1, 0, 1)
    assert next_after(spec, 0, utc_ms(2026, 1, 1, 0, 0) + 1) == utc_ms(2026, 1, 1, 0, 1)


def test_impossible_date_gives_up():
    assert next_after(parse_cron("0 0 30 2 *"), 0, utc_ms(2026, 1, 1)) is None


def test_leap_day_within_search_limit():
    assert next_after(parse_cron("0 0 29 2 *"), 0, utc_ms(2026, 1, 1)) == utc_ms(2028, 2, 29)


def test_leap_day_beyond_search_limit_gives_up():
    # 2100 is not a leap year: from March 2097 the next Feb 29 is in 2104 (> 5 x 366 days).
    assert next_after(parse_cron("0 0 29 2 *"), 0, utc_ms(2097, 3, 1)) is None


def test_day_seven_is_sunday():
    assert parse_cron("0 0 * * 7").weekdays == parse_cron("0 0 * * 0").weekdays == {0}
    # 2026-01-04 is a Sunday
    assert next_after(parse_cron("0 0 * * 7"), 0, utc_ms(2026, 1, 1)) == utc_ms(2026, 1, 4)


def test_star_slash_one_is_restricted():
    # */1 restricts day-of-month, so with a restricted weekday either matches: every day.
    spec = parse_cron("0 0 */1 * 1")
    assert spec.day_of_month_restricted and spec.day_of_week_restricted
    assert next_after(spec, 0, utc_ms(2026, 1, 1)) == utc_ms(2026, 1, 2)


def test_literal_star_day_of_month_lets_weekday_decide():
    assert next_after(parse_cron("0 0 * * 1"), 0, utc_ms(2026, 1, 1)) == utc_ms(2026, 1, 5)


def test_full_weekday_list_with_restricted_day_matches_every_day():
    spec = parse_cron("0 0 13 * 0-6")
    assert next_after(spec, 0, utc_ms(2026, 1, 1)) == utc_ms(2026, 1, 2)


def test_star_inside_a_list_is_restricted():
    spec = parse_cron("0 0 *,5 * 1")
    assert spec.day_of_month_restricted


def test_step_on_a_single_number_walks_to_the_end():
    assert parse_cron("5/20 * * * *").minutes == {5, 25, 45}


def test_ranges_steps_and_lists():
    spec = parse_cron("0-10/5,30 1,2 1-3 6 *")
    assert spec.minutes == {0, 5, 10, 30}
    assert spec.hours == {1, 2}
    assert spec.days == {1, 2, 3}
    assert spec.months == {6}


@pytest.mark.parametrize(
    "expression",
    [
        "* * * *", "* * * * * *", "61 * * * *", "* 24 * * *", "* * 0 * *", "* * 32 * *",
        "* * * 13 *", "* * * * 8", "* * * JAN *", "* * * * MON", "* * L * *", "* * 15W * *",
        "* * * * 1#2", "* * ? * *", "5-1 * * * *", "*/0 * * * *", "-1 * * * *", "", "  ",
        "1,,2 * * * *", "1- * * * *",
    ],
)
def test_invalid_expressions(expression):
    with pytest.raises(RequestRefused) as info:
        parse_cron(expression)
    assert info.value.code == "invalid_schedule"


@pytest.mark.parametrize(
    "text, minutes",
    [("+00", 0), ("Z", 0), ("UTC", 0), ("+02", 120), ("-05", -300), ("+05:30", 330),
     ("-23:59", -1439)],
)
def test_timezones(text, minutes):
    assert parse_timezone(text) == minutes


@pytest.mark.parametrize(
    "text", ["Europe/Kyiv", "utc", "+24", "+5", "+05:60", "05", "+0530", "", None, 2]
)
def test_invalid_timezones(text):
    with pytest.raises(RequestRefused) as info:
        parse_timezone(text)
    assert info.value.code == "invalid_schedule"
    assert info.value.details["field"] == "timezone"


def test_half_hour_offsets_shift_the_wall_clock():
    spec = parse_cron("30 1 * * *")
    assert next_after(spec, parse_timezone("+05:30"), utc_ms(2026, 1, 1)) == utc_ms(2026, 1, 1, 20)
    assert next_after(spec, parse_timezone("-05"), utc_ms(2026, 1, 1)) == utc_ms(2026, 1, 1, 6, 30)


def test_first_occurrence_includes_the_current_minute():
    spec = parse_cron("* * * * *")
    start = utc_ms(2026, 1, 1, 10, 0) + 59_999
    assert first_at_or_after_minute(spec, 0, start) == utc_ms(2026, 1, 1, 10, 0)


def _brute_force(spec, offset_minutes: int, instant_ms: int, horizon_minutes: int) -> int | None:
    zone = timezone(timedelta(minutes=offset_minutes))
    candidate = instant_ms - instant_ms % MINUTE_MS + MINUTE_MS
    for _ in range(horizon_minutes):
        local = datetime.fromtimestamp(candidate / 1000, tz=timezone.utc).astimezone(zone)
        if spec.matches(local):
            return candidate
        candidate += MINUTE_MS
    return None


_field = st.one_of(
    st.just("*"),
    st.builds(lambda a, s: f"*/{s}", st.just(0), st.integers(1, 9)),
    st.integers(0, 6).map(str),
    st.tuples(st.integers(0, 3), st.integers(3, 6)).map(lambda p: f"{p[0]}-{p[1]}"),
)


@settings(max_examples=60, deadline=None)
@given(
    minute=st.sampled_from(["*", "0", "*/15", "7,37"]),
    hour=st.sampled_from(["*", "3", "*/6", "22-23"]),
    dom=st.sampled_from(["*", "1", "13", "*/10", "28-31", "*/1"]),
    month=st.sampled_from(["*", "2", "1-3"]),
    dow=_field,
    offset=st.sampled_from([0, 120, -300, 330]),
    instant=st.integers(utc_ms(2026, 1, 1), utc_ms(2026, 1, 3)),
)
def test_croniter_agrees_with_brute_force_matching(minute, hour, dom, month, dow, offset, instant):
    spec = parse_cron(f"{minute} {hour} {dom} {month} {dow}")
    expected = _brute_force(spec, offset, instant, 70 * 24 * 60)
    found = next_after(spec, offset, instant)
    if expected is not None:
        assert found == expected
    else:
        assert found is None or found - instant > 70 * 24 * 60 * MINUTE_MS
