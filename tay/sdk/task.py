"""``Task``: a registered callable that runs locally when called and remotely via ``enqueue``.

Arguments travel as one JSON object keyed by parameter name, so a worker can rebuild the
call from the function's signature: ``*args`` travels as a list and ``**kwargs`` as an
object under their parameter names.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from functools import update_wrapper
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, Protocol, TypeVar, cast, overload

from tay.errors import ModeError, TaskRegistrationError, ValidationError
from tay.sdk.options import Durability, TaskConfig
from tay.sdk.wire import normalize_json, validate_task_name

if TYPE_CHECKING:  # pragma: no cover
    from tay.sdk.handles import HTTPJobHandle, JobHandle, ScheduleHandle

__all__ = ["Durability", "Task", "TaskCall", "TaskConfig", "TaskDecorator", "call_parts", "default_task_name",
           "register_task"]

P = ParamSpec("P")
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)


@dataclass(frozen=True)
class TaskCall(Generic[R_co]):
    """One call of a task, bound and encoded but not sent: ``task.bind(2, 5)``.

    Any producer enqueues it (``await tay.enqueue(call, submission_id=...)``,
    ``SyncTay.enqueue(call)``) and the job handle it returns is typed by the task's result.
    ``options`` are the task's declared defaults (``@tay.task(retries=...)``).
    """

    task: str
    args: dict[str, Any]
    options: dict[str, Any] = field(default_factory=dict)


class TaskDecorator(Protocol):
    """What ``@tay.task(name=...)`` returns: it turns a function into a typed ``Task``."""

    @overload
    def __call__(self, function: Callable[P, Awaitable[R]], /) -> Task[P, R]: ...
    @overload
    def __call__(self, function: Callable[P, R], /) -> Task[P, R]: ...


# Keywords of ``Task.enqueue`` that are submission options, unless the function itself
# has a parameter of that name (then it is an argument; use options={...} instead).
ENQUEUE_OPTION_NAMES = frozenset(
    {"delay", "run_at", "retries", "backoff", "submission_id", "priority", "queue", "timeout", "durability"}
)


def call_parts(task: Any, args: Any, options: Any, keywords: Mapping[str, Any], durability: Any,
               name_of: Callable[[Any], str]) -> tuple[str, Any, Any]:
    """``(task name, args, options)`` for ``enqueue(task_or_call, args, options=...)``.

    A ``TaskCall`` carries its arguments and its task's default options; options given to
    ``enqueue`` (as ``options=``, keywords or ``durability=``) win over those defaults.
    """
    if not isinstance(task, TaskCall):
        return name_of(task), args, options
    if args is not None:
        raise ValidationError("a bound call (task.bind(...)) carries its arguments; pass no args")
    if options is not None and not isinstance(options, Mapping):
        return task.task, task.args, options  # refused by merge_enqueue_options, by name
    given = {*(options or {}), *keywords, *(("durability",) if durability is not None else ())}
    defaults = {key: value for key, value in task.options.items() if key not in given}
    return task.task, task.args, {**defaults, **(options or {})}


def default_task_name(function: Callable[..., Any]) -> str:
    """``<module>.<name>``: the stable key tay-client 1.4.0 derives for a function."""
    return f"{function.__module__}.{function.__name__}"


def register_task(owner: Any, registry: dict[str, Task[Any, Any]], candidate: Callable[..., Any], *,
                  name: str | None, config: TaskConfig) -> tuple[Task[Any, Any], bool]:
    """Add ``candidate`` to ``registry``; returns the task and whether it is new.

    Registering the same function again under its name is a no-op (module reloads,
    repeated decorators); another function under a taken name is refused.
    """
    if not callable(candidate):
        raise TaskRegistrationError(f"only callables can be tasks, got {type(candidate).__name__}")
    task_name = validate_task_name(name or default_task_name(candidate))
    existing = registry.get(task_name)
    if existing is not None:
        if existing.function is candidate:
            return existing, False
        raise TaskRegistrationError(
            f"task name {task_name!r} is already registered to {existing.function!r}; "
            "pass name=... to register this function under another name"
        )
    task: Task[Any, Any] = Task(owner, candidate, name=task_name, config=config)
    registry[task_name] = task
    return task, True


class Task(Generic[P, R]):
    """A registered Python callable with a stable task name.

    Generic over the function's parameters ``P`` and its result ``R`` (an ``async def``
    returning ``R`` gives ``Task[P, R]`` too): ``enqueue`` and ``bind`` take exactly the
    function's arguments, and the job handle's ``result()`` is typed ``R``.
    """

    def __init__(self, tay: Any, function: Callable[..., Any], *, name: str, config: TaskConfig) -> None:
        self.tay = tay
        self.function = function
        self.name = validate_task_name(name)
        self.config = config
        self.signature: inspect.Signature | None
        try:
            self.signature = inspect.signature(function)
        except (TypeError, ValueError):
            self.signature = None
        update_wrapper(self, function)  # keep __name__, __doc__, __wrapped__ like a decorator
        self._is_async = inspect.iscoroutinefunction(function)
        # Parameter names when every parameter may be passed by keyword (no positional-only,
        # no *args/**kwargs): then an argument object holding only such names is the call.
        self._keyword_names: frozenset[str] | None = None
        if self.signature is not None and all(
                parameter.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
                for parameter in self.signature.parameters.values()):
            self._keyword_names = frozenset(self.signature.parameters)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Any:
        """Run the function here and now; nothing is sent to Tay."""
        return self.function(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Task(name={self.name!r}, function={self.function!r})"

    @property
    def is_async(self) -> bool:
        return self._is_async

    # -- producing ---------------------------------------------------------------------

    async def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle[R] | HTTPJobHandle[R]:
        """Submit one job of this task with these call arguments; returns its handle.

        For job options use ``tay.enqueue(task.bind(...), submission_id=..., delay=...)``.
        (Option keywords mixed into the call, as tay-client allows, still work at run time,
        but type checkers only accept the function's own parameters here.)
        """
        task_kwargs, options = self._split_options(kwargs)
        options = {**self.config.execution_options(), **options}
        handle = await self.tay.enqueue(self.name, self.arguments(args, task_kwargs), options=options)
        return cast("JobHandle[R] | HTTPJobHandle[R]", handle)

    def bind(self, *args: P.args, **kwargs: P.kwargs) -> TaskCall[R]:
        """This call, checked against the signature and encoded, ready for any producer."""
        return TaskCall(self.name, self.arguments(args, kwargs), self.config.execution_options())

    def _split_options(self, kwargs: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        task_kwargs = dict(kwargs)
        explicit = task_kwargs.pop("options", None)
        if explicit is not None and not isinstance(explicit, Mapping):
            raise ValidationError(f"options must be a mapping, got {type(explicit).__name__}")
        options = dict(explicit or {})
        parameters = self.signature.parameters if self.signature is not None else {}
        for key in [key for key in task_kwargs if key in ENQUEUE_OPTION_NAMES and key not in parameters]:
            options[key] = task_kwargs.pop(key)
        return task_kwargs, options

    def arguments(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The JSON argument object for a call with ``args``/``kwargs`` (defaults applied)."""
        if self.signature is None:
            if args:
                raise ValidationError(
                    f"task {self.name!r} has no inspectable signature; pass keyword arguments only"
                )
            return normalize_json(dict(kwargs))
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise ValidationError(f"invalid arguments for task {self.name!r}: {exc}") from exc
        bound.apply_defaults()
        out: dict[str, Any] = {}
        for name, value in bound.arguments.items():
            kind = self.signature.parameters[name].kind
            if kind is inspect.Parameter.VAR_POSITIONAL:
                value = list(value)
            elif kind is inspect.Parameter.VAR_KEYWORD:
                value = dict(value)
            out[name] = value
        return normalize_json(out)

    # -- executing ---------------------------------------------------------------------

    def call_with(self, arguments: Any) -> Any:
        """Call the function from a received argument object (the inverse of ``arguments``)."""
        if type(arguments) is dict and self._keyword_names is not None and arguments.keys() <= self._keyword_names:
            return self.function(**arguments)  # what the loop below would build
        if not isinstance(arguments, Mapping):
            raise ValidationError(f"task {self.name!r}: execution args must be a JSON object")
        if self.signature is None:
            return self.function(**arguments)
        positional: list[Any] = []
        keywords: dict[str, Any] = {}
        in_order = True  # parameters before *args go positionally while none is missing
        for parameter in self.signature.parameters.values():
            kind = parameter.kind
            if parameter.name not in arguments:
                in_order = in_order and kind not in (inspect.Parameter.POSITIONAL_ONLY,
                                                     inspect.Parameter.POSITIONAL_OR_KEYWORD)
                continue
            value = arguments[parameter.name]
            if kind is inspect.Parameter.POSITIONAL_ONLY or (kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and in_order):
                positional.append(value)
            elif kind is inspect.Parameter.VAR_POSITIONAL:
                if not isinstance(value, list):
                    raise ValidationError(f"task {self.name!r}: *{parameter.name} must arrive as a list")
                if value and not in_order:
                    raise ValidationError(f"task {self.name!r}: *{parameter.name} given but an earlier argument is missing")
                positional.extend(value)
            elif kind is inspect.Parameter.VAR_KEYWORD:
                if not isinstance(value, Mapping):
                    raise ValidationError(f"task {self.name!r}: **{parameter.name} must arrive as an object")
                keywords.update(value)
            else:
                keywords[parameter.name] = value
        return self.function(*positional, **keywords)

    # Name kept for code written against tay-client's private helper.
    _call_from_arguments = call_with

    # -- schedules ---------------------------------------------------------------------

    async def schedule(
        self,
        *,
        cron: str,
        kwargs: Mapping[str, Any] | None = None,
        timezone: str = "+00",
        catch_up: str = "latest",
        overlap: str | None = None,
        delay: float | None = None,
        start_at: int | None = None,
        **options: Any,
    ) -> ScheduleHandle:
        """Create or update a cron schedule of this task."""
        return await self._scheduler("schedule").schedule(
            self, cron=cron, kwargs=kwargs, timezone=timezone, catch_up=catch_up,
            overlap=overlap, delay=delay, start_at=start_at, **options,
        )

    async def every(
        self,
        *,
        seconds: float | None = None,
        minutes: float | None = None,
        hours: float | None = None,
        days: float | None = None,
        kwargs: Mapping[str, Any] | None = None,
        catch_up: str = "latest",
        overlap: str | None = None,
        delay: float | None = None,
        start_at: int | None = None,
        **options: Any,
    ) -> ScheduleHandle:
        """Create or update an interval schedule of this task (exactly one unit)."""
        return await self._scheduler("every").every(
            self, seconds=seconds, minutes=minutes, hours=hours, days=days, kwargs=kwargs,
            catch_up=catch_up, overlap=overlap, delay=delay, start_at=start_at, **options,
        )

    def _scheduler(self, operation: str) -> Any:
        if not hasattr(self.tay, operation):
            raise ModeError(f"{type(self.tay).__name__} cannot create schedules")
        return self.tay

    def static_schedule_declaration(self) -> dict[str, Any] | None:
        """The schedule declared by ``@tay.task(cron=...|every=...)``, replayed on connect.

        Without an explicit ``declaration_id`` the id is ``python:<task>:<24 hex>``, a
        SHA-256 of the declaration's canonical JSON, so every process (and tay-client
        1.4.0) derives the same id for the same declaration.
        """
        if not self.config.has_schedule:
            return None
        declaration: dict[str, Any] = {"task": self.name, "args": {}, "options": self.config.execution_options()}
        if self.config.cron is not None:
            declaration["cron"] = self.config.cron
        if self.config.every is not None:
            declaration["every"] = dict(self.config.every)
        if self.config.overlap is not None:
            declaration["overlap"] = self.config.overlap
        declaration_id = self.config.declaration_id
        if declaration_id is None:
            canonical = json.dumps(declaration, sort_keys=True, separators=(",", ":"))
            declaration_id = f"python:{self.name}:{hashlib.sha256(canonical.encode()).hexdigest()[:24]}"
        declaration["declaration_id"] = declaration_id
        return normalize_json(declaration)
