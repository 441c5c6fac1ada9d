"""Windowed segment scans: the outcome never depends on the window, the CRC covers every byte.

``scan_segment`` walks frames in windows and releases each walked range; these tests
compare every window size against one whole-file walk (records, state, end, segment CRC,
or the exact refusal with its offset), on the upstream fixtures and on generated segments
with frames crossing window edges, damaged bytes, torn tails and trailing garbage.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tay import _native
from tay.failures import RecoveryRefused
from tay.storage.formats import segment as segment_module
from tay.storage.formats.record import MAX_SEQUENCE, encode_records
from tay.storage.formats.segment import (
    FOOTER_SIZE,
    HEADER_SIZE,
    decode_header,
    encode_footer,
    encode_header,
    scan_segment,
)
from tay.storage.recovery.recover import recover
from tests.storage.test_recovery import build_store, opaque

STORE_ID = bytes(range(1, 17))
WHOLE = 1 << 31  # larger than any test file: one native call


def outcome(buf: bytes, window: int, *, highest: bool = True, store_id: bytes = STORE_ID,
            segment_id: int = 5, budget: int = 16_777_216) -> tuple:
    """What a scan says, as a comparable tuple; the released ranges are checked on the way."""
    released: list[tuple[int, int]] = []
    try:
        result = scan_segment(buf, segment_id=segment_id, store_id=store_id, highest=highest,
                              budget=budget, window=window,
                              release=lambda start, end: released.append((start, end)))
    except RecoveryRefused as refusal:
        return ("refused", refusal.kind, refusal.reason, refusal.offset, refusal.sequence,
                sorted(refusal.extra.items()))
    # contiguous, in order, from the header to where the records stop
    assert released[0][0] == HEADER_SIZE
    assert all(a[1] == b[0] for a, b in zip(released, released[1:]))
    assert released[-1][1] == result.end
    assert result.segment_crc == _native.crc32c(buf[:result.end])
    return ("ok", result.state, result.records, result.end, result.segment_crc)


def build(payloads: list[bytes], first: int = 1, seal: bool = False) -> bytes:
    header = encode_header(5, first, STORE_ID)
    frames = encode_records([(1, 1, first + i, p) for i, p in enumerate(payloads)])
    buf = header + frames
    if seal and payloads:
        buf += encode_footer(decode_header(header), len(payloads), _native.crc32c(buf))
    return buf


FIXTURES = ["s01", "s02", "s03", "s04", "s05", "s06", "s08", "s09", "s11", "s14",
            "s10_1", "s10_3", "s10_4", "s10_36", "s10_63"]


@pytest.mark.parametrize("name", FIXTURES)
@pytest.mark.parametrize("highest", [True, False])
def test_fixtures_scan_alike_in_any_window(upstream, name, highest):
    buf = upstream.segment(name)
    whole = outcome(buf, WHOLE, highest=highest, store_id=upstream.store_id, segment_id=1)
    for window in (1, 28, 29, 40, 64, 65, 100):
        assert outcome(buf, window, highest=highest, store_id=upstream.store_id,
                       segment_id=1) == whole


payload_lists = st.lists(st.binary(max_size=300), min_size=0, max_size=12)


@settings(max_examples=150, deadline=None)
@given(payload_lists, st.booleans(), st.booleans(), st.integers(1, 700), st.data())
def test_generated_segments_scan_alike_in_any_window(payloads, seal, highest, window, data):
    buf = bytearray(build(payloads, seal=seal))
    damage = data.draw(st.sampled_from(["none", "flip", "truncate", "append"]))
    if damage == "flip":
        position = data.draw(st.integers(HEADER_SIZE, len(buf) - 1)) if len(buf) > HEADER_SIZE \
            else HEADER_SIZE - 1
        buf[position] ^= data.draw(st.integers(1, 255))
    elif damage == "truncate" and len(buf) > HEADER_SIZE:
        del buf[data.draw(st.integers(HEADER_SIZE, len(buf) - 1)):]
    elif damage == "append":
        buf += data.draw(st.binary(min_size=1, max_size=80))
    buf = bytes(buf)
    budget = data.draw(st.sampled_from([16_777_216, 100]))
    assert outcome(buf, window, highest=highest, budget=budget) == \
        outcome(buf, WHOLE, highest=highest, budget=budget)


def test_frame_longer_than_the_window_is_judged_whole():
    payloads = [b"a" * 5000, b"b" * 10, b"c" * 9000]
    buf = build(payloads, seal=True)
    result = outcome(buf, 64)
    assert result[:2] == ("ok", "sealed") and len(result[2]) == 3
    cut = buf[:-FOOTER_SIZE - 100]  # the last frame torn in the middle
    assert outcome(cut, 64) == outcome(cut, WHOLE)
    assert outcome(cut, 64)[:3] == ("refused", "incomplete_tail", "incomplete_record")


def test_sequence_ceiling_across_windows():
    first = MAX_SEQUENCE - 2
    good = build([b"x" * 50] * 3, first=first)
    # one more frame after 2^64-1: whatever sequence it carries, it is out of sequence
    extra = encode_records([(1, 1, 7, b"y" * 50)])
    for window in (64, 90, WHOLE):
        assert outcome(good, window)[:2] == ("ok", "active")
        refused = outcome(good + extra, window)
        assert refused[:3] == ("refused", "continuity", "sequence")
        assert refused == outcome(good + extra, WHOLE)
        garbage = outcome(good + b"\x00" * 30, window)
        assert garbage == outcome(good + b"\x00" * 30, WHOLE)
        assert garbage[:3] == ("refused", "physical_corruption", "invalid_magic")


def test_recovery_in_small_windows_hands_the_writer_the_file_crc(monkeypatch, data_dir):
    monkeypatch.setattr(segment_module, "SCAN_WINDOW", 256)
    root = data_dir
    build_store(root, [opaque(1, 150), opaque(151, 50)])
    active = Path(root, "segments", f"{1:020d}.tay")
    journal = recover(str(root), consumer=lambda *a: None, durability="write").journal
    assert journal.segment_crc == _native.crc32c(active.read_bytes())
    journal._rotate()  # the seal re-reads the file and checks that CRC before the footer
    journal.append_batch(opaque(201, 3))
    journal.close()
    replayed = recover(str(root), consumer=lambda *a: None, activate=False)
    assert [v.scan.state for v in replayed.view.segments] == ["sealed", "active"]
    assert replayed.records_replayed == 203
