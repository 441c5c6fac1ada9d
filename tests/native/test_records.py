"""Record v1 encode and scan (storage.md §1) against the upstream frame fixtures."""

from __future__ import annotations

import mmap

import pytest

from tests.native.conftest import fixture_bytes

F01 = fixture_bytes("storage/record/v1/f01.bin.hex")
F02 = fixture_bytes("storage/record/v1/f02.bin.hex")
F03 = fixture_bytes("storage/record/v1/f03.bin.hex")
F18 = fixture_bytes("storage/record/v1/f18.bin.hex")
BUDGET = 16_777_216


def test_encoder_reproduces_fixtures(native):
    assert native.encode_records([(1, 1, 1, b"")]) == F01
    assert native.encode_records([(1, 1, 2, bytes.fromhex("00ff544159007f800a"))]) == F02
    assert native.encode_records([(254, 255, 2**64 - 1, b"")]) == F03
    assert native.encode_records([(1, 1, 1, b""), (1, 1, 2, F02[24:33]), (1, 1, 3, b"")]) == F01 + F02 + F18


def test_encode_empty_batch(native):
    assert native.encode_records([]) == b""


@pytest.mark.parametrize(
    ("record", "field"),
    [((0, 1, 1, b""), "type"), ((255, 1, 1, b""), "type"), ((1, 0, 1, b""), "schema"),
     ((1, 256, 1, b""), "schema"), ((1, 1, 0, b""), "sequence"), ((1, 1, 2**64, b""), "sequence"),
     ((1, 1, -1, b""), "sequence")],
)
def test_encode_domain_errors_name_index_and_field(native, record, field):
    with pytest.raises(ValueError, match=rf"record 1: {field}"):
        native.encode_records([(1, 1, 1, b""), record])


def test_encode_refuses_oversized_payload(native):
    with pytest.raises(ValueError, match="record 0: payload length 16777217"):
        native.encode_records([(1, 1, 1, bytes(16_777_217))])


def test_scan_contiguous_stream(native):
    stream = F01 + F02 + F18
    records, stop, code = native.scan_records(stream, 0, len(stream), BUDGET, 1)
    assert code == "end" and stop == len(stream)
    assert records == [(0, 1, 1, 1, 0), (28, 1, 1, 2, 9), (65, 1, 1, 3, 0)]


def test_scan_over_mmap_with_prefix(native):
    stream = b"H" * 44 + F01 + F02
    with mmap.mmap(-1, len(stream)) as mapped:
        mapped.write(stream)
        records, stop, code = native.scan_records(mapped, 44, len(stream), BUDGET, 1)
    assert [r[0] for r in records] == [44, 72] and code == "end"


@pytest.mark.parametrize(
    "name", ["f04", "f05", "f06", "f08", "f10", "f11", "f12"])
def test_scan_stops_at_bad_fixture(native, name):
    bad = fixture_bytes(f"storage/record/v1/{name}.bin.hex")
    stream = F01 + bad
    records, stop, code = native.scan_records(stream, 0, len(stream), BUDGET, 1)
    assert (len(records), stop, code) == (1, 28, "bad_record")


def test_scan_budget_is_decode_step_10(native):
    assert native.scan_records(F02, 0, len(F02), 8, 2)[2] == "bad_record"
    assert native.scan_records(F02, 0, len(F02), 9, 2)[2] == "end"


def test_scan_corrupted_middle_record(native):
    middle = bytearray(F02)
    middle[19] ^= 0x40
    stream = F01 + bytes(middle) + F18
    assert native.scan_records(stream, 0, len(stream), BUDGET, 1)[1:] == (28, "bad_record")


def test_scan_sequence_gap(native):
    stream = F01 + F18
    records, stop, code = native.scan_records(stream, 0, len(stream), BUDGET, 1)
    assert (len(records), stop, code) == (1, 28, "sequence")


@pytest.mark.parametrize("tail", [b"", b"T", b"TAY", b"TAYF" + bytes(60), b"XXXXXXXX"])
def test_scan_not_record_tail(native, tail):
    stream = F01 + tail
    records, stop, code = native.scan_records(stream, 0, len(stream), BUDGET, 1)
    assert stop == 28 and code == ("end" if not tail else "not_record")


def test_scan_truncated_frame_is_bad_record(native):
    stream = F01 + F02[:-1]
    assert native.scan_records(stream, 0, len(stream), BUDGET, 1)[1:] == (28, "bad_record")
    assert native.scan_records(F02, 0, 10, BUDGET, 2)[1:] == (0, "bad_record")


def test_scan_end_bound_is_respected(native):
    stream = F01 + F02
    assert native.scan_records(stream, 0, 28, BUDGET, 1) == ([(0, 1, 1, 1, 0)], 28, "end")


def test_scan_argument_errors(native):
    with pytest.raises(ValueError, match="scan range"):
        native.scan_records(F01, 0, 29, BUDGET, 1)
    with pytest.raises(ValueError, match="budget"):
        native.scan_records(F01, 0, 28, BUDGET + 1, 1)
    with pytest.raises(ValueError, match="first_sequence"):
        native.scan_records(F01, 0, 28, BUDGET, 0)


def test_scan_many_records_crosses_chunks(native):
    count = 70_000 if native.IMPLEMENTATION == "c" else 2_000
    stream = native.encode_records([(2, 1, 5 + i, b"p") for i in range(count)])
    records, stop, code = native.scan_records(stream, 0, len(stream), BUDGET, 5)
    assert code == "end" and len(records) == count
    assert records[-1] == ((count - 1) * 29, 2, 1, 4 + count, 1)


def test_scan_last_sequence(native):
    assert native.scan_records(F03, 0, len(F03), BUDGET, 2**64 - 1)[2] == "end"
    assert native.scan_records(F03, 0, len(F03), BUDGET, 2**64 - 2)[2] == "sequence"
