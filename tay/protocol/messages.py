"""Per-message field validation: a decoded, envelope-checked message becomes a typed
request (``tay.protocol.requests``) or a correlated ``RequestRefused``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tay.failures import RequestRefused

from .admin_api import SOCKET_TYPES, socket_request
from .envelope import is_identifier
from .requests import (
    CLIENT_MODES, Enqueue, Failed, Hello, JobRead, RegisterTasks, Request, ScheduleRequest,
    Started, Succeeded, UnregisterTasks,
)
from .values import encode_json

MAX_KEY_BYTES = 255
MAX_CONCURRENCY = 65_535
ENVELOPE_FIELDS = ("version", "v", "type", "request_id")
_SHORT_KEY = MAX_KEY_BYTES // 4  # four bytes per character at most: within the limit unencoded
_HEX = frozenset("0123456789abcdef")


def is_key(value: Any) -> bool:
    """Task and queue names: UTF-8 strings of 1..255 bytes without NUL."""
    if type(value) is not str or not value or "\x00" in value:
        return False
    # four bytes per character at most: a short name needs no encoding to be measured
    return len(value) <= MAX_KEY_BYTES // 4 or len(value.encode("utf-8")) <= MAX_KEY_BYTES


def is_job_id(value: Any) -> bool:
    """32 lowercase hex characters that are not all zero."""
    return (
        type(value) is str and len(value) == 32 and _HEX.issuperset(value)
        and value != "0" * 32
    )


def parse_hello(request_id: str, message: dict[str, Any]) -> Hello:
    mode = message.get("mode")
    if mode not in CLIENT_MODES:
        raise RequestRefused("mode must be client, embedded or worker",
                             code="invalid_hello", field="mode")
    runtime_id = message.get("runtime_id")
    if not is_identifier(runtime_id):
        raise RequestRefused("runtime_id must be a 1..128 byte identifier",
                             code="invalid_hello", field="runtime_id")
    capacity = message.get("max_concurrency", 0)
    if type(capacity) is not int or not 0 <= capacity <= MAX_CONCURRENCY:
        raise RequestRefused("max_concurrency must be an integer in 0..65535",
                             code="invalid_hello", field="max_concurrency")
    if (mode == "client") != (capacity == 0):
        raise RequestRefused("client mode needs max_concurrency 0; executors need 1..65535",
                             code="invalid_hello", field="max_concurrency")
    return Hello(request_id, mode, runtime_id, capacity)


def parse_tasks(message: dict[str, Any], max_tasks: int) -> tuple[str, ...]:
    tasks = message.get("tasks")
    if type(tasks) is not list or not 0 < len(tasks) <= max_tasks:
        raise RequestRefused(f"tasks must be a list of 1..{max_tasks} task keys",
                             code="invalid_tasks", field="tasks")
    for index, task in enumerate(tasks):
        if not is_key(task):
            raise RequestRefused("each task must be a 1..255 byte key without NUL",
                                 code="invalid_tasks", field=f"tasks[{index}]")
    if len(set(tasks)) != len(tasks):
        raise RequestRefused("tasks contain duplicates", code="invalid_tasks", field="tasks")
    return tuple(tasks)


def parse_enqueue(request_id: str, message: dict[str, Any], size: int = 0,
                  make: Callable[..., Any] = Enqueue) -> Any:
    """``make(request_id, task, args, options, size)``, an ``Enqueue`` by default."""
    task = message.get("task")
    # is_key, its common case inline: a short str without NUL (one call fewer per job)
    if not (type(task) is str and 0 < len(task) <= _SHORT_KEY and "\x00" not in task) \
            and not is_key(task):
        raise RequestRefused("task must be a 1..255 byte key without NUL",
                             code="invalid_enqueue", field="task")
    args = message.get("args")
    if type(args) is not dict:
        raise RequestRefused("args must be a JSON object", code="invalid_enqueue", field="args")
    options = message.get("options")
    if type(options) is not dict:
        # absent: no options (an empty dict made only then, not as every call's default)
        if options is not None or "options" in message:
            raise RequestRefused("options must be a JSON object",
                                 code="invalid_enqueue", field="options")
        options = {}
    return make(request_id, task, args, options, size)


def parse_job_read(kind: str, request_id: str, message: dict[str, Any]) -> JobRead:
    job_id = message.get("job_id")
    if not is_job_id(job_id):
        raise RequestRefused("job_id must be 32 lowercase hex characters, not all zero",
                             code="invalid_job_id", field="job_id")
    return JobRead(request_id, kind, job_id)


def execution_ids(message: dict[str, Any]) -> tuple[str, str]:
    reservation_id = message.get("reservation_id")
    if not is_identifier(reservation_id):
        raise RequestRefused("reservation_id must be a 1..128 byte identifier",
                             code="invalid_execution", field="reservation_id")
    execution_id = message.get("execution_id")
    if not is_identifier(execution_id):
        raise RequestRefused("execution_id must be a 1..128 byte identifier",
                             code="invalid_execution", field="execution_id")
    return reservation_id, execution_id


def parse_succeeded(request_id: str, message: dict[str, Any], result_bytes: int,
                    make: Callable[..., Any] = Succeeded) -> Any:
    """``make(request_id, reservation_id, execution_id, result)``: a ``Succeeded`` unless the
    caller builds its own report (see ``ProtocolSession``)."""
    reservation_id, execution_id = execution_ids(message)
    result = message.get("result")
    size = len(encode_json(result))
    if size > result_bytes:
        raise RequestRefused(f"result encodes to {size} bytes, limit {result_bytes}",
                             code="result_too_large", field="result")
    return make(request_id, reservation_id, execution_id, result)


def parse_failed(request_id: str, message: dict[str, Any], error_bytes: int,
                 make: Callable[..., Any] = Failed) -> Any:
    """Keep only ``type`` (<= 128 bytes), ``message`` and ``traceback`` (strings);
    ``make(request_id, reservation_id, execution_id, error)``, a ``Failed`` by default."""
    reservation_id, execution_id = execution_ids(message)
    error = message.get("error")
    if type(error) is not dict:
        raise RequestRefused("error must be an object", code="invalid_failure", field="error")
    kept: dict[str, str] = {}
    for name in ("type", "message", "traceback"):
        if name not in error:
            continue
        value = error[name]
        if type(value) is not str:
            raise RequestRefused(f"error.{name} must be a string",
                                 code="invalid_failure", field=f"error.{name}")
        if name == "type" and len(value.encode("utf-8")) > 128:
            raise RequestRefused("error.type exceeds 128 bytes",
                                 code="invalid_failure", field="error.type")
        kept[name] = value
    if not kept:
        raise RequestRefused("error needs type, message or traceback",
                             code="invalid_failure", field="error")
    size = len(encode_json(kept))
    if size > error_bytes:
        raise RequestRefused(f"error encodes to {size} bytes, limit {error_bytes}",
                             code="error_too_large", field="error")
    return make(request_id, reservation_id, execution_id, kept)


def schedule_body(message: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in message.items() if key not in ENVELOPE_FIELDS}


Parser = Callable[[str, dict[str, Any]], Request]


def build_parsers(max_tasks: int, result_bytes: int, error_bytes: int) -> dict[str, Parser]:
    """Parsers for every request that becomes a typed ``Request`` (after ``hello``)."""
    def started(rid: str, msg: dict[str, Any]) -> Started:
        return Started(rid, *execution_ids(msg))

    parsers: dict[str, Parser] = {
        "register_tasks": lambda rid, msg: RegisterTasks(rid, parse_tasks(msg, max_tasks)),
        "unregister_tasks": lambda rid, msg: UnregisterTasks(rid, parse_tasks(msg, max_tasks)),
        "enqueue": parse_enqueue,
        "started": started,
        "succeeded": lambda rid, msg: parse_succeeded(rid, msg, result_bytes),
        "failed": lambda rid, msg: parse_failed(rid, msg, error_bytes),
    }
    for kind in ("status", "result", "cancel"):
        parsers[kind] = lambda rid, msg, kind=kind: parse_job_read(kind, rid, msg)
    for kind in ("schedule", "cancel_schedule", "schedules", "schedule_status"):
        parsers[kind] = lambda rid, msg, kind=kind: ScheduleRequest(rid, kind, schedule_body(msg))
    for kind in SOCKET_TYPES:
        parsers[kind] = lambda rid, msg, kind=kind: socket_request(kind, rid, msg)
    return parsers
