"""``tay._frozen.Frozen``: what the storage value classes kept from frozen dataclasses."""

from __future__ import annotations

from dataclasses import FrozenInstanceError

import pytest

from tay.storage.formats.value import DecodeLimits
from tay.storage.v2.manifest import Retention


def test_equality_hash_and_repr_come_from_the_fields() -> None:
    assert Retention("hours", 24) == Retention("hours", 24) != Retention("hours", 1)
    assert Retention("infinity") != Retention("hours", None)
    assert hash(Retention("hours", 24)) == hash(Retention("hours", 24))
    assert len({Retention("hours", 24), Retention("hours", 24), DecodeLimits()}) == 2
    assert repr(Retention("hours", 24)) == "Retention(unit='hours', count=24)"
    assert DecodeLimits() != (64, 100_000, 16 * 1024 * 1024)  # a class, not a tuple


def test_fields_cannot_be_assigned_or_deleted() -> None:
    limits = DecodeLimits()
    with pytest.raises(FrozenInstanceError):
        limits.depth = 1
    with pytest.raises(FrozenInstanceError):
        del limits.nodes
    with pytest.raises(AttributeError):
        object.__setattr__(limits, "other", 1)  # slotted: no other attribute either
    assert limits.depth == 64
