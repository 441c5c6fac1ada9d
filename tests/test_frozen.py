"""``tay._frozen.Frozen``: what the storage value classes kept from frozen dataclasses."""

from __future__ import annotations

from dataclasses import FrozenInstanceError

import pytest

from tay.storage.formats.value import DecodeLimits
from tay.storage.v2.manifest import Retention
from tests.test_startup_imports import IMPORT_SERVING


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


def test_record_compares_by_fields_assigns_and_is_unhashable() -> None:
    from tay.protocol.session import Received

    first, second = Received(), Received()
    assert first == second and first.outputs is not second.outputs  # a new list for each
    first.outputs.append(b"frame")
    assert first != second
    second.close_frame = b"bye"
    assert repr(second) == "Received(outputs=[], close_frame=b'bye')"
    with pytest.raises(TypeError):
        hash(first)
    with pytest.raises(AttributeError):
        first.other = 1  # slotted


def test_replace_runs_the_checks_again_and_names_unknown_fields() -> None:
    from tay._frozen import replace
    from tay.engine.config import EngineConfig
    from tay.failures import ConfigurationError
    from tay.server.app import ServeConfig

    config = ServeConfig(data_dir="/data", socket=None)
    assert config.engine == EngineConfig() and config.engine.queues == {"default": 10}
    assert config.engine.queues is not ServeConfig(data_dir="/data", socket=None).engine.queues
    changed = replace(config, engine=replace(config.engine, max_reply_bytes=4096))
    assert changed.engine.max_reply_bytes == 4096 and config.engine.max_reply_bytes == 1_048_576
    assert changed.data_dir == "/data" and changed.limits == config.limits
    with pytest.raises(ConfigurationError, match="max_reply_bytes"):
        replace(config.engine, max_reply_bytes=10)
    with pytest.raises(TypeError, match="no field 'bogus'"):
        replace(config, bogus=1)
    with pytest.raises(FrozenInstanceError):
        config.data_dir = "/other"


def test_engine_values_keep_their_dataclass_behaviour() -> None:
    from tay._frozen import replace
    from tay.engine.effects import Outcome
    from tay.engine.executors import Executor
    from tay.engine.schedules.table import ScheduleState

    assert Outcome() == Outcome() and not Outcome() and Outcome().events is not Outcome().events
    first, second = Executor("c", "worker", "r", 8, None), Executor("c", "worker", "r", 8, None)
    first.tasks.add("t")
    assert second.tasks == set() and first != second  # each its own set
    state = ScheduleState("s", {"task": "t"}, b"\x00secret", 1, 5, None, None, None, (), True)
    assert "secret" not in repr(state) and repr(state).startswith("ScheduleState(schedule_id='s'")
    assert state != replace(state, definition_bytes=b"other")  # compared, only not shown
    assert replace(state, next_at=9).next_at == 9 and state.next_at is None


def test_storage_values_keep_their_dataclass_behaviour() -> None:
    from tay.storage.journal.commit import CommitStats
    from tay.storage.layout import Inventory
    from tay.storage.v2.layout import RootInventory

    stats = CommitStats(submissions=3, fsyncs=1)
    assert stats.as_dict() == {"submissions": 3, "events": 0, "batches": 0, "fsyncs": 1,
                               "largest_batch": 0, "gathered": 0}
    stats.events += 2
    assert stats == CommitStats(3, 2, 0, 1, 0) != CommitStats()
    first, second = Inventory("/a"), Inventory("/a")
    first.segment_ids.append(1)
    assert second.segment_ids == [] and first != second
    assert RootInventory("/a").names is not RootInventory("/a").names


def test_the_serving_stack_builds_no_dataclass_but_the_event_type() -> None:
    """A dataclass compiles its methods at every import (~0.7 ms each of tay serve's
    start); the one left on the serving path is the event type (with its class-switching
    fast constructor)."""
    import subprocess
    import sys

    probe = ("import dataclasses, sys\n"
             "made = []\n"
             "original = dataclasses._process_class\n"
             "def record(cls, *args):\n"
             "    made.append(cls.__module__ + '.' + cls.__qualname__)\n"
             "    return original(cls, *args)\n"
             "dataclasses._process_class = record\n"
             + IMPORT_SERVING +
             "print(sorted(made))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout
    assert set(eval(out)) <= {"tay.storage.events.registry.Event"}


def test_replay_values_keep_their_dataclass_behaviour() -> None:
    """The v2 snapshot, the v1 view and the default consumer, once dataclasses: fields in
    order and by name, defaults (a fresh table and counter for each consumer), equality
    (a snapshot's definition bytes left out of it and of the repr, as ``compare=False,
    repr=False`` did), frozen snapshots, body fields read as attributes."""
    from collections import Counter

    from tay.storage.events.transitions import JobTable
    from tay.storage.layout import Inventory
    from tay.storage.recovery.recover import FrozenView, TableConsumer
    from tay.storage.v2.records import Snapshot

    body = {"state": "completed", "attempt": 1}
    one = Snapshot(b"i" * 16, 3, 1, None, body, b"def")
    assert one == Snapshot(b"i" * 16, 3, 1, None, dict(body)) != Snapshot(b"i" * 16, 4, 1,
                                                                          None, body)
    assert repr(one) == ("Snapshot(job_id=b'iiiiiiiiiiiiiiii', revision=3, cycle=1, "
                         "execution=None, body={'state': 'completed', 'attempt': 1})")
    assert one.state == "completed" and one.definition_bytes == b"def"
    assert Snapshot(job_id=b"j" * 16, revision=1, cycle=1, execution=7, body={}).execution == 7
    with pytest.raises(AttributeError):
        one.no_such_key  # noqa: B018
    with pytest.raises(FrozenInstanceError):
        one.revision = 4
    with pytest.raises(TypeError):
        hash(one)  # its body is a dict, as the frozen dataclass's hash found
    first, second = TableConsumer(), TableConsumer()
    assert first.table is not second.table and first != second  # a table is itself only
    assert first.other_events is not second.other_events and first.limits == DecodeLimits()
    same = TableConsumer(table=first.table)
    assert same == first and isinstance(second.table, JobTable)
    first.other_events["x"] += 1
    assert same != first
    assert TableConsumer(DecodeLimits(depth=3)).limits.depth == 3
    assert isinstance(second.other_events, Counter)
    view = FrozenView(Inventory("/a"), b"s" * 16, [], 1, 0, False)
    assert view.ledger is None and view == FrozenView(Inventory("/a"), b"s" * 16, [], 1, 0,
                                                      False, None)
    view.ledger = "x"
    assert view != FrozenView(Inventory("/a"), b"s" * 16, [], 1, 0, False)
    with pytest.raises(TypeError):
        hash(view)


# ---- ``Fields``: the named tuples of the serve path, built without typing's checks ----

def _named_tuple_classes() -> list[type]:
    from tay.engine.effects import CancelExecution, Execute, Refuse, Reply
    from tay.engine.validation.options import JobRequest
    from tay.engine.validation.values import Measure
    from tay.storage.events.transitions import JobState
    from tay.storage.v2.epoch_records import EpochEvent
    from tay.storage.v2.records import Mutation
    return [Reply, Refuse, Execute, CancelExecution, JobRequest, Measure, JobState,
            EpochEvent, Mutation]


def test_a_fields_class_is_the_named_tuple_typing_makes() -> None:
    import pickle
    import typing

    from tay._frozen import Fields

    class Ours(Fields):
        """Two fields, one defaulted, and a method."""

        first: int
        second: str | None = None

        def both(self) -> tuple:
            return (self.first, self.second)

    class Theirs(typing.NamedTuple):
        """Two fields, one defaulted, and a method."""

        first: int
        second: str | None = None

        def both(self) -> tuple:
            return (self.first, self.second)

    for cls in (Ours, Theirs):
        value = cls(1)
        assert cls.__mro__[1:] == (tuple, object) and cls.__doc__.startswith("Two fields")
        assert (cls._fields, cls._field_defaults) == (("first", "second"), {"second": None})
        assert value == (1, None) and value.both() == (1, None)
        assert repr(value) == f"{cls.__name__}(first=1, second=None)"
        assert value._replace(second="x") == (1, "x") and value._asdict() == {
            "first": 1, "second": None}
        assert (cls.__module__, cls.__qualname__.rsplit(".", 1)[-1]) == (
            __name__, cls.__name__)
        with pytest.raises(AttributeError):
            value.first = 2  # type: ignore[misc]
    assert list(Ours.__annotations__) == list(Theirs.__annotations__)
    for wrong in ("class Bad(Fields):\n    a: int = 1\n    b: int\n",
                  "class Bad(Fields):\n    a: int\n    def _replace(self): pass\n"):
        with pytest.raises((TypeError, AttributeError)):
            exec(wrong, {"Fields": Fields, "__name__": __name__})
    for cls in _named_tuple_classes():  # module level: they pickle as typing's do
        assert cls.__mro__[1:] == (tuple, object)
        assert list(cls._fields) == list(cls.__annotations__)
        value = cls(*[index for index in range(len(cls._fields))])
        assert pickle.loads(pickle.dumps(value)) == value and type(pickle.loads(
            pickle.dumps(value))) is cls


def test_a_lazy_pattern_matches_as_the_compiled_one_from_its_first_use() -> None:
    import re

    from tay._frozen import LazyPattern

    text = r"\.tay-(v2-marker|adoption)-([0-9a-f]{2})\.tmp"
    lazy = LazyPattern(text)
    assert lazy._compiled is None  # nothing compiled at import
    for name in (".tay-adoption-0f.tmp", ".tay-adoption-0f.tmpx", "x.tay-v2-marker-aa.tmp",
                 ".tay-v2-marker-aa.tmp", ""):
        ours, theirs = lazy.fullmatch(name), re.fullmatch(text, name)
        assert (ours and ours.groups()) == (theirs and theirs.groups())
        ours, theirs = lazy.match(name), re.match(text, name)
        assert (ours and ours.span()) == (theirs and theirs.span())
    assert lazy._compiled is re.compile(text)


def test_a_lazy_module_imports_its_module_at_the_first_attribute_use() -> None:
    import subprocess
    import sys

    probe = ("import sys\n"
             "from tay._frozen import LazyModule\n"
             "lazy = LazyModule('tay.engine.schedules.cron')\n"
             "print('tay.engine.schedules.cron' in sys.modules, repr(lazy))\n"
             "found = lazy.parse_cron\n"
             "import tay.engine.schedules.cron as real\n"
             "print('tay.engine.schedules.cron' in sys.modules, found is real.parse_cron,\n"
             "      lazy.LAST_COMPUTABLE_MS == real.LAST_COMPUTABLE_MS, 'parse_cron' in vars(lazy))\n"
             "try:\n"
             "    lazy.no_such_name\n"
             "except AttributeError as error:\n"
             "    print('AttributeError', 'no_such_name' in str(error))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out == ["False <LazyModule 'tay.engine.schedules.cron'>", "True True True True",
                   "AttributeError True"]
