"""``json_plain_string_end``: the string scan under the report and enqueue readers
(csrc/frames_check.c, sixteen bytes at a time with SSE2, the last sixteen before the end of
the text for a shorter rest, eight at a time or byte by byte otherwise) finds what the pure
twin's byte loop finds: the offset after the closing quote when every byte before it is
printable ASCII other than a backslash, 0 at the first other byte or when no quote closes
the string inside the text."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from tay._native import pure
from tests.build_guard import c_twin
from tests.storage.json_strategies import SETTINGS

c = c_twin()
MORE = settings(SETTINGS, max_examples=400)

# every kind of byte the scan tells apart: plain, the quote, the backslash, control bytes,
# DEL, the first and last byte of each half, and UTF-8
STOPS = [0x22, 0x5C, 0x00, 0x09, 0x0A, 0x1F, 0x7F, 0x80, 0xC3, 0xFF]
PLAIN = [0x20, 0x21, 0x23, 0x41, 0x5B, 0x5D, 0x7E]
BYTES = st.sampled_from(PLAIN * 4 + STOPS) | st.integers(0, 255)


def agree(text: bytes, at: int) -> int:
    expected = pure.json_plain_string_end(text, at)
    assert c.json_plain_string_end(text, at) == expected, (text, at)
    return expected


@MORE
@given(st.lists(BYTES, max_size=70), st.data())
def test_the_scan_is_the_byte_loop_on_drawn_texts(body, data) -> None:
    text = bytes(body)
    if not text:
        return
    for at in {data.draw(st.integers(0, len(text) - 1)), 0, len(text) - 1}:
        agree(text, at)
    for at, byte in enumerate(text):  # every opening quote in the text
        if byte == 0x22:
            agree(text, at)


@MORE
@given(st.text(max_size=40), st.text(max_size=40), st.integers(0, 24), st.booleans())
def test_the_scan_is_the_byte_loop_on_strings_as_json_writes_them(
        value, after, before, ascii_only) -> None:
    written = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    text = b"x" * before + written + after.encode("utf-8", "surrogatepass")
    end = agree(text, before)
    if ascii_only and value.isprintable() and value.isascii() and "\\" not in value \
            and '"' not in value:
        assert end == before + len(written)


def test_every_stop_byte_at_every_place_of_a_step_and_before_the_end() -> None:
    # the string opened at 0..17 (every alignment of an 8- and a 16-byte step), plain
    # bytes up to the stop byte at each place, then more plain bytes and a quote (which
    # closes it only when the stop byte is not one), the text ending right after or later:
    # its end 1..60 bytes past the opening quote, so the last sixteen overlap the start
    for start in range(18):
        for length in range(0, 40):
            for stop in STOPS:
                for more, tail in ((0, 0), (0, 1), (1, 0), (3, 7), (8, 8), (15, 0), (0, 16),
                                   (17, 17)):
                    text = (b"{" * start + b'"' + b"a" * length + bytes([stop]) + b"b" * more
                            + b'"' + b"}" * tail)
                    end = agree(text, start)
                    assert end == (start + length + 2 if stop == 0x22 else 0)
                    agree(text[:start + 1 + length], start)  # not closed before the end


def test_a_plain_run_to_the_end_of_the_text_is_not_a_string() -> None:
    for size in range(1, 50):
        for start in range(size):
            text = b"a" * start + b'"' + b"b" * (size - start - 1)
            assert agree(text, start) == 0
