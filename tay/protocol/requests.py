"""Typed requests decoded from Executor Protocol v1 messages.

These are transport-neutral: the Unix-socket session builds them from frames and an HTTP
mapping can build the same objects, so one driver turns them into engine commands.
Field checks here are the wire-level ones (shapes, identifiers, sizes); job option rules
belong to the engine.
"""

from __future__ import annotations

from typing import Any

from tay._frozen import Frozen, set_field
from tay.protocol.admin_api import AdminRequest  # the operations API's one request type

CLIENT_MODES = ("client", "embedded", "worker")


class Hello(Frozen):
    __slots__ = ("request_id", "mode", "runtime_id", "max_concurrency")
    request_id: str
    mode: str
    runtime_id: str
    max_concurrency: int

    def __init__(self, request_id: str, mode: str, runtime_id: str, max_concurrency: int) -> None:
        set_field(self, "request_id", request_id)
        set_field(self, "mode", mode)
        set_field(self, "runtime_id", runtime_id)
        set_field(self, "max_concurrency", max_concurrency)


class RegisterTasks(Frozen):
    __slots__ = ("request_id", "tasks")
    request_id: str
    tasks: tuple[str, ...]

    def __init__(self, request_id: str, tasks: tuple[str, ...]) -> None:
        set_field(self, "request_id", request_id)
        set_field(self, "tasks", tasks)


class UnregisterTasks(Frozen):
    __slots__ = ("request_id", "tasks")
    request_id: str
    tasks: tuple[str, ...]

    def __init__(self, request_id: str, tasks: tuple[str, ...]) -> None:
        set_field(self, "request_id", request_id)
        set_field(self, "tasks", tasks)


class Enqueue(Frozen):
    __slots__ = ("request_id", "task", "args", "options", "size")
    request_id: str
    task: str
    args: dict[str, Any]
    options: dict[str, Any]
    size: int  # encoded request bytes, for client admission (--client-bytes)

    def __init__(self, request_id: str, task: str, args: dict[str, Any], options: dict[str, Any],
                 size: int = 0) -> None:
        set_field(self, "request_id", request_id)
        set_field(self, "task", task)
        set_field(self, "args", args)
        set_field(self, "options", options)
        set_field(self, "size", size)


class JobRead(Frozen):
    """``status``, ``result`` or ``cancel`` of one job (``kind`` says which)."""

    __slots__ = ("request_id", "kind", "job_id")
    request_id: str
    kind: str
    job_id: str

    def __init__(self, request_id: str, kind: str, job_id: str) -> None:
        set_field(self, "request_id", request_id)
        set_field(self, "kind", kind)
        set_field(self, "job_id", job_id)


class Started(Frozen):
    __slots__ = ("request_id", "reservation_id", "execution_id")
    request_id: str
    reservation_id: str
    execution_id: str

    def __init__(self, request_id: str, reservation_id: str, execution_id: str) -> None:
        set_field(self, "request_id", request_id)
        set_field(self, "reservation_id", reservation_id)
        set_field(self, "execution_id", execution_id)


class Succeeded(Frozen):
    __slots__ = ("request_id", "reservation_id", "execution_id", "result")
    request_id: str
    reservation_id: str
    execution_id: str
    result: Any

    def __init__(self, request_id: str, reservation_id: str, execution_id: str,
                 result: Any) -> None:
        set_field(self, "request_id", request_id)
        set_field(self, "reservation_id", reservation_id)
        set_field(self, "execution_id", execution_id)
        set_field(self, "result", result)


class Failed(Frozen):
    __slots__ = ("request_id", "reservation_id", "execution_id", "error")
    request_id: str
    reservation_id: str
    execution_id: str
    error: dict[str, Any]

    def __init__(self, request_id: str, reservation_id: str, execution_id: str,
                 error: dict[str, Any]) -> None:
        set_field(self, "request_id", request_id)
        set_field(self, "reservation_id", reservation_id)
        set_field(self, "execution_id", execution_id)
        set_field(self, "error", error)


class ScheduleRequest(Frozen):
    """``schedule``, ``cancel_schedule``, ``schedules`` or ``schedule_status``: the body is
    passed on untouched because schedule rules live with the engine's schedules."""

    __slots__ = ("request_id", "kind", "body")
    request_id: str
    kind: str
    body: dict[str, Any]

    def __init__(self, request_id: str, kind: str, body: dict[str, Any]) -> None:
        set_field(self, "request_id", request_id)
        set_field(self, "kind", kind)
        set_field(self, "body", body)


ExecutionReport = Started | Succeeded | Failed
Request = (
    Hello | RegisterTasks | UnregisterTasks | Enqueue | JobRead | ExecutionReport | ScheduleRequest
    | AdminRequest
)

# Requests answered by the engine after durability: they count against the pending limit.
FORWARDED = (Enqueue, JobRead, ScheduleRequest, AdminRequest)
