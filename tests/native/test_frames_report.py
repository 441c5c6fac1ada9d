"""``json_report`` / ``split_frames_marked``: a worker's ``started`` and ``succeeded`` reports
read without a JSON decoder (csrc/frames_check.c).

A report mark is a promise: the payload is valid JSON that decodes to exactly the report it
names (version 1, the three ids at the spans given, a null or absent result, no other key),
so the fast path reads what the decoder would. The scan may leave any payload unmarked (the
decoder then runs), never the other way round. The C and pure twins mark alike."""

from __future__ import annotations

import json

import orjson
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
KEYS = ["version", "type", "request_id", "reservation_id", "execution_id", "result"]
PLAIN = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E,
                              blacklist_characters='"\\'), min_size=1, max_size=130)
ANY_TEXT = PLAIN | st.text(max_size=6) | st.sampled_from(["", "a\"b", "a\\b", "é", "\x00",
                                                           "x" * 128, "x" * 129])
SPACE = st.sampled_from(["", "", "", " ", "\n", "\t", "\r", "  "])
NOT_SPACE = st.sampled_from(["\x0b", "\xa0", "\x00", "x", ",", ":"])


@st.composite
def report_texts(draw) -> bytes:
    """Report-shaped objects: usually close to what a worker sends, with every way of
    straying from the subset the scan reads (other keys, types, numbers, spacing, escapes)."""
    kind = draw(st.sampled_from(["started", "succeeded", "started", "succeeded", "failed",
                                 "enqueue", "Started"]))
    ids = PLAIN if draw(st.integers(0, 3)) else ANY_TEXT  # mostly plain, as workers send
    message = {"version": draw(st.sampled_from([1] * 8 + [1.0, 2, True, "1", 0, 10])),
               "type": kind, "request_id": draw(ids), "reservation_id": draw(ids),
               "execution_id": draw(ids)}
    if draw(st.booleans()):
        message["result"] = draw(st.none() | st.none() | json_values)
    if draw(st.booleans()):  # tay-client sends the job's id too
        message["job_id"] = draw(ids)
    if not draw(st.integers(0, 3)):  # a key dropped, or one added or changed
        for key in draw(st.lists(st.sampled_from(KEYS + ["v", "extra"]), max_size=2)):
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
    if draw(st.integers(0, 14)) == 0:  # a byte flipped, cut or added
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.binary(max_size=2)) + text[at + draw(st.integers(0, 2)):]
    if draw(st.integers(0, 14)) == 0:  # a key repeated
        text = b'{"request_id":"dup",' + text.lstrip()[1:]
    return text


def read(text: bytes, mark: int, spans: tuple[int, ...]) -> dict:
    """The report a mark and its spans stand for."""
    ids = [text[spans[k]:spans[k + 1]].decode("ascii") for k in (0, 2, 4)]
    return {"version": 1, "type": "started" if mark == 2 else "succeeded",
            "request_id": ids[0], "reservation_id": ids[1], "execution_id": ids[2]}


@MORE
@given(report_texts())
def test_a_report_mark_is_what_the_decoder_reads(text) -> None:
    mark, spans = agreed_mark((c, pure), "json_report", text)
    if not mark:
        return
    decoded = orjson.loads(text)  # valid JSON, or this raises
    result_key = decoded.pop("result", None)
    assert result_key is None
    report = read(text, mark, spans)
    others = {key: decoded.pop(key) for key in list(decoded) if key not in report}
    assert decoded == report
    assert "v" not in others and all(type(value) is str for value in others.values())
    assert all(1 <= len(decoded[key].encode()) <= 128
               for key in ("request_id", "reservation_id", "execution_id"))


@MORE
@given(st.lists(report_texts() | st.binary(max_size=40), min_size=1, max_size=6),
       st.data())
def test_split_frames_marked_marks_each_frame_as_the_twin(payloads, data) -> None:
    buf = b"".join(len(p).to_bytes(4, "big") + p for p in payloads)
    buf += data.draw(st.binary(max_size=6))
    wants = pure.split_frames_marked(buf, *BOUNDS)
    for twin in (c, pure):
        for given_buf in (buf, bytearray(buf)):
            got = twin.split_frames_marked(given_buf, *BOUNDS)
            assert got == wants
    frames, consumed, error = wants
    split = pure.split_frames(buf, BOUNDS[0])
    # a decoder's prepared scan (FrameScan, reused read after read) splits as the function
    for scan in (c.FrameScan(*BOUNDS), pure.FrameScan(*BOUNDS)):
        for given_buf in (buf, bytearray(buf), buf[:len(buf) // 2], buf):
            assert scan.split(given_buf) == pure.split_frames_marked(given_buf, *BOUNDS)
    assert (consumed, error) == split[1:]
    assert [(start, end) for start, end, _, _ in frames] == split[0]
    for start, end, mark, ids in frames:
        # a report is clean too
        assert (mark > 0) == pure.json_domain_clean(buf[start:end], *BOUNDS[1:])
        if mark > 1:
            assert ids == tuple(read(buf[start:end], mark,
                                     pure.json_report(buf[start:end])[1])[key]
                                for key in ("request_id", "reservation_id", "execution_id"))
        else:
            assert ids is None


def test_what_workers_send_is_marked() -> None:
    ids = {"reservation_id": "3f1c9a", "execution_id": "e-17"}
    started = orjson.dumps({"version": 1, "type": "started", "request_id": "q1", **ids})
    succeeded = orjson.dumps({"version": 1, "type": "succeeded", "request_id": "q2", **ids,
                              "result": None})
    spaced = b' { "type" : "succeeded" , "version" : 1 , "request_id" : "q3" ,' \
             b' "execution_id" : "e-17" , "reservation_id" : "3f1c9a" } '
    # as tay-client 1.4.0 writes them: sorted keys, compact, the job's id along
    client = json.dumps({"version": 1, "type": "succeeded", "request_id": "9f" * 16,
                         "job_id": "ab" * 16, "result": None, **ids}, sort_keys=True,
                        separators=(",", ":")).encode()
    for twin in (c, pure):
        assert twin.json_report(started)[0] == 2
        assert twin.json_report(succeeded)[0] == 3
        assert twin.json_report(spaced)[0] == 3
        assert twin.json_report(client)[0] == 3
        for other in (b'{"version":1,"type":"succeeded","request_id":"q","reservation_id":"r",'
                      b'"execution_id":"e","result":0}',
                      b'{"version":1,"type":"started","request_id":"q","reservation_id":"r",'
                      b'"execution_id":"e","v":1}',
                      b'{"version":1,"type":"started","request_id":"q","reservation_id":"r",'
                      b'"execution_id":"e","v":"x"}',
                      b'{"version":1,"type":"started","request_id":"q","reservation_id":"r",'
                      b'"execution_id":"e","job_id":7}',
                      b'{"version":1,"type":"started","request_id":"q\\u0041",'
                      b'"reservation_id":"r","execution_id":"e"}',
                      b'{"version":1,"type":"started","request_id":"","reservation_id":"r",'
                      b'"execution_id":"e"}',
                      b'{"version":1,"type":"started","reservation_id":"r","execution_id":"e"}',
                      b'{"version":10,"type":"started","request_id":"q","reservation_id":"r",'
                      b'"execution_id":"e"}',
                      b'{"version":1,"type":"started","request_id":"q","reservation_id":"r",'
                      b'"execution_id":"e"}x',
                      b'{"version":1,"type":"started","request_id":"q","request_id":"q",'
                      b'"reservation_id":"r","execution_id":"e"}'):
            assert twin.json_report(other) == (0, ())


@st.composite
def many_keyed_reports(draw) -> bytes:
    """Reports with extra plain keys (some repeated, some long) around the report keys."""
    message = [("version", 1), ("type", draw(st.sampled_from(["started", "succeeded"]))),
               ("request_id", "q"), ("reservation_id", "r"), ("execution_id", "e")]
    names = st.sampled_from(["job_id", "x", "y" * 9, "z" * 40]) | st.text(
        st.characters(min_codepoint=0x61, max_codepoint=0x66), min_size=1, max_size=3)
    message += [(draw(names), "s") for _ in range(draw(st.integers(0, 70)))]
    order = draw(st.permutations(range(len(message))))
    return ("{" + ",".join(f'"{message[i][0]}":{json.dumps(message[i][1])}'
                           for i in order) + "}").encode()


@MORE
@given(st.lists(report_texts() | many_keyed_reports(), min_size=1, max_size=3),
       st.integers(0, 3), st.integers(0, 80), st.integers(0, 45))
def test_a_report_is_marked_as_the_twin_under_any_limits(payloads, depth, nodes,
                                                         key_bytes) -> None:
    # the C scan takes a report that is surely within the bounds without the domain walk;
    # under tight bounds (a key too long, too many members, one repeated) it must still
    # mark exactly as the pure twin, which always walks
    buf = b"".join(len(p).to_bytes(4, "big") + p for p in payloads)
    bounds = (BOUNDS[0], depth, nodes, key_bytes)
    wants = pure.split_frames_marked(buf, *bounds)
    assert c.split_frames_marked(buf, *bounds) == wants
    assert c.FrameScan(*bounds).split(buf) == wants


@MORE
@given(st.lists(report_texts() | st.binary(max_size=40), min_size=1, max_size=6),
       st.binary(max_size=6))
def test_payloads_are_the_split_frames_sliced(payloads, tail) -> None:
    # FrameScan.payloads (what a decoder hands on) is split's rows with each payload sliced
    buf = b"".join(len(p).to_bytes(4, "big") + p for p in payloads) + tail
    frames, consumed, error = pure.split_frames_marked(buf, *BOUNDS)
    wants = ([(buf[start:end], mark, ids) for start, end, mark, ids in frames], consumed, error)
    for scan in (c.FrameScan(*BOUNDS), pure.FrameScan(*BOUNDS)):
        for given_buf in (buf, buf[:len(buf) // 2], buf):
            got = scan.payloads(given_buf)
            frames, consumed, error = pure.split_frames_marked(given_buf, *BOUNDS)
            assert got == ([(given_buf[start:end], mark, ids)
                            for start, end, mark, ids in frames], consumed, error)
        assert scan.payloads(buf) == wants


def test_every_byte_at_every_place_of_an_id_is_read_as_the_twin_reads_it() -> None:
    # the C scan takes a plain string eight bytes at a time: a byte that ends the run
    # (quote, backslash, control, DEL, >= 0x80) must stop it wherever it stands in a word
    for value in range(256):
        for place in range(19):
            rid = b"a" * place + bytes([value]) + b"b" * (18 - place)
            text = (b'{"version":1,"type":"started","request_id":"' + rid +
                    b'","reservation_id":"r","execution_id":"e"}')
            assert c.json_report(text) == pure.json_report(text), (value, place)
