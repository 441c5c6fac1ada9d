"""Event pairs of the operations API (schema 2, types 20..29 and 32): queue pause and
resume, a worker failure's details, the manual retry of a cancelled job, a queue's
concurrency set at runtime, schedule pause and resume, a scheduled job run now, a queue's
rate limit, a finished job deleted by hand, and what a UTC day saw (the per-day history).

Layouts (docs/storage-events.md, literal fixtures in fixtures/tay/events/operations/):

* (20,2) ``queue_paused``       at, queue
* (21,2) ``queue_resumed``      at, queue
* (22,2) ``failure_recorded``   at, error, expected_revision, job_id
* (23,2) ``job_requeued``       at, expected_revision, job_id
* (24,2) ``queue_scaled``       at, concurrency, queue
* (25,2) ``schedule_paused``    at, schedule_id
* (26,2) ``schedule_resumed``   at, schedule_id
* (27,2) ``job_expedited``      at, expected_revision, job_id
* (28,2) ``queue_rate_limited`` at, period_ms, queue, starts
* (29,2) ``job_deleted``        at, expected_revision, job_id
* (32,2) ``day_totals``         at, completed, day, enqueued, failed

``concurrency`` is the queue's credits from then on (an integer in 1..65,536), or nil: back
to the configured credits.

``starts`` and ``period_ms`` are a queue's rate limit from then on: at most ``starts`` job
starts (1..10,000) in any ``period_ms`` (1..86,400,000 ms); both nil: no limit.

``schedule_id`` is a schedule id (1..128 UTF-8 bytes without U+0000). A paused schedule
delivers no occurrence until it is resumed; its definition and chain of (13,2)/(11,2)
events do not change.

``error`` is a map with one to three of ``type`` (text of at most 128 UTF-8 bytes),
``message`` and ``traceback`` (text), nothing else. Its size is bounded by the engine's
error limit when written; a reader accepts any size within the Value budgets.

``day`` is a UTC day (days since 1970-01-01); ``enqueued``, ``completed`` and ``failed`` are
that day's totals so far (jobs inserted; executions that succeeded; executions that failed,
timed out or were discarded), each written whole: the last one of a day is its history.
"""

from __future__ import annotations

from typing import Any

from tay.storage.events.definition import (
    check_exact_keys, check_job_id, check_key, check_seq, check_time, check_unsigned, invalid,
)
from tay.storage.events.schedules import check_schedule_id
from tay.storage.events.registry import (
    DAY_TOTALS, FAILURE_RECORDED, JOB_DELETED, JOB_EXPEDITED, JOB_REQUEUED, QUEUE_PAUSED, QUEUE_RATE_LIMITED,
    QUEUE_RESUMED, QUEUE_SCALED,
    SCHEDULE_PAUSED, SCHEDULE_RESUMED, Event, carry_in_epochs,
    job_entity, make_event, register_pairs,
)

QUEUE_PAIRS = frozenset({QUEUE_PAUSED, QUEUE_RESUMED, QUEUE_SCALED, QUEUE_RATE_LIMITED})
SCHEDULE_CONTROL_PAIRS = frozenset({SCHEDULE_PAUSED, SCHEDULE_RESUMED})
# engine state outside any job's chain: what an operator sets on a queue or a schedule,
# and the per-day totals the engine records
CONTROL_PAIRS = QUEUE_PAIRS | SCHEDULE_CONTROL_PAIRS | {DAY_TOTALS}
DAY_MS = 86_400_000
DAY_MAX = (2**63 - 1) // DAY_MS  # the day of the largest Time
_DAY_KEYS = frozenset({"at", "completed", "day", "enqueued", "failed"})
ERROR_KEYS = ("type", "message", "traceback")
ERROR_TYPE_MAX_BYTES = 128
_FAILURE_KEYS = frozenset({"at", "error", "expected_revision", "job_id"})
_JOB_STEP_KEYS = frozenset({"at", "expected_revision", "job_id"})
_SCALE_KEYS = frozenset({"at", "concurrency", "queue"})
QUEUE_CREDITS_MAX = 65_536  # a queue's credits set at runtime (TAY_DEFAULT_QUEUE_CONCURRENCY's)
_RATE_KEYS = frozenset({"at", "period_ms", "queue", "starts"})
# a rate limit's bounds: the engine remembers each start of the period (a sliding log)
RATE_STARTS_MAX = 10_000
RATE_PERIOD_MAX_MS = 86_400_000


def _validate_control(name: str, subject: str, check_subject: Any):
    """A pause or resume: ``{at, <subject>}``, the subject checked by ``check_subject``."""
    keys = frozenset({"at", subject})

    def validate(payload: Any) -> None:
        check_exact_keys(payload, keys, name)
        check_time(payload["at"], f"{name}.at")
        check_subject(payload[subject], f"{name}.{subject}")
    return validate


def check_error(error: Any, field: str) -> dict[str, str]:
    """A failure object: a map of 1..3 of type/message/traceback, each text."""
    if type(error) is not dict or not error:
        raise invalid("expected a non-empty map", field)
    for key, text in error.items():
        if key not in ERROR_KEYS:
            raise invalid(f"unexpected key {key!r}", field)
        if type(text) is not str:
            raise invalid("expected text", f"{field}.{key}")
    if len(error.get("type", "").encode("utf-8", "surrogatepass")) > ERROR_TYPE_MAX_BYTES:
        raise invalid(f"type exceeds {ERROR_TYPE_MAX_BYTES} bytes", f"{field}.type")
    return error


def _validate_failure(payload: Any) -> None:
    name = "failure_recorded"
    check_exact_keys(payload, _FAILURE_KEYS, name)
    check_time(payload["at"], f"{name}.at")
    check_seq(payload["expected_revision"], f"{name}.expected_revision")
    check_job_id(payload["job_id"], f"{name}.job_id")
    check_error(payload["error"], f"{name}.error")


def _validate_job_step(name: str):
    """A job step with no field of its own: ``{at, expected_revision, job_id}``."""
    def validate(payload: Any) -> None:
        check_exact_keys(payload, _JOB_STEP_KEYS, name)
        check_time(payload["at"], f"{name}.at")
        check_seq(payload["expected_revision"], f"{name}.expected_revision")
        check_job_id(payload["job_id"], f"{name}.job_id")
    return validate


def _validate_scaled(payload: Any) -> None:
    name = "queue_scaled"
    check_exact_keys(payload, _SCALE_KEYS, name)
    check_time(payload["at"], f"{name}.at")
    check_key(payload["queue"], f"{name}.queue")
    if payload["concurrency"] is not None:
        check_unsigned(payload["concurrency"], f"{name}.concurrency", 1, QUEUE_CREDITS_MAX)


def _validate_rate_limited(payload: Any) -> None:
    name = "queue_rate_limited"
    check_exact_keys(payload, _RATE_KEYS, name)
    check_time(payload["at"], f"{name}.at")
    check_key(payload["queue"], f"{name}.queue")
    starts, period_ms = payload["starts"], payload["period_ms"]
    if (starts is None) != (period_ms is None):
        raise invalid("starts and period_ms are both nil (no limit) or both set",
                      f"{name}.starts")
    if starts is not None:
        check_unsigned(starts, f"{name}.starts", 1, RATE_STARTS_MAX)
        check_unsigned(period_ms, f"{name}.period_ms", 1, RATE_PERIOD_MAX_MS)


def _validate_day_totals(payload: Any) -> None:
    name = "day_totals"
    check_exact_keys(payload, _DAY_KEYS, name)
    check_time(payload["at"], f"{name}.at")
    check_unsigned(payload["day"], f"{name}.day", 0, DAY_MAX)
    for count in ("enqueued", "completed", "failed"):
        check_unsigned(payload[count], f"{name}.{count}")


register_pairs((
    (QUEUE_PAUSED, "queue_paused", _validate_control("queue_paused", "queue", check_key)),
    (QUEUE_RESUMED, "queue_resumed", _validate_control("queue_resumed", "queue", check_key)),
    (FAILURE_RECORDED, "failure_recorded", _validate_failure),
    (JOB_REQUEUED, "job_requeued", _validate_job_step("job_requeued")),
    (QUEUE_SCALED, "queue_scaled", _validate_scaled),
    (SCHEDULE_PAUSED, "schedule_paused",
     _validate_control("schedule_paused", "schedule_id", check_schedule_id)),
    (SCHEDULE_RESUMED, "schedule_resumed",
     _validate_control("schedule_resumed", "schedule_id", check_schedule_id)),
    (JOB_EXPEDITED, "job_expedited", _validate_job_step("job_expedited")),
    (QUEUE_RATE_LIMITED, "queue_rate_limited", _validate_rate_limited),
    (JOB_DELETED, "job_deleted", _validate_job_step("job_deleted")),
    (DAY_TOTALS, "day_totals", _validate_day_totals),
))

def queue_entity(payload: Any) -> tuple:
    return ("queue", payload["queue"])


def queue_scale_entity(payload: Any) -> tuple:
    return ("queue_scale", payload["queue"])


def queue_rate_entity(payload: Any) -> tuple:
    return ("queue_rate", payload["queue"])


def day_entity(payload: Any) -> tuple:
    return ("day", payload["day"])


def schedule_pause_entity(payload: Any) -> tuple:
    return ("schedule_pause", payload["schedule_id"])


# Through Store-v2 compaction (docs/storage-format.md "Epoch events"): a failure rides a
# base as a (31,2) attachment of its job and a tail as a (30,2) event; a requeue and an
# expedite are lifecycle steps of their job, so a base holds the job's (7,1) snapshot and a
# tail a (30,2). A deletion is its job's last step: a tail holds it as a (30,2), and a base
# made after it holds nothing of the job.
# A queue's pause state is an entity of its own: its payloads carry no expected revision,
# so the (30,2) revision alone chains them, and a base checkpoints every queue ever paused.
# A queue's runtime concurrency is a second entity of that queue (a base checkpoints it for
# every queue ever scaled), so that each checkpoint is one event; its rate limit is a
# third (``("queue_rate", name)``), checkpointed for every queue ever limited. A schedule's
# pause state is likewise an entity beside the schedule's own chain, whose (13,2)/(11,2)
# events carry expected revisions that a pause must not move; a base checkpoints every
# schedule ever paused, after the schedules themselves (checkpoints are written in pair
# order). Each UTC day's totals are an entity (``("day", day)``) whose last (32,2) a base
# checkpoints, for the days the engine keeps.
carry_in_epochs(FAILURE_RECORDED, job_entity, attachment=True)
carry_in_epochs(JOB_REQUEUED, job_entity)
carry_in_epochs(JOB_EXPEDITED, job_entity)
carry_in_epochs(JOB_DELETED, job_entity)
carry_in_epochs(QUEUE_PAUSED, queue_entity)
carry_in_epochs(QUEUE_RESUMED, queue_entity)
carry_in_epochs(QUEUE_SCALED, queue_scale_entity)
carry_in_epochs(QUEUE_RATE_LIMITED, queue_rate_entity)
carry_in_epochs(SCHEDULE_PAUSED, schedule_pause_entity)
carry_in_epochs(SCHEDULE_RESUMED, schedule_pause_entity)
carry_in_epochs(DAY_TOTALS, day_entity)


# ---- builders -------------------------------------------------------------------------

def queue_paused(queue: str, at: int) -> Event:
    return make_event(QUEUE_PAUSED, {"at": at, "queue": queue})


def queue_resumed(queue: str, at: int) -> Event:
    return make_event(QUEUE_RESUMED, {"at": at, "queue": queue})


def queue_scaled(queue: str, concurrency: int | None, at: int) -> Event:
    return make_event(QUEUE_SCALED, {"at": at, "concurrency": concurrency, "queue": queue})


def queue_rate_limited(queue: str, starts: int | None, period_ms: int | None,
                       at: int) -> Event:
    return make_event(QUEUE_RATE_LIMITED, {"at": at, "period_ms": period_ms, "queue": queue,
                                           "starts": starts})


def schedule_paused(schedule_id: str, at: int) -> Event:
    return make_event(SCHEDULE_PAUSED, {"at": at, "schedule_id": schedule_id})


def schedule_resumed(schedule_id: str, at: int) -> Event:
    return make_event(SCHEDULE_RESUMED, {"at": at, "schedule_id": schedule_id})


def failure_recorded(job_id: bytes, at: int, expected_revision: int,
                     error: dict[str, str]) -> Event:
    return make_event(FAILURE_RECORDED, {"at": at, "error": dict(error),
                                         "expected_revision": expected_revision,
                                         "job_id": job_id})


def job_requeued(job_id: bytes, at: int, expected_revision: int) -> Event:
    return make_event(JOB_REQUEUED, {"at": at, "expected_revision": expected_revision,
                                     "job_id": job_id})


def job_expedited(job_id: bytes, at: int, expected_revision: int) -> Event:
    return make_event(JOB_EXPEDITED, {"at": at, "expected_revision": expected_revision,
                                      "job_id": job_id})


def job_deleted(job_id: bytes, at: int, expected_revision: int) -> Event:
    return make_event(JOB_DELETED, {"at": at, "expected_revision": expected_revision,
                                    "job_id": job_id})


def day_totals(day: int, enqueued: int, completed: int, failed: int, at: int) -> Event:
    return make_event(DAY_TOTALS, {"at": at, "completed": completed, "day": day,
                                   "enqueued": enqueued, "failed": failed})
