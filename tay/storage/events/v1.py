"""Event-v1: the job lifecycle pairs (1..6, schema 1) and result_recorded (10,2).

Payload validators (registered with ``tay.storage.events.registry`` on import) and the
builders the engine uses to create these events; both check with the same rules.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping

from tay.storage.events.definition import (
    ATTEMPT_MAX,
    TIME_MAX,
    U64_MAX,
    LazyDefinition,
    check_attempt,
    check_exact_keys,
    check_job_id,
    check_json_value,
    check_optional,
    check_seq,
    check_time,
    check_unsigned,
    invalid,
    is_unsigned,
    validate_definition,
)
from tay.storage.events.registry import (
    JOB_AVAILABLE,
    JOB_CANCELLED,
    JOB_FINISHED,
    JOB_INSERTED,
    JOB_RETRIED,
    JOB_STARTED,
    RESULT_RECORDED,
    Event,
    carry_in_epochs,
    job_entity,
    event_with_raw,
    register_pairs,
)

# outcome codes, dispositions, retry modes and diagnostic codes (§6.1)
SUCCESS, WORKER_FAILURE, TIMEOUT, INTERRUPTED = 0, 1, 2, 3
COMPLETED, RETRYABLE, DISCARDED = 0, 1, 2
MODE_EXPEDITE, MODE_NEW_CYCLE = 0, 1
DIAG_ERROR_RETURN, DIAG_RAISE, DIAG_THROW, DIAG_WORKER_EXIT = 1, 2, 3, 4
DIAG_TIMEOUT, DIAG_BAD_RETURN, DIAG_INTERRUPTED = 5, 6, 7

# outcome -> (allowed diagnostic codes (None: diagnostic must be nil), allowed dispositions)
OUTCOME_RULES: dict[int, tuple[frozenset[int] | None, frozenset[int]]] = {
    SUCCESS: (None, frozenset({COMPLETED})),
    WORKER_FAILURE: (frozenset({1, 2, 3, 4, 6}), frozenset({RETRYABLE, DISCARDED})),
    TIMEOUT: (frozenset({5}), frozenset({RETRYABLE, DISCARDED})),
    INTERRUPTED: (frozenset({7}), frozenset({RETRYABLE})),
}


# ---- payload validators ----------------------------------------------------------------

def _common(payload: Any, keys: frozenset[str], name: str, *, insert: bool = False,
            shaped: bool = False) -> dict:
    """The checks every job payload shares; ``shaped``: built here with exactly ``keys``
    (a builder's literal), so only the values are checked."""
    if not shaped:
        check_exact_keys(payload, keys, name)
    at, job_id, expected = payload["at"], payload["job_id"], payload["expected_revision"]
    # the common case checked inline; the field names are only built for a refusal
    if not (type(at) is int and 0 <= at <= TIME_MAX):
        check_time(at, f"{name}.at")
    if not (type(job_id) is bytes and len(job_id) == 16 and job_id != _ZERO_ID):
        check_job_id(job_id, f"{name}.job_id")
    if insert:
        if not (is_unsigned(expected) and expected == 0):
            raise invalid("expected_revision must be 0 for an insert", f"{name}.expected_revision")
    elif not (type(expected) is int and 1 <= expected <= U64_MAX):
        check_seq(expected, f"{name}.expected_revision")
    return payload


_COMMON_KEYS = frozenset({"at", "expected_revision", "job_id"})
_ZERO_ID = bytes(16)
_KEY_SETS: dict[tuple[str, ...], frozenset[str]] = {}


def _keys(*names: str) -> frozenset[str]:
    keys = _KEY_SETS.get(names)
    if keys is None:
        keys = _KEY_SETS[names] = _COMMON_KEYS | frozenset(names)
    return keys


_INSERTED_KEYS = _keys("definition", "eligible_at")
_AVAILABLE_KEYS = _keys("due_at")
_STARTED_KEYS = _keys("attempt", "cycle_token")
_CANCELLED_KEYS = _keys("execution_token")
_RETRIED_KEYS = _keys("mode", "new_due_at")
_RESULT_KEYS = _keys("result")
_FINISHED_KEYS = _keys("diagnostic", "disposition", "execution_token", "next_attempt",
                       "next_due_at", "outcome")


def _validate_inserted(payload: Any, shaped: bool = False) -> None:
    _common(payload, _INSERTED_KEYS, "job_inserted", insert=True, shaped=shaped)
    definition = validate_definition(payload["definition"], "job_inserted.definition")
    eligible_at = payload["eligible_at"]
    if not (type(eligible_at) is int and 0 <= eligible_at <= TIME_MAX):
        check_time(eligible_at, "job_inserted.eligible_at")
    scheduled_at = definition["scheduled_at"]
    expected = payload["at"] if scheduled_at is None else scheduled_at
    if eligible_at != expected:
        raise invalid("eligible_at must equal scheduled_at (or at when unscheduled)",
                      "job_inserted.eligible_at")


def _validate_available(payload: Any, shaped: bool = False) -> None:
    _common(payload, _AVAILABLE_KEYS, "job_available", shaped=shaped)
    check_time(payload["due_at"], "job_available.due_at")
    if payload["due_at"] > payload["at"]:
        raise invalid("due_at must not be after at", "job_available.due_at")


def _validate_started(payload: Any, shaped: bool = False) -> None:
    _common(payload, _STARTED_KEYS, "job_started", shaped=shaped)
    attempt, cycle = payload["attempt"], payload["cycle_token"]
    if not (type(attempt) is int and 1 <= attempt <= ATTEMPT_MAX):
        check_attempt(attempt, "job_started.attempt")
    if not (type(cycle) is int and 1 <= cycle <= U64_MAX):
        check_seq(cycle, "job_started.cycle_token")


def check_diagnostic(obj: Any, field: str) -> int:
    """Diagnostic v1: exactly ``{"code": U, "version": 1}``; returns the code."""
    check_exact_keys(obj, frozenset({"code", "version"}), field)
    if not (is_unsigned(obj["version"]) and obj["version"] == 1):
        raise invalid("diagnostic version must be 1", f"{field}.version")
    return check_unsigned(obj["code"], f"{field}.code", 1, 7)


def _validate_finished(payload: Any, shaped: bool = False) -> None:
    _common(payload, _FINISHED_KEYS, "job_finished", shaped=shaped)
    token, outcome = payload["execution_token"], payload["outcome"]
    if not (type(token) is int and 1 <= token <= U64_MAX):  # names built only to refuse
        check_seq(token, "job_finished.execution_token")
    if not (type(outcome) is int and 0 <= outcome <= 3):
        check_unsigned(outcome, "job_finished.outcome", 0, 3)
    codes, dispositions = OUTCOME_RULES[outcome]
    if codes is None:
        if payload["diagnostic"] is not None:
            raise invalid("a successful outcome has no diagnostic", "job_finished.diagnostic")
    elif payload["diagnostic"] is None or check_diagnostic(
        payload["diagnostic"], "job_finished.diagnostic"
    ) not in codes:
        raise invalid(f"outcome {outcome} needs a diagnostic code in {sorted(codes)}",
                      "job_finished.diagnostic")
    disposition = payload["disposition"]
    if not (type(disposition) is int and 0 <= disposition <= 2):
        check_unsigned(disposition, "job_finished.disposition", 0, 2)
    if disposition not in dispositions:
        raise invalid(f"outcome {outcome} allows dispositions {sorted(dispositions)}",
                      "job_finished.disposition")
    if disposition == RETRYABLE:
        check_attempt(payload["next_attempt"], "job_finished.next_attempt")
        check_time(payload["next_due_at"], "job_finished.next_due_at")
    else:
        for key in ("next_attempt", "next_due_at"):
            if payload[key] is not None:
                raise invalid("must be nil unless the disposition is retryable",
                              f"job_finished.{key}")


def _validate_cancelled(payload: Any, shaped: bool = False) -> None:
    _common(payload, _CANCELLED_KEYS, "job_cancelled", shaped=shaped)
    check_optional(payload["execution_token"], "job_cancelled.execution_token", check_seq)


def _validate_retried(payload: Any, shaped: bool = False) -> None:
    _common(payload, _RETRIED_KEYS, "job_retried", shaped=shaped)
    check_unsigned(payload["mode"], "job_retried.mode", 0, 1)
    check_time(payload["new_due_at"], "job_retried.new_due_at")
    if payload["new_due_at"] != payload["at"]:
        raise invalid("new_due_at must equal at", "job_retried.new_due_at")


def _validate_result_recorded(payload: Any, shaped: bool = False) -> None:
    _common(payload, _RESULT_KEYS, "result_recorded", shaped=shaped)
    if payload["result"] is not None:  # nil (what most tasks return) is a JSON value
        check_json_value(payload["result"], "result_recorded.result")


register_pairs((
    (JOB_INSERTED, "job_inserted", _validate_inserted),
    (JOB_AVAILABLE, "job_available", _validate_available),
    (JOB_STARTED, "job_started", _validate_started),
    (JOB_FINISHED, "job_finished", _validate_finished),
    (JOB_CANCELLED, "job_cancelled", _validate_cancelled),
    (JOB_RETRIED, "job_retried", _validate_retried),
    (RESULT_RECORDED, "result_recorded", _validate_result_recorded),
))
# inside a Store-v2 epoch a result is a job-scoped epoch event, and a base keeps it as an
# attachment of its completed job
carry_in_epochs(RESULT_RECORDED, job_entity, attachment=True)


# ---- builders (the engine creates events only through these) ---------------------------

def _built(pair: tuple[int, int], name: str, validate: Any, payload: dict) -> Event:
    """``make_event`` for the builders below: ``payload`` is their own fresh dict with
    exactly the pair's keys, so neither a copy nor the key-set check is needed; every value
    is checked by the pair's validator as decoding checks it."""
    validate(payload, True)
    return event_with_raw(pair[0], pair[1], name, MappingProxyType(payload), None)


def diagnostic(code: int) -> dict[str, int]:
    return {"code": code, "version": 1}


def job_inserted(job_id: bytes, at: int, definition: Mapping[str, Any]) -> Event:
    scheduled_at = definition.get("scheduled_at")
    eligible_at = at if scheduled_at is None else scheduled_at
    if type(definition) is not LazyDefinition:
        definition = dict(definition)
    return _built(JOB_INSERTED, "job_inserted", _validate_inserted, {"at": at, "definition": definition,
                                     "eligible_at": eligible_at, "expected_revision": 0,
                                     "job_id": job_id})


def job_available(job_id: bytes, at: int, expected_revision: int, due_at: int) -> Event:
    return _built(JOB_AVAILABLE, "job_available", _validate_available, {"at": at, "due_at": due_at,
                                      "expected_revision": expected_revision, "job_id": job_id})


def job_started(job_id: bytes, at: int, expected_revision: int, attempt: int,
                cycle_token: int) -> Event:
    return _built(JOB_STARTED, "job_started", _validate_started, {"at": at, "attempt": attempt, "cycle_token": cycle_token,
                                    "expected_revision": expected_revision, "job_id": job_id})


def job_finished(job_id: bytes, at: int, expected_revision: int, *, execution_token: int,
                 outcome: int, diagnostic_code: int | None, disposition: int,
                 next_attempt: int | None = None, next_due_at: int | None = None) -> Event:
    return _built(JOB_FINISHED, "job_finished", _validate_finished, {
        "at": at,
        "diagnostic": None if diagnostic_code is None else diagnostic(diagnostic_code),
        "disposition": disposition, "execution_token": execution_token,
        "expected_revision": expected_revision, "job_id": job_id,
        "next_attempt": next_attempt, "next_due_at": next_due_at, "outcome": outcome,
    })


def job_cancelled(job_id: bytes, at: int, expected_revision: int,
                  execution_token: int | None) -> Event:
    return _built(JOB_CANCELLED, "job_cancelled", _validate_cancelled, {"at": at, "execution_token": execution_token,
                                      "expected_revision": expected_revision, "job_id": job_id})


def job_retried(job_id: bytes, at: int, expected_revision: int, mode: int) -> Event:
    return _built(JOB_RETRIED, "job_retried", _validate_retried, {"at": at, "expected_revision": expected_revision,
                                    "job_id": job_id, "mode": mode, "new_due_at": at})


def result_recorded(job_id: bytes, at: int, expected_revision: int, result: Any) -> Event:
    return _built(RESULT_RECORDED, "result_recorded", _validate_result_recorded, {"at": at, "expected_revision": expected_revision,
                                        "job_id": job_id, "result": result})
