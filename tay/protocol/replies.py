"""Engine -> client messages as frames: compact JSON, ``version: 1``, real ``null``."""

from __future__ import annotations

from typing import Any

import orjson

from tay.failures import TayFailure

from .framing import _LENGTH

_dumps = orjson.dumps  # of a str: its JSON string, escapes and all
_Fragment = orjson.Fragment
# the payload's start for each reply type without fields ("accepted" for every report); the
# types come from the engine's effects, a handful, so the cache stays small
_HEADS: dict[str, bytes] = {}
_MAX_HEADS = 64


# the 4-byte length prefixes of the payload lengths met so far (a frame's bytes go out as
# pieces: no prefix packed and no payload copied into one frame object per reply)
_PREFIXES: dict[int, bytes] = {}
_MAX_PREFIXES = 4096


def _prefix(length: int) -> bytes:
    prefix = _LENGTH.pack(length)
    if len(_PREFIXES) < _MAX_PREFIXES:
        _PREFIXES[length] = prefix
    return prefix


def message_frame_into(out: list[bytes], message_type: str, request_id: str | None,
                       fields: dict[str, Any]) -> None:
    """``message_frame``'s bytes appended to ``out`` as pieces (their join is the frame):
    for a connection that joins what it queued once per write."""
    if not fields and request_id is not None:  # "accepted" for every report: no dict
        head = _HEADS.get(message_type)
        if head is None:
            head = _head(message_type)
        dumped = _dumps(request_id)
        length = len(head) + len(dumped) + 1
        out += (_PREFIXES.get(length) or _prefix(length), head, dumped, b"}")
        return
    # one dict display, the fields merged as ``update`` would (a field named like an envelope
    # key keeps the key's place): no envelope dict updated, no encode / frame call per layer
    if request_id is not None:
        payload = _dumps({"version": 1, "type": message_type, "request_id": request_id,
                          **fields})
    else:
        payload = _dumps({"version": 1, "type": message_type, **fields})
    length = len(payload)
    out += (_PREFIXES.get(length) or _prefix(length), payload)


def _head(message_type: str) -> bytes:
    head = b'{"version":1,"type":' + _dumps(message_type) + b',"request_id":'
    if len(_HEADS) < _MAX_HEADS:
        _HEADS[message_type] = head
    return head


def message_frame(message_type: str, request_id: str | None, fields: dict[str, Any]) -> bytes:
    """One frame; ``request_id`` is omitted only for uncorrelated errors (the pieces of
    ``message_frame_into``, joined: one way of writing a reply)."""
    out: list[bytes] = []
    message_frame_into(out, message_type, request_id, fields)
    return b"".join(out)


def execute_frame(execute: Any) -> bytes:
    """The ``execute`` frame of an ``Execute`` effect, its args JSON spliced as it is (the
    pieces of ``execute_frame_into``, joined)."""
    out: list[bytes] = []
    execute_frame_into(out, execute)
    return b"".join(out)


def execute_frame_into(out: list[bytes], execute: Any) -> None:
    """``execute_frame``'s bytes appended to ``out`` as pieces (see ``message_frame_into``)."""
    _, reservation_id, execution_id, job_id, task, args_json, timeout_ms, _ = execute
    payload = _dumps({
        "version": 1, "type": "execute", "request_id": execution_id,
        "reservation_id": reservation_id, "execution_id": execution_id, "job_id": job_id,
        "task": task, "args": _Fragment(args_json), "timeout_ms": timeout_ms})
    length = len(payload)
    out += (_PREFIXES.get(length) or _prefix(length), payload)


def reply_frame(message_type: str, request_id: str, **fields: Any) -> bytes:
    return message_frame(message_type, request_id, fields)


def error_frame(failure: TayFailure, request_id: str | None = None) -> bytes:
    """A correlated error (with ``request_id``) or the uncorrelated connection-fatal one."""
    return message_frame("error", request_id, {"error": failure.wire_error()})
