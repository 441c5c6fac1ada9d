"""``json_enqueued``: an ``enqueued`` reply read without a JSON decoder (csrc/frames_check.c),
for the SDK's producer, which returns only the job id and the job's durability.

A mark is a promise: the payload is valid JSON, orjson reads it exactly (no repeated key, no
integer of 19+ digits) and it decodes to the reply the spans name (version 1, type
``enqueued``, the request id and job id at their spans, a job object whose ``durability`` is
the string at its span, or not a string, or absent). The scan may leave any payload unmarked
(the SDK then decodes it), never the other way round. The C and pure twins mark alike."""

from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tay._native import pure
from tests.build_guard import c_twin
from tests.native.twin_marks import agreed_mark
from tests.storage.json_strategies import SETTINGS, json_values

c = c_twin()
MORE = settings(SETTINGS, max_examples=400)
PLAIN = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E, blacklist_characters='"\\'),
                min_size=1, max_size=130)
ANY_TEXT = PLAIN | st.text(max_size=6) | st.sampled_from(["", "a\"b", "a\\b", "é", "x" * 128, "x" * 129])
NUMBERS = st.sampled_from(["0", "-0", "7", "-12", "1.5", "-0.25", "01", "1.", ".5", "1e3", "1E-2", "+1", "--1",
                           "1" * 18, "1" * 19, "0." + "1" * 18, "0." + "1" * 19, "12345678901234567890"])
PLAIN_VALUES = st.recursive(  # what the subset holds, mostly
    st.none() | st.booleans() | st.integers(-(2**64), 2**64) | st.floats(allow_nan=False, allow_infinity=False) | PLAIN,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(PLAIN, children, max_size=3), max_leaves=12)
LITERALS = st.sampled_from(["true", "false", "null", "tru", "nul", "True", "nulll"])


def serve_reply(request_id: str, job_id: str, job: dict) -> bytes:
    """As tay serve writes it (compact, its keys in this order; big integers too)."""
    return json.dumps({"version": 1, "type": "enqueued", "request_id": request_id, "job_id": job_id, "job": job},
                      separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass")


@st.composite
def reply_texts(draw) -> bytes:
    """Replies close to what tay serve writes, with every way of straying from the subset."""
    job = {"id": draw(PLAIN), "task": draw(PLAIN), "args": draw(st.dictionaries(PLAIN, PLAIN_VALUES) | json_values),
           "state": "available", "attempt": draw(st.integers(0, 2**70)), "queue": draw(PLAIN | st.none()),
           "errors": draw(st.lists(PLAIN_VALUES, max_size=2))}
    if draw(st.integers(0, 4)):
        job["durability"] = draw(st.sampled_from(["persistent", "volatile", "other", ""]) | PLAIN_VALUES)
    ids = PLAIN if draw(st.integers(0, 3)) else ANY_TEXT
    text = serve_reply(draw(ids), draw(ids), job)
    if draw(st.integers(0, 5)) == 0:  # a number or literal written in any way, valid or not
        text = text[:-2] + b',"n":' + draw(NUMBERS | LITERALS).encode() + b"}}"
    if draw(st.integers(0, 8)) == 0:  # whitespace, which the subset leaves out
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.sampled_from([b" ", b"\n", b"\t"])) + text[at:]
    if draw(st.integers(0, 8)) == 0:  # a key repeated, in the job or in its args
        text = text.replace(b'"job":{', b'"job":{"id":"x",', 1) if draw(st.booleans()) else \
            text.replace(b'"args":{', b'"args":{"a":1,"a":2,', 1)
    if draw(st.integers(0, 8)) == 0:  # a byte flipped, cut or added
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.binary(max_size=2)) + text[at + draw(st.integers(0, 2)):]
    return text


@MORE
@given(reply_texts())
def test_an_enqueued_mark_is_what_the_decoder_reads(text) -> None:
    mark, spans = agreed_mark((c, pure), "json_enqueued", text)
    if not mark:
        return
    decoded = orjson.loads(text)  # valid JSON, or this raises
    assert decoded == json.loads(text)  # exactly: big integers stay integers
    assert list(decoded) == ["version", "type", "request_id", "job_id", "job"]
    assert decoded["version"] == 1 and type(decoded["version"]) is int and decoded["type"] == "enqueued"
    assert decoded["request_id"] == text[spans[0]:spans[1]].decode("ascii")
    assert 1 <= len(decoded["request_id"]) <= 128
    assert decoded["job_id"] == text[spans[2]:spans[3]].decode("ascii") != ""
    job = decoded["job"]
    assert type(job) is dict
    durability = job.get("durability")
    if type(durability) is str:
        assert durability == text[spans[4]:spans[5]].decode("ascii")
    else:
        assert spans[4:] == (0, 0)


def test_a_repeated_key_anywhere_is_not_marked() -> None:
    # orjson keeps the last of a repeated key; the SDK refuses the text, so it is not marked
    for text in (b'{"version":1,"type":"enqueued","request_id":"r","job_id":"j","job":{"a":1,"a":1}}',
                 b'{"version":1,"type":"enqueued","request_id":"r","job_id":"j","job":{"x":{"b":[{"c":1,"c":2}]}}}'):
        for twin in (c, pure):
            assert twin.json_enqueued(text) == (0, ())


@pytest.mark.parametrize("twin", [c, pure], ids=["c", "pure"])
def test_the_serve_reply_is_marked_with_its_spans(twin) -> None:
    text = serve_reply("abc-1", "00ff", {"id": "00ff", "args": {"durability": "volatile", "n": [1, -2.5, None]},
                                        "errors": [], "durability": "persistent", "completed_at": None})
    mark, spans = twin.json_enqueued(text)
    assert mark == 1
    assert [text[spans[k]:spans[k + 1]] for k in (0, 2, 4)] == [b"abc-1", b"00ff", b"persistent"]
    # the durability of the job itself, not a member of that name deeper in it
    text = serve_reply("abc-1", "00ff", {"args": {"durability": "volatile"}})
    assert twin.json_enqueued(text) == (1, (text.index(b"abc-1"), text.index(b"abc-1") + 5,
                                            text.index(b"00ff"), text.index(b"00ff") + 4, 0, 0))
    # bytes after the reply, a job that is not an object, an empty job id: left to the decoder
    for other in (text + b" ", text[:-1], serve_reply("r", "", {}), text.replace(b'"job":{', b'"job":[', 1)):
        assert twin.json_enqueued(other) == (0, ())
