"""Validation of task, enqueue and schedule options, shared by both transports.

Every check runs before anything is sent, and each message names the option and the
accepted values so the caller can fix the call.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias, TypedDict

from tay.errors import ValidationError
from tay.sdk.wire import normalize_json

Durability: TypeAlias = Literal["persistent", "volatile"]

Backoff: TypeAlias = Literal["exponential"]


class EnqueueOptions(TypedDict, total=False):
    """The job options of protocol v1 ``enqueue`` (docs/sdk.md "Job options").

    ``retries`` (0..65,534, default 0) re-runs a failed or timed-out attempt after the
    exponential backoff (1 s doubling to a 60 s cap, plus up to a quarter of jitter), the
    only retry curve protocol v1 has (``backoff="exponential"``). ``timeout`` (seconds) or
    ``timeout_ms`` bounds one attempt (default 30 s). ``delay``/``delay_ms`` or ``run_at``
    (Unix ms) defer the first attempt. ``submission_id`` (or an explicit 32-hex ``id``)
    makes a retried enqueue reconcile to the same job. ``durability`` is its own keyword.
    """

    id: str
    submission_id: str
    delay: float
    delay_ms: int
    run_at: int
    retries: int
    timeout: float
    timeout_ms: int
    backoff: Backoff
    queue: str


DURABILITY_MODES = ("persistent", "volatile")
BACKOFF_MODES = ("exponential",)
OVERLAP_POLICIES = ("allow", "queue", "skip")
CATCH_UP_POLICIES = ("all", "latest")
EVERY_UNITS = ("seconds", "minutes", "hours", "days")
MAX_CRON_BYTES = 256
MAX_DECLARATION_ID_BYTES = 255
_TIMEZONE = re.compile(r"(?:UTC|Z|[+-](?:[01]\d|2[0-3])(?::[0-5]\d)?)")


@dataclass(frozen=True)
class TaskConfig:
    """What ``@tay.task(...)`` declared besides the name."""

    retries: int | None = None
    backoff: str | Mapping[str, Any] | None = None
    durability: Durability | None = None
    cron: str | None = None
    every: Mapping[str, Any] | None = None
    overlap: str | None = None
    declaration_id: str | None = None

    def execution_options(self) -> dict[str, Any]:
        """The enqueue options every job of this task carries by default."""
        pairs = (("retries", self.retries), ("backoff", self.backoff), ("durability", self.durability))
        return {key: value for key, value in pairs if value is not None}

    @property
    def has_schedule(self) -> bool:
        return self.cron is not None or self.every is not None


def _one_of(name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value is not None and value not in allowed:
        raise ValidationError(f"{name} must be one of {list(allowed)}, got {value!r}")


def check_retries(value: Any, *, upper: int | None = None) -> None:
    if value is None:
        return
    if type(value) is not int or value < 0 or (upper is not None and value > upper):
        bound = f"an integer in 0..{upper}" if upper is not None else "a non-negative integer"
        raise ValidationError(f"retries must be {bound}, got {value!r}")


def check_backoff(value: Any) -> None:
    if value is not None and value not in BACKOFF_MODES:
        raise ValidationError(f"backoff must be 'exponential' (the only retry curve of protocol v1), got {value!r}")


def check_durability(value: Any) -> None:
    _one_of("durability", value, DURABILITY_MODES)


def check_cron(value: Any) -> None:
    if type(value) is not str or not value.strip() or len(value.encode("utf-8")) > MAX_CRON_BYTES:
        raise ValidationError(f"cron must be a non-empty string of at most {MAX_CRON_BYTES} bytes, got {value!r}")


def check_declaration_id(value: Any) -> None:
    if value is None:
        return
    if type(value) is not str or not value:
        raise ValidationError(f"declaration_id must be a non-empty string, got {value!r}")
    if len(value.encode("utf-8")) > MAX_DECLARATION_ID_BYTES:
        raise ValidationError(f"declaration_id is longer than {MAX_DECLARATION_ID_BYTES} bytes")


def every_mapping(value: Any) -> dict[str, int | float]:
    """``{"minutes": 4}``-style interval: exactly one positive, finite unit."""
    if not isinstance(value, Mapping):
        raise ValidationError(f"every must be a mapping such as {{'minutes': 4}}, got {value!r}")
    unknown = set(value) - set(EVERY_UNITS)
    if unknown:
        raise ValidationError(f"every accepts only {list(EVERY_UNITS)}, not {sorted(map(str, unknown))}")
    present = [(unit, amount) for unit, amount in value.items() if amount is not None]
    if len(present) != 1:
        raise ValidationError("every needs exactly one time unit, e.g. every(minutes=5)")
    unit, amount = present[0]
    if type(amount) not in (int, float) or not amount > 0 or not math.isfinite(amount):
        raise ValidationError(f"every.{unit} must be a positive finite number, got {amount!r}")
    return {unit: amount}


def task_config(**raw: Any) -> TaskConfig:
    """Validate the keyword options of ``@tay.task(...)``."""
    check_retries(raw["retries"])
    check_backoff(raw["backoff"])
    check_durability(raw["durability"])
    cron, every = raw["cron"], raw["every"]
    if cron is not None and every is not None:
        raise ValidationError("a task declares either cron or every, not both")
    if cron is not None:
        check_cron(cron)
    if every is not None:
        every = every_mapping(every)
    _one_of("overlap", raw["overlap"], OVERLAP_POLICIES)
    check_declaration_id(raw["declaration_id"])
    return TaskConfig(**{**raw, "every": every})


def schedule_options(
    *,
    declaration_id: Any,
    timezone: Any,
    catch_up: Any,
    overlap: Any,
    delay: Any,
    start_at: Any,
) -> None:
    """The options shared by ``schedule`` and ``every``."""
    check_declaration_id(declaration_id)
    if type(timezone) is not str or not _TIMEZONE.fullmatch(timezone):
        raise ValidationError(f"timezone must be UTC, Z or an offset such as +01 or -02:30, got {timezone!r}")
    _one_of("catch_up", catch_up, CATCH_UP_POLICIES)
    if catch_up is None:
        raise ValidationError("catch_up must be 'latest' or 'all'")
    _one_of("overlap", overlap, OVERLAP_POLICIES)
    if delay is not None and (type(delay) not in (int, float) or not math.isfinite(delay) or delay < 0):
        raise ValidationError(f"delay must be a finite non-negative number of seconds, got {delay!r}")
    if start_at is not None and (type(start_at) is not int or start_at < 0):
        raise ValidationError(f"start_at must be a non-negative UTC millisecond timestamp, got {start_at!r}")
    if delay is not None and start_at is not None:
        raise ValidationError("pass either delay or start_at, not both")


def merge_enqueue_options(
    options: Any, durability: Any, keywords: Mapping[str, Any]
) -> dict[str, Any]:
    """One options object from ``options=``, ``durability=`` and extra keywords."""
    if options is None:  # the common call: keywords only, one copy
        merged = dict(keywords)
    else:
        if not isinstance(options, Mapping):
            raise ValidationError(f"enqueue options must be a mapping, got {type(options).__name__}")
        merged = dict(options)
        if merged and keywords:
            twice = sorted(merged.keys() & keywords.keys())
            if twice:
                raise ValidationError(f"enqueue option supplied twice: {twice[0]}")
        merged.update(keywords)
    if durability is not None:
        if "durability" in merged:
            raise ValidationError("enqueue option supplied twice: durability")
        merged["durability"] = durability
    if "backoff" in merged:  # an absent option needs no check (both accept None)
        check_backoff(merged["backoff"])
    if "durability" in merged:
        check_durability(merged["durability"])
    return merged


def enqueue_args(args: Any) -> Mapping[str, Any]:
    if args is None:
        return {}
    if type(args) is not dict and not isinstance(args, Mapping):
        raise ValidationError(f"enqueue args must be a JSON object (a mapping), got {type(args).__name__}")
    return args


def schedule_payload(
    task_name: str, kwargs: Any, args: Any, declaration_id: Any, timezone: Any, catch_up: Any,
    overlap: Any, delay: Any, start_at: Any, options: Mapping[str, Any], timing: dict[str, Any],
) -> dict[str, Any]:
    """The ``schedule`` request body shared by cron and interval declarations."""
    if kwargs is not None and args is not None:
        raise ValidationError("pass either kwargs or args to a schedule, not both")
    schedule_options(declaration_id=declaration_id, timezone=timezone, catch_up=catch_up,
                          overlap=overlap, delay=delay, start_at=start_at)
    payload: dict[str, Any] = {"task": task_name, "args": normalize_json(enqueue_args(kwargs if kwargs is not None else args)),
                               **timing, "catch_up": catch_up, "options": normalize_json(dict(options))}
    optional = {"declaration_id": declaration_id, "overlap": overlap, "delay": delay, "start_at": start_at}
    payload.update({key: value for key, value in optional.items() if value is not None})
    return payload
