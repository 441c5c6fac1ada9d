"""What one engine step produces: durable events to append, then effects to release.

The contract (docs/engine.md): the server appends ``Outcome.events`` in order and releases
``Outcome.effects`` only after those events, and every earlier one, are durable. Effects
of reads carry no events but are still released in order, so a reply never shows state
that is not yet durable.

Effects are immutable named tuples: several are built per job, and a tuple is built in one
step (a frozen dataclass sets each field through a guarded ``setattr``).
"""

from __future__ import annotations

from typing import Any, Hashable

import orjson

from tay._frozen import Fields, Record
from tay.failures import TayFailure

Conn = Hashable


class Reply(Fields):
    """A correlated success reply: ``{"type": type, "request_id": ..., **fields}``."""

    conn: Conn
    request_id: str | None
    type: str
    fields: dict[str, Any]

    def message(self) -> dict[str, Any]:
        return {"type": self.type, "request_id": self.request_id, **self.fields}


class Refuse(Fields):
    """A correlated refusal; ``failure.wire_error()`` is the wire ``error`` object."""

    conn: Conn
    request_id: str | None
    failure: TayFailure

    def message(self) -> dict[str, Any]:
        return {"type": "error", "request_id": self.request_id, "error": self.failure.wire_error()}


class Execute(Fields):
    """Dispatch one execution to an executor connection (after its START is durable).

    ``args_json`` is the args as compact JSON, transcoded from the job's stored bytes; the
    frame splices it (``orjson.Fragment``) instead of decoding and re-encoding a dict.
    """

    conn: Conn
    reservation_id: str
    execution_id: str
    job_id: str
    task: str
    args_json: bytes
    timeout_ms: int
    queue: str

    @property
    def args(self) -> dict[str, Any]:
        """The args as objects (for in-process readers; frames use ``args_json``)."""
        return orjson.loads(self.args_json)

    def message(self) -> dict[str, Any]:
        return {
            "type": "execute",
            "request_id": self.execution_id,
            "reservation_id": self.reservation_id,
            "execution_id": self.execution_id,
            "job_id": self.job_id,
            "task": self.task,
            "args": orjson.Fragment(self.args_json),
            "timeout_ms": self.timeout_ms,
        }


class CancelExecution(Fields):
    """Best-effort cancellation of a running execution (job cancelled or timed out)."""

    conn: Conn
    request_id: str
    reservation_id: str
    execution_id: str

    def message(self) -> dict[str, Any]:
        return {
            "type": "cancel_execution",
            "request_id": self.request_id,
            "reservation_id": self.reservation_id,
            "execution_id": self.execution_id,
        }


Effect = Reply | Refuse | Execute | CancelExecution


class Outcome(Record):
    """``events``: (sequence, Event) pairs in append order; ``effects`` released after them."""

    __slots__ = ("events", "effects")
    events: list[tuple[int, Any]]
    effects: list[Effect]

    def __init__(self, events: list[tuple[int, Any]] | None = None,
                 effects: list[Effect] | None = None) -> None:
        self.events = [] if events is None else events  # a new list for each
        self.effects = [] if effects is None else effects

    def extend(self, other: "Outcome") -> None:
        self.events.extend(other.events)
        self.effects.extend(other.effects)

    def __bool__(self) -> bool:
        return bool(self.events or self.effects)
