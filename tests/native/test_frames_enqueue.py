"""``json_enqueue`` / ``split_frames_marked`` mark 4: a producer's ``enqueue`` read without a
JSON decoder at its top level (csrc/frames_check.c).

An enqueue mark is a promise about the payload's top level: it is the object of
``version`` 1, ``type`` "enqueue", the request id and task at the spans given (plain ASCII
text, 1..128 and 1..255 bytes), ``args`` and (if present) ``options`` at theirs, and other
keys only with plain string values (never "v"). So when both object spans are valid JSON,
the whole payload is valid JSON and decodes to exactly those members; when either is not,
neither is the payload (the caller then takes the exact path). The scan may leave any
payload unmarked, never the other way round. The C and pure twins mark alike."""

from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tay._native import pure
from tay.protocol.limits import ProtocolLimits
from tests.build_guard import c_twin
from tests.native.twin_marks import agreed_mark
from tests.storage.json_strategies import SETTINGS, json_values

c = c_twin()
MORE = settings(SETTINGS, max_examples=400)
LIMITS = ProtocolLimits()
BOUNDS = (LIMITS.max_frame_bytes, LIMITS.max_depth, LIMITS.max_nodes, LIMITS.max_key_bytes)
KEYS = ["version", "type", "request_id", "task", "args", "options"]
PLAIN = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E,
                              blacklist_characters='"\\'), min_size=1, max_size=130)
ANY_TEXT = PLAIN | st.text(max_size=6) | st.sampled_from(
    ["", "a\"b", "a\\b", "é", "\x00", "x" * 128, "x" * 129, "t" * 255, "t" * 256])
SPACE = st.sampled_from(["", "", "", " ", "\n", "\t", "\r", "  "])
NOT_SPACE = st.sampled_from(["\x0b", "\xa0", "\x00", "x", ",", ":"])
# args and options written with brackets, braces and quotes inside strings, and escapes
TRICKY = st.sampled_from(["}", "{", "]", "[", "\"}", "\\", "\\\"}", "a\"b}", "\x00", "é"])
OBJECTS = st.dictionaries(st.text(max_size=5) | TRICKY, json_values | TRICKY, max_size=4)
OPTIONS = st.dictionaries(
    st.sampled_from(["queue", "retries", "backoff", "durability", "delay", "id", "x"]),
    st.none() | st.integers(-2, 70_000) | st.sampled_from(
        ["alpha", "exponential", "persistent", "volatile", "", 1.5, True, 65_534, 65_535,
         100_000, 0, 1e3, "é", "a\"b", "q\x00", "q" * 255, "q" * 256, [], {}]), max_size=4)


@st.composite
def enqueue_texts(draw) -> bytes:
    """Enqueue-shaped objects: usually close to what producers send, with every way of
    straying from the subset the scan reads (other keys, types, numbers, spacing, escapes,
    args and options of any value, cut or broken text)."""
    ids = PLAIN if draw(st.integers(0, 3)) else ANY_TEXT
    message = {"version": draw(st.sampled_from([1] * 8 + [1.0, 2, True, "1", 0, 10])),
               "type": draw(st.sampled_from(["enqueue"] * 6 + ["started", "Enqueue"])),
               "request_id": draw(ids), "task": draw(ids),
               "args": draw(OBJECTS if draw(st.integers(0, 5)) else json_values)}
    if draw(st.integers(0, 3)):
        message["options"] = draw(OPTIONS if draw(st.integers(0, 5)) else json_values)
    if draw(st.integers(0, 5)) == 0:  # another key, as a report may carry job_id
        message[draw(st.sampled_from(["job_id", "x", "v"]))] = draw(ids | json_values)
    if not draw(st.integers(0, 5)):  # a key dropped, or one changed
        for key in draw(st.lists(st.sampled_from(KEYS), max_size=2)):
            message.pop(key, None) if draw(st.booleans()) else message.update(
                {key: draw(json_values)})
    items = list(message.items())
    order = draw(st.permutations(range(len(items))))
    spaced = draw(st.integers(0, 2))  # none, JSON whitespace, or a stray byte somewhere
    gaps = [draw(SPACE) if spaced else "" for _ in range(4 * len(items) + 2)]
    if spaced == 2:
        gaps[draw(st.integers(0, len(gaps) - 1))] = draw(NOT_SPACE)
    body = ",".join(f"{gaps[4 * k]}{json.dumps(items[i][0])}{gaps[4 * k + 1]}:"
                    f"{gaps[4 * k + 2]}{json.dumps(items[i][1], ensure_ascii=draw(st.booleans()))}"
                    f"{gaps[4 * k + 3]}" for k, i in enumerate(order))
    text = (gaps[-2] + "{" + body + "}" + gaps[-1]).encode("utf-8", "surrogatepass")
    if draw(st.integers(0, 9)) == 0:  # a byte flipped, cut or added
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.binary(max_size=2)) + text[at + draw(st.integers(0, 2)):]
    if draw(st.integers(0, 14)) == 0:  # a key repeated
        text = b'{"task":"dup",' + text.lstrip()[1:]
    return text


def decode_spans(text: bytes, spans: tuple[int, ...]) -> dict | None:
    """The message a mark and its spans stand for, its objects decoded; None when either
    object span is not valid JSON."""
    a, b, c_, d, e, f, g, h = spans[:8]
    try:
        args = orjson.loads(text[e:f])
        options = orjson.loads(text[g:h]) if g != h else None
    except orjson.JSONDecodeError:
        return None
    message = {"version": 1, "type": "enqueue", "request_id": text[a:b].decode("ascii"),
               "task": text[c_:d].decode("ascii"), "args": args}
    if g != h:
        message["options"] = options
    return message


@MORE
@given(enqueue_texts())
def test_an_enqueue_mark_is_what_the_decoder_reads(text) -> None:
    mark, spans = agreed_mark((c, pure), "json_enqueue", text)
    if not mark:
        return
    assert mark == 4
    if spans[8] and spans[6] != spans[7]:  # plain options are valid JSON by themselves
        orjson.loads(text[spans[6]:spans[7]])
    read = decode_spans(text, spans)
    try:
        decoded = orjson.loads(text)
    except orjson.JSONDecodeError:
        assert read is None  # the payload is valid JSON exactly when both objects are
        return
    assert read is not None
    others = {key: decoded.pop(key) for key in list(decoded) if key not in read}
    assert decoded == read  # (each of its keys is read once: a repeat is never marked)
    assert "v" not in others and all(type(value) is str for value in others.values())
    assert type(read["args"]) is dict and type(read.get("options", {})) is dict
    assert 1 <= len(read["request_id"]) <= 128 and 1 <= len(read["task"]) <= 255
    check_plain(text, spans, read.get("options"))


def check_plain(text: bytes, spans: tuple[int, ...], options: dict | None) -> None:
    """Options read as plain are what the engine reads of the decoded object as it is."""
    retries, durability, queue_start, queue_end = spans[8:]
    if not retries:
        assert options is not None  # absent options are plain
        return
    options = {} if options is None else options
    assert options.keys() <= {"queue", "retries", "backoff", "durability"}
    assert options.get("retries") in (None, retries - 1)
    assert type(options.get("retries", 0)) in (int, type(None))
    assert 0 <= retries - 1 <= 65_534
    assert options.get("backoff") in (None, "exponential")
    assert options.get("durability") == (None, "persistent", "volatile")[durability]
    queue = text[queue_start:queue_end].decode("ascii") if queue_start != queue_end else None
    assert options.get("queue") == queue
    assert queue is None or 1 <= len(queue) <= 255


@MORE
@given(st.lists(enqueue_texts() | st.binary(max_size=40), min_size=1, max_size=6),
       st.binary(max_size=6), st.integers(0, 3), st.integers(0, 80), st.integers(0, 45),
       st.booleans())
def test_split_frames_marked_marks_each_enqueue_as_the_twin(payloads, tail, depth, nodes,
                                                            key_bytes, tight) -> None:
    buf = b"".join(len(p).to_bytes(4, "big") + p for p in payloads) + tail
    bounds = (BOUNDS[0], depth, nodes, key_bytes) if tight else BOUNDS
    wants = pure.split_frames_marked(buf, *bounds)
    for given_buf in (buf, bytearray(buf)):
        assert c.split_frames_marked(given_buf, *bounds) == wants
    for scan in (c.FrameScan(*bounds), pure.FrameScan(*bounds)):
        for given_buf in (buf, buf[:len(buf) // 2], buf):
            frames, consumed, error = pure.split_frames_marked(given_buf, *bounds)
            assert scan.split(given_buf) == (frames, consumed, error)
            assert scan.payloads(given_buf) == ([(given_buf[start:end], mark, ids)
                                                 for start, end, mark, ids in frames],
                                                consumed, error)
    for start, end, mark, ids in wants[0]:
        payload = buf[start:end]
        if mark == 4:  # clean, and its ids are the spans' text
            assert pure.json_domain_clean(payload, *bounds[1:])
            spans = pure.json_enqueue(payload)[1]
            a, b, c_, d, e, f, g, h, r, u, q, z = spans
            assert ids == (payload[a:b].decode(), payload[c_:d].decode(), payload[e:f],
                           payload[g:h] if g != h else None,
                           (r - 1, payload[q:z].decode() if q != z else None,
                            (None, "persistent", "volatile")[u]) if r else None,
                           # plain options and args text orjson writes back as it is
                           bool(r) and pure.json_canonical(payload[e:f]))
        elif mark == 1:
            assert pure.json_enqueue(payload)[0] == 0


def test_what_producers_send_is_marked() -> None:
    args = {"account_key": "benchmark-account", "payload": "x" * 1024, "version": 1}
    message = {"version": 1, "type": "enqueue", "request_id": "9f" * 16,
               "task": "tay.benchmark.v1", "args": args,
               "options": {"queue": "alpha", "retries": 0}}
    texts = [
        orjson.dumps(message),  # tay's SDK and the benchmarks: compact, in this order
        # tay-client 1.4.0: sorted keys, compact, not ASCII-escaped, options with nulls
        json.dumps({**message, "args": {"name": "é}{\"]", "n": [1, 2.5, None]},
                    "options": {"queue": None, "retries": 3, "durability": "volatile"}},
                   sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(),
        # no options; spaced
        b' { "type" : "enqueue" , "version" : 1 , "request_id" : "q3" , "task" : "t" ,'
        b' "args" : { } } ',
    ]
    for twin in (c, pure):
        for text in texts:
            mark, spans = twin.json_enqueue(text)
            assert mark == 4
            assert decode_spans(text, spans) == orjson.loads(text)
        assert twin.json_enqueue(texts[2])[1][6:] == (0, 0, 1, 0, 0, 0)  # options absent
        assert twin.json_enqueue(texts[0])[1][8:10] == (1, 0)  # retries 0, no durability
        assert twin.json_enqueue(texts[1])[1][8:10] == (4, 2)  # retries 3, volatile


@pytest.mark.parametrize("text", [
    b'{"version":1,"type":"enqueue","request_id":"q","task":"t","args":{},"v":1}',
    b'{"version":1,"type":"enqueue","request_id":"q","task":"t","args":{},"v":"1"}',
    b'{"version":1,"type":"enqueue","request_id":"q","task":"t","args":{},"x":7}',
    b'{"version":1,"type":"enqueue","request_id":"q","task":"t","args":[]}',
    b'{"version":1,"type":"enqueue","request_id":"q","task":"t","args":null}',
    b'{"version":1,"type":"enqueue","request_id":"q","task":"t","args":{},"options":null}',
    b'{"version":1,"type":"enqueue","request_id":"q","task":"t","args":{},"options":[]}',
    b'{"version":1,"type":"enqueue","request_id":"q","task":"t"}',
    b'{"version":1,"type":"enqueue","request_id":"q","args":{}}',
    b'{"version":1,"type":"enqueue","task":"t","args":{}}',
    b'{"type":"enqueue","request_id":"q","task":"t","args":{}}',
    b'{"version":10,"type":"enqueue","request_id":"q","task":"t","args":{}}',
    b'{"version":1.0,"type":"enqueue","request_id":"q","task":"t","args":{}}',
    b'{"version":true,"type":"enqueue","request_id":"q","task":"t","args":{}}',
    b'{"version":1,"type":"enqueue ","request_id":"q","task":"t","args":{}}',
    b'{"version":1,"type":"started","request_id":"q","task":"t","args":{}}',
    b'{"version":1,"type":"enqueue","request_id":"","task":"t","args":{}}',
    b'{"version":1,"type":"enqueue","request_id":"q","task":"","args":{}}',
    b'{"version":1,"type":"enqueue","request_id":"q\\u0041","task":"t","args":{}}',
    b'{"version":1,"type":"enqueue","request_id":"q","task":"t\\u0000","args":{}}',
    b'{"version":1,"type":"enqueue","request_id":"q","task":"\xc3\xa9","args":{}}',
    b'{"version":1,"type":"enqueue","request_id":"' + b"x" * 129 + b'","task":"t","args":{}}',
    b'{"version":1,"type":"enqueue","request_id":"q","task":"' + b"t" * 256 + b'","args":{}}',
    b'{"version":1,"type":"enqueue","request_id":"q","task":"t","task":"t","args":{}}',
    b'{"version":1,"type":"enqueue","request_id":"q","task":"t","args":{},"args":{}}',
    b'{"version":1,"type":"enqueue","request_id":"q","task":"t","args":{"a":"}"}',
    b'{"version":1,"type":"enqueue","request_id":"q","task":"t","args":{}}x',
    b'{"version":1,"type":"enqueue","request_id":"q","task":"t","args":{}',
    b'{"version":1,"type":"enqueue","request_id":"q","task":"t","args":{},}',
    b'{"version":1,"type":"enqueue","request_id":"q","task":"t","args":{}\x0b}',
])
def test_near_misses_are_left_to_the_decoder(text) -> None:
    for twin in (c, pure):
        assert twin.json_enqueue(text) == (0, ())


def test_the_object_spans_are_where_the_decoder_would_find_them() -> None:
    # brackets and quotes inside strings, escaped quotes, nested containers: the span ends
    # at the object's own closing brace (the decoder then reads exactly that text)
    args = {"a}": "]}\"{", "b": [{"c": "\\\"}"}, []], "d": {"e": {}}}
    text = orjson.dumps({"version": 1, "type": "enqueue", "request_id": "q", "task": "t",
                         "args": args, "options": {"queue": "}"}})
    for twin in (c, pure):
        mark, spans = twin.json_enqueue(text)
        assert mark == 4
        assert orjson.loads(text[spans[4]:spans[5]]) == args
        assert orjson.loads(text[spans[6]:spans[7]]) == {"queue": "}"}
    # an object that never closes (a quote left open inside it): unmarked
    broken = b'{"version":1,"type":"enqueue","request_id":"q","task":"t","args":{"a":"}}'
    assert c.json_enqueue(broken) == pure.json_enqueue(broken) == (0, ())


def test_every_byte_at_every_place_of_the_task_is_read_as_the_twin_reads_it() -> None:
    # the C scan takes a plain string eight bytes at a time: a byte that ends the run
    # (quote, backslash, control, DEL, >= 0x80) must stop it wherever it stands in a word
    for value in range(256):
        for place in range(19):
            task = b"a" * place + bytes([value]) + b"b" * (18 - place)
            text = (b'{"version":1,"type":"enqueue","request_id":"q","task":"' + task +
                    b'","args":{"k":"' + task + b'"}}')
            assert c.json_enqueue(text) == pure.json_enqueue(text), (value, place)


@pytest.mark.parametrize(("options", "read"), [
    (b'{}', (0, None, None)),
    (b' { } ', (0, None, None)),
    (b'{"retries":65534}', (65_534, None, None)),
    (b'{"retries":0,"queue":"q","durability":"volatile","backoff":"exponential"}',
     (0, "q", "volatile")),
    (b'{ "retries" : null , "queue" : null , "durability" : null , "backoff" : null }',
     (0, None, None)),
    (b'{"durability":"persistent","queue":"' + b"q" * 255 + b'"}',
     (0, "q" * 255, "persistent")),
    (b'{"retries":10}', (10, None, None)),
    (b'{"retries":65535}', None),
    (b'{"retries":100000}', None),
    (b'{"retries":01}', None),
    (b'{"retries":-0}', None),
    (b'{"retries":-1}', None),
    (b'{"retries":1.0}', None),
    (b'{"retries":1e2}', None),
    (b'{"retries":true}', None),
    (b'{"retries":"1"}', None),
    (b'{"queue":""}', None),
    (b'{"queue":"' + b"q" * 256 + b'"}', None),
    (b'{"queue":"\xc3\xa9"}', None),
    (b'{"queue":"a\\"b"}', None),
    (b'{"queue":7}', None),
    (b'{"durability":"Persistent"}', None),
    (b'{"durability":"durable"}', None),
    (b'{"backoff":"linear"}', None),
    (b'{"retries":1,"retries":1}', None),
    (b'{"delay":1}', None),
    (b'{"queue":"q","id":"x"}', None),
    (b'{"queue":"q",}', None),
    (b'{"queue":nul}', None),
])
def test_options_are_read_when_plain(options, read) -> None:
    text = (b'{"version":1,"type":"enqueue","request_id":"q","task":"t","args":{},'
            b'"options":' + options + b"}")
    buf = len(text).to_bytes(4, "big") + text
    bounds = (BOUNDS[0], 64, 10_000, 255)
    for twin in (c, pure):
        [(_, mark, ids)], _, _ = twin.FrameScan(*bounds).payloads(buf)
        if mark == 4:  # (a repeated key or bad JSON leaves the frame unclean, or not marked)
            assert ids[4] == read
        else:
            assert read is None
        assert twin.json_enqueue(text)[1][8] == (0 if read is None else read[0] + 1)


@st.composite
def many_keyed_enqueues(draw) -> bytes:
    """Enqueues with extra plain keys (some repeated, some long) around the enqueue keys,
    and args of many keys, nested or repeated: the top level's key budget and the walk of
    the objects inside it under any limits."""
    message = [("version", "1"), ("type", '"enqueue"'), ("request_id", '"q"'),
               ("task", '"t"')]
    names = st.text(st.characters(min_codepoint=0x61, max_codepoint=0x7A), min_size=1,
                    max_size=6) | st.sampled_from(["job_id", "x", "y" * 9, "z" * 40])
    many = st.integers(0, 8) | st.integers(0, 70)
    extra = draw(st.lists(names, unique=True, max_size=draw(many)))
    if extra and not draw(st.integers(0, 4)):  # one repeated
        extra.append(draw(st.sampled_from(extra)))
    message += [(name, '"s"') for name in extra]
    values = ['1', '"s"', '[[[1]]]', '{"b":{"c":[]}}', 'null', '[1,2,3]', '{"k":"v"}']
    keys = draw(st.lists(names, unique=True, max_size=draw(many)))
    if keys and not draw(st.integers(0, 4)):
        keys.append(draw(st.sampled_from(keys)))
    inner = [(key, draw(st.sampled_from(values * 8 + ['{"a":1,"a":2}', '123456789012345678901'])))
             for key in keys]
    message.append(("args", "{" + ",".join(f'"{k}":{v}' for k, v in inner) + "}"))
    if draw(st.booleans()):
        message.append(("options", draw(st.sampled_from(
            ['{}', '{"queue":"q"}', '{"retries":1,"retries":2}', '{"delay":{"x":[1]}}']))))
    order = draw(st.permutations(range(len(message))))
    return ("{" + ",".join(f'"{message[i][0]}":{message[i][1]}' for i in order)
            + "}").encode()


@MORE
@given(st.lists(many_keyed_enqueues() | enqueue_texts(), min_size=1, max_size=3),
       st.integers(0, 4), st.integers(0, 200), st.integers(0, 45))
def test_an_enqueue_is_marked_as_the_twin_under_any_limits(payloads, depth, nodes,
                                                           key_bytes) -> None:
    # the C scan reads a plain enqueue and walks its objects for the domain at once; under
    # tight bounds (a key too long, too many members or keys, one repeated, too deep) it
    # must still mark exactly as the pure twin, which walks the whole payload first
    buf = b"".join(len(p).to_bytes(4, "big") + p for p in payloads)
    for bounds in ((BOUNDS[0], depth, nodes, key_bytes), BOUNDS):
        wants = pure.split_frames_marked(buf, *bounds)
        assert c.split_frames_marked(buf, *bounds) == wants
        assert c.FrameScan(*bounds).split(buf) == wants
