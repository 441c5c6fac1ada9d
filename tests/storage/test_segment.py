"""Segment v1: every upstream fixture as highest and non-highest, codecs, names, topology."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tay import _native
from tay.failures import RecoveryRefused
from tay.storage.formats.record import MAX_SEQUENCE, encode_records
from tay.storage.formats.segment import (
    MAX_SEGMENT_ID,
    SegmentHeader,
    SegmentScan,
    decode_header,
    encode_footer,
    encode_header,
    is_exhausted,
    parse_segment_file_name,
    parse_staging_file_name,
    scan_segment,
    segment_file_name,
    staging_file_name,
    topology_check,
)

# fixture -> (state, record count, end offset, last sequence) when it scans cleanly
CLEAN = {
    "s01": ("active", 0, 44, None),
    "s02": ("active", 1, 72, 1),
    "s03": ("active", 3, 137, 3),
    "s04": ("sealed", 1, 72, 1),
    "s05": ("sealed", 3, 137, 3),
}

# fixture -> (kind, reason, offset, extra facts) in every position (highest or not)
CORRUPT_ANYWHERE = {
    "s06": ("physical_corruption", "checksum", 0, {"object": "segment_header"}),
    "s08": ("physical_corruption", "checksum", 72, {"object": "footer"}),
    "s09": ("physical_corruption", "segment_crc", 72,
            {"object": "footer", "expected": 0xCB674BB0, "found": 0xCB674BB1}),
    "s11": ("continuity", "sequence", 44, {"expected": 2, "found": 1}),
    "s14": ("physical_corruption", "invalid_store_id", 24, {"object": "segment_header"}),
}

TORN_TAILS = {
    "s10_1": ("ambiguous_short_tail", 1),
    "s10_3": ("ambiguous_short_tail", 3),
    "s10_4": ("incomplete_footer", 4),
    "s10_36": ("incomplete_footer", 36),
    "s10_63": ("incomplete_footer", 63),
}


def scan(buf, upstream, *, highest=True, segment_id=1, path="segments/x.tay"):
    return scan_segment(buf, segment_id=segment_id, store_id=upstream.store_id,
                        highest=highest, path=path)


def refusal(buf, upstream, **kwargs) -> RecoveryRefused:
    with pytest.raises(RecoveryRefused) as info:
        scan(buf, upstream, **kwargs)
    return info.value


@pytest.mark.parametrize("name", sorted(CLEAN))
def test_clean_fixture_as_highest(upstream, name):
    result = scan(upstream.segment(name), upstream)
    assert (result.state, result.count, result.end, result.last_sequence) == CLEAN[name]
    assert (result.segment_id, result.first_sequence, result.store_id) == (
        1, 1, upstream.store_id)


@pytest.mark.parametrize("name", sorted(CLEAN))
def test_clean_fixture_as_non_highest(upstream, name):
    buf = upstream.segment(name)
    state = CLEAN[name][0]
    if state == "sealed":
        assert scan(buf, upstream, highest=False).state == "sealed"
    else:
        err = refusal(buf, upstream, highest=False)
        assert (err.kind, err.reason, err.extra["tail"]) == (
            "continuity", "sealed_history_error", "active")


def test_records_locate_payloads_for_zero_copy_replay(upstream):
    buf = upstream.segment("s03")
    result = scan(buf, upstream)
    assert [r[3] for r in result.records] == [1, 2, 3]
    offset, _, _, _, length = result.records[1]
    assert bytes(memoryview(buf)[offset + 24: offset + 24 + length]) == bytes.fromhex(
        "00ff544159007f800a")


@pytest.mark.parametrize("highest", [True, False])
@pytest.mark.parametrize("name", sorted(CORRUPT_ANYWHERE))
def test_corrupt_fixture(upstream, name, highest):
    kind, reason, offset, facts = CORRUPT_ANYWHERE[name]
    err = refusal(upstream.segment(name), upstream, highest=highest)
    assert (err.kind, err.reason, err.offset, err.path, err.segment_id) == (
        kind, reason, offset, "segments/x.tay", 1)
    assert {key: err.extra[key] for key in facts} == facts


def test_s07_under_the_name_of_id_2(upstream):
    for highest in (True, False):
        err = refusal(upstream.segment("s07"), upstream, segment_id=2, highest=highest)
        assert (err.reason, err.extra["expected"], err.extra["found"], err.segment_id) == (
            "segment_id_mismatch", 2, 1, 2)


def test_s07_under_its_own_name_is_empty_active(upstream):
    assert scan(upstream.segment("s07"), upstream).state == "active"


def test_s11_names_the_bad_sequence(upstream):
    assert refusal(upstream.segment("s11"), upstream).sequence == 1


def test_s08_is_never_treated_as_active(upstream):
    err = refusal(upstream.segment("s08"), upstream)
    assert err.kind == "physical_corruption"


@pytest.mark.parametrize("name", sorted(TORN_TAILS))
def test_torn_tail_in_highest(upstream, name):
    reason, available = TORN_TAILS[name]
    err = refusal(upstream.segment(name), upstream)
    assert (err.kind, err.reason, err.offset, err.extra["available"]) == (
        "incomplete_tail", reason, 72, available)


@pytest.mark.parametrize("name", sorted(TORN_TAILS))
def test_torn_tail_in_non_highest_is_sealed_history_error(upstream, name):
    err = refusal(upstream.segment(name), upstream, highest=False)
    assert (err.kind, err.reason, err.extra["tail"]) == (
        "continuity", "sealed_history_error", TORN_TAILS[name][0])


def test_foreign_store_id_is_refused(upstream):
    with pytest.raises(RecoveryRefused) as info:
        scan_segment(upstream.segment("s02"), segment_id=1, store_id=bytes(range(1, 17)),
                     highest=True)
    assert info.value.reason == "store_id_mismatch"


@pytest.mark.parametrize("cut", [0, 3, 5, 43])
def test_torn_header(upstream, cut):
    buf = upstream.segment("s01")[:cut]
    assert refusal(buf, upstream).reason == "incomplete_segment_header"
    assert refusal(buf, upstream, highest=False).extra["tail"] == "incomplete_segment_header"


@pytest.mark.parametrize("cut", [48, 50, 71])
def test_torn_record(upstream, cut):  # below 48 the tail is 1-3 bytes: ambiguous
    err = refusal(upstream.segment("s02")[:cut], upstream)
    assert (err.kind, err.reason, err.offset) == ("incomplete_tail", "incomplete_record", 44)


def test_damaged_record_keeps_its_exact_class(upstream):
    buf = bytearray(upstream.segment("s03"))
    buf[72 + 19] ^= 0x40  # f02's length byte: header_checksum
    err = refusal(bytes(buf), upstream)
    assert (err.kind, err.reason, err.offset) == ("physical_corruption", "header_checksum", 72)


def test_record_budget_is_a_resource_limit(upstream):
    with pytest.raises(RecoveryRefused) as info:
        scan_segment(upstream.segment("s03"), segment_id=1, store_id=upstream.store_id,
                     highest=True, budget=8)
    assert (info.value.kind, info.value.offset) == ("resource_limit", 72)


@pytest.mark.parametrize("tail", [b"X", b"TB", b"ZZZZ", b"TAYS" + bytes(60)])
def test_garbage_after_records_is_invalid_magic(upstream, tail):
    assert refusal(upstream.segment("s02") + tail, upstream).reason == "invalid_magic"


def test_footer_followed_by_bytes_is_refused(upstream):
    buf = upstream.segment("s04")
    assert refusal(buf + buf[-64:], upstream).reason == "trailing_bytes"
    assert refusal(buf + b"\0", upstream).reason == "trailing_bytes"


def test_footer_on_empty_segment_is_refused(upstream):
    s01 = upstream.segment("s01")
    header = decode_header(s01)
    footer = encode_footer(header, 1, _native.crc32c(s01))
    assert refusal(s01 + footer, upstream).reason == "record_count_mismatch"


def test_header_codec_reproduces_fixtures(upstream):
    assert encode_header(1, 1, upstream.store_id) == upstream.segment("s01")
    assert encode_header(1, 2, upstream.store_id) == upstream.segment("s11")[:44]
    assert upstream.segment("s11")[40:44] == bytes.fromhex("dd510c58")


@pytest.mark.parametrize("name, count, crc", [("s04", 1, 0xCB674BB0), ("s05", 3, 0x8E145CFC)])
def test_footer_codec_reproduces_fixtures(upstream, name, count, crc):
    buf = upstream.segment(name)
    header = SegmentHeader(1, 1, upstream.store_id)
    assert _native.crc32c(buf[:-64]) == crc
    assert encode_footer(header, count, crc) == buf[-64:]


def test_codecs_refuse_impossible_values(upstream):
    for bad in [(0, 1, upstream.store_id), (1, 0, upstream.store_id), (1, 1, bytes(16))]:
        with pytest.raises(ValueError):
            encode_header(*bad)
    with pytest.raises(ValueError):
        encode_footer(SegmentHeader(1, 1, upstream.store_id), 0, 0)
    with pytest.raises(ValueError):
        encode_footer(SegmentHeader(1, MAX_SEQUENCE, upstream.store_id), 2, 0)


def test_file_names():
    assert segment_file_name(1) == "00000000000000000001.tay"
    assert parse_segment_file_name("00000000000000000001.tay") == 1
    assert parse_segment_file_name(segment_file_name(MAX_SEGMENT_ID)) == MAX_SEGMENT_ID
    for bad in ["00000000000000000000.tay", "99999999999999999999.tay", "1.tay",
                "00000000000000000001.TAY", "00000000000000000001.tay.tmp",
                "0000000000000000001a.tay"]:
        assert parse_segment_file_name(bad) is None, bad
    nonce = bytes(range(16))
    name = staging_file_name(7, nonce)
    assert name == ".tay-new-00000000000000000007-000102030405060708090a0b0c0d0e0f.tmp"
    assert parse_staging_file_name(name) == (7, nonce)
    assert parse_staging_file_name(name.replace("0f.tmp", "0F.tmp")) is None
    with pytest.raises(ValueError):
        segment_file_name(0)


def _scan(segment_id, first, count, state) -> SegmentScan:
    records = [(0, 1, 1, first + i, 0) for i in range(count)]
    return SegmentScan(segment_id, first, b"\x01" * 16, state, records, 44, 44)


def test_topology_of_a_healthy_store():
    topology = topology_check([_scan(1, 1, 3, "sealed"), _scan(2, 4, 2, "sealed"),
                               _scan(3, 6, 0, "active")])
    assert (topology.next_sequence, topology.highest_id, topology.highest_state,
            topology.exhausted) == (6, 3, "active", False)


@pytest.mark.parametrize(
    "scans, kind, reason",
    [
        ([], "discovery", "missing_history"),
        ([_scan(2, 1, 1, "active")], "discovery", "segment_id_gap"),
        ([_scan(1, 2, 1, "active")], "continuity", "first_sequence"),
        ([_scan(1, 1, 2, "sealed"), _scan(2, 4, 0, "active")], "continuity", "first_sequence"),
        ([_scan(1, 1, 2, "sealed"), _scan(2, 2, 0, "active")], "continuity", "first_sequence"),
        ([_scan(1, 1, 2, "active"), _scan(2, 3, 0, "active")], "continuity",
         "sealed_history_error"),
    ],
)
def test_topology_refusals(scans, kind, reason):
    with pytest.raises(RecoveryRefused) as info:
        topology_check(scans)
    assert (info.value.kind, info.value.reason) == (kind, reason)


def test_topology_refuses_mixed_store_ids():
    other = SegmentScan(2, 2, b"\x02" * 16, "active", [], 44, 44)
    with pytest.raises(RecoveryRefused) as info:
        topology_check([_scan(1, 1, 1, "sealed"), other])
    assert info.value.reason == "store_id_mismatch"


def test_topology_exhaustion():
    assert topology_check([_scan(1, 1, 1, "active")]).exhausted is False
    assert is_exhausted(MAX_SEQUENCE, 1, "active") is False
    assert is_exhausted(MAX_SEQUENCE + 1, 1, "active") is True
    assert is_exhausted(10, MAX_SEGMENT_ID, "sealed") is True
    assert is_exhausted(10, MAX_SEGMENT_ID, "active") is False


batches = st.lists(
    st.tuples(st.integers(1, 254), st.integers(1, 255), st.binary(max_size=40)),
    min_size=0, max_size=8,
)


@settings(max_examples=100, deadline=None)
@given(batches, st.integers(1, 2**40), st.booleans())
def test_written_segments_scan_back(batch, first, seal):
    store_id = bytes(range(1, 17))
    header = encode_header(5, first, store_id)
    frames = encode_records([(t, s, first + i, p) for i, (t, s, p) in enumerate(batch)])
    buf = header + frames
    sealed = seal and bool(batch)
    if sealed:
        buf += encode_footer(decode_header(header), len(batch), _native.crc32c(buf))
    result = scan_segment(buf, segment_id=5, store_id=store_id, highest=True)
    assert result.state == ("sealed" if sealed else "active")
    assert result.end == len(header) + len(frames)
    decoded = [
        (t, s, bytes(buf[off + 24: off + 24 + n])) for off, t, s, seq, n in result.records
    ]
    assert decoded == batch
    assert [r[3] for r in result.records] == list(range(first, first + len(batch)))


def test_encoders_rebuild_sealed_fixture(upstream):
    header = encode_header(1, 1, upstream.store_id)
    frames = encode_records([(1, 1, 1, b""), (1, 1, 2, bytes.fromhex("00ff544159007f800a")),
                             (1, 1, 3, b"")])
    body = header + frames
    footer = encode_footer(decode_header(header), 3, _native.crc32c(body))
    assert body + footer == upstream.segment("s05")


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["s02", "s03", "s04", "s05"]), st.data())
def test_any_flipped_byte_is_refused(upstream, name, data):
    # CRC32C catches every error burst of up to 32 bits, so one damaged byte anywhere in a
    # header, frame or footer can never scan as a (different) clean segment.
    buf = bytearray(upstream.segment(name))
    position = data.draw(st.integers(0, len(buf) - 1))
    buf[position] ^= data.draw(st.integers(1, 255))
    with pytest.raises(RecoveryRefused):
        scan(bytes(buf), upstream)


def test_file_over_one_gib_is_refused(upstream, tmp_path):
    import mmap

    path = tmp_path / "00000000000000000001.tay"
    with open(path, "wb") as file:  # sparse: only the header is really written
        file.write(upstream.segment("s01"))
        file.truncate((1 << 30) + 1)
    with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        err = refusal(buf, upstream)
    assert (err.kind, err.reason, err.extra["size"]) == (
        "physical_corruption", "segment_too_large", (1 << 30) + 1)


def test_scan_works_on_an_mmap(upstream, tmp_path):
    import mmap

    path = tmp_path / "00000000000000000001.tay"
    path.write_bytes(upstream.segment("s05"))
    with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        result = scan(buf, upstream)
        offset, _, _, _, length = result.records[1]
        payload = bytes(memoryview(buf)[offset + 24: offset + 24 + length])
    assert (result.state, result.count, payload) == ("sealed", 3, bytes.fromhex(
        "00ff544159007f800a"))
