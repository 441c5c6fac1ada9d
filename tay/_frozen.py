"""``Frozen`` and ``Record``: value classes that cost nothing to create at import.

A ``@dataclass`` compiles its generated methods (``__init__``, ``__repr__``, ``__eq__``,
``__hash__``, the frozen ``__setattr__``/``__delattr__``) with ``exec`` when its module is
imported: about 0.5 ms per class here, a third of ``tay serve``'s import time with the ~70
of them on that path. A ``Frozen`` subclass lists its fields in ``__slots__`` and writes
its ``__init__`` (assigning through ``object.__setattr__``); equality, hashing and repr
come from the fields, as a frozen dataclass's do, and assignment is refused with the same
``FrozenInstanceError``. Only for classes that need none of the other dataclass features
(``fields``, ``asdict``); ``replace`` below stands in for ``dataclasses.replace``.

``Record`` is the same for a mutable dataclass (``@dataclass`` without ``frozen``): fields
may be assigned, equality and repr come from the fields, and it is unhashable.

Three more things a ``tay serve`` start would otherwise pay for at import: ``Fields`` (a
``typing.NamedTuple`` without typing's per-field checks), ``LazyPattern`` (a regular
expression compiled at its first use) and ``LazyModule`` (a module imported at its first use).
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from collections import namedtuple
from typing import TYPE_CHECKING, Any

set_field = object.__setattr__  # what a Frozen __init__ assigns with


class Frozen:
    __slots__ = ()

    def _values(self) -> tuple:
        return tuple([getattr(self, name) for name in self.__slots__])

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self._values() == other._values()  # type: ignore[attr-defined]
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{type(self).__qualname__}({fields})"


class Record:
    __slots__ = ()
    __hash__ = None  # type: ignore[assignment]  # mutable and compared by value, as a dataclass

    def _values(self) -> tuple:
        return tuple([getattr(self, name) for name in self.__slots__])

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self._values() == other._values()  # type: ignore[attr-defined]
        return NotImplemented

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{type(self).__qualname__}({fields})"


def replace(obj: Any, **changes: Any) -> Any:
    """A copy of a ``Frozen`` or ``Record`` with ``changes``, as ``dataclasses.replace``: the
    class's ``__init__`` runs again (its checks too); it must take every field by name."""
    values = {name: getattr(obj, name) for name in obj.__slots__}
    unknown = changes.keys() - values.keys()
    if unknown:
        raise TypeError(f"{type(obj).__qualname__} has no field {sorted(unknown)[0]!r}")
    values.update(changes)
    return type(obj)(**values)


_namedtuple: Any = namedtuple  # called with computed names: not a type checker's literal form
_NOT_COPIED = frozenset({"__module__", "__annotations__"})  # namedtuple sets its own
_REFUSED = frozenset({"__new__", "__init__", "__slots__", "__getnewargs__", "_fields",
                      "_field_defaults", "_make", "_replace", "_asdict", "_source"})


class _TupleMeta(type):
    """Builds what ``class C(typing.NamedTuple)`` builds, without typing's check of each
    annotation: under ``from __future__ import annotations`` every annotation is a string,
    and ``typing`` compiles each into a ``ForwardRef`` (~20 us a field; ~60 fields on the
    ``tay serve`` path). The annotations stay as written (strings)."""

    def __new__(mcls, name: str, bases: tuple, namespace: dict[str, Any]) -> Any:
        if not bases:  # the ``Fields`` base itself
            return super().__new__(mcls, name, bases, namespace)
        annotations = namespace.get("__annotations__", {})
        names = list(annotations)
        defaults: list[Any] = []
        default_names: list[str] = []
        for field in names:
            if field in namespace:
                defaults.append(namespace[field])
                default_names.append(field)
            elif defaults:
                raise TypeError(f"Non-default namedtuple field {field} cannot follow default "
                                f"field{'s' if len(default_names) > 1 else ''} "
                                f"{', '.join(default_names)}")
        cls = _namedtuple(name, names, defaults=defaults, module=namespace["__module__"])
        cls.__annotations__ = dict(annotations)
        for key, value in namespace.items():
            if key in _REFUSED:
                raise AttributeError("Cannot overwrite NamedTuple attribute " + key)
            if key not in _NOT_COPIED and key not in names:
                setattr(cls, key, value)
        return cls


if TYPE_CHECKING:  # type checkers read the fields as typing's own named tuple
    from typing import NamedTuple as Fields
else:
    class Fields(metaclass=_TupleMeta):
        """Base of a named tuple written as ``class C(Fields)`` with annotated fields (and
        defaults, methods, a docstring): the class ``typing.NamedTuple`` would make."""


class LazyPattern:
    """A regular expression compiled at its first use, for the module constants a
    ``tay serve`` start never uses (cron fields, staging and legacy names: each
    ``re.compile`` is 0.1-0.5 ms at import); ``match`` and ``fullmatch`` are the
    compiled pattern's."""

    __slots__ = ("pattern", "_compiled")

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self._compiled: Any = None

    def _compile(self) -> Any:
        import re

        self._compiled = re.compile(self.pattern)
        return self._compiled

    def match(self, text: str) -> Any:
        return (self._compiled or self._compile()).match(text)

    def fullmatch(self, text: str) -> Any:
        return (self._compiled or self._compile()).fullmatch(text)


class LazyModule:
    """A module imported at its first attribute use: the named seam through which a module on
    the ``tay serve`` path reaches one that a default start (no schedules, no HTTP, no
    compaction, no inspection) never runs; each module costs 0.1-0.5 ms to import. Bind it
    under ``TYPE_CHECKING`` to the real module for type checkers::

        if TYPE_CHECKING:
            from tay.engine.schedules import timing as schedule_timing
        else:
            schedule_timing = LazyModule("tay.engine.schedules.timing")

    Each attribute is looked up in the module once and then kept on the proxy, so later
    uses are a plain attribute read."""

    def __init__(self, name: str) -> None:
        self.__name__ = name

    def __getattr__(self, attribute: str) -> Any:
        from importlib import import_module  # importlib is loaded by every start already

        found = getattr(import_module(self.__name__), attribute)
        setattr(self, attribute, found)
        return found

    def __repr__(self) -> str:
        return f"<LazyModule {self.__name__!r}>"
