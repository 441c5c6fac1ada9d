"""The commands the engine accepts: one small frozen class per request or connection event.

The protocol layer turns a validated envelope into one of these; the engine checks the
semantics (options, definitions, ids, pairing). ``conn`` is an opaque hashable handle chosen
by the server (a socket connection or an HTTP worker session / request); the engine only
hands it back inside effects. ``request_id`` is echoed in the reply; ``None`` means the
transport answers by itself (for example an HTTP worker registration).

They behave like ``@dataclass(frozen=True, slots=True)`` classes (positional or keyword
construction, field equality within one class, hashing, a field repr, ``match`` positional
patterns, assignment refused with ``FrozenInstanceError``) but are tuple subclasses written
out by hand: a tuple is built in one step, where a frozen class pays a guarded
``object.__setattr__`` per field (~0.8 us per enqueue command; three commands per job), and
fifteen generated dataclasses would cost ~8 ms of every ``tay serve`` start. A command is
never equal to a plain tuple or to another class's command with the same values.
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from operator import itemgetter
from typing import Any, Hashable

Conn = Hashable

MODES = ("client", "embedded", "worker")

_new = tuple.__new__
_tuple_eq = tuple.__eq__
_NEW_DICT: Any = object()  # default marker: a fresh {} per command (like default_factory)


class _Command(tuple):
    """Frozen value semantics over a tuple of the fields (``_fields``, in order)."""

    __slots__ = ()

    _fields: tuple[str, ...] = ()

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            # a plain tuple would otherwise compare equal through tuple's reflected __eq__
            return False if isinstance(other, tuple) else NotImplemented
        return _tuple_eq(self, other)

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = tuple.__hash__

    def __lt__(self, other: object) -> bool:  # no ordering, as a dataclass without order
        return NotImplemented

    __le__ = __gt__ = __ge__ = __lt__

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={value!r}" for name, value in zip(self._fields, self))
        return f"{type(self).__name__}({shown})"

    def __getnewargs__(self) -> tuple[Any, ...]:  # copy and pickle: __new__ takes the fields
        return tuple(self)

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __init_subclass__(cls) -> None:
        fields = cls.__dict__.get("_fields")
        if fields is not None:  # a class that declares fields gets one reader per field
            for index, name in enumerate(fields):
                setattr(cls, name, property(itemgetter(index)))
        cls.__match_args__ = cls._fields


class Connect(_Command):
    """A socket ``hello`` or an HTTP worker session (``queue`` set: bound to that queue)."""

    __slots__ = ()
    _fields = ("conn", "mode", "runtime_id", "capacity", "queue", "request_id")

    def __new__(cls, conn: Conn, mode: str, runtime_id: str, capacity: int,
                queue: str | None = None, request_id: str | None = None) -> Any:
        return _new(cls, (conn, mode, runtime_id, capacity, queue, request_id))


class Disconnect(_Command):
    """The connection or session is gone: its capacity vanishes, in-flight work is interrupted."""

    __slots__ = ()
    _fields = ("conn",)

    def __new__(cls, conn: Conn) -> Any:
        return _new(cls, (conn,))


class _Tasks(_Command):
    __slots__ = ()
    _fields = ("conn", "tasks", "request_id")

    def __new__(cls, conn: Conn, tasks: tuple[str, ...], request_id: str | None = None) -> Any:
        return _new(cls, (conn, tasks, request_id))


class RegisterTasks(_Tasks):
    __slots__ = ()


class UnregisterTasks(_Tasks):
    __slots__ = ()


class Enqueue(_Command):
    __slots__ = ()
    _fields = ("conn", "request_id", "task", "args", "options")

    def __new__(cls, conn: Conn, request_id: str | None, task: Any, args: Any,
                options: Any = _NEW_DICT) -> Any:
        return _new(cls, (conn, request_id, task, args, {} if options is _NEW_DICT else options))


class DecodedEnqueue(Enqueue):
    """An ``Enqueue`` whose args the server decoded from JSON text with ``orjson.loads``
    (``tay.protocol.values.decode_message``, for the socket and HTTP alike):
    dicts, lists, str, int within -2^63..2^64-1 (larger numbers decode as floats), finite
    floats, bools and None only. The engine measures such args in the native transcoder on
    their way to canonical bytes instead of walking them
    (tay.engine.validation.options.parse_enqueue); it is handled exactly as an ``Enqueue``
    with the same fields."""

    __slots__ = ()


class PlainEnqueue(DecodedEnqueue):
    """A ``DecodedEnqueue`` whose options the socket's frame scan read already
    (csrc/frames_check.c): ``options`` is ``(retries, queue, durability)``, each value one
    the option checks take as it is (None: a null or absent queue or durability). It is
    handled exactly as a ``DecodedEnqueue`` whose options are
    ``tay.engine.validation.options.plain_options(options)``, without reading them again.
    ``args`` may also be the args' JSON text as bytes when it is written exactly as
    ``orjson.dumps(args, option=OPT_SORT_KEYS)`` writes the object it decodes to
    (``tay._native.json_canonical`` said so): that object's command, with no decode and no
    encode of the text."""

    __slots__ = ()


class _JobRead(_Command):
    __slots__ = ()
    _fields = ("conn", "request_id", "job_id")

    def __new__(cls, conn: Conn, request_id: str | None, job_id: Any) -> Any:
        return _new(cls, (conn, request_id, job_id))


class Status(_JobRead):
    __slots__ = ()


class Result(_JobRead):
    __slots__ = ()


class Cancel(_JobRead):
    __slots__ = ()


class Started(_Command):
    """Informational: an executor began an execution (no durable effect)."""

    __slots__ = ()
    _fields = ("conn", "request_id", "reservation_id", "execution_id")

    def __new__(cls, conn: Conn, request_id: str | None, reservation_id: Any,
                execution_id: Any) -> Any:
        return _new(cls, (conn, request_id, reservation_id, execution_id))


class Succeeded(_Command):
    __slots__ = ()
    _fields = ("conn", "request_id", "reservation_id", "execution_id", "result")

    def __new__(cls, conn: Conn, request_id: str | None, reservation_id: Any,
                execution_id: Any, result: Any = None) -> Any:
        return _new(cls, (conn, request_id, reservation_id, execution_id, result))


class Failed(_Command):
    __slots__ = ()
    _fields = ("conn", "request_id", "reservation_id", "execution_id", "error")

    def __new__(cls, conn: Conn, request_id: str | None, reservation_id: Any,
                execution_id: Any, error: Any = None) -> Any:
        return _new(cls, (conn, request_id, reservation_id, execution_id, error))


class _ScheduleCommand(_Command):
    __slots__ = ()
    _fields = ("conn", "request_id", "body")

    def __new__(cls, conn: Conn, request_id: str | None, body: Any) -> Any:
        return _new(cls, (conn, request_id, body))


class Schedule(_ScheduleCommand):
    """Declare (or idempotently redeclare) a schedule; ``body`` is the request minus envelope."""

    __slots__ = ()


class CancelSchedule(_ScheduleCommand):
    """``body``: ``{"schedule_id": ...}``."""

    __slots__ = ()


class ListSchedules(_ScheduleCommand):
    """``body``: optional ``limit`` (1..100) and ``cursor`` (exclusive schedule id)."""

    __slots__ = ()

    def __new__(cls, conn: Conn, request_id: str | None, body: Any = _NEW_DICT) -> Any:
        return _new(cls, (conn, request_id, {} if body is _NEW_DICT else body))


class ScheduleStatus(_ScheduleCommand):
    """``body``: ``{"schedule_id": ...}``."""

    __slots__ = ()


class Admin(_Command):
    """An operations request (docs/admin.md): ``op`` names it (``jobs``, ``pause_queue``,
    ...), ``body`` holds its parameters as the transports received them."""

    __slots__ = ()
    _fields = ("conn", "request_id", "op", "body")

    def __new__(cls, conn: Conn, request_id: str | None, op: str, body: Any = _NEW_DICT) -> Any:
        return _new(cls, (conn, request_id, op, {} if body is _NEW_DICT else body))


Command = (
    Connect | Disconnect | RegisterTasks | UnregisterTasks | Enqueue | DecodedEnqueue
    | PlainEnqueue | Status | Result
    | Cancel | Started | Succeeded | Failed | Schedule | CancelSchedule | ListSchedules
    | ScheduleStatus | Admin
)
