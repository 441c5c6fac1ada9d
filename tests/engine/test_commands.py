"""Engine commands keep frozen-dataclass value semantics (they are hand-written classes)."""

from __future__ import annotations

import dataclasses

import pytest

from tay.engine import commands as c

from .conftest import reply


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


def test_a_command_is_not_a_plain_tuple_and_survives_copy_and_pickle():
    import copy
    import pickle

    command = c.Succeeded("p", "r", "res", "exe", {"ok": True})
    assert command != ("p", "r", "res", "exe", {"ok": True})
    assert ("p", "r", "res", "exe", {"ok": True}) != command
    assert not command == ("p", "r", "res", "exe", {"ok": True})
    assert c.Disconnect("p") != c.Disconnect("q") and not c.Disconnect("p") != c.Disconnect("p")
    assert c.Status("p", "r", "j") != c.Result("p", "r", "j")
    for clone in (copy.copy(command), copy.deepcopy(command),
                  pickle.loads(pickle.dumps(command))):
        assert type(clone) is c.Succeeded and clone == command
    with pytest.raises(TypeError):
        c.Disconnect("p") < c.Disconnect("q")  # type: ignore[operator]  # no ordering
    with pytest.raises(dataclasses.FrozenInstanceError):
        command.other = 1  # type: ignore[attr-defined]


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


# -- the enqueue reply's args: reused from the request only when they are canonical ------

from hypothesis import given, settings, strategies as st  # noqa: E402

from tay.engine.retained.jobs import canonical_order  # noqa: E402
from tay.storage.formats import value  # noqa: E402

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner,
                                                                max_size=4),
    max_leaves=12)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.text(max_size=4), _json, max_size=5))
def test_canonical_order_means_the_stored_args_decode_identically(args):
    decoded = value.decode(value.encode(args))
    if canonical_order(args):
        assert repr(decoded) == repr(args)  # same values, types and key order
    assert canonical_order(decoded)


def test_canonical_order_refuses_unsorted_keys_at_any_depth():
    assert canonical_order({"a": 1, "b": [{"x": 1, "y": 2}]})
    assert not canonical_order({"b": 1, "a": 1})
    assert not canonical_order({"a": [{"y": 1, "x": 2}]})
    assert not canonical_order({"a": {"b": {"d": 1, "c": 1}}})


@pytest.mark.parametrize("args", [{"b": 1, "a": {"d": 2, "c": 3}}, {"a": 1, "b": [2.0, {"c": None}]}])
def test_enqueue_reply_shows_args_in_canonical_order(driver, args):
    job = reply(driver.enqueue(args=args)).fields["job"]
    assert job["args"] == args
    assert repr(job["args"]) == repr(value.decode(value.encode(args)))
    assert job == driver.status(job["id"])  # a later read shows the very same job object
