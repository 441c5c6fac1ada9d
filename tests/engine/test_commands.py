"""Engine commands keep frozen-dataclass value semantics (they are hand-written classes)."""

from __future__ import annotations

import dataclasses

import pytest

from tay.engine import commands as c


def test_equality_is_per_class_and_field_wise():
    assert c.Enqueue("p", "r", "t", {"a": 1}) == c.Enqueue("p", "r", "t", {"a": 1}, {})
    assert c.Enqueue("p", "r", "t", {}) != c.Enqueue("p", "r2", "t", {})
    assert c.Status("p", "r", "j") != c.Result("p", "r", "j")
    assert c.RegisterTasks("p", ("t",)) != c.UnregisterTasks("p", ("t",))
    assert not isinstance(c.UnregisterTasks("p", ("t",)), c.RegisterTasks)
    assert hash(c.Disconnect("p")) == hash(c.Disconnect("p"))


def test_fields_are_frozen():
    command = c.Started("p", "r", "res", "exe")
    with pytest.raises(dataclasses.FrozenInstanceError):
        command.request_id = "other"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del command.conn  # type: ignore[misc]


def test_defaults_are_fresh_and_explicit_none_is_kept():
    first, second = c.Enqueue("p", "r", "t", {}), c.Enqueue("p", "r", "t", {})
    assert first.options == {} and first.options is not second.options
    assert c.Enqueue("p", "r", "t", {}, None).options is None
    assert c.ListSchedules("p", "r").body == {}
    assert c.Connect("p", "worker", "rt", 2) == c.Connect(
        conn="p", mode="worker", runtime_id="rt", capacity=2, queue=None, request_id=None)
    with pytest.raises(TypeError):
        c.Schedule("p", "r")  # type: ignore[call-arg]  # body is required


def test_repr_and_match_positional_patterns():
    command = c.Succeeded("p", "r", "res", "exe", {"ok": True})
    assert repr(command) == ("Succeeded(conn='p', request_id='r', reservation_id='res', "
                             "execution_id='exe', result={'ok': True})")
    match command:
        case c.Succeeded(conn, request_id, reservation_id, execution_id, result):
            assert (conn, request_id, reservation_id, execution_id, result) == (
                "p", "r", "res", "exe", {"ok": True})
        case _:
            pytest.fail("positional pattern did not match")
    assert c.UnregisterTasks.__match_args__ == ("conn", "tasks", "request_id")
