"""The pure-Python twin of the native core: same functions, same results as ``tay._native.c``.

It is the reference the C module is tested against and the fallback when the C module is
not built (or ``TAY_NATIVE=python``). Kept straightforward rather than fast.
"""

from __future__ import annotations

import re
import struct
from array import array
from typing import Any, Sequence

from tay._native._pure_fileops import (
    fdatasync,
    filesystem_magic,
    flock_exclusive,
    fsync,
    fsync_dir,
    rename_noreplace,
    write_all_at,
)
from tay._native._pure_events import events_scan as events_scan
from tay._native._pure_snapshots import snapshots_scan as snapshots_scan
from tay._native._pure_mutations import mutations_scan as mutations_scan
from tay._native._pure_base import base_ids as base_ids
from tay._native._pure_base import base_jobs as base_jobs
from tay._native._pure_base import base_keys as base_keys
from tay._native._pure_live import LiveTable as LiveTable
from tay._native._pure_tail import tail_jobs as tail_jobs
from tay._native._pure_json import json_to_value, json_to_value_measured, value_to_json
from tay._native._pure_value import value_decode, value_encode
from tay._native.checks import (
    MAX_PAYLOAD,
    MAX_SEQUENCE,
    check_record_fields,
    check_scan_bounds,
)
from tay._native.errors import ValueCodecError

IMPLEMENTATION = "python"
CRC32C_IMPLEMENTATION = "software"

__all__ = [
    "IMPLEMENTATION", "CRC32C_IMPLEMENTATION", "ValueCodecError", "crc32c", "encode_records",
    "scan_records", "scan_record_columns", "value_encode", "value_decode", "split_frames",
    "json_domain_clean",
    "json_member_count", "json_canonical", "json_plain_string_end", "json_enqueued",
    "json_to_value", "json_to_value_measured", "value_to_json",
    "write_all_at",
    "fdatasync", "fsync", "fsync_dir", "flock_exclusive", "rename_noreplace",
    "filesystem_magic", "RECORD_MAGIC", "MAX_PAYLOAD",
]

RECORD_MAGIC = b"TAY\x00"
_HEADER = struct.Struct(">4sBBBBQI")  # magic, version, type, flags, schema, sequence, N
_U32 = struct.Struct(">I")


def _make_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
        table.append(crc)
    return tuple(table)


_TABLE = _make_table()


def crc32c(data: Any, value: int = 0) -> int:
    """CRC32C of ``data``, continuing from the finalized CRC ``value`` (zlib-style chaining)."""
    crc = (value & 0xFFFFFFFF) ^ 0xFFFFFFFF
    table = _TABLE
    for byte in memoryview(data).cast("B"):
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def encode_records(records: Sequence[tuple[int, int, int, Any]]) -> bytes:
    """Concatenated Record v1 frames for ``(type, schema, sequence, payload)`` tuples."""
    out = bytearray()
    for index, (rtype, schema, sequence, payload) in enumerate(records):
        payload = bytes(payload)
        check_record_fields(index, rtype, schema, sequence, len(payload))
        header = _HEADER.pack(RECORD_MAGIC, 1, rtype, 0, schema, sequence, len(payload))
        header_crc = crc32c(header)
        out += header + _U32.pack(header_crc) + payload
        out += _U32.pack(crc32c(payload, header_crc))
    return bytes(out)


def _frame_ok(view: memoryview, offset: int, available: int, budget: int) -> int:
    """Length of the valid frame at ``offset`` (full §1.2 precedence), or -1."""
    if available < 24 or view[offset + 4] != 1:
        return -1
    header = view[offset : offset + 20]
    if crc32c(header) != _U32.unpack_from(view, offset + 20)[0]:
        return -1
    _, _, rtype, flags, schema, sequence, length = _HEADER.unpack_from(view, offset)
    if flags or rtype in (0, 255) or schema == 0 or sequence == 0:
        return -1
    if length > MAX_PAYLOAD or length > budget or available < 28 + length:
        return -1
    record_crc = crc32c(view[offset + 24 : offset + 24 + length], crc32c(header))
    if record_crc != _U32.unpack_from(view, offset + 24 + length)[0]:
        return -1
    return 28 + length


def scan_records(
    buf: Any, start: int, end: int, budget: int, first_sequence: int
) -> tuple[list[tuple[int, int, int, int, int]], int, str]:
    """Walk Record v1 frames in ``buf[start:end]``.

    Returns ``(records, stop_offset, stop)``: ``records`` holds one
    ``(offset, type, schema, sequence, payload_length)`` tuple per valid frame whose sequence
    is ``first_sequence + index``; ``stop`` is "end", "not_record" (no magic, or < 4 bytes
    left), "bad_record" (magic but §1.2 fails: re-decode precisely) or "sequence".
    """
    view = memoryview(buf).cast("B")
    check_scan_bounds(len(view), start, end, budget, first_sequence)
    records: list[tuple[int, int, int, int, int]] = []
    offset = start
    while offset < end:
        available = end - offset
        if available < 4 or view[offset : offset + 4] != RECORD_MAGIC:
            return records, offset, "not_record"
        frame_length = _frame_ok(view, offset, available, budget)
        if frame_length < 0:
            return records, offset, "bad_record"
        _, _, rtype, _, schema, sequence, length = _HEADER.unpack_from(view, offset)
        if sequence != first_sequence + len(records):
            return records, offset, "sequence"
        records.append((offset, rtype, schema, sequence, length))
        offset += frame_length
    return records, offset, "end"


def scan_record_columns(
    buf: Any, start: int, end: int, budget: int, first_sequence: int
) -> tuple[array, bytes, bytes, array, int, str]:
    """``scan_records`` as columns: ``(offsets, types, schemas, lengths, stop_offset, stop)``.

    ``offsets`` is an ``array('Q')``, ``lengths`` an ``array('I')``, ``types`` and
    ``schemas`` one byte per record; record ``i`` carries sequence ``first_sequence + i``.
    A scan of a whole segment keeps ~14 bytes per record instead of a 5-tuple of ints.
    """
    records, stop_offset, stop = scan_records(buf, start, end, budget, first_sequence)
    return (array("Q", [r[0] for r in records]), bytes(r[1] for r in records),
            bytes(r[2] for r in records), array("I", [r[4] for r in records]), stop_offset,
            stop)


# a string, or an unterminated one up to the end (as the C scanner reads it)
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.|\\\Z)*(?:"|\Z)', re.DOTALL)


def json_member_count(json: Any) -> int:
    """Colons outside strings of a valid JSON text: the members of all its objects."""
    return _JSON_STRING.sub(b"", bytes(json)).count(b":")


_CHECK_DEPTH, _CHECK_KEYS, _CHECK_OPEN_KEYS = 255, 64, 256
_SPACE = frozenset(b" \t\n\r")
_NUMBER = frozenset(b"0123456789-+.eE")


def json_domain_clean(json: Any, max_depth: int, max_nodes: int, max_key_bytes: int) -> bool:
    """Whether ``json``, if valid JSON, is an object within the protocol's value-domain
    bounds for sure (the twin of csrc/frames_check.c: the same walk, the same caution)."""
    s = bytes(json)
    n = len(s)
    is_object: list[bool] = [False]
    key_base: list[int] = [0]
    keys: list[bytes] = []
    depth, nodes, i = 0, 1, 0
    expect_key = started = False
    while i < n and s[i] in _SPACE:
        i += 1
    if i == n or s[i] != 0x7B:
        return False
    while i < n:
        c = s[i]
        if c in _SPACE or c == 0x3A:
            i += 1
            continue
        if started and depth == 0:
            return False
        if c in (0x7B, 0x5B):  # { [
            if started:
                nodes += 1
                if nodes > max_nodes:
                    return False
            started = True
            depth += 1
            if depth > max_depth or depth > _CHECK_DEPTH:
                return False
            del is_object[depth:], key_base[depth:]
            is_object.append(c == 0x7B)
            key_base.append(len(keys))
            expect_key = c == 0x7B
            i += 1
        elif c in (0x7D, 0x5D):  # } ]
            if depth == 0:
                return False
            opened = keys[key_base[depth]:]
            if is_object[depth] and len(set(opened)) != len(opened):
                return False
            del keys[key_base[depth]:]
            depth -= 1
            expect_key = False
            i += 1
        elif c == 0x2C:  # ,
            if depth == 0:
                return False
            expect_key = is_object[depth]
            i += 1
        elif c == 0x22:  # "
            end, escaped = _string_end(s, i)
            if end == 0:
                return False
            if expect_key:
                key = s[i + 1:end - 1]
                if escaped or len(key) > max_key_bytes or len(keys) == _CHECK_OPEN_KEYS \
                        or len(keys) - key_base[depth] == _CHECK_KEYS:
                    return False
                keys.append(key)
                expect_key = False
            else:
                nodes += 1
                if nodes > max_nodes:
                    return False
            i = end
        elif c == 0x2D or 0x30 <= c <= 0x39:  # - or a digit
            run = 0
            while i < n and s[i] in _NUMBER:
                if 0x30 <= s[i] <= 0x39:
                    run += 1
                    if run >= 19:
                        return False
                else:
                    run = 0
                i += 1
            nodes += 1
            if nodes > max_nodes:
                return False
        elif c in (0x74, 0x66, 0x6E):  # t f n
            while i < n and 0x61 <= s[i] <= 0x7A:
                i += 1
            nodes += 1
            if nodes > max_nodes:
                return False
        else:
            return False
    return started and depth == 0


def _string_end(s: bytes, i: int) -> tuple[int, bool]:
    """(offset after the string opened at s[i], whether it holds a backslash); 0: unclosed."""
    escaped = False
    i += 1
    while True:
        quote = s.find(b'"', i)
        slash = s.find(b"\\", i, quote if quote >= 0 else len(s))
        if slash >= 0:
            escaped = True
            i = slash + 2
            continue
        return (quote + 1 if quote >= 0 else 0), escaped


def split_frames(buf: Any, max_frame: int) -> tuple[list[tuple[int, int]], int, str | None]:
    """Split length-prefixed frames: ``(payload slices, bytes consumed, error or None)``."""
    view = memoryview(buf).cast("B")
    frames: list[tuple[int, int]] = []
    offset = 0
    size = len(view)
    while size - offset >= 4:
        length = _U32.unpack_from(view, offset)[0]
        if length == 0:
            return frames, offset, "empty_frame"
        if length > max_frame:
            return frames, offset, "frame_too_large"
        if size - offset - 4 < length:
            break
        frames.append((offset + 4, offset + 4 + length))
        offset += 4 + length
    return frames, offset, None


# -- the per-job reports, read without a JSON decoder (twin of csrc/frames_check.c) ---------
_REPORT_KEYS = (b"version", b"type", b"request_id", b"reservation_id", b"execution_id",
                b"result")
_REPORT_IDS = (b"request_id", b"reservation_id", b"execution_id")
_REPORT_TYPES = {b"started": 2, b"succeeded": 3}
REPORT_MAX_ID = 128


def _plain_string_end(s: bytes, i: int) -> int:
    """The offset after the string opened at s[i] if it is printable ASCII without a
    backslash, else 0."""
    i += 1
    while i < len(s):
        c = s[i]
        if c == 0x22:
            return i + 1
        if c < 0x20 or c > 0x7E or c == 0x5C:
            return 0
        i += 1
    return 0


def json_plain_string_end(json: Any, at: int) -> int:
    """The offset after the string whose opening quote is ``json[at]`` (``at < len(json)``)
    when it is printable ASCII without a backslash and closes inside ``json``; 0 otherwise
    (``tay_json_plain_string_end``: the strings the report and enqueue readers take as
    their text)."""
    s = bytes(json)
    return _plain_string_end(s, at) if 0 <= at < len(s) else 0


def _skip_space(s: bytes, i: int) -> int:
    while i < len(s) and s[i] in _SPACE:
        i += 1
    return i


def json_report(json: Any) -> tuple[int, tuple[int, ...]]:
    """``(mark, spans)``: mark 2 for a ``started`` report, 3 for a ``succeeded`` one with a
    null or no result, when ``json`` is written in the strict subset csrc/frames_check.c
    reads (the six report keys once each, plain ASCII strings, ``version`` 1, ``result``
    null; ids of 1..128 bytes); spans are request_id, reservation_id and execution_id
    (start, end) in ``json``. Other keys than "v" are allowed with plain string values (a
    clean payload never repeats one). ``(0, ())`` otherwise: never a refusal."""
    s = bytes(json)
    n = len(s)
    spans: dict[bytes, tuple[int, int]] = {}
    i = _skip_space(s, 0)
    if i == n or s[i] != 0x7B:
        return 0, ()
    i += 1
    while True:
        i = _skip_space(s, i)
        if i == n or s[i] != 0x22:
            return 0, ()
        key_end = _plain_string_end(s, i)
        if not key_end:
            return 0, ()
        key = s[i + 1:key_end - 1]
        if key not in _REPORT_KEYS:
            if key == b"v":  # the legacy version key: the envelope's exact check decides
                return 0, ()
            key = b""  # another key (tay-client's job_id): ignored when its value is a string
        elif key in spans:
            return 0, ()
        i = _skip_space(s, key_end)
        if i == n or s[i] != 0x3A:
            return 0, ()
        i = _skip_space(s, i + 1)
        if i == n:
            return 0, ()
        if key == b"version":
            if s[i] != 0x31:  # 1
                return 0, ()
            spans[key] = (i, i + 1)
            i += 1
        elif key == b"result":
            if s[i:i + 4] != b"null":
                return 0, ()
            spans[key] = (i, i + 4)
            i += 4
        else:
            if s[i] != 0x22:
                return 0, ()
            value_end = _plain_string_end(s, i)
            if not value_end:
                return 0, ()
            spans[key] = (i + 1, value_end - 1)
            i = value_end
        i = _skip_space(s, i)
        if i == n:
            return 0, ()
        if s[i] == 0x7D:
            break
        if s[i] != 0x2C:
            return 0, ()
        i += 1
    if _skip_space(s, i + 1) != n:
        return 0, ()
    if any(key not in spans for key in (b"version", b"type", *_REPORT_IDS)):
        return 0, ()
    out: list[int] = []
    for key in _REPORT_IDS:
        start, end = spans[key]
        if not 1 <= end - start <= REPORT_MAX_ID:
            return 0, ()
        out += (start, end)
    start, end = spans[b"type"]
    mark = _REPORT_TYPES.get(s[start:end], 0)
    return (mark, tuple(out)) if mark else (0, ())


# -- the enqueue, read without a JSON decoder (twin of csrc/frames_check.c) ------------------
ENQUEUE = 4
ENQUEUE_MAX_TASK = 255
_ENQUEUE_KEYS = (b"version", b"type", b"request_id", b"task", b"args", b"options")
_ENQUEUE_SPANS = (b"request_id", b"task", b"args", b"options")


def _container_end(s: bytes, i: int) -> int:
    """The offset after the object or array opened at s[i], its brackets counted outside
    strings; 0 when it does not close. Nothing of its syntax is checked."""
    depth = 0
    n = len(s)
    while i < n:
        c = s[i]
        if c == 0x22:
            i = _string_end(s, i)[0]
            if not i:
                return 0
            continue
        if c == 0x7B or c == 0x5B:
            depth += 1
        elif c == 0x7D or c == 0x5D:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return 0


ENQUEUE_MAX_RETRIES = 65_534
_OPTION_KEYS = (b"queue", b"retries", b"backoff", b"durability")
_DIGITS = b"0123456789"
_DURABILITIES = {b"persistent": 1, b"volatile": 2}
_DURABILITY_NAMES = (None, "persistent", "volatile")


def _plain_options(s: bytes, i: int, end: int) -> tuple[int, int, int, int]:
    """The plain options object s[i:end] read as csrc/frames_check.c reads it: (retries + 1,
    durability (0 null or absent, 1 persistent, 2 volatile), queue start, queue end), or zeros when they are
    not plain (keys among queue, retries, backoff and durability once each, each null or:
    queue a plain string of 1..255 bytes, retries an integer literal 0..65534, backoff
    "exponential", durability "persistent" or "volatile")."""
    s = s[:end]
    seen: set[bytes] = set()
    retries = durability = queue_start = queue_end = 0
    i = _skip_space(s, i + 1)
    if i < end and s[i] == 0x7D:
        i += 1
    else:
        while True:
            if i == end or s[i] != 0x22:
                return 0, 0, 0, 0
            key_end = _plain_string_end(s, i)
            if not key_end:
                return 0, 0, 0, 0
            key = s[i + 1:key_end - 1]
            if key not in _OPTION_KEYS or key in seen:
                return 0, 0, 0, 0
            seen.add(key)
            i = _skip_space(s, key_end)
            if i == end or s[i] != 0x3A:
                return 0, 0, 0, 0
            i = _skip_space(s, i + 1)
            if i == end:
                return 0, 0, 0, 0
            if s[i:i + 4] == b"null":
                i += 4
            elif key == b"retries":
                first = i
                while i < end and s[i] in _DIGITS and i - first < 6:
                    i += 1
                digits = s[first:i]
                if not digits or (len(digits) > 1 and digits[0] == 0x30) \
                        or int(digits) > ENQUEUE_MAX_RETRIES:
                    return 0, 0, 0, 0
                retries = int(digits)
            else:
                if s[i] != 0x22:
                    return 0, 0, 0, 0
                value_end = _plain_string_end(s, i)
                if not value_end:
                    return 0, 0, 0, 0
                value = s[i + 1:value_end - 1]
                if key == b"queue":
                    if not 1 <= len(value) <= ENQUEUE_MAX_TASK:
                        return 0, 0, 0, 0
                    queue_start, queue_end = i + 1, value_end - 1
                elif key == b"backoff":
                    if value != b"exponential":
                        return 0, 0, 0, 0
                elif value in _DURABILITIES:
                    durability = _DURABILITIES[value]
                else:
                    return 0, 0, 0, 0
                i = value_end
            i = _skip_space(s, i)
            if i == end:
                return 0, 0, 0, 0
            if s[i] == 0x7D:
                i += 1
                break
            if s[i] != 0x2C:
                return 0, 0, 0, 0
            i = _skip_space(s, i + 1)
    if i != end:
        return 0, 0, 0, 0
    return retries + 1, durability, queue_start, queue_end


CANONICAL_DEPTH = 128  # TAY_CANONICAL_DEPTH
_INT_LIMITS = {False: b"18446744073709551615", True: b"9223372036854775808"}
_DIGITS = frozenset(b"0123456789")
_NOT_AFTER_INT = frozenset(b"0123456789.eE")


def _canonical_string_end(s: bytes, i: int) -> int:
    """The offset after the string opened at s[i] when it is valid UTF-8 without an escape
    or a control byte; 0 otherwise."""
    end = s.find(b'"', i + 1)
    if end < 0:
        return 0
    text = s[i + 1:end]
    if b"\\" in text or any(c < 0x20 for c in text):
        return 0
    try:
        text.decode("utf-8")
    except UnicodeDecodeError:
        return 0
    return end + 1


def _canonical_int_end(s: bytes, i: int) -> int:
    negative = s[i] == 0x2D
    start = i + 1 if negative else i
    i = start
    if i == len(s) or s[i] not in _DIGITS:
        return 0
    if s[i] == 0x30:
        if negative:
            return 0
        i += 1
    else:
        while i < len(s) and s[i] in _DIGITS:
            i += 1
    if i < len(s) and s[i] in _NOT_AFTER_INT:
        return 0
    digits, limit = s[start:i], _INT_LIMITS[negative]
    if len(digits) > len(limit) or (len(digits) == len(limit) and digits > limit):
        return 0
    return i


def json_canonical(json: Any) -> bool:
    """Whether ``json`` is an object written exactly as ``orjson.dumps(orjson.loads(json),
    option=orjson.OPT_SORT_KEYS)`` writes it, for sure (the twin of csrc/frames_check.c's
    ``tay_json_canonical``): no whitespace, each object's keys in strictly increasing byte
    order, strings of valid UTF-8 with no escape and no control byte, integers only (no -0,
    no leading zero, within -2^63..2^64-1), true, false and null, at most 128 containers
    deep. False is "not known", never a refusal."""
    s = bytes(json)
    n = len(s)
    if n < 2 or s[0] != 0x7B:
        return False
    stack: list[list[Any]] = []  # per open container: [is_object, previous key or None]
    i = 0
    state = "value"
    while True:
        if state == "value":
            if i >= n:
                return False
            c = s[i]
            if c in (0x7B, 0x5B):
                if len(stack) == CANONICAL_DEPTH:
                    return False
                is_object = c == 0x7B
                stack.append([is_object, None])
                i += 1
                if i < n and s[i] == (0x7D if is_object else 0x5D):
                    i += 1
                    stack.pop()
                    state = "after"
                else:
                    state = "key" if is_object else "value"
                continue
            if c == 0x22:
                end = _canonical_string_end(s, i)
            elif c in (0x74, 0x66, 0x6E):
                word = {0x74: b"true", 0x66: b"false", 0x6E: b"null"}[c]
                end = i + len(word) if s.startswith(word, i) else 0
            elif c == 0x2D or c in _DIGITS:
                end = _canonical_int_end(s, i)
            else:
                return False
            if not end:
                return False
            i = end
            state = "after"
        elif state == "key":
            if i >= n or s[i] != 0x22:
                return False
            end = _canonical_string_end(s, i)
            if not end:
                return False
            key = s[i + 1:end - 1]
            top = stack[-1]
            if top[1] is not None and not top[1] < key:
                return False
            top[1] = key
            i = end
            if i >= n or s[i] != 0x3A:
                return False
            i += 1
            state = "value"
        else:  # after a value
            if not stack:
                return i == n
            if i >= n:
                return False
            is_object = stack[-1][0]
            if s[i] == 0x2C:
                i += 1
                state = "key" if is_object else "value"
            elif s[i] == (0x7D if is_object else 0x5D):
                i += 1
                stack.pop()
            else:
                return False


def json_enqueue(json: Any) -> tuple[int, tuple[int, ...]]:
    """``(4, spans)`` when ``json`` is an enqueue written in the strict subset
    csrc/frames_check.c reads at its top level: "version" 1, "type" "enqueue", request_id
    (1..128 bytes) and task (1..255 bytes) strings of printable ASCII without a backslash,
    "args" and optionally "options" objects (only delimited: their text is the decoder's),
    each key once, any other key but "v" with such a string value; spans are request_id,
    task, args and options (start, end) in ``json``, options (0, 0) when absent, then
    ``_plain_options``' four values (``(1, 0, 0, 0)`` when absent). ``(0, ())`` otherwise:
    never a refusal."""
    s = bytes(json)
    n = len(s)
    spans: dict[bytes, tuple[int, int]] = {}
    i = _skip_space(s, 0)
    if i == n or s[i] != 0x7B:
        return 0, ()
    i += 1
    while True:
        i = _skip_space(s, i)
        if i == n or s[i] != 0x22:
            return 0, ()
        key_end = _plain_string_end(s, i)
        if not key_end:
            return 0, ()
        key = s[i + 1:key_end - 1]
        if key not in _ENQUEUE_KEYS:
            if key == b"v":  # the legacy version key: the envelope's exact check decides
                return 0, ()
            key = b""  # another key: ignored when its value is a plain string
        elif key in spans:
            return 0, ()
        i = _skip_space(s, key_end)
        if i == n or s[i] != 0x3A:
            return 0, ()
        i = _skip_space(s, i + 1)
        if i == n:
            return 0, ()
        if key == b"version":
            if s[i] != 0x31:  # 1
                return 0, ()
            spans[key] = (i, i + 1)
            i += 1
        elif key in (b"args", b"options"):
            if s[i] != 0x7B:
                return 0, ()
            value_end = _container_end(s, i)
            if not value_end:
                return 0, ()
            spans[key] = (i, value_end)
            i = value_end
        else:
            if s[i] != 0x22:
                return 0, ()
            value_end = _plain_string_end(s, i)
            if not value_end:
                return 0, ()
            if key == b"type" and s[i + 1:value_end - 1] != b"enqueue":
                return 0, ()
            if key:
                spans[key] = (i + 1, value_end - 1)
            i = value_end
        i = _skip_space(s, i)
        if i == n:
            return 0, ()
        if s[i] == 0x7D:
            break
        if s[i] != 0x2C:
            return 0, ()
        i += 1
    if _skip_space(s, i + 1) != n:
        return 0, ()
    if any(key not in spans for key in (b"version", b"type", b"request_id", b"task", b"args")):
        return 0, ()
    start, end = spans[b"request_id"]
    if not 1 <= end - start <= REPORT_MAX_ID:
        return 0, ()
    start, end = spans[b"task"]
    if not 1 <= end - start <= ENQUEUE_MAX_TASK:
        return 0, ()
    out: list[int] = []
    for key in _ENQUEUE_SPANS:
        out += spans.get(key, (0, 0))
    if b"options" in spans:
        out += _plain_options(s, *spans[b"options"])
    else:  # absent: plain, every default
        out += (1, 0, 0, 0)
    return ENQUEUE, tuple(out)


def _enqueue_ids(view: Any, start: int, spans: tuple[int, ...]) -> tuple[Any, ...]:
    """An enqueue frame's ids: (request_id, task) as str, (args, options) as bytes of JSON
    text (options None when absent), then the plain options read, (retries, queue,
    durability) with None for a null or absent queue or durability (retries 0), or None
    when they are not plain, and last whether the options are plain and the args text is
    canonical (``json_canonical``)."""
    a, b, c, d, e, f, g, h = (start + x for x in spans[:8])
    retries, durability, i, j = spans[8:]
    plain = None
    if retries:
        plain = (retries - 1, str(view[start + i:start + j], "ascii") if i != j else None,
                 _DURABILITY_NAMES[durability])
    args = bytes(view[e:f])
    return (str(view[a:b], "ascii"), str(view[c:d], "ascii"), args,
            bytes(view[g:h]) if g != h else None, plain,
            plain is not None and json_canonical(args))


def split_frames_marked(buf: Any, max_frame: int, max_depth: int, max_nodes: int,
                        max_key_bytes: int) -> tuple[list[tuple[int, int, int, Any]], int,
                                                     str | None]:
    """``split_frames``, each frame ``(start, end, mark, ids)``: mark 0 (check it the exact
    way), 1 (clean: ``json_domain_clean``), 2 or 3 (a clean ``started`` / ``succeeded``
    report, see ``json_report``) with ids (request_id, reservation_id, execution_id) as str,
    4 (a clean enqueue, see ``json_enqueue``) with ids (request_id, task, args, options,
    plain, canonical): the first two str, args and options the bytes of their JSON text
    (options None when absent), plain the options read when they are plain, canonical
    whether they are and the args text is canonical (``_enqueue_ids``); else None."""
    if not (0 <= max_frame <= 0xFFFFFFFF and 0 <= max_depth <= 0xFFFFFFFF
            and 0 <= max_nodes <= 0xFFFFFFFFFFFFFFFF and 0 <= max_key_bytes <= 0xFFFFFFFF):
        raise ValueError("limits out of range")
    view = memoryview(buf).cast("B")
    frames, consumed, error = split_frames(view, max_frame)
    marked: list[tuple[int, int, int, Any]] = []
    for start, end in frames:
        clean = json_domain_clean(view[start:end], max_depth, max_nodes, max_key_bytes)
        mark, spans = json_report(view[start:end]) if clean else (0, ())
        if clean and not mark:
            mark, spans = json_enqueue(view[start:end])
            if mark:
                marked.append((start, end, mark, _enqueue_ids(view, start, spans)))
                continue
        if mark:
            ids = tuple(str(view[start + spans[k]:start + spans[k + 1]], "ascii")
                        for k in (0, 2, 4))
            marked.append((start, end, mark, ids))
        else:
            marked.append((start, end, 1 if clean else 0, None))
    return marked, consumed, error


class FrameScan:
    """``split_frames_marked`` with its limits set once (the C twin prepares one
    ``tay_frame_scan`` per decoder)."""

    __slots__ = ("_limits",)

    def __init__(self, max_frame: int, max_depth: int, max_nodes: int,
                 max_key_bytes: int) -> None:
        split_frames_marked(b"", max_frame, max_depth, max_nodes, max_key_bytes)  # the checks
        self._limits = (max_frame, max_depth, max_nodes, max_key_bytes)

    def split(self, buf: Any) -> tuple[list[tuple[int, int, int, Any]], int, str | None]:
        """``split_frames_marked(buf, *limits)``."""
        return split_frames_marked(buf, *self._limits)

    def payloads(self, buf: Any) -> tuple[list[tuple[Any, int, Any]], int, str | None]:
        """``split`` with each frame as ``(payload, mark, ids)``, the payload sliced from
        ``buf``."""
        frames, consumed, error = split_frames_marked(buf, *self._limits)
        return [(buf[start:end], mark, ids) for start, end, mark, ids in frames], consumed, error


_ENQUEUED_HEAD = b'{"version":1,"type":"enqueued","request_id":"'
_ENQUEUED_DEPTH = 255  # CHECK_DEPTH of csrc/frames_check.c
_ENQUEUED_KEYS = 64  # CHECK_KEYS: keys of one object
_ENQUEUED_OPEN_KEYS = 256  # CHECK_OPEN_KEYS: keys of all open objects together
_DIGITS = b"0123456789"


def _plain_number_end(s: bytes, i: int) -> int:
    """The offset after a number ``-?(0|[1-9][0-9]*)(.[0-9]+)?`` without a run of 19 digits
    at s[i], else 0 (what follows is the caller's to check)."""
    n = len(s)
    if s[i] == 0x2D:  # -
        i += 1
    if i == n or s[i] not in _DIGITS:
        return 0
    start = i
    if s[i] == 0x30:
        i += 1
    else:
        while i < n and s[i] in _DIGITS:
            i += 1
    if i - start >= 19:
        return 0
    if i < n and s[i] == 0x2E:  # .
        i += 1
        fraction = i
        while i < n and s[i] in _DIGITS:
            i += 1
        if i == fraction or i - fraction >= 19:
            return 0
    return i


def _plain_object_end(s: bytes, i: int) -> tuple[int, tuple[int, int]]:
    """(the offset after the object opened at s[i] when all of it is in the subset, else 0;
    the span of its own "durability" member's value when that is a plain string, else (0, 0))."""
    n = len(s)
    durability = (0, 0)
    if i >= n or s[i] != 0x7B:
        return 0, durability
    stack: list[tuple[bool, list[bytes]]] = []  # (is an object, its keys)
    state = "value"
    is_durability = False
    while i < n:
        c = s[i]
        if state == "after":
            if c == 0x2C:  # ,
                state = "key" if stack[-1][0] else "value"
                i += 1
                continue
            if c != (0x7D if stack[-1][0] else 0x5D):
                return 0, durability
        elif state in ("key", "key_or_close"):
            if not (c == 0x7D and state == "key_or_close"):
                if c != 0x22:
                    return 0, durability
                end = _plain_string_end(s, i)
                if not end or end == n or s[end] != 0x3A:
                    return 0, durability
                keys = stack[-1][1]
                if sum(len(keys) for _, keys in stack) == _ENQUEUED_OPEN_KEYS or len(keys) == _ENQUEUED_KEYS:
                    return 0, durability
                keys.append(s[i + 1:end - 1])
                is_durability = len(stack) == 1 and s[i + 1:end - 1] == b"durability"
                i = end + 1
                state = "value"
                continue
        elif not (c == 0x5D and state == "value_or_close"):
            if c in (0x7B, 0x5B):  # { [
                if len(stack) == _ENQUEUED_DEPTH:
                    return 0, durability
                stack.append((c == 0x7B, []))
                state = "key_or_close" if c == 0x7B else "value_or_close"
                is_durability = False
                i += 1
                continue
            if c == 0x22:
                end = _plain_string_end(s, i)
                if not end:
                    return 0, durability
                if is_durability:
                    durability = (i + 1, end - 1)
                i = end
            elif c == 0x2D or c in _DIGITS:
                i = _plain_number_end(s, i)
                if not i:
                    return 0, durability
            elif s.startswith(b"true", i) or s.startswith(b"null", i):
                i += 4
            elif s.startswith(b"false", i):
                i += 5
            else:
                return 0, durability
            is_durability = False
            state = "after"
            continue
        # c closes the innermost container
        is_object, keys = stack.pop()
        if is_object and len(set(keys)) != len(keys):
            return 0, durability
        i += 1
        if not stack:
            return i, durability
        state = "after"
    return 0, durability


def json_enqueued(json: Any) -> tuple[int, tuple[int, ...]]:
    """``(1, spans)`` when ``json`` is an ``enqueued`` reply written as tay serve writes it,
    ``{"version":1,"type":"enqueued","request_id":"R","job_id":"J","job":{...}}``, all in a
    strict subset of JSON (csrc/frames_check.c: no whitespace, strings and keys of printable
    ASCII without a backslash, numbers ``-?(0|[1-9][0-9]*)(.[0-9]+)?`` without a run of 19
    digits, true, false, null, no object repeating a key, at most 255 levels and 64 keys per
    object; R of 1..128 bytes, J not empty): spans are the (start, end) of R, J and the
    job's own durability string, (0, 0) when the job has no such member with a plain string
    value. ``(0, ())`` otherwise: the caller decodes it in full (never a refusal)."""
    s = bytes(json)
    n = len(s)
    if not s.startswith(_ENQUEUED_HEAD):
        return 0, ()
    i = len(_ENQUEUED_HEAD) - 1
    end = _plain_string_end(s, i)
    if not end or not 1 <= end - i - 2 <= REPORT_MAX_ID:
        return 0, ()
    request = (i + 1, end - 1)
    if not s.startswith(b',"job_id":"', end):
        return 0, ()
    i = end + len(b',"job_id":"') - 1
    end = _plain_string_end(s, i)
    if not end or end - i - 2 < 1:
        return 0, ()
    job = (i + 1, end - 1)
    if not s.startswith(b',"job":', end):
        return 0, ()
    end, durability = _plain_object_end(s, end + len(b',"job":'))
    if not end or n - end != 1 or s[end] != 0x7D:
        return 0, ()
    return 1, (*request, *job, *durability)
