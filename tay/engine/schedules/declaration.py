"""Validating a ``schedule`` request into a durable definition and a start instant.

Request fields (protocol.md §4.2, seeds): ``declaration_id`` (optional identifier),
``task`` (key), ``args`` (object, default ``{}``), ``cron`` xor ``every``, ``timezone`` (cron
only, default ``+00``), ``catch_up`` (``latest`` | ``all``), ``overlap`` (``allow`` |
``skip`` (default) | ``queue``), ``delay`` xor ``start_at``, ``options`` (validated like
enqueue options). JSON ``null`` means absent, as for enqueue options. Unknown fields are
refused. Every refusal is ``invalid_schedule`` naming the field.

The *definition* (what redeclaration compares) is the storage map of
``tay.storage.events.schedules``: args, catch_up, expression (cron text or interval ms),
kind, options, overlap, task, timezone. ``delay``/``start_at`` only place the first
occurrence and are not part of it, so the SDK's reconnect replay stays idempotent.
"""

from __future__ import annotations

import math
import string
from collections.abc import Callable
from typing import Any, Mapping

from tay._frozen import Frozen, set_field
from tay.engine.schedules.cron import DEFAULT_TIMEZONE, parse_cron, parse_timezone
from tay.engine.validation.options import round_half_away
from tay.failures import RequestRefused, TayFailure
from tay.storage.events.definition import PayloadRefused, check_json_value
from tay.storage.events.schedules import (
    CATCH_UPS,
    EXPRESSION_MAX_BYTES,
    OVERLAPS,
    validate_schedule_definition,
)

TIME_MAX = 2**63 - 1
UNIT_MS = {"seconds": 1_000, "minutes": 60_000, "hours": 3_600_000, "days": 86_400_000}
REQUEST_FIELDS = frozenset(
    {"declaration_id", "task", "args", "cron", "every", "timezone", "catch_up", "overlap",
     "delay", "start_at", "options"}
)
# Options an occurrence cannot take: its job id is derived from the schedule id and due time.
FORBIDDEN_OPTIONS = frozenset({"id", "submission_id"})
GENERATED_ID_ALPHABET = string.ascii_letters + string.digits
GENERATED_ID_LENGTH = 24

# (task, args, options) -> None; raises a TayFailure for bad options (the engine's enqueue
# validator, wrapped). Its refusal is reported as ``invalid_schedule``.
OptionsValidator = Callable[[str, dict, dict], None]


def invalid_schedule(message: str, field: str | None = None) -> RequestRefused:
    return RequestRefused(message, code="invalid_schedule", field=field)


class Declaration(Frozen):
    """A validated declaration: its id, durable definition and first-occurrence start."""

    __slots__ = ("schedule_id", "definition", "start_ms", "generated_id")
    schedule_id: str
    definition: dict[str, Any]
    start_ms: int
    generated_id: bool

    def __init__(self, schedule_id: str, definition: dict[str, Any], start_ms: int,
                 generated_id: bool) -> None:
        set_field(self, "schedule_id", schedule_id)
        set_field(self, "definition", definition)
        set_field(self, "start_ms", start_ms)
        set_field(self, "generated_id", generated_id)


def _is_number(obj: Any) -> bool:
    return type(obj) in (int, float) and math.isfinite(obj)


def _scaled_ms(amount: int | float, unit_ms: int, field: str, what: str) -> int:
    """``amount`` units in ms: ints exactly, floats rounded half away from zero; a product
    past the largest timestamp (or an overflow to infinity, as ``1e308`` seconds gives)
    is refused before any rounding could raise."""
    if type(amount) is int:
        total = amount * unit_ms
    else:
        scaled = amount * unit_ms
        if not math.isfinite(scaled) or scaled > TIME_MAX:
            raise invalid_schedule(f"{what} reaches past the largest timestamp", field)
        total = round_half_away(scaled)
    if total > TIME_MAX:
        raise invalid_schedule(f"{what} reaches past the largest timestamp", field)
    return total


def _identifier(obj: Any, field: str) -> str:
    if type(obj) is not str or "\x00" in obj:
        raise invalid_schedule(f"{field} must be a string without NUL", field)
    size = len(obj.encode("utf-8", "surrogatepass"))
    if not 1 <= size <= 128:
        raise invalid_schedule(f"{field} must be 1..128 UTF-8 bytes, got {size}", field)
    return obj


def _task(obj: Any) -> str:
    if type(obj) is not str or "\x00" in obj:
        raise invalid_schedule("task must be a string without NUL", "task")
    if not 1 <= len(obj.encode("utf-8", "surrogatepass")) <= 255:
        raise invalid_schedule("task must be 1..255 UTF-8 bytes", "task")
    return obj


def _json_object(obj: Any, field: str) -> dict:
    if type(obj) is not dict:
        raise invalid_schedule(f"{field} must be an object", field)
    try:
        check_json_value(obj, field)
    except PayloadRefused as refusal:
        raise invalid_schedule(refusal.reason, refusal.field) from None
    return obj


def interval_ms(every: Any) -> int:
    """``every``: exactly one non-null unit with a positive amount; rounds, at least 1 ms."""
    if type(every) is not dict:
        raise invalid_schedule("every must be an object", "every")
    unknown = sorted(set(every) - set(UNIT_MS))
    if unknown:
        raise invalid_schedule(f"every has unknown units {unknown}", "every")
    given = {unit: amount for unit, amount in every.items() if amount is not None}
    if len(given) != 1:
        raise invalid_schedule("every needs exactly one of seconds/minutes/hours/days", "every")
    ((unit, amount),) = given.items()
    if not _is_number(amount) or amount <= 0:
        raise invalid_schedule(f"every.{unit} must be a positive number", f"every.{unit}")
    return max(1, _scaled_ms(amount, UNIT_MS[unit], f"every.{unit}", f"every.{unit}"))


def _timing(request: Mapping[str, Any]) -> tuple[str, Any, str | None]:
    """(kind, expression, timezone) from ``cron``/``every``/``timezone``."""
    cron, every = request.get("cron"), request.get("every")
    if (cron is None) == (every is None):
        raise invalid_schedule("give exactly one of cron or every", "cron")
    if every is not None:
        if request.get("timezone") is not None:
            raise invalid_schedule("timezone applies to cron schedules only", "timezone")
        return "every", interval_ms(every), None
    if type(cron) is not str or len(cron.encode("utf-8", "surrogatepass")) > EXPRESSION_MAX_BYTES:
        raise invalid_schedule(f"cron must be a string of at most {EXPRESSION_MAX_BYTES} bytes", "cron")
    parse_cron(cron)
    zone = request.get("timezone")
    zone = DEFAULT_TIMEZONE if zone is None else zone
    parse_timezone(zone)
    return "cron", cron, zone


def _start(request: Mapping[str, Any], now_ms: int) -> int:
    delay, start_at = request.get("delay"), request.get("start_at")
    if delay is not None and start_at is not None:
        raise invalid_schedule("give at most one of delay or start_at", "delay")
    if start_at is not None:
        if type(start_at) is not int or not 0 <= start_at <= TIME_MAX:
            raise invalid_schedule("start_at must be an integer Unix ms timestamp >= 0", "start_at")
        return start_at
    if delay is not None:
        if not _is_number(delay) or delay < 0:
            raise invalid_schedule("delay must be a finite number of seconds >= 0", "delay")
        delay_ms = _scaled_ms(delay, 1000, "delay", "delay")
        if now_ms + delay_ms > TIME_MAX:
            raise invalid_schedule("delay reaches past the largest timestamp", "delay")
        return now_ms + delay_ms
    return now_ms


def structural_options_check(task: str, args: dict, options: dict) -> None:
    """Fallback when no engine validator is supplied: JSON values only (see the table)."""


def _options(request: Mapping[str, Any], task: str, args: dict,
             validator: OptionsValidator) -> dict:
    options = request.get("options")
    options = {} if options is None else _json_object(options, "options")
    for name in sorted(FORBIDDEN_OPTIONS & set(options)):
        if options[name] is not None:
            raise invalid_schedule(
                f"options.{name} is not allowed: occurrence job ids derive from the schedule",
                f"options.{name}",
            )
    try:
        validator(task, args, options)
    except TayFailure as refusal:
        option = refusal.details.get("option") or refusal.details.get("field")
        if refusal.code == "capacity":  # insert size limits: the args make the job too big
            where = "args"
        else:
            where = f"options.{option}" if option else "options"
        raise invalid_schedule(f"{where}: {refusal.message}", where) from None
    return options


def parse_declaration(
    request: Mapping[str, Any], now_ms: int, *, new_id: Callable[[], str],
    options_validator: OptionsValidator = structural_options_check,
) -> Declaration:
    """Validate a ``schedule`` request (without envelope fields)."""
    unknown = sorted(set(request) - REQUEST_FIELDS)
    if unknown:
        raise invalid_schedule(f"unknown schedule fields {unknown}", unknown[0])
    raw_id = request.get("declaration_id")
    schedule_id = new_id() if raw_id is None else _identifier(raw_id, "declaration_id")
    task = _task(request.get("task"))
    args = request.get("args")
    args = {} if args is None else _json_object(args, "args")
    kind, expression, zone = _timing(request)
    catch_up = request.get("catch_up")
    catch_up = "latest" if catch_up is None else catch_up
    if catch_up not in CATCH_UPS:
        raise invalid_schedule(f"catch_up must be one of {list(CATCH_UPS)}", "catch_up")
    overlap = request.get("overlap")
    overlap = "skip" if overlap is None else overlap
    if overlap not in OVERLAPS:
        raise invalid_schedule(f"overlap must be one of {list(OVERLAPS)}", "overlap")
    definition = {
        "args": args, "catch_up": catch_up, "expression": expression, "kind": kind,
        "options": _options(request, task, args, options_validator), "overlap": overlap,
        "task": task, "timezone": zone,
    }
    validate_schedule_definition(definition)
    return Declaration(schedule_id, definition, _start(request, now_ms), raw_id is None)


def generated_schedule_id(randbelow: Callable[[int], int]) -> str:
    """A random 24-character id, for declarations without ``declaration_id``."""
    alphabet = GENERATED_ID_ALPHABET
    return "".join(alphabet[randbelow(len(alphabet))] for _ in range(GENERATED_ID_LENGTH))
