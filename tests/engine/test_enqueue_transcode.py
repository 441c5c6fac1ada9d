"""parse_enqueue encodes args through orjson + the native transcoder: same bytes as before."""

from __future__ import annotations

import random

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tay.engine import EngineConfig
from tay.engine.validation.options import parse_enqueue
from tay.engine.validation.values import measure
from tay.storage.formats import value
from tay.storage.events.definition import build_definition
from tests.engine.conftest import Driver, executes
from tests.storage.json_strategies import SETTINGS, json_values

NOW = 1_700_000_000_000


def object_encoder_bytes(args, config, **options):
    return value.encode(build_definition(
        worker_key="t", queue_key=options.get("queue", "default"), args=args,
        max_attempts=1, scheduled_at=None, timeout_ms=config.default_timeout_ms))


@SETTINGS
@given(st.dictionaries(st.text(max_size=8), json_values, max_size=5))
def test_enqueue_bytes_equal_the_object_encoder(args):
    config = EngineConfig()
    request = parse_enqueue("t", args, {}, NOW, config, random.Random(1))
    assert request.definition.canonical == object_encoder_bytes(args, config)
    assert request.definition_size == len(request.definition.canonical)
    assert request.definition.args_nodes == measure(args, "args").nodes
    assert request.definition["args"] == args


def nested_args(levels: int) -> dict:
    nested: list = []
    for _ in range(levels):
        nested = [nested]
    return {"deep": nested}


def test_deepest_args_agree_and_deeper_ones_fail_as_before():
    config = EngineConfig(max_depth=300)
    deepest = nested_args(252)
    request = parse_enqueue("t", deepest, {}, NOW, config, random.Random(1))
    assert request.definition.canonical == object_encoder_bytes(deepest, config)
    # one more level: orjson refuses it, and so does the object encoder it falls back to
    with pytest.raises(orjson.JSONEncodeError):
        orjson.dumps(nested_args(253))
    with pytest.raises(value.EncodeError) as info:
        parse_enqueue("t", nested_args(253), {}, NOW, config, random.Random(1))
    assert info.value.reason == "depth_limit"


def test_execute_carries_the_args_json_of_the_stored_bytes():
    driver = Driver()
    driver.worker()
    args = {"z": [1, 2.5, None, True], "a": {"é": "x" * 10}, "n": -(2**63)}
    (execute,) = executes(driver.enqueue(args=args))
    assert execute.args_json == orjson.dumps(args, option=orjson.OPT_SORT_KEYS)
    assert execute.args == args


@SETTINGS
@given(st.dictionaries(st.text(max_size=8), json_values, max_size=5))
def test_the_kept_args_json_is_what_the_transcoder_writes(args):
    """An execute frame takes its args from the enqueue's JSON when kept: same bytes."""
    request = parse_enqueue("t", args, {}, NOW, EngineConfig(), random.Random(1))
    assert request.args_json is not None
    assert request.args_json == request.definition.args_json()


def test_a_dispatch_without_the_kept_json_carries_the_same_args():
    kept, transcoded = Driver(), Driver()
    transcoded.engine.execute_args.max_bytes = 0  # nothing is kept: every dispatch transcodes
    args = {"k": ["é", 1.5, 2**64 - 1]}
    frames = []
    for driver in (kept, transcoded):
        driver.worker()
        (execute,) = executes(driver.enqueue(args=args))
        frames.append(execute.args_json)
        assert len(driver.engine.execute_args) == 0
    assert frames[0] == frames[1] == orjson.dumps(args, option=orjson.OPT_SORT_KEYS)


def test_the_kept_args_are_bounded_and_tied_to_their_definition():
    from tay.engine.retained.execute_args import ExecuteArgs

    waiting: set[bytes] = set()
    kept = ExecuteArgs(waiting.__contains__, max_bytes=1000)
    first, second = object(), object()
    for index in range(10):
        waiting.add(bytes([index]) * 16)
        kept.remember(bytes([index]) * 16, first, b"x" * 100)
    assert kept.bytes <= 1000 and 0 < len(kept) < 10
    # full of waiting jobs: the newest were not kept, the oldest (next to go) were
    assert kept.take(bytes([9]) * 16, first) is None
    assert kept.take(bytes([1]) * 16, second) is None  # another definition: never its JSON
    assert kept.take(bytes([1]) * 16, first) is None  # ... and the entry is gone
    assert kept.take(bytes([0]) * 16, first) == b"x" * 100
    waiting.update((b"new", b"newer", b"newest"))
    kept.remember(b"new", first, b"y" * 100)
    kept.remember(b"newer", first, b"z" * 100)  # now full again: 2, new, newer
    waiting.discard(bytes([2]) * 16)  # cancelled, say: its entry gives way when full
    kept.remember(b"newest", first, b"w" * 100)
    assert kept.take(bytes([2]) * 16, first) is None
    assert kept.take(b"newest", first) == b"w" * 100
    assert kept.take(b"new", first) == b"y" * 100
    kept.remember(bytes([3]) * 16, second, None)  # re-inserted without JSON: forgotten
    assert kept.take(bytes([3]) * 16, first) is None
    kept.remember(b"big", first, b"y" * 2000)  # larger than the bound: not kept
    assert kept.take(b"big", first) is None
    while len(kept):
        kept.take(next(iter(kept._items)), first)
    assert kept.bytes == 0


def test_the_kept_args_cost_about_their_size():
    """What the bound counts is what is held: orjson's output over-allocates its buffer."""
    import tracemalloc

    from tay.engine.retained.execute_args import ExecuteArgs

    kept = ExecuteArgs(lambda job_id: True, max_bytes=1 << 30)
    args = {"payload": "x" * 1024}
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for index in range(500):
            kept.remember(index.to_bytes(16, "big"), None,
                          orjson.dumps(args, option=orjson.OPT_SORT_KEYS))
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 500 * 2 * 1024, held


def test_a_frames_args_text_is_kept_as_it_came_and_orjsons_output_copied():
    """A PlainEnqueue's args text (bytes of exactly its size) is kept as that very object;
    args the engine wrote with orjson are kept as a copy (the test above: what is held)."""
    from tay.engine import commands as c

    plain = (0, None, None)
    args = {"a": [1, "x"]}
    text = orjson.dumps(args, option=orjson.OPT_SORT_KEYS)[:]
    text = bytes(bytearray(text))  # an object of its own, as the frame scan hands it on
    for given, same in ((text, True), (args, False)):
        driver = Driver()
        driver.run(c.PlainEnqueue("p", "e1", "t", given, plain))
        ((job_id, (_, kept)),) = driver.engine.execute_args._items.items()
        assert kept == text
        assert (kept is given) is same
