"""Schedule events: the legacy (7,2)/(8,2)/(9,2) payloads and our Tay 1.8 (11,2)/(13,2).

Importing this module registers the five pairs with ``tay.storage.events`` (one owner per
pair). (12,2) is a historical checkpoint whose layout is undocumented: ``tay.storage.events``
refuses it as ``unsupported_semantics`` / ``undocumented_payload_layout``; we never guess it.

Every payload is one canonical Value map with an exact key set (docs/schedules.md has the
grammar and a worked example). These validators check only what a payload says on its own
(``invalid_payload``); rules that need the schedule's previous state (revisions, the due
time being the current one, membership only shrinking) live in the one ``apply`` of
``tay.engine.schedules.table`` and refuse with ``consumer_rejected``.

Pairs:

* (7,2) ``schedule_registered`` (legacy)  at, definition, expected_revision, next_at, schedule_id
* (8,2) ``schedule_advanced`` (legacy)    at, due_at, expected_revision, next_at, schedule_id
* (9,2) ``schedule_cancelled`` (legacy)   at, expected_revision, schedule_id
* (11,2) ``schedule_delivered``           active, at, due_at, expected_revision, job_id,
                                          next_at, revision, schedule_id
* (13,2) ``schedule_state``               action, active, at, cancelled_at, definition,
                                          expected_revision, last_at, membership, next_at,
                                          revision, schedule_id
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from tay.storage.events.definition import (
    check_exact_keys,
    check_job_id,
    check_json_value,
    check_key,
    check_optional,
    check_seq,
    check_time,
    check_unsigned,
    invalid,
    is_job_id,
    is_unsigned,
)
from tay.storage.events.registry import carry_in_epochs, register_pairs
from tay.storage.events import Event, make_event

SCHEDULE_REGISTERED = (7, 2)
SCHEDULE_ADVANCED = (8, 2)
SCHEDULE_CANCELLED = (9, 2)
SCHEDULE_DELIVERED = (11, 2)
SCHEDULE_STATE = (13, 2)
SCHEDULE_PAIRS = frozenset(
    {SCHEDULE_REGISTERED, SCHEDULE_ADVANCED, SCHEDULE_CANCELLED, SCHEDULE_DELIVERED,
     SCHEDULE_STATE}
)

SCHEDULE_ID_MAX_BYTES = 128
EXPRESSION_MAX_BYTES = 128
TIMEZONE_MAX_BYTES = 128
KINDS = ("cron", "every")
CATCH_UPS = ("latest", "all")
OVERLAPS = ("allow", "skip", "queue")
ACTIONS = ("registered", "cancelled", "advanced", "checkpoint")
MEMBERSHIPS = ("complete", "partial")

DEFINITION_KEYS = frozenset(
    {"args", "catch_up", "expression", "kind", "options", "overlap", "task", "timezone"}
)
_REGISTERED_KEYS = frozenset({"at", "definition", "expected_revision", "next_at", "schedule_id"})
_ADVANCED_KEYS = frozenset({"at", "due_at", "expected_revision", "next_at", "schedule_id"})
_CANCELLED_KEYS = frozenset({"at", "expected_revision", "schedule_id"})
_DELIVERED_KEYS = frozenset(
    {"active", "at", "due_at", "expected_revision", "job_id", "next_at", "revision",
     "schedule_id"}
)
_STATE_KEYS = frozenset(
    {"action", "active", "at", "cancelled_at", "definition", "expected_revision", "last_at",
     "membership", "next_at", "revision", "schedule_id"}
)


# ---- field checks ---------------------------------------------------------------------

def _bounded_text(obj: Any, field: str, max_bytes: int) -> str:
    if type(obj) is not str:
        raise invalid("expected text", field)
    size = len(obj.encode("utf-8", "surrogatepass"))
    if not 1 <= size <= max_bytes:
        raise invalid(f"text must be 1..{max_bytes} bytes, got {size}", field)
    return obj


def check_schedule_id(obj: Any, field: str = "schedule_id") -> str:
    """Text of 1..128 UTF-8 bytes without U+0000."""
    _bounded_text(obj, field, SCHEDULE_ID_MAX_BYTES)
    if "\x00" in obj:
        raise invalid("schedule id contains U+0000", field)
    return obj


def _one_of(obj: Any, choices: Sequence[str], field: str) -> str:
    if type(obj) is not str or obj not in choices:
        raise invalid(f"expected one of {list(choices)}, got {obj!r}", field)
    return obj


def _map(obj: Any, field: str) -> dict:
    if type(obj) is not dict:
        raise invalid("expected a map", field)
    check_json_value(obj, field)
    return obj


def validate_schedule_definition(obj: Any, field: str = "definition") -> dict:
    """The schedule definition map (storage.md §6.6), shared by (7,2) and (13,2)."""
    check_exact_keys(obj, DEFINITION_KEYS, field)
    _map(obj["args"], f"{field}.args")
    _map(obj["options"], f"{field}.options")
    _one_of(obj["catch_up"], CATCH_UPS, f"{field}.catch_up")
    _one_of(obj["overlap"], OVERLAPS, f"{field}.overlap")
    check_key(obj["task"], f"{field}.task")
    kind = _one_of(obj["kind"], KINDS, f"{field}.kind")
    if kind == "cron":
        _bounded_text(obj["expression"], f"{field}.expression", EXPRESSION_MAX_BYTES)
    else:
        check_unsigned(obj["expression"], f"{field}.expression", 1)
    check_optional(
        obj["timezone"], f"{field}.timezone",
        lambda text, where: _bounded_text(text, where, TIMEZONE_MAX_BYTES),
    )
    return obj


def _check_active(obj: Any, field: str) -> list[bytes]:
    """The occurrence membership: a list of distinct job IDs, in admission order."""
    if type(obj) is not list:
        raise invalid("expected a list of job IDs", field)
    for index, job_id in enumerate(obj):  # named only when refused (a replay reads many)
        if not is_job_id(job_id):
            check_job_id(job_id, f"{field}[{index}]")  # raises, naming the item
    if len(set(obj)) != len(obj):
        raise invalid("job IDs must be distinct", field)
    return obj


def _check_upsert_revision(obj: Any, field: str) -> int:
    """0 (the schedule is new) or the schedule's current record sequence."""
    if not is_unsigned(obj):
        raise invalid(f"expected an unsigned integer, got {obj!r}", field)
    return obj


# ---- validators -----------------------------------------------------------------------

def _validate_registered(payload: Any) -> None:
    name = "schedule_registered"
    check_exact_keys(payload, _REGISTERED_KEYS, name)
    check_time(payload["at"], f"{name}.at")
    validate_schedule_definition(payload["definition"], f"{name}.definition")
    _check_upsert_revision(payload["expected_revision"], f"{name}.expected_revision")
    check_time(payload["next_at"], f"{name}.next_at")
    check_schedule_id(payload["schedule_id"], f"{name}.schedule_id")


def _validate_advanced(payload: Any) -> None:
    name = "schedule_advanced"
    check_exact_keys(payload, _ADVANCED_KEYS, name)
    at = check_time(payload["at"], f"{name}.at")
    due_at = check_time(payload["due_at"], f"{name}.due_at")
    next_at = check_time(payload["next_at"], f"{name}.next_at")
    check_seq(payload["expected_revision"], f"{name}.expected_revision")
    check_schedule_id(payload["schedule_id"], f"{name}.schedule_id")
    if due_at > at:
        raise invalid("due_at must not be after at", f"{name}.due_at")
    if next_at <= due_at:
        raise invalid("next_at must be after due_at", f"{name}.next_at")


def _validate_cancelled(payload: Any) -> None:
    name = "schedule_cancelled"
    check_exact_keys(payload, _CANCELLED_KEYS, name)
    check_time(payload["at"], f"{name}.at")
    check_seq(payload["expected_revision"], f"{name}.expected_revision")
    check_schedule_id(payload["schedule_id"], f"{name}.schedule_id")


def _validate_delivered(payload: Any) -> None:
    name = "schedule_delivered"
    check_exact_keys(payload, _DELIVERED_KEYS, name)
    at = check_time(payload["at"], f"{name}.at")
    due_at = check_time(payload["due_at"], f"{name}.due_at")
    next_at = check_optional(payload["next_at"], f"{name}.next_at", check_time)
    check_seq(payload["expected_revision"], f"{name}.expected_revision")
    job_id = check_job_id(payload["job_id"], f"{name}.job_id")
    check_unsigned(payload["revision"], f"{name}.revision", 1)
    check_schedule_id(payload["schedule_id"], f"{name}.schedule_id")
    active = _check_active(payload["active"], f"{name}.active")
    if due_at > at:
        raise invalid("due_at must not be after at", f"{name}.due_at")
    if next_at is not None and next_at <= due_at:
        raise invalid("next_at must be after due_at", f"{name}.next_at")
    if job_id not in active:
        raise invalid("the delivered job must be an active occurrence", f"{name}.active")


def _validate_state(payload: Any) -> None:
    name = "schedule_state"
    check_exact_keys(payload, _STATE_KEYS, name)
    action = _one_of(payload["action"], ACTIONS, f"{name}.action")
    at = check_time(payload["at"], f"{name}.at")
    cancelled_at = check_optional(payload["cancelled_at"], f"{name}.cancelled_at", check_time)
    validate_schedule_definition(payload["definition"], f"{name}.definition")
    expected = _check_upsert_revision(payload["expected_revision"], f"{name}.expected_revision")
    check_optional(payload["last_at"], f"{name}.last_at", check_time)
    _one_of(payload["membership"], MEMBERSHIPS, f"{name}.membership")
    check_optional(payload["next_at"], f"{name}.next_at", check_time)
    check_unsigned(payload["revision"], f"{name}.revision", 1)
    check_schedule_id(payload["schedule_id"], f"{name}.schedule_id")
    _check_active(payload["active"], f"{name}.active")
    if action in ("cancelled", "advanced") and expected == 0:
        raise invalid(f"{action} needs the schedule's current revision", f"{name}.expected_revision")
    if action == "cancelled" and cancelled_at != at:
        raise invalid("a cancellation sets cancelled_at to at", f"{name}.cancelled_at")
    if action in ("registered", "advanced") and cancelled_at is not None:
        raise invalid(f"{action} leaves cancelled_at nil", f"{name}.cancelled_at")


register_pairs((
    (SCHEDULE_REGISTERED, "schedule_registered", _validate_registered),
    (SCHEDULE_ADVANCED, "schedule_advanced", _validate_advanced),
    (SCHEDULE_CANCELLED, "schedule_cancelled", _validate_cancelled),
    (SCHEDULE_DELIVERED, "schedule_delivered", _validate_delivered),
    (SCHEDULE_STATE, "schedule_state", _validate_state),
))


def schedule_entity(payload: Mapping[str, Any]) -> tuple:
    return ("schedule", payload["schedule_id"])


# Tay 1.8's pairs travel inside Store-v2 epochs; the legacy ones are only read from v1
# history (compaction turns their state into a (13,2) checkpoint).
carry_in_epochs(SCHEDULE_DELIVERED, schedule_entity)
carry_in_epochs(SCHEDULE_STATE, schedule_entity)


# ---- builders -------------------------------------------------------------------------

def schedule_delivered(
    *, schedule_id: str, at: int, due_at: int, job_id: bytes, next_at: int | None,
    revision: int, expected_revision: int, active: Sequence[bytes],
) -> Event:
    """(11,2): the occurrence ``due_at`` was durably admitted as ``job_id``."""
    return make_event(SCHEDULE_DELIVERED, {
        "active": list(active), "at": at, "due_at": due_at,
        "expected_revision": expected_revision, "job_id": job_id, "next_at": next_at,
        "revision": revision, "schedule_id": schedule_id,
    })


def schedule_state(
    *, action: str, schedule_id: str, at: int, definition: Mapping[str, Any], revision: int,
    expected_revision: int, next_at: int | None, last_at: int | None,
    cancelled_at: int | None, active: Sequence[bytes], membership_complete: bool,
) -> Event:
    """(13,2): the whole durable state of one schedule after ``action``."""
    return make_event(SCHEDULE_STATE, {
        "action": action, "active": list(active), "at": at, "cancelled_at": cancelled_at,
        "definition": dict(definition), "expected_revision": expected_revision,
        "last_at": last_at, "membership": "complete" if membership_complete else "partial",
        "next_at": next_at, "revision": revision, "schedule_id": schedule_id,
    })


def legacy_registered(
    *, schedule_id: str, at: int, definition: Mapping[str, Any], next_at: int,
    expected_revision: int,
) -> Event:
    """(7,2), built only by tests and fixtures: tay 1.8 never writes legacy pairs."""
    return make_event(SCHEDULE_REGISTERED, {
        "at": at, "definition": dict(definition), "expected_revision": expected_revision,
        "next_at": next_at, "schedule_id": schedule_id,
    })


def legacy_advanced(
    *, schedule_id: str, at: int, due_at: int, next_at: int, expected_revision: int
) -> Event:
    """(8,2), for tests and fixtures only."""
    return make_event(SCHEDULE_ADVANCED, {
        "at": at, "due_at": due_at, "expected_revision": expected_revision,
        "next_at": next_at, "schedule_id": schedule_id,
    })


def legacy_cancelled(*, schedule_id: str, at: int, expected_revision: int) -> Event:
    """(9,2), for tests and fixtures only."""
    return make_event(SCHEDULE_CANCELLED, {
        "at": at, "expected_revision": expected_revision, "schedule_id": schedule_id,
    })
