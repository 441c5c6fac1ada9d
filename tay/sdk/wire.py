"""Sans-IO pieces of Executor Protocol v1 as the SDK speaks it.

A frame is a 4-byte unsigned big-endian payload length followed by one UTF-8 JSON object.
Outgoing JSON is compact with sorted keys (orjson); incoming JSON is parsed strictly:
duplicate keys, NaN/Infinity and non-objects are protocol errors. Values are restricted
to null, booleans, finite numbers, strings, lists and string-keyed objects, checked
*before* anything is sent so a bad argument fails at the call site with a clear message.
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
from collections.abc import Mapping
from typing import Any, Literal

import orjson

from tay.errors import ProtocolError, RemoteTaskError, ServerError, ValidationError
from tay.protocol.json_text import has_long_integer_token, repeats_a_key, surely_exact

PROTOCOL_VERSION = 1
DEFAULT_MAX_FRAME_BYTES = 1_048_576
MAX_JSON_DEPTH = 32
MAX_COLLECTION_ITEMS = 10_000
MAX_TASK_NAME_BYTES = 255
MAX_REQUEST_ID_BYTES = 128
MAX_TYPE_BYTES = 64
_HEADER = struct.Struct(">I")


def normalize_json(value: Any, *, _depth: int = 0) -> Any:
    """Return a detached copy of ``value`` made only of protocol JSON values.

    Tuples, sets, bytes, datetimes and other objects are refused rather than guessed at:
    pass ids and plain values. Any ``Mapping`` becomes a dict; lists are copied.
    """
    if _depth > MAX_JSON_DEPTH:
        raise ValidationError(f"JSON value nests deeper than {MAX_JSON_DEPTH} levels")
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is dict or (kind is not list and isinstance(value, Mapping)):
        if len(value) > MAX_COLLECTION_ITEMS:
            raise ValidationError(f"JSON object has {len(value)} keys; limit is {MAX_COLLECTION_ITEMS}")
        out: dict[str, Any] = {}
        for key, item in value.items():
            if type(key) is not str:
                raise ValidationError(f"JSON object keys must be strings, got {type(key).__name__} {key!r}")
            out[key] = normalize_json(item, _depth=_depth + 1)
        return out
    if kind is float:
        if not math.isfinite(value):
            raise ValidationError(f"JSON numbers must be finite, got {value!r}")
        return value
    if kind is list:
        if len(value) > MAX_COLLECTION_ITEMS:
            raise ValidationError(f"JSON list has {len(value)} items; limit is {MAX_COLLECTION_ITEMS}")
        return [normalize_json(item, _depth=_depth + 1) for item in value]
    raise ValidationError(
        f"{kind.__name__} is not a JSON value; pass ids and plain JSON values "
        "(None, bool, int, float, str, list, dict) instead"
    )


class _NeedsCopy(Exception):
    """A ``Mapping`` that is not a dict: orjson cannot encode it as it is."""


def _check_plain(value: Any, depth: int) -> None:
    """``normalize_json``'s checks (the same limits and errors) without the copy."""
    if depth > MAX_JSON_DEPTH:
        raise ValidationError(f"JSON value nests deeper than {MAX_JSON_DEPTH} levels")
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return
    if kind is dict:
        if len(value) > MAX_COLLECTION_ITEMS:
            raise ValidationError(f"JSON object has {len(value)} keys; limit is {MAX_COLLECTION_ITEMS}")
        for key, item in value.items():
            if type(key) is not str:
                raise ValidationError(f"JSON object keys must be strings, got {type(key).__name__} {key!r}")
            kind = type(item)
            if depth == MAX_JSON_DEPTH or not (kind is str or kind is int or kind is bool or item is None):
                _check_plain(item, depth + 1)
        return
    if kind is list:
        if len(value) > MAX_COLLECTION_ITEMS:
            raise ValidationError(f"JSON list has {len(value)} items; limit is {MAX_COLLECTION_ITEMS}")
        for item in value:
            _check_plain(item, depth + 1)
        return
    if kind is float:
        if not math.isfinite(value):
            raise ValidationError(f"JSON numbers must be finite, got {value!r}")
        return
    if isinstance(value, Mapping):
        raise _NeedsCopy
    normalize_json(value)  # raises the ValidationError that names the type


def plain_json(value: Any) -> Any:
    """``value`` itself when it is made only of protocol JSON values (dicts, lists,
    scalars), else its ``normalize_json`` copy; invalid values raise as there.

    For values encoded at once (before the caller can change them), so no copy is made
    on the common path.
    """
    try:
        _check_plain(value, 0)
    except _NeedsCopy:
        return normalize_json(value)
    return value


def json_bytes(value: Any) -> bytes:
    """Compact, key-sorted UTF-8 JSON of an already normalized value."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except (TypeError, orjson.JSONEncodeError) as exc:
        # orjson refuses integers outside the 64-bit range.
        raise ValidationError(f"value cannot be encoded as JSON: {exc}") from exc


def encoded_json_size(value: Any) -> int:
    """The encoded byte size of ``value`` after normalization."""
    return len(json_bytes(normalize_json(value)))


_CONTROL_CHARACTER = re.compile("[\x00-\x1f]")
_VALID_NAMES: set[str] = set()  # names that passed, so a producer checks its few names once
_VALID_NAMES_KEPT = 4096


def validate_task_name(name: Any, *, what: str = "task name") -> str:
    """A task or queue key: non-empty UTF-8, at most 255 bytes, no control characters."""
    if type(name) is str and name in _VALID_NAMES:
        return name
    if type(name) is not str or not name:
        raise ValidationError(f"{what} must be a non-empty string, got {name!r}")
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ValidationError(f"{what} {name!r} is not valid UTF-8") from exc
    if size > MAX_TASK_NAME_BYTES:
        raise ValidationError(f"{what} is {size} UTF-8 bytes; limit is {MAX_TASK_NAME_BYTES}")
    if _CONTROL_CHARACTER.search(name):
        raise ValidationError(f"{what} {name!r} contains a control character")
    if len(_VALID_NAMES) < _VALID_NAMES_KEPT:
        _VALID_NAMES.add(name)
    return name


def new_request_id() -> str:
    """32 random hex characters (a uuid4's worth of entropy, without building a UUID)."""
    return os.urandom(16).hex()


class RequestIds:
    """Request ids of one connection: a random prefix per connection, ``-`` and a counter
    in hex. Unique per connection, which is what correlation needs, without a
    ``getrandom`` call per message; no long zero runs (they would look like integers to
    the decoder's 64-bit check)."""

    __slots__ = ("_prefix", "_next")

    def __init__(self) -> None:
        self._prefix = os.urandom(8).hex() + "-"
        self._next = 0

    def __call__(self) -> str:
        self._next += 1
        return f"{self._prefix}{self._next:x}"


def envelope(message_type: str, request_id: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """One outgoing message: the envelope fields plus normalized ``fields``."""
    message = normalize_json(fields)
    message.update(version=PROTOCOL_VERSION, type=message_type, request_id=request_id)
    return message


def encode_frame(message: Mapping[str, Any], *, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                 normalized: bool = False) -> bytes:
    """Length-prefixed frame for one message; refuses a payload over ``max_frame_bytes``.

    ``normalized``: ``message`` came from ``envelope`` (already a detached, checked JSON
    value), so it is not walked a second time.
    """
    check_envelope(message)
    payload = json_bytes(message if normalized else normalize_json(message))
    if len(payload) > max_frame_bytes:
        raise ValidationError(
            f"message {message.get('type')!r} encodes to {len(payload)} bytes; "
            f"the frame limit is {max_frame_bytes}"
        )
    return _HEADER.pack(len(payload)) + payload


def message_frame(message_type: str, request_id: str, fields: Mapping[str, Any], *,
                  max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, plain: bool = False) -> bytes:
    """The frame of one outgoing message, encoded at once: ``fields`` plus the envelope.

    ``plain``: ``fields`` holds only plain JSON values already (``plain_json`` or
    ``normalize_json`` checked them), so they are not walked again. ``message_type`` and
    ``request_id`` come from the SDK itself (``RequestIds``), not from callers.
    """
    message = {**(fields if plain else plain_json(fields)), "version": PROTOCOL_VERSION,
               "type": message_type, "request_id": request_id}
    return _frame_of(json_bytes(message), message_type, max_frame_bytes)


def report_ids(ids: Mapping[str, str]) -> tuple[bytes, bytes]:
    """An execution's ``execution_id``, ``job_id`` and ``reservation_id`` (strings) encoded
    once for all its reports: the bytes before and after the report's request id.

    ``request_id`` sorts between ``job_id`` and ``reservation_id``; a quote inside a JSON
    string is escaped, so ``,"reservation_id":`` is found only where that member starts.
    """
    encoded = json_bytes(ids)
    cut = encoded.rindex(b',"reservation_id":')
    return encoded[:cut] + b',"request_id":"', b'",' + encoded[cut + 1 : -1]


_REPORT_TAILS: dict[str, bytes] = {}  # ',"type":"started","version":1}' by message type


def report_frame(message_type: str, request_id: str, ids: tuple[bytes, bytes], result_json: bytes | None = None,
                 *, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> bytes:
    """The frame of an execution report, its ids (``report_ids``) and ``result`` already
    encoded, spliced in instead of decoded and encoded again.

    With ``request_id`` the ids sort before ``result``, ``type`` and ``version``, so the
    bytes are exactly what ``json_bytes`` gives for the whole message.
    """
    tail = _REPORT_TAILS.get(message_type)
    if tail is None:
        tail = _REPORT_TAILS[message_type] = b',"type":' + json_bytes(message_type) + b',"version":1}'
    before, after = ids
    if result_json is None:
        payload = before + request_id.encode() + after + tail
    else:
        payload = b"".join((before, request_id.encode(), after, b',"result":', result_json, tail))
    return _frame_of(payload, message_type, max_frame_bytes)


def _frame_of(payload: bytes, message_type: str, max_frame_bytes: int) -> bytes:
    if len(payload) > max_frame_bytes:
        raise ValidationError(
            f"message {message_type!r} encodes to {len(payload)} bytes; the frame limit is {max_frame_bytes}"
        )
    return _HEADER.pack(len(payload)) + payload


def check_envelope(message: Mapping[str, Any], *, incoming: bool = False) -> None:
    """Version 1, a non-empty ``type`` (<= 64 bytes), a request id of 1..128 bytes."""
    version = message.get("version")
    if incoming and version is None:
        version = message.get("v")  # early v1 peers spelled it "v"
    if version != PROTOCOL_VERSION or type(version) is not int:
        raise ProtocolError(f"unsupported protocol version {version!r} (expected 1)")
    message_type = message.get("type")
    if type(message_type) is not str or not message_type:
        raise ProtocolError("message has no non-empty string 'type'")
    if len(message_type.encode("utf-8")) > MAX_TYPE_BYTES:
        raise ProtocolError(f"message type is longer than {MAX_TYPE_BYTES} bytes")
    request_id = message.get("request_id")
    if type(request_id) is not str or not request_id:
        raise ProtocolError(f"message {message_type!r} has no non-empty string 'request_id'")
    if len(request_id.encode("utf-8")) > MAX_REQUEST_ID_BYTES:
        raise ProtocolError(f"request_id of {message_type!r} is longer than {MAX_REQUEST_ID_BYTES} bytes")


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ProtocolError(f"JSON object repeats the key {key!r}")
            seen.add(key)
    return out


def _refuse_constant(name: str) -> None:
    raise ProtocolError(f"JSON constant {name} is not allowed")


# One decoder for every frame: ``json.loads`` with hooks would build a new one per call.
_STRICT_DECODER = json.JSONDecoder(object_pairs_hook=_refuse_duplicates,
                                   parse_constant=_refuse_constant)


def decode_payload(payload: bytes, *, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> dict[str, Any]:
    """Parse and check one frame payload (the bytes after the length prefix).

    orjson parses (refusing non-UTF-8, NaN/Infinity and malformed text); what it lets
    through is checked here (``tay.protocol.json_text``, as the engine does; one C scan when
    it can vouch for the text, ``surely_exact``, else the checks that follow): a repeated key
    (orjson keeps the last) and integers beyond 64 bits (orjson turns them into floats, so
    only a message with a float is searched). Either case, and every error, takes the exact
    stdlib parse, so errors read the same and big integers stay exact.
    """
    if not payload:
        raise ProtocolError("empty frame payload")
    if len(payload) > max_frame_bytes:
        raise ProtocolError(f"frame payload of {len(payload)} bytes exceeds {max_frame_bytes}")
    try:
        message = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return _decode_exactly(payload)
    if type(message) is not dict:
        raise ProtocolError(f"frame payload must be a JSON object, got {type(message).__name__}")
    if not surely_exact(payload):  # one C scan; else the decoded value's members are counted
        members, floats = _members(message)
        if repeats_a_key(payload, members) or (floats and has_long_integer_token(payload)):
            return _decode_exactly(payload)
    message_type = message.get("type")
    request_id = message.get("request_id")
    # check_envelope's rules, the common case first: short strings need no UTF-8 length
    if not (message.get("version") == 1 and type(message["version"]) is int
            and type(message_type) is str and 0 < len(message_type) <= MAX_TYPE_BYTES // 4
            and type(request_id) is str and 0 < len(request_id) <= MAX_REQUEST_ID_BYTES // 4):
        check_envelope(message, incoming=True)
    return message


def _members(message: dict[str, Any]) -> tuple[int, bool]:
    """Members of every object in a decoded message (each has one colon in the text), and
    whether it holds a float (orjson's reading of an integer beyond 64 bits is one)."""
    count = len(message)
    floats = False
    stack: list[Any] | None = None
    for item in message.values():
        kind = type(item)
        if kind is dict or kind is list:
            if stack is None:
                stack = [item]
            else:
                stack.append(item)
        elif kind is float:
            floats = True
    while stack:
        container = stack.pop()
        if type(container) is dict:
            count += len(container)
            items = container.values()
        else:
            items = container
        for item in items:
            kind = type(item)
            if kind is dict or kind is list:
                stack.append(item)
            elif kind is float:
                floats = True
    return count, floats


def _decode_exactly(payload: bytes) -> dict[str, Any]:
    """The stdlib parse: every error named precisely, repeated keys refused, exact ints."""
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"frame payload is not UTF-8 (byte offset {exc.start})") from exc
    try:
        message = _STRICT_DECODER.decode(text)
    except json.JSONDecodeError as exc:
        raise ProtocolError(f"frame payload is not JSON: {exc.msg} at offset {exc.pos}") from exc
    if not isinstance(message, dict):
        raise ProtocolError(f"frame payload must be a JSON object, got {type(message).__name__}")
    check_envelope(message, incoming=True)
    return message


def server_error(payload: Any) -> ServerError:
    """The exception for a server ``error`` object (``RemoteTaskError`` for task failures)."""
    if not isinstance(payload, Mapping):
        return ServerError(f"Tay refused the request: {payload!r}")
    code = payload.get("code") or payload.get("type")
    code = str(code) if code else None
    message = payload.get("message") or payload.get("reason")
    if not message:
        message = f"Tay refused the request ({code})" if code else "Tay refused the request"
    if payload.get("remote_task") or code in {"task_failed", "TaskFailed"}:
        failure = payload.get("failure")
        if isinstance(failure, Mapping) and (failure.get("type") or failure.get("message")):
            remote = ": ".join(str(failure[k]) for k in ("type", "message") if failure.get(k))
            message = f"{message} ({remote})"
        return RemoteTaskError(str(message), code=code, details=dict(payload))
    return ServerError(str(message), code=code, details=dict(payload))


def _resolve_enqueued(payload: bytes) -> tuple[str, str, Literal["persistent", "volatile"] | None] | None:
    """The first call picks the reader (importing ``tay._native`` only when a reply comes):
    the C scan, or none with the pure twin (a Python walk would cost more than the decode)."""
    global enqueued_reply
    from tay import _native

    enqueued_reply = _reader(_native.json_enqueued) if _native.IMPLEMENTATION == "c" else _no_reader
    return enqueued_reply(payload)


def _no_reader(payload: bytes) -> None:
    return None


def _reader(spans_of: Any) -> Any:
    def read(payload: bytes) -> tuple[str, str, Literal["persistent", "volatile"] | None] | None:
        mark, spans = spans_of(payload)
        if not mark:
            return None
        durability = payload[spans[4] : spans[5]]
        return (payload[spans[0] : spans[1]].decode("ascii"), payload[spans[2] : spans[3]].decode("ascii"),
                "persistent" if durability == b"persistent" else "volatile" if durability == b"volatile" else None)

    return read


# ``enqueued_reply(payload)``: ``(request_id, job_id, durability)`` of an ``enqueued`` reply
# that ``tay._native.json_enqueued`` reads for sure (written as tay serve writes it, all in a
# strict subset of JSON: the decoder would give the same request id and job id, and
# ``reply_durability`` the same durability), else None (decode it in full).
enqueued_reply = _resolve_enqueued


def reply_identifier(reply: Mapping[str, Any], field: str, nested: str) -> str:
    """``reply[field]``, else ``reply[nested]["id"]``; a ProtocolError if neither is a string."""
    identifier = reply.get(field)
    if identifier is None and isinstance(reply.get(nested), Mapping):
        identifier = reply[nested].get("id")
    if type(identifier) is not str or not identifier:
        raise ProtocolError(f"Tay's {reply.get('type', 'reply')!r} reply has no valid {field}")
    return identifier


def reply_durability(reply: Mapping[str, Any]) -> Literal["persistent", "volatile"] | None:
    """``job.durability`` of an enqueue reply when it is one of the two known modes."""
    job = reply.get("job")
    durability = job.get("durability") if type(job) is dict or isinstance(job, Mapping) else None
    if durability == "persistent" or durability == "volatile":
        return durability
    return None
