"""Typed requests decoded from Executor Protocol v1 messages.

These are transport-neutral: the Unix-socket session builds them from frames and an HTTP
mapping can build the same objects, so one driver turns them into engine commands.
Field checks here are the wire-level ones (shapes, identifiers, sizes); job option rules
belong to the engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tay.protocol.admin_api import AdminRequest  # the operations API's one request type

CLIENT_MODES = ("client", "embedded", "worker")


@dataclass(frozen=True, slots=True)
class Hello:
    request_id: str
    mode: str
    runtime_id: str
    max_concurrency: int


@dataclass(frozen=True, slots=True)
class RegisterTasks:
    request_id: str
    tasks: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class UnregisterTasks:
    request_id: str
    tasks: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Enqueue:
    request_id: str
    task: str
    args: dict[str, Any]
    options: dict[str, Any]
    size: int = 0  # encoded request bytes, for client admission (--client-bytes)


@dataclass(frozen=True, slots=True)
class JobRead:
    """``status``, ``result`` or ``cancel`` of one job (``kind`` says which)."""

    request_id: str
    kind: str
    job_id: str


@dataclass(frozen=True, slots=True)
class Started:
    request_id: str
    reservation_id: str
    execution_id: str


@dataclass(frozen=True, slots=True)
class Succeeded:
    request_id: str
    reservation_id: str
    execution_id: str
    result: Any


@dataclass(frozen=True, slots=True)
class Failed:
    request_id: str
    reservation_id: str
    execution_id: str
    error: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ScheduleRequest:
    """``schedule``, ``cancel_schedule``, ``schedules`` or ``schedule_status``: the body is
    passed on untouched because schedule rules live with the engine's schedules."""

    request_id: str
    kind: str
    body: dict[str, Any]


ExecutionReport = Started | Succeeded | Failed
Request = (
    Hello | RegisterTasks | UnregisterTasks | Enqueue | JobRead | ExecutionReport | ScheduleRequest
    | AdminRequest
)

# Requests answered by the engine after durability: they count against the pending limit.
FORWARDED = (Enqueue, JobRead, ScheduleRequest, AdminRequest)
