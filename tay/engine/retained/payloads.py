"""Read-only payloads of the fused commits' events, each held as one tuple of values.

A fused commit (tay.engine.epoch) makes four events per job. The journal writes their
``raw`` bytes; their payloads are read only in process (tests, a caller that inspects an
``Outcome``). A ``dict`` wrapped in a ``MappingProxyType`` per event was ~3 % of the
engine's instructions per job (callgrind ``benchmarks.engine_path``); a payload here is
the values in one tuple, the keys held once by its class, and it reads as the proxy it
replaces does: ``[]``, ``get``, ``in``, iteration, ``keys``/``items``/``values`` in the same
(canonical) order, ``len``, equality with any mapping, unhashable, no assignment.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Iterator



class FieldsPayload(Mapping):
    """A read-only mapping of ``KEYS`` (canonical order) to ``values``, one per key."""

    __slots__ = ("fields",)  # the values, in KEYS order (set once, right after __new__)
    KEYS: tuple[str, ...] = ()
    _INDEX: dict[str, int] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        assert list(cls.KEYS) == sorted(cls.KEYS), "canonical (code point) key order"
        cls._INDEX = {key: index for index, key in enumerate(cls.KEYS)}

    def __getitem__(self, key: str) -> Any:
        return self.fields[self._INDEX[key]]  # an unknown key: KeyError(key), as a dict

    def __contains__(self, key: object) -> bool:
        return key in self._INDEX

    def __iter__(self) -> Iterator[str]:
        return iter(self.KEYS)

    def __len__(self) -> int:
        return len(self.KEYS)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict(zip(self.KEYS, self.fields))!r})"

    def copy(self) -> dict[str, Any]:
        """A dict of the same items (as ``MappingProxyType.copy`` of a dict gives)."""
        return dict(zip(self.KEYS, self.fields))


def fields_payload(kind: type[FieldsPayload], values: tuple) -> FieldsPayload:
    """A ``kind`` payload of ``values`` (in ``kind.KEYS`` order): ``kind()`` (the type's
    own call: no Python ``__init__``, and cheaper than ``object.__new__(kind)``, which goes
    through the ``__new__`` wrapper) and one slot store (the fused commits write these two
    steps inline)."""
    payload = kind()
    payload.fields = values
    return payload


class InsertedPayload(FieldsPayload):
    """A ``job_inserted`` (1,1) payload."""

    __slots__ = ()
    KEYS = ("at", "definition", "eligible_at", "expected_revision", "job_id")


class StartedPayload(FieldsPayload):
    """A ``job_started`` (3,1) payload."""

    __slots__ = ()
    KEYS = ("at", "attempt", "cycle_token", "expected_revision", "job_id")


class FinishedPayload(FieldsPayload):
    """A ``job_finished`` (4,1) payload."""

    __slots__ = ()
    KEYS = ("at", "diagnostic", "disposition", "execution_token", "expected_revision",
            "job_id", "next_attempt", "next_due_at", "outcome")


class ResultPayload(FieldsPayload):
    """A ``result_recorded`` (10,2) payload."""

    __slots__ = ()
    KEYS = ("at", "expected_revision", "job_id", "result")
