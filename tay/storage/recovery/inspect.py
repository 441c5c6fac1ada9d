"""An offline, read-only summary of a store, taken under its lock.

It runs the full recovery pipeline without activation (nothing is written or fsynced) and
reports the segments, bytes, records, next sequence and per-state job counts. Refusals
propagate as ``RecoveryRefused`` for the CLI to report. ``tay storage inspect`` replays
into the engine (``tay.server.recovery``) and uses ``summarize`` and ``format_summary``.
"""

from __future__ import annotations

from typing import Any

from tay.storage.modes import loose_modes
from tay.storage.recovery.recover import RecoveryOptions, TableConsumer, recover
from tay.storage.fsio import RealIO

DURABILITY_NOTE = (
    "the durability mode is a runtime setting and is not stored on disk; acknowledgements "
    "given in 'write' (development) mode carry no power-loss claim"
)


def inspect_store(data_dir: str, *, io: RealIO | None = None,
                  options: RecoveryOptions | None = None) -> dict[str, Any]:
    """Recover ``data_dir`` read-only through the storage layer's own ``TableConsumer`` (the
    job transitions only) and summarize it as a JSON-safe dict. ``tay storage inspect``
    recovers through the engine instead (``tay.server.recovery.inspect_store``), as serve."""
    consumer = TableConsumer()
    recovered = recover(data_dir, consumer=consumer, io=io, options=options, activate=False)
    return summarize(recovered, jobs=len(consumer.table), job_states=consumer.table.counts(),
                     other_events=dict(consumer.other_events))


def summarize(recovered: Any, *, jobs: int, job_states: dict[str, int],
              other_events: dict[str, int]) -> dict[str, Any]:
    """The JSON-safe summary of a read-only recovery and the consumer's counts."""
    view = recovered.view
    highest = view.segments[-1]
    root = view.inventory.root if recovered.store_version == 1 else view.root.root
    summary = {
        "data_dir": root,
        "store_version": recovered.store_version,
        "store_id": view.store_id.hex(),
        "segments": len(view.segments),
        "sealed_segments": sum(1 for s in view.segments if s.scan.state == "sealed"),
        "highest_segment_state": highest.scan.state,
        "bytes": sum(s.size for s in view.segments),
        "records": view.record_count,
        "next_sequence": view.next_sequence,
        "exhausted": view.exhausted,
        "jobs": jobs,
        "job_states": job_states,
        "other_events": other_events,
        "segment_ledger": None if view.ledger is None else {
            "entries": len(view.ledger.entries),
            "highest_segment": getattr(view.ledger.highest(), "segment_id", None)},
        "loose_modes": [{"path": path, "mode": f"{mode:04o}"}
                        for path, mode in loose_modes(root)],
        "durability_note": DURABILITY_NOTE,
    }
    if recovered.store_version == 2:
        summary.update(_epoch_facts(view))
    else:
        summary["unrelated_files"] = list(view.inventory.unrelated)
        summary["staging_files"] = list(view.inventory.staging)
    return summary


def _epoch_facts(view: Any) -> dict[str, Any]:
    """The Store-v2 selection: the epoch CURRENT names, its base/tail and its retention."""
    manifest = view.manifest
    retention = manifest.terminal_retention
    root = view.root
    return {
        "epoch_id": manifest.epoch_id.hex(),
        "captured_at": manifest.captured_at,
        "terminal_retention": retention.to_value(),
        "runtime_retention_ms": retention.runtime_ms,
        "base_segments": view.base_count,
        "base_bytes": view.base_bytes,
        "tail_segments": len(view.segments) - view.base_count,
        "tail_bytes": view.tail_bytes,
        "source_epoch_id": (manifest.source_epoch_id.hex()
                            if manifest.source_epoch_id is not None else None),
        "other_epochs": [e.hex() for e in root.epochs if e != manifest.epoch_id],
        "leaked_candidates": [c.hex() for c in root.candidates],
        "legacy_directories": [n.hex() for n in root.legacy],
        "adoption_intent": "ADOPTION" in root.names,
        "unrelated_files": list(root.unrelated),
        "staging_files": [*root.staging, *view.epoch.staging],
    }


def format_summary(summary: dict[str, Any]) -> str:
    """Human-readable lines for the terminal."""
    lines = [
        f"store           {summary['data_dir']}",
        f"store version   {summary['store_version']}",
        f"store id        {summary['store_id']}",
        f"segments        {summary['segments']} ({summary['sealed_segments']} sealed, "
        f"highest {summary['highest_segment_state']})",
        f"bytes           {summary['bytes']}",
        f"records         {summary['records']}",
        f"next sequence   {summary['next_sequence']}",
        f"jobs            {summary['jobs']}",
    ]
    if summary["store_version"] == 2:
        lines.insert(3, f"epoch           {summary['epoch_id']} (base {summary['base_bytes']} "
                        f"bytes in {summary['base_segments']} segments, tail "
                        f"{summary['tail_bytes']} bytes)")
        lines.insert(4, f"retention       {summary['terminal_retention']}")
    for state, count in summary["job_states"].items():
        lines.append(f"  {state:<14}{count}")
    for name, count in summary["other_events"].items():
        lines.append(f"event {name:<10}{count}")
    if summary["exhausted"]:
        lines.append("exhausted       yes (read-only)")
    if summary["loose_modes"]:
        shown = ", ".join(f"{e['path']} {e['mode']}" for e in summary["loose_modes"][:5])
        lines.append(f"modes           open to other users: {shown} "
                     f"(chmod -R go-rwx {summary['data_dir']})")
    lines.append(f"note            {summary['durability_note']}")
    return "\n".join(lines) + "\n"
