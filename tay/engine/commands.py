"""The commands the engine accepts: one frozen dataclass per request or connection event.

The protocol layer turns a validated envelope into one of these; the engine checks the
semantics (options, definitions, ids, pairing). ``conn`` is an opaque hashable handle chosen
by the server (a socket connection or an HTTP worker session / request); the engine only
hands it back inside effects. ``request_id`` is echoed in the reply; ``None`` means the
transport answers by itself (for example an HTTP worker registration).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Hashable

Conn = Hashable

MODES = ("client", "embedded", "worker")


@dataclass(frozen=True, slots=True)
class Connect:
    """A socket ``hello`` or an HTTP worker session (``queue`` set: bound to that queue)."""

    conn: Conn
    mode: str
    runtime_id: str
    capacity: int
    queue: str | None = None
    request_id: str | None = None


@dataclass(frozen=True, slots=True)
class Disconnect:
    """The connection or session is gone: its capacity vanishes, in-flight work is interrupted."""

    conn: Conn


@dataclass(frozen=True, slots=True)
class RegisterTasks:
    conn: Conn
    tasks: tuple[str, ...]
    request_id: str | None = None


@dataclass(frozen=True, slots=True)
class UnregisterTasks:
    conn: Conn
    tasks: tuple[str, ...]
    request_id: str | None = None


@dataclass(frozen=True, slots=True)
class Enqueue:
    conn: Conn
    request_id: str | None
    task: Any
    args: Any
    options: Any = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Status:
    conn: Conn
    request_id: str | None
    job_id: Any


@dataclass(frozen=True, slots=True)
class Result:
    conn: Conn
    request_id: str | None
    job_id: Any


@dataclass(frozen=True, slots=True)
class Cancel:
    conn: Conn
    request_id: str | None
    job_id: Any


@dataclass(frozen=True, slots=True)
class Started:
    """Informational: an executor began an execution (no durable effect)."""

    conn: Conn
    request_id: str | None
    reservation_id: Any
    execution_id: Any


@dataclass(frozen=True, slots=True)
class Succeeded:
    conn: Conn
    request_id: str | None
    reservation_id: Any
    execution_id: Any
    result: Any = None


@dataclass(frozen=True, slots=True)
class Failed:
    conn: Conn
    request_id: str | None
    reservation_id: Any
    execution_id: Any
    error: Any = None


@dataclass(frozen=True, slots=True)
class Schedule:
    """Declare (or idempotently redeclare) a schedule; ``body`` is the request minus envelope."""

    conn: Conn
    request_id: str | None
    body: Any


@dataclass(frozen=True, slots=True)
class CancelSchedule:
    """``body``: ``{"schedule_id": ...}``."""

    conn: Conn
    request_id: str | None
    body: Any


@dataclass(frozen=True, slots=True)
class ListSchedules:
    """``body``: optional ``limit`` (1..100) and ``cursor`` (exclusive schedule id)."""

    conn: Conn
    request_id: str | None
    body: Any = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ScheduleStatus:
    """``body``: ``{"schedule_id": ...}``."""

    conn: Conn
    request_id: str | None
    body: Any


Command = (
    Connect | Disconnect | RegisterTasks | UnregisterTasks | Enqueue | Status | Result
    | Cancel | Started | Succeeded | Failed | Schedule | CancelSchedule | ListSchedules
    | ScheduleStatus
)
