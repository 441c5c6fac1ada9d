"""tay's two Store-v2 record pairs that carry any other registered pair inside an epoch.

Upstream's epoch profile admits only (7,1) snapshots and (8,1) lifecycle mutations; results,
schedules and every later durable pair need a place too (storage.md §11.5). One mechanism
carries them all (docs/storage-format.md, "Epoch events"):

* (30,2) ``epoch_event``: ``inner_type u8 | inner_schema u8 | revision u64 | payload``, one
  event of a registered pair applied in the epoch's logical revision domain: ``revision``
  is the entity's revision after it (its ``S``). In a tail it continues the entity's chain
  (``revision`` = the entity's revision + 1, and an inner ``expected_revision``, when the
  pair has one, equals that revision); in a base it is a checkpoint that creates the
  entity at ``revision`` (an inner ``expected_revision`` is 0).
* (31,2) ``job_attachment``: ``inner_type u8 | inner_schema u8 | payload``, base only, right
  after the (7,1) snapshot of the job it belongs to: state of that job which a snapshot
  cannot hold (a result), written as the payload of the pair that owns it, with
  ``expected_revision`` equal to the snapshot's revision.

The inner payload is byte for byte what the inner pair's own schema says; the inner pair
must be registered *and* marked as carried in epochs by its owner
(``events.carry_in_epochs``). Anything else is ``unsupported_semantics``, so a reader that
does not know a pair refuses the whole epoch instead of dropping state.
"""

from __future__ import annotations

import struct

from tay._frozen import Fields
from tay.storage import events as ev
from tay.storage.events.definition import PayloadRefused, invalid, U64_MAX
from tay.storage.events.registry import decode_event_exact, spec_for
from tay.storage.formats import value

EPOCH_EVENT_PAIR = (30, 2)
JOB_ATTACHMENT_PAIR = (31, 2)
_EVENT_PREFIX = struct.Struct(">BBQ")
_ATTACHMENT_PREFIX = struct.Struct(">BB")


class EpochEvent(Fields):
    """A (30,2) record: ``event`` (validated by its own pair) applied with S = ``revision``.

    Immutable; a named tuple because the live writer and replay build one per record."""

    event: ev.Event
    revision: int
    carry: ev.EpochCarry

    @property
    def entity(self) -> tuple:
        return self.carry.entity(self.event.payload)


def _prefix(layout: struct.Struct, view: memoryview, what: str) -> tuple:
    if len(view) < layout.size:
        raise PayloadRefused("invalid_payload", "truncated", field=what, length=len(view),
                             need=layout.size)
    return layout.unpack_from(view, 0)


def _carry(pair: tuple[int, int], attachment: bool) -> ev.EpochCarry:
    """The inner pair's epoch role; refuses pairs that cannot appear where they are."""
    carry = ev.epoch_carry(pair)  # a carried pair is registered (carry_in_epochs checks)
    if carry is not None and (carry.attachment or not attachment):
        return carry
    spec_for(pair)  # unknown pairs: the registry's own unsupported_semantics refusal
    carry = ev.epoch_carry(pair)
    if carry is None:
        raise PayloadRefused("unsupported_semantics", "not_carried_in_epochs",
                             event_type=pair[0], schema=pair[1])
    if attachment and not carry.attachment:
        raise PayloadRefused("unsupported_semantics", "not_a_job_attachment",
                             event_type=pair[0], schema=pair[1])
    return carry


def decode_epoch_event(payload: bytes | memoryview,
                       limits: value.DecodeLimits | None = None) -> EpochEvent:
    """Decode a (30,2) payload: the envelope, then the inner pair's own decoder."""
    view = memoryview(payload)
    inner_type, inner_schema, revision = _prefix(_EVENT_PREFIX, view, "epoch_event")
    carry = _carry((inner_type, inner_schema), attachment=False)
    if revision == 0:
        raise invalid("revision must be 1..2^64-1", "epoch_event.revision")
    event = decode_event_exact(inner_type, inner_schema, view[_EVENT_PREFIX.size:], limits)
    if not event.get("expected_revision", 0) < revision:
        raise invalid("revision must be above the inner expected_revision",
                      "epoch_event.revision", revision=revision,
                      expected_revision=event["expected_revision"])
    return EpochEvent(event, revision, carry)


def encode_epoch_event(event: ev.Event, revision: int) -> bytes:
    """The (30,2) payload carrying ``event`` at logical revision ``revision``."""
    _carry(event.pair, attachment=False)
    if type(revision) is not int or not event.get("expected_revision", 0) < revision <= U64_MAX:
        raise ValueError(f"revision {revision!r} must be above expected_revision")
    return _EVENT_PREFIX.pack(event.type, event.schema, revision) + ev.encode_event(event)


def decode_job_attachment(payload: bytes | memoryview,
                          limits: value.DecodeLimits | None = None) -> ev.Event:
    """Decode a (31,2) payload into the attachment's inner event (job-scoped)."""
    view = memoryview(payload)
    inner_type, inner_schema = _prefix(_ATTACHMENT_PREFIX, view, "job_attachment")
    _carry((inner_type, inner_schema), attachment=True)
    return decode_event_exact(inner_type, inner_schema, view[_ATTACHMENT_PREFIX.size:], limits)


def encode_job_attachment(event: ev.Event) -> bytes:
    _carry(event.pair, attachment=True)
    return _ATTACHMENT_PREFIX.pack(event.type, event.schema) + ev.encode_event(event)
