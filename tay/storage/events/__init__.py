"""Durable events: the one import point for the Event type, the pair registry, Event-v1
(job lifecycle 1..6 schema 1, result_recorded (10,2)) and the batch decoders.

An event is a record type, a payload schema and one canonical Value map with an exact key
set (docs/storage-events.md). ``decode_event`` checks, in this order: the pair is known
(``unsupported_semantics``), the Value decodes within budget (``invalid_payload`` /
``resource_limit``), then the pair's payload-local rules (``invalid_payload``). Transition
rules that need the job's previous state live in ``tay.storage.events.transitions``.

The code lives by idea in ``event_registry`` (Event, pairs, registry, exact decode),
``event_v1`` (validators and builders) and ``event_fast`` (native fast path, batch decode);
this module re-exports their public names so callers import one place.
"""

from __future__ import annotations

from tay.storage.events.definition import PayloadRefused
from tay.storage.events.fast import decode_event, decode_events
from tay.storage.events.registry import (
    ALL_JOB_PAIRS,
    DAY_TOTALS,
    FAILURE_RECORDED,
    JOB_AVAILABLE,
    JOB_CANCELLED,
    JOB_DELETED,
    JOB_EXPEDITED,
    JOB_REQUEUED,
    QUEUE_PAUSED,
    QUEUE_RATE_LIMITED,
    QUEUE_RESUMED,
    QUEUE_SCALED,
    SCHEDULE_PAUSED,
    SCHEDULE_RESUMED,
    JOB_FINISHED,
    JOB_INSERTED,
    JOB_PAIRS,
    LIFECYCLE_PAIRS,
    JOB_RETRIED,
    JOB_STARTED,
    RESULT_RECORDED,
    UNDOCUMENTED_PAIRS,
    EpochCarry,
    Event,
    Pair,
    Validator,
    carry_in_epochs,
    decode_event_exact,
    encode_event,
    epoch_carry,
    event_with_raw,
    job_entity,
    journal_records,
    make_event,
    register_pair,
    registered_pairs,
)
from tay.storage.events.v1 import (
    COMPLETED,
    DIAG_BAD_RETURN,
    DIAG_ERROR_RETURN,
    DIAG_INTERRUPTED,
    DIAG_RAISE,
    DIAG_THROW,
    DIAG_TIMEOUT,
    DIAG_WORKER_EXIT,
    DISCARDED,
    INTERRUPTED,
    MODE_EXPEDITE,
    MODE_NEW_CYCLE,
    OUTCOME_RULES,
    RETRYABLE,
    SUCCESS,
    TIMEOUT,
    WORKER_FAILURE,
    check_diagnostic,
    diagnostic,
    job_available,
    job_cancelled,
    job_finished,
    job_inserted,
    job_retried,
    job_started,
    result_recorded,
)

__all__ = [
    "Event", "PayloadRefused", "decode_event", "decode_events", "encode_event", "journal_records", "make_event", "register_pair",
    "registered_pairs", "job_inserted", "job_available", "job_started", "job_finished",
    "job_cancelled", "job_retried", "result_recorded", "diagnostic",
    "decode_event_exact", "check_diagnostic", "carry_in_epochs", "epoch_carry", "job_entity",
    "event_with_raw",
    "EpochCarry", "LIFECYCLE_PAIRS", "Pair", "Validator", "JOB_PAIRS", "UNDOCUMENTED_PAIRS",
    "JOB_INSERTED", "JOB_AVAILABLE", "JOB_STARTED", "JOB_FINISHED", "JOB_CANCELLED",
    "JOB_RETRIED", "RESULT_RECORDED", "OUTCOME_RULES", "ALL_JOB_PAIRS", "FAILURE_RECORDED",
    "JOB_REQUEUED", "JOB_EXPEDITED", "JOB_DELETED", "DAY_TOTALS", "QUEUE_PAUSED", "QUEUE_RESUMED", "QUEUE_SCALED", "QUEUE_RATE_LIMITED",
    "SCHEDULE_PAUSED", "SCHEDULE_RESUMED",
    "SUCCESS", "WORKER_FAILURE", "TIMEOUT", "INTERRUPTED", "COMPLETED", "RETRYABLE", "DISCARDED",
    "MODE_EXPEDITE", "MODE_NEW_CYCLE", "DIAG_ERROR_RETURN", "DIAG_RAISE", "DIAG_THROW",
    "DIAG_WORKER_EXIT", "DIAG_TIMEOUT", "DIAG_BAD_RETURN", "DIAG_INTERRUPTED",
]
