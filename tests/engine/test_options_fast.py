"""The common enqueue's inline parse (``_parse_plain_decoded``: decoded args, options among
queue, retries, backoff and durability) is the general parse: the same job request, bytes
and scalars, the same id drawn, and the same refusal (code, message, details) first."""

from __future__ import annotations

import json
import random

import orjson
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tay.engine import EngineConfig
from tay.engine.validation import options as o
from tay.failures import RequestRefused

scalars = (st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=6))
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=5), inner, max_size=4), max_leaves=25)
args_maps = st.dictionaries(st.text(max_size=6), json_values, max_size=5).map(
    lambda args: orjson.loads(json.dumps(args)))  # as the socket session decodes them
keys = st.sampled_from(["t1", "q2", "", "a\x00b", "é" * 100, "x" * 300, 7, None])
plain_options = st.fixed_dictionaries({}, optional={
    "queue": keys,
    "retries": st.sampled_from([None, 0, 2, 65_534, 65_535, -1, True, 1.0, "1"]),
    "backoff": st.sampled_from([None, "exponential", "linear", 1]),
    "durability": st.sampled_from([None, "persistent", "volatile", "durable", 0]),
})
limits = st.fixed_dictionaries({}, optional={
    "max_depth": st.integers(1, 4), "max_nodes": st.integers(1, 30),
    "max_args_bytes": st.integers(5, 200), "max_payload_bytes": st.integers(100, 400),
    "default_timeout_ms": st.sampled_from([1, 30_000, 86_400_000])})
SETTINGS = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def outcome(parse, *arguments):
    """A request as comparable fields, or the refusal as (code, message, details)."""
    try:
        request = parse(*arguments)
    except RequestRefused as refused:
        return ("refused", refused.code, refused.message, refused.details)
    if request is None:
        return None
    definition = request.definition
    return ("ok", request.job_id, definition.canonical, definition.scalars,
            definition.args_nodes, request.definition_size, request.definition_nodes,
            request.durability, request.args_json)


@SETTINGS
@given(keys, args_maps, plain_options, limits, st.integers(0, 2**32))
@example("t1", {"a": 1}, {"queue": None, "retries": None, "backoff": None,
                          "durability": None}, {}, 0)
@example("t1", {"a": [[[[1]]]]}, {"queue": ""}, {"max_depth": 2}, 0)
def test_the_plain_parse_is_the_general_parse(task, args, options, limit, seed):
    config = EngineConfig(**limit)
    now_ms = 1_800_000_000_000
    fast = outcome(o._parse_plain_decoded, task, args, options, config, random.Random(seed))
    general = outcome(o._parse_general, task, args, options, now_ms, config,
                      random.Random(seed), True)
    assert fast == general
    assert outcome(o.parse_enqueue, task, args, options, now_ms, config,
                   random.Random(seed), True) == general


def test_args_orjson_cannot_write_take_the_general_path():
    """Nesting past orjson's 254 levels: the plain parse gives up, and the general one
    measures the args as any args (and refuses them by the depth limit)."""
    deep: dict = {}
    for _ in range(300):
        deep = {"k": deep}
    config = EngineConfig()
    assert o._parse_plain_decoded("t1", deep, {}, config, random.Random(0)) is None
    refused = outcome(o.parse_enqueue, "t1", deep, {}, 0, config, random.Random(0), True)
    assert refused == ("refused", "capacity", "args nest 301 levels (limit 32)",
                       {"reason": "depth"})


# what the socket's frame scan reads of plain options: (retries, queue, durability)
scanned_options = st.tuples(st.integers(0, 65_534) | st.sampled_from([0, 65_534]),
                            st.none() | st.sampled_from(["t1", "q2", "x" * 255]),
                            st.sampled_from([None, "persistent", "volatile"]))


@SETTINGS
@given(keys, args_maps, scanned_options, limits, st.integers(0, 2**32), st.booleans())
def test_options_the_scan_read_parse_as_their_object(task, args, plain, limit, seed, backoff):
    """``parse_plain_enqueue`` (a ``PlainEnqueue``) is the parse of the options object it
    stands for, however it is written: nulls for the absent values, or a backoff."""
    config = EngineConfig(**limit)
    now_ms = 1_800_000_000_000
    retries, queue, durability = plain
    written = {"retries": None if retries == 0 and backoff else retries, "queue": queue,
               "durability": durability}
    if backoff:
        written["backoff"] = "exponential"
    want = outcome(o.parse_enqueue, task, args, written, now_ms, config, random.Random(seed),
                   True)
    assert outcome(o.parse_plain_enqueue, task, args, plain, now_ms, config,
                   random.Random(seed)) == want
    assert outcome(o.parse_enqueue, task, args, o.plain_options(plain), now_ms, config,
                   random.Random(seed), True) == want


def test_a_plain_enqueue_the_inline_parse_cannot_take_goes_the_general_way():
    deep: dict = {}
    for _ in range(300):
        deep = {"k": deep}
    config = EngineConfig()
    for task, args, plain in (("t1", deep, (0, None, None)), ("t1", [1], (0, None, None)),
                              ("t1", {}, (70_000, None, None)), ("t1", {}, (0, 7, None)),
                              ("t1", {}, (0, None, "durable")), ("", {}, (1, "q", None))):
        want = outcome(o.parse_enqueue, task, args, o.plain_options(plain), 0, config,
                       random.Random(0), True)
        assert outcome(o.parse_plain_enqueue, task, args, plain, 0, config,
                       random.Random(0)) == want
        assert want[0] == "refused"
