"""``event_with_raw``, the hot paths' Event constructor, builds exactly what ``Event(...)``
builds: the same type, fields and raw bytes, and an event as frozen as any other."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

import pytest
from hypothesis import given, strategies as st

from tay.storage.events.registry import Event, event_with_raw


@given(st.integers(0, 255), st.integers(0, 255), st.text(max_size=12),
       st.dictionaries(st.text(max_size=4), st.integers(), max_size=3),
       st.none() | st.binary(max_size=8))
def test_the_fast_constructor_builds_the_event_the_dataclass_builds(
        event_type: int, schema: int, name: str, payload: dict, raw: bytes | None) -> None:
    proxy = MappingProxyType(payload)
    fast = event_with_raw(event_type, schema, name, proxy, raw)
    slow = Event(event_type, schema, name, proxy, raw)
    assert type(fast) is Event
    assert fast == slow and repr(fast) == repr(slow)
    assert [getattr(fast, f.name) for f in dataclasses.fields(Event)] == \
        [getattr(slow, f.name) for f in dataclasses.fields(Event)]
    assert fast.raw is raw and fast.payload is proxy
    assert fast.pair == (event_type, schema)


def test_a_fast_event_is_frozen() -> None:
    event = event_with_raw(3, 1, "job_started", MappingProxyType({"at": 1}), b"raw")
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.raw = None  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del event.name  # type: ignore[misc]
    assert event.raw == b"raw"
