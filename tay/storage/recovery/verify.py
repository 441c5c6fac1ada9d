"""``tay storage verify-file``: decode one file of a named kind and report the outcome.

Kinds: ``record`` (a stream of Record v1 frames), ``segment`` (one segment file, checked as
the highest segment of a store; its ID comes from a canonical file name, else 1; its
STORE_ID is taken from its own header), ``store`` (a STORE marker), ``value`` (one canonical
Value), ``event`` (one Record v1 frame whose payload is a v1/v2 Event), and the Store-v2
objects ``manifest``, ``current``, ``store-v2``, ``adoption`` and ``v2-record`` (one frame
holding a (7,1), (8,1), (30,2) or (31,2) record).

Input is raw bytes or, for a name ending in ``.hex``, hex text (whitespace ignored); a
labelled ``.hex`` file (``label:hex`` or ``label hex`` per line, as the upstream Store-v2
fixtures are) needs ``--label`` to pick one entry.
The report is one JSON-safe dict: ``{"ok": true, ...facts}`` or ``{"ok": false, "class":
..., "reason": ..., ...location}``.
"""

from __future__ import annotations

import os
import re
from typing import Any, Callable

from tay.failures import StorageFailure
from tay.storage import events, v2
from tay.storage.formats import record, segment, store_marker, value

_CANONICAL_IN_NAME = re.compile(r"([0-9]{20})\.tay")


_LABELLED = re.compile(r"^([A-Za-z0-9_./-]+)[: ]([0-9a-f]*)$")


def labelled_entries(text: str) -> dict[str, str] | None:
    """``label:hex`` / ``label hex`` lines (the upstream v2 fixture files), or None."""
    lines = [line for line in text.splitlines() if line.strip()]
    matches = [_LABELLED.match(line) for line in lines]
    if not lines or not all(matches):
        return None
    return {m.group(1): m.group(2) for m in matches if m is not None}


def read_input(path: str, label: str | None = None) -> bytes:
    """The file's bytes; a ``.hex`` file is decoded (ValueError names the problem).

    A labelled ``.hex`` file (one ``label:hex`` or ``label hex`` entry per line) needs
    ``label`` to pick its entry.
    """
    with open(path, "rb") as handle:
        data = handle.read()
    if not path.endswith(".hex"):
        if label is not None:
            raise ValueError("--label applies to labelled .hex files only")
        return data
    text = data.decode("ascii", errors="strict")
    entries = labelled_entries(text)
    if entries is not None:
        if label is None:
            raise ValueError(f"a labelled file: pick an entry with --label "
                             f"({', '.join(sorted(entries))})")
        if label not in entries:
            raise ValueError(f"no entry {label!r} (labels: {', '.join(sorted(entries))})")
        text = entries[label]
    elif label is not None:
        raise ValueError("--label given but the file has no labelled entries")
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


def _verify_manifest(data: bytes, path: str) -> dict[str, Any]:
    manifest = v2.decode_manifest(data)
    retention = manifest.terminal_retention
    return {"store_id": manifest.store_id.hex(), "epoch_id": manifest.epoch_id.hex(),
            "captured_at": manifest.captured_at,
            "terminal_retention": retention.to_value(),
            "runtime_retention_ms": retention.runtime_ms,
            "base_segments": len(manifest.base_segments),
            "source_epoch_id": (manifest.source_epoch_id.hex()
                                if manifest.source_epoch_id is not None else None),
            "source_frontier": manifest.source_frontier,
            "source_segments": len(manifest.source_segments),
            "tail_first_sequence": manifest.tail_first_sequence,
            "tail_segment_id": manifest.tail_segment_id}


def _verify_current(data: bytes, path: str) -> dict[str, Any]:
    current = v2.decode_current(data)
    return {"store_id": current.store_id.hex(), "epoch_id": current.epoch_id.hex(),
            "manifest_sha256": current.manifest_digest.hex()}


def _verify_store_v2(data: bytes, path: str) -> dict[str, Any]:
    return {"store_id": v2.decode_store_v2(data).hex()}


def _verify_adoption(data: bytes, path: str) -> dict[str, Any]:
    return {"nonce": v2.decode_adoption(data).hex()}


def _verify_v2_record(data: bytes, path: str) -> dict[str, Any]:
    """One Record v1 frame holding a Store-v2 record: (7,1), (8,1), (30,2) or (31,2)."""
    from tay.storage.v2.epoch_records import decode_epoch_event, decode_job_attachment

    frame = record.decode_record(data)
    if frame.end != len(data):
        return {"ok": False, "class": "physical_corruption", "reason": "trailing_bytes",
                "offset": frame.end}
    pair = (frame.type, frame.schema)
    facts: dict[str, Any] = {"type": frame.type, "schema": frame.schema,
                             "sequence": frame.sequence}
    if pair == v2.SNAPSHOT_PAIR:
        snapshot = v2.decode_snapshot(frame.payload)
        facts.update(record_kind="job_snapshot", job_id=snapshot.job_id.hex(),
                     revision=snapshot.revision, state=snapshot.body["state"])
    elif pair == v2.MUTATION_PAIR:
        mutation = v2.decode_mutation(frame.payload)
        facts.update(record_kind="job_mutation", job_id=mutation.job_id.hex(),
                     mutation_kind=mutation.kind, expected_revision=mutation.expected_revision,
                     new_revision=mutation.new_revision, event=mutation.event.name)
    elif pair == (30, 2):
        record_ = decode_epoch_event(frame.payload)
        facts.update(record_kind="epoch_event", event=record_.event.name,
                     inner=list(record_.event.pair), revision=record_.revision)
    elif pair == (31, 2):
        event = decode_job_attachment(frame.payload)
        facts.update(record_kind="job_attachment", event=event.name, inner=list(event.pair),
                     job_id=event["job_id"].hex())
    else:
        return {"ok": False, "class": "unsupported_semantics", "reason": "record_profile",
                "type": frame.type, "schema": frame.schema}
    return facts


VERIFIERS: dict[str, Callable[[bytes, str], dict[str, Any]]] = {
    "record": _verify_record,
    "segment": _verify_segment,
    "store": _verify_store,
    "value": _verify_value,
    "event": _verify_event,
    "manifest": _verify_manifest,
    "current": _verify_current,
    "store-v2": _verify_store_v2,
    "adoption": _verify_adoption,
    "v2-record": _verify_v2_record,
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
