"""``event_with_raw``, the hot paths' Event constructor, builds exactly what ``Event(...)``
builds: the same type, fields and raw bytes, and an event as frozen as any other."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given, strategies as st

from tay.storage.events.registry import Event, event_with_raw


@given(st.integers(0, 255), st.integers(0, 255), st.text(max_size=12),
       st.dictionaries(st.text(max_size=4), st.integers(), max_size=3),
       st.none() | st.binary(max_size=8))
def test_the_fast_constructor_builds_the_event_the_constructor_builds(
        event_type: int, schema: int, name: str, payload: dict, raw: bytes | None) -> None:
    proxy = MappingProxyType(payload)
    fast = event_with_raw(event_type, schema, name, proxy, raw)
    slow = Event(event_type, schema, name, proxy, raw)
    assert type(fast) is Event
    assert fast == slow and repr(fast) == repr(slow)
    assert [getattr(fast, name) for name in Event.__slots__] == \
        [getattr(slow, name) for name in Event.__slots__]
    assert fast.raw is raw and fast.payload is proxy
    assert fast.pair == (event_type, schema)


def test_a_fast_event_is_frozen() -> None:
    event = event_with_raw(3, 1, "job_started", MappingProxyType({"at": 1}), b"raw")
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.raw = None  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del event.name  # type: ignore[misc]
    assert event.raw == b"raw"


@dataclasses.dataclass(frozen=True, slots=True)
class DataclassEvent:
    """What ``Event`` was until it was written out by hand: it must behave the same."""

    type: int
    schema: int
    name: str
    payload: Any
    raw: bytes | None = dataclasses.field(default=None, compare=False, repr=False)


def _as_dataclass_text(text: str) -> str:
    return text.replace("DataclassEvent(", "Event(")


@given(st.integers(0, 3), st.integers(0, 3), st.sampled_from(["a", "b"]),
       st.sampled_from([(), (1,), ("x", 2)]), st.none() | st.binary(max_size=2),
       st.integers(0, 3), st.integers(0, 3), st.sampled_from(["a", "b"]),
       st.sampled_from([(), (1,), ("x", 2)]), st.none() | st.binary(max_size=2))
def test_an_event_compares_hashes_and_shows_as_the_dataclass_did(
        t1: int, s1: int, n1: str, p1: tuple, r1: bytes | None,
        t2: int, s2: int, n2: str, p2: tuple, r2: bytes | None) -> None:
    ours = Event(t1, s1, n1, p1, r1), Event(t2, s2, n2, p2, r2)
    theirs = DataclassEvent(t1, s1, n1, p1, r1), DataclassEvent(t2, s2, n2, p2, r2)
    assert (ours[0] == ours[1]) == (theirs[0] == theirs[1])
    assert (ours[0] != ours[1]) == (theirs[0] != theirs[1])
    assert hash(ours[0]) == hash(theirs[0])  # hashable payloads: the fields raw excluded
    assert repr(ours[0]) == _as_dataclass_text(repr(theirs[0]))
    assert Event(t1, s1, n1, p1) == ours[0] and Event(t1, s1, n1, p1).raw is None
    assert ours[0] != theirs[0] and Event.__match_args__ == DataclassEvent.__match_args__


def test_an_event_with_a_mapping_payload_is_unhashable_as_the_dataclass_was() -> None:
    for event in (Event(1, 1, "a", MappingProxyType({})), DataclassEvent(1, 1, "a", {})):
        with pytest.raises(TypeError):
            hash(event)
    event = Event(1, 1, "a", MappingProxyType({}))
    with pytest.raises(AttributeError):
        event.extra = 1  # type: ignore[attr-defined]
