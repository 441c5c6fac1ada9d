"""``tay storage verify-file``: decode one file of a named kind and report the outcome.

Kinds: ``record`` (a stream of Record v1 frames), ``segment`` (one segment file, checked as
the highest segment of a store; its ID comes from a canonical file name, else 1; its
STORE_ID is taken from its own header), ``store`` (a STORE marker), ``value`` (one canonical
Value) and ``event`` (one Record v1 frame whose payload is a v1/v2 Event).

Input is raw bytes or, for a name ending in ``.hex``, hex text (whitespace ignored).
The report is one JSON-safe dict: ``{"ok": true, ...facts}`` or ``{"ok": false, "class":
..., "reason": ..., ...location}``.
"""

from __future__ import annotations

import os
import re
from typing import Any, Callable

from tay.failures import StorageFailure
from tay.storage import events
from tay.storage.formats import record, segment, store_marker, value

_CANONICAL_IN_NAME = re.compile(r"([0-9]{20})\.tay")


def read_input(path: str) -> bytes:
    """The file's bytes; a ``.hex`` file is decoded (ValueError names the problem)."""
    with open(path, "rb") as handle:
        data = handle.read()
    if not path.endswith(".hex"):
        return data
    text = data.decode("ascii", errors="strict")
    try:
        return bytes.fromhex("".join(text.split()))
    except ValueError as error:
        raise ValueError(f"not valid hex text: {error}") from None


def _segment_id_from_name(path: str) -> int:
    match = _CANONICAL_IN_NAME.search(os.path.basename(path))
    return int(match.group(1)) if match else 1


def _verify_record(data: bytes, path: str) -> dict[str, Any]:
    frames = record.decode_stream(data)
    return {"records": len(frames),
            "sequences": [frames[0].sequence, frames[-1].sequence] if frames else []}


def _verify_segment(data: bytes, path: str) -> dict[str, Any]:
    segment_id = _segment_id_from_name(path)
    store_id = bytes(data[24:40])  # the header's own STORE_ID; the header CRC vouches for it
    scan = segment.scan_segment(data, segment_id=segment_id, store_id=store_id, highest=True,
                                budget=record.MAX_PAYLOAD, path=path)
    return {"segment_id": segment_id, "state": scan.state, "first_sequence": scan.first_sequence,
            "records": scan.count, "store_id": store_id.hex()}


def _verify_store(data: bytes, path: str) -> dict[str, Any]:
    return {"store_id": store_marker.decode_store_marker(data, path).hex()}


def _verify_value(data: bytes, path: str) -> dict[str, Any]:
    decoded = value.decode(data)
    return {"value_type": type(decoded).__name__}


def _verify_event(data: bytes, path: str) -> dict[str, Any]:
    frame = record.decode_record(data)
    if frame.end != len(data):
        return {"ok": False, "class": "physical_corruption", "reason": "trailing_bytes",
                "offset": frame.end}
    event = events.decode_event(frame.type, frame.schema, frame.payload)
    return {"type": frame.type, "schema": frame.schema, "sequence": frame.sequence,
            "event": event.name}


VERIFIERS: dict[str, Callable[[bytes, str], dict[str, Any]]] = {
    "record": _verify_record,
    "segment": _verify_segment,
    "store": _verify_store,
    "value": _verify_value,
    "event": _verify_event,
}


def verify_bytes(kind: str, data: bytes, path: str = "-") -> dict[str, Any]:
    """Check ``data`` as ``kind``; never raises for bad content (only for an unknown kind)."""
    verifier = VERIFIERS[kind]
    try:
        facts = verifier(data, path)
    except StorageFailure as failure:
        report = {"ok": False, **failure.report()}
        report.setdefault("path", path)
        return _json_safe(report)
    if facts.get("ok") is False:
        return {**facts, "path": path}
    return _json_safe({"ok": True, "kind": kind, "path": path, "bytes": len(data), **facts})


def _json_safe(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return bytes(obj).hex()
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    return str(obj)
