"""What every ``tay serve`` start parses, read without compiling a pattern: the segment and
epoch names of its listing, its default ``--max-state-bytes`` and its retention. Each reads
exactly what the pattern it replaced read (the patterns are kept here), on fixed and
generated near misses: wrong lengths, upper-case hex, non-ASCII digits, spaces, newlines."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings, strategies as st

from tay.failures import ConfigurationError
from tay.server.cli import parse_size
from tay.storage.formats.segment import MAX_SEGMENT_ID, parse_segment_file_name
from tay.storage.v2.layout import parse_epoch_dir_name
from tay.storage.v2.manifest import parse_retention

SEGMENT_NAME = re.compile(r"([0-9]{20})\.tay")
EPOCH_NAME = re.compile(r"e-([0-9a-f]{32})")
SIZE = re.compile(r"^\s*(\d+)\s*(KB|MB|GB|KiB|MiB|GiB)?\s*$")
UNITS = {None: 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
RETENTION = re.compile(r"^(\d+)([mhd])$")

NEAR = "0123456789abcdefAF \n\t.٣²xe-"  # digits, hex, look-alikes (Arabic-Indic, superscript)


def near_text(prefix: str, length: int, suffix: str) -> st.SearchStrategy[str]:
    core = st.text(alphabet=NEAR, min_size=max(0, length - 2), max_size=length + 2)
    return st.one_of(st.text(max_size=40),
                     st.builds(lambda p, c, s: p + c + s,
                               st.sampled_from([prefix, "", prefix.upper(), " " + prefix]), core,
                               st.sampled_from([suffix, "", suffix + "\n", suffix.upper()])))


def by_pattern_segment(name: str) -> int | None:
    match = SEGMENT_NAME.fullmatch(name)
    if match is None:
        return None
    segment_id = int(match.group(1))
    return segment_id if 1 <= segment_id <= MAX_SEGMENT_ID else None


def by_pattern_epoch(name: str) -> bytes | None:
    match = EPOCH_NAME.fullmatch(name)
    return bytes.fromhex(match.group(1)) if match else None


def by_pattern_size(text: str) -> int | None:
    match = SIZE.match(str(text))
    return None if match is None else int(match.group(1)) * UNITS[match.group(2)]


def by_pattern_retention(text: str) -> tuple[str, int] | None:
    text = str(text).strip()
    if text == "infinity":
        return ("infinity", 0)
    match = RETENTION.match(text)
    if match is None:
        return None
    count, unit = int(match.group(1)), match.group(2)
    return {"m": ("minutes", count), "h": ("hours", count), "d": ("hours", count * 24)}[unit]


def ours_size(text: str) -> int | None:
    try:
        return parse_size("--max-state-bytes", text)
    except ConfigurationError:
        return None


def ours_retention(text: str) -> tuple[str, int] | None:
    try:
        retention = parse_retention(text)
    except ValueError as error:
        return ("too long", 0) if "longer than" in str(error) else None
    return (retention.unit, retention.count or 0)


def check_retention(text: str) -> None:
    expected = by_pattern_retention(text)
    ours = ours_retention(text)
    if ours == ("too long", 0):  # the limits apply after the reading, as before
        assert expected is not None
    else:
        assert ours == expected, text


FIXED_NAMES = ["00000000000000000001.tay", "18446744073709551615.tay", "18446744073709551616.tay",
               "0000000000000000000١.tay", "0000000000000000000².tay", "00000000000000000001.tay\n",
               "e-" + "0" * 32, "e-" + "a" * 31 + "A", "e-" + "٣" * 32, "e-" + "f" * 33, "e-",
               "e-" + "0123456789abcdef" * 2 + "\n", "E-" + "0" * 32, ""]


@pytest.mark.parametrize("name", FIXED_NAMES)
def test_fixed_names_read_as_their_patterns_read_them(name: str) -> None:
    assert parse_segment_file_name(name) == by_pattern_segment(name)
    assert parse_epoch_dir_name(name) == by_pattern_epoch(name)


@settings(max_examples=400, deadline=None)
@given(near_text("", 20, ".tay"))
def test_segment_names_read_as_the_pattern_read_them(name: str) -> None:
    assert parse_segment_file_name(name) == by_pattern_segment(name)


@settings(max_examples=400, deadline=None)
@given(near_text("e-", 32, ""))
def test_epoch_names_read_as_the_pattern_read_them(name: str) -> None:
    assert parse_epoch_dir_name(name) == by_pattern_epoch(name)


@pytest.mark.parametrize("text", ["268435456", "0", "007", " 12 ", "12\n", "1 KiB", "1KB", "٣",
                                  "²", "", "1.5", "-1", "12 kb", 4096])
def test_fixed_sizes_read_as_the_pattern_read_them(text: str) -> None:
    assert ours_size(text) == by_pattern_size(text)  # type: ignore[arg-type]


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(alphabet="0123456789 \n٣²KMGiB", max_size=14), st.text(max_size=14)))
def test_sizes_read_as_the_pattern_read_them(text: str) -> None:
    assert ours_size(text) == by_pattern_size(text)


@pytest.mark.parametrize("text", ["24h", "0h", "1m", "30d", " 5h ", "infinity", "h", "5", "٣h",
                                  "²d", "5H", "5 h", "-1h", "1h\n", "99999999999d", ""])
def test_fixed_retentions_read_as_the_pattern_read_them(text: str) -> None:
    check_retention(text)


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(alphabet="0123456789 \nmhd٣²H", max_size=10), st.text(max_size=10)))
def test_retentions_read_as_the_pattern_read_them(text: str) -> None:
    check_retention(text)
