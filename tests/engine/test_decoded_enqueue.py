"""A DecodedEnqueue (args from orjson.loads, measured in the native transcoder) is handled
exactly as an Enqueue with the same fields: the same records and bytes, the same replies,
dispatches and refusals (the insert limits included), and the same engine state after."""

from __future__ import annotations

import json

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tay.engine import EngineConfig
from tay.engine import commands as c
from tay.engine.validation.options import parse_enqueue
from tay.engine.validation.values import measure
from tests.engine.test_fused_commits import effects, epoch_driver, records, snapshot

scalars = (st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1)
           | st.integers(2**64, 2**70) | st.floats(allow_nan=False, allow_infinity=False)
           | st.text(max_size=6))
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=5), inner, max_size=4), max_leaves=25)
args_maps = st.dictionaries(st.text(max_size=6), json_values, max_size=5)
options = st.fixed_dictionaries({}, optional={
    "queue": st.sampled_from(["q1", "q2", ""]), "retries": st.sampled_from([0, 2, -1]),
    "delay_ms": st.sampled_from([0, 5_000]), "durability": st.sampled_from(["persistent",
                                                                           "volatile"])})
limits = st.fixed_dictionaries({}, optional={
    "max_depth": st.integers(1, 4), "max_nodes": st.integers(1, 30),
    "max_args_bytes": st.integers(5, 200)})
SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def decoded(args):
    """What the socket session hands the engine: the args as orjson.loads gives them
    (integers beyond 64 bits as floats)."""
    return orjson.loads(json.dumps(args))


@SETTINGS
@given(json_values)
def test_the_transcoder_measures_as_measure(obj):
    from tay._native import pure
    from tests.build_guard import c_twin

    text = orjson.dumps(decoded(obj), option=orjson.OPT_SORT_KEYS)
    size = measure(decoded(obj), "args")
    for twin in (pure, c_twin()):
        encoded, depth, nodes = twin.json_to_value_measured(text)
        assert (len(encoded), depth, nodes) == size
        assert encoded == pure.json_to_value(text)


@SETTINGS
@given(st.lists(st.tuples(args_maps, options), min_size=1, max_size=4), limits,
       st.integers(0, 2**32))
def test_a_decoded_enqueue_is_an_enqueue(requests, limit, seed):
    drivers = []
    for kind in (c.Enqueue, c.DecodedEnqueue):
        driver = epoch_driver(seed, "uncapped", True)
        driver.engine.config = EngineConfig(queues={"q1": 2, "q2": 1}, **limit)
        driver.worker("w1", tasks=("t",), capacity=2)
        drivers.append((kind, driver))
    for index, (args, opts) in enumerate(requests):
        outs = [driver.run(kind("p", f"e{index}", "t", decoded(args), dict(opts)))
                for kind, driver in drivers]
        assert records(outs[0]) == records(outs[1])
        assert effects(outs[0]) == effects(outs[1])
    assert snapshot(drivers[0][1].engine) == snapshot(drivers[1][1].engine)


def outcome(*args):
    try:
        request = parse_enqueue(*args)
    except Exception as failure:  # noqa: BLE001 - the same refusal either way
        return type(failure), str(failure)
    return request.definition.canonical, request[2:]


def test_args_orjson_cannot_write_are_measured_as_any_args():
    deep: dict = {}
    inner = deep
    for _ in range(254):  # past orjson's 254 levels of nesting
        inner["k"] = {}
        inner = inner["k"]
    for max_depth in (10, 400):
        config = EngineConfig(max_depth=max_depth, max_nodes=10_000)
        for args in (deep, orjson.loads(json.dumps({"k": [1, 2.5, "x", None]}))):
            plain = outcome("t", args, {"id": "1" * 32}, 1, config, None)
            assert plain == outcome("t", args, {"id": "1" * 32}, 1, config, None, True)


def wire(out):
    """The effects as what leaves: replies and executions as their frames' bytes."""
    from tay.engine.effects import Execute, Reply
    from tay.protocol.replies import execute_frame, message_frame

    seen = []
    for effect in out.effects:
        if type(effect) is Reply:
            seen.append(("reply", effect.conn, message_frame(effect.type, effect.request_id,
                                                             effect.fields)))
        elif type(effect) is Execute:
            seen.append(("execute", effect[0], execute_frame(effect)))
        else:
            seen.append(effects(_Only(effect))[0])
    return seen


class _Only:
    def __init__(self, effect):
        self.effects = [effect]


plain_texts = st.dictionaries(
    st.text(st.characters(min_codepoint=0x20, blacklist_categories=("Cs",),
                          blacklist_characters='"\\'), max_size=6),
    st.recursive(st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1)
                 | st.text(st.characters(min_codepoint=0x20, blacklist_categories=("Cs",),
                                         blacklist_characters='"\\'), max_size=8),
                 lambda inner: st.lists(inner, max_size=3)
                 | st.dictionaries(st.text(max_size=3), inner, max_size=3), max_leaves=15),
    max_size=5)


@SETTINGS
@given(st.lists(st.tuples(plain_texts | args_maps, st.sampled_from(
    [(0, None, None), (2, "q1", "volatile"), (0, "q2", "persistent")])), min_size=1,
    max_size=4), limits, st.integers(0, 2**32))
def test_a_plain_enqueue_of_args_text_is_one_of_the_decoded_args(requests, limit, seed):
    """A PlainEnqueue whose args are their JSON text (what the socket session hands over
    when ``json_canonical`` says orjson writes it back as it is) is one of the decoded
    args: the same records and bytes, the same reply and execute frames byte for byte,
    the same refusals and the same engine state after."""
    from tay._native import json_canonical

    drivers = []
    for as_text in (False, True):
        driver = epoch_driver(seed, "uncapped", True)
        driver.engine.config = EngineConfig(queues={"q1": 2, "q2": 1}, **limit)
        driver.worker("w1", tasks=("t",), capacity=2)
        drivers.append((as_text, driver))
    texts = 0
    for index, (args, plain) in enumerate(requests):
        text = orjson.dumps(decoded(args), option=orjson.OPT_SORT_KEYS)
        outs = []
        for as_text, driver in drivers:
            given_args = text if as_text and json_canonical(text) else decoded(args)
            texts += type(given_args) is bytes
            outs.append(driver.run(c.PlainEnqueue("p", f"e{index}", "t", given_args, plain)))
        assert records(outs[0]) == records(outs[1])
        assert wire(outs[0]) == wire(outs[1])
    assert snapshot(drivers[0][1].engine) == snapshot(drivers[1][1].engine)
