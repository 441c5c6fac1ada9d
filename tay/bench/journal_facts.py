"""Offline facts about a stopped store, read with the recovery API (read-only, no
activation): events by name, history bytes, job states, and the engine timestamps of the
first insert and last finish (the throughput window as the journal saw it)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tay.storage.events import decode_event
from tay.storage.recovery.recover import TableConsumer, recover


@dataclass
class _CountingConsumer:
    """Counts every event by name and keeps the first/last ``at`` of job events."""

    table: TableConsumer = field(default_factory=TableConsumer)
    events: Counter = field(default_factory=Counter)
    first_inserted_ms: int | None = None
    last_finished_ms: int | None = None

    def __call__(self, sequence: int, rtype: int, schema: int, payload: memoryview) -> None:
        event = decode_event(rtype, schema, payload)
        self._count(event)
        if event.is_job_event:
            self.table.table.apply(sequence, event)

    # a Store-v2 store: the reducer hands over each job's new state with the event it carried
    def epoch_job(self, job_id: bytes) -> Any:
        return self.table.table.get(job_id)

    def epoch_install(self, state: Any, event: Any) -> None:
        self.table.table.install(state, event)
        if event is not None:
            self._count(event)

    def epoch_entity(self, revision: int, event: Any) -> None:
        self._count(event)

    def _count(self, event: Any) -> None:
        self.events[event.name] += 1
        at = event.payload.get("at")
        if event.name == "job_inserted" and isinstance(at, int):
            if self.first_inserted_ms is None or at < self.first_inserted_ms:
                self.first_inserted_ms = at
        elif event.name == "job_finished" and isinstance(at, int):
            if self.last_finished_ms is None or at > self.last_finished_ms:
                self.last_finished_ms = at


def read_store_facts(data_dir: str) -> dict[str, Any]:
    consumer = _CountingConsumer()
    recovered = recover(data_dir, consumer=consumer, activate=False)
    view = recovered.view
    job_events = sum(consumer.events[name] for name in
                     ("job_inserted", "job_started", "job_finished"))
    return {
        "segments": len(view.segments),
        "history_bytes": sum(segment.size for segment in view.segments),
        "records": view.record_count,
        "events_by_name": dict(consumer.events),
        "job_lifecycle_events": job_events,
        "job_states": consumer.table.table.counts(),
        "first_inserted_at_ms": consumer.first_inserted_ms,
        "last_finished_at_ms": consumer.last_finished_ms,
    }
