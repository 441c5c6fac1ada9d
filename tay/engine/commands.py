"""The commands the engine accepts: one small frozen class per request or connection event.

The protocol layer turns a validated envelope into one of these; the engine checks the
semantics (options, definitions, ids, pairing). ``conn`` is an opaque hashable handle chosen
by the server (a socket connection or an HTTP worker session / request); the engine only
hands it back inside effects. ``request_id`` is echoed in the reply; ``None`` means the
transport answers by itself (for example an HTTP worker registration).

They behave like ``@dataclass(frozen=True, slots=True)`` classes (positional or keyword
construction, field equality within one class, hashing, a field repr, ``match`` positional
patterns) but are written out by hand: fifteen generated dataclasses cost ~8 ms of every
``tay serve`` start.
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from typing import Any, Hashable

Conn = Hashable

MODES = ("client", "embedded", "worker")

_set = object.__setattr__
_NEW_DICT: Any = object()  # default marker: a fresh {} per command (like default_factory)


class _Command:
    """Frozen value semantics over ``__slots__`` (the fields, in order)."""

    __slots__ = ()

    _fields: tuple[str, ...] = ()

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self._fields)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields)
        return f"{type(self).__name__}({shown})"

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __init_subclass__(cls) -> None:
        # the fields are the slots of the nearest class that declares any
        cls._fields = next(k.__dict__["__slots__"] for k in cls.__mro__ if k.__dict__.get("__slots__"))
        cls.__match_args__ = cls._fields


class Connect(_Command):
    """A socket ``hello`` or an HTTP worker session (``queue`` set: bound to that queue)."""

    __slots__ = ("conn", "mode", "runtime_id", "capacity", "queue", "request_id")

    def __init__(self, conn: Conn, mode: str, runtime_id: str, capacity: int,
                 queue: str | None = None, request_id: str | None = None) -> None:
        _set(self, "conn", conn)
        _set(self, "mode", mode)
        _set(self, "runtime_id", runtime_id)
        _set(self, "capacity", capacity)
        _set(self, "queue", queue)
        _set(self, "request_id", request_id)


class Disconnect(_Command):
    """The connection or session is gone: its capacity vanishes, in-flight work is interrupted."""

    __slots__ = ("conn",)

    def __init__(self, conn: Conn) -> None:
        _set(self, "conn", conn)


class _Tasks(_Command):
    __slots__ = ("conn", "tasks", "request_id")

    def __init__(self, conn: Conn, tasks: tuple[str, ...], request_id: str | None = None) -> None:
        _set(self, "conn", conn)
        _set(self, "tasks", tasks)
        _set(self, "request_id", request_id)


class RegisterTasks(_Tasks):
    __slots__ = ()


class UnregisterTasks(_Tasks):
    __slots__ = ()


class Enqueue(_Command):
    __slots__ = ("conn", "request_id", "task", "args", "options")

    def __init__(self, conn: Conn, request_id: str | None, task: Any, args: Any,
                 options: Any = _NEW_DICT) -> None:
        _set(self, "conn", conn)
        _set(self, "request_id", request_id)
        _set(self, "task", task)
        _set(self, "args", args)
        _set(self, "options", {} if options is _NEW_DICT else options)


class _JobRead(_Command):
    __slots__ = ("conn", "request_id", "job_id")

    def __init__(self, conn: Conn, request_id: str | None, job_id: Any) -> None:
        _set(self, "conn", conn)
        _set(self, "request_id", request_id)
        _set(self, "job_id", job_id)


class Status(_JobRead):
    __slots__ = ()


class Result(_JobRead):
    __slots__ = ()


class Cancel(_JobRead):
    __slots__ = ()


class Started(_Command):
    """Informational: an executor began an execution (no durable effect)."""

    __slots__ = ("conn", "request_id", "reservation_id", "execution_id")

    def __init__(self, conn: Conn, request_id: str | None, reservation_id: Any,
                 execution_id: Any) -> None:
        _set(self, "conn", conn)
        _set(self, "request_id", request_id)
        _set(self, "reservation_id", reservation_id)
        _set(self, "execution_id", execution_id)


class Succeeded(_Command):
    __slots__ = ("conn", "request_id", "reservation_id", "execution_id", "result")

    def __init__(self, conn: Conn, request_id: str | None, reservation_id: Any,
                 execution_id: Any, result: Any = None) -> None:
        _set(self, "conn", conn)
        _set(self, "request_id", request_id)
        _set(self, "reservation_id", reservation_id)
        _set(self, "execution_id", execution_id)
        _set(self, "result", result)


class Failed(_Command):
    __slots__ = ("conn", "request_id", "reservation_id", "execution_id", "error")

    def __init__(self, conn: Conn, request_id: str | None, reservation_id: Any,
                 execution_id: Any, error: Any = None) -> None:
        _set(self, "conn", conn)
        _set(self, "request_id", request_id)
        _set(self, "reservation_id", reservation_id)
        _set(self, "execution_id", execution_id)
        _set(self, "error", error)


class _ScheduleCommand(_Command):
    __slots__ = ("conn", "request_id", "body")

    def __init__(self, conn: Conn, request_id: str | None, body: Any) -> None:
        _set(self, "conn", conn)
        _set(self, "request_id", request_id)
        _set(self, "body", body)


class Schedule(_ScheduleCommand):
    """Declare (or idempotently redeclare) a schedule; ``body`` is the request minus envelope."""

    __slots__ = ()


class CancelSchedule(_ScheduleCommand):
    """``body``: ``{"schedule_id": ...}``."""

    __slots__ = ()


class ListSchedules(_ScheduleCommand):
    """``body``: optional ``limit`` (1..100) and ``cursor`` (exclusive schedule id)."""

    __slots__ = ()

    def __init__(self, conn: Conn, request_id: str | None, body: Any = _NEW_DICT) -> None:
        super().__init__(conn, request_id, {} if body is _NEW_DICT else body)


class ScheduleStatus(_ScheduleCommand):
    """``body``: ``{"schedule_id": ...}``."""

    __slots__ = ()


class Admin(_Command):
    """An operations request (docs/admin.md): ``op`` names it (``jobs``, ``pause_queue``,
    ...), ``body`` holds its parameters as the transports received them."""

    __slots__ = ("conn", "request_id", "op", "body")

    def __init__(self, conn: Conn, request_id: str | None, op: str, body: Any = _NEW_DICT) -> None:
        _set(self, "conn", conn)
        _set(self, "request_id", request_id)
        _set(self, "op", op)
        _set(self, "body", {} if body is _NEW_DICT else body)


Command = (
    Connect | Disconnect | RegisterTasks | UnregisterTasks | Enqueue | Status | Result
    | Cancel | Started | Succeeded | Failed | Schedule | CancelSchedule | ListSchedules
    | ScheduleStatus | Admin
)
