"""The sans-IO session driven with literal frames: every connection-fatal error, the
envelope rules, the value-domain limits and the correlated refusals."""

from __future__ import annotations

import orjson
import pytest

from tay.protocol.limits import ProtocolLimits
from tay.protocol.requests import Enqueue, Failed, Hello, JobRead, RegisterTasks, ScheduleRequest
from tay.protocol.session import ProtocolSession

HELLO_WORKER = b'{"version":1,"type":"hello","request_id":"h1","mode":"worker","runtime_id":"w-1","max_concurrency":4}'
HELLO_CLIENT = b'{"version":1,"type":"hello","request_id":"h1","mode":"client","runtime_id":"c-1","max_concurrency":0}'


def frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


def decode(frame_bytes: bytes) -> dict:
    length = int.from_bytes(frame_bytes[:4], "big")
    assert length == len(frame_bytes) - 4
    return orjson.loads(frame_bytes[4:])


def fatal_code(data: bytes, limits: ProtocolLimits | None = None) -> str:
    session = ProtocolSession(limits or ProtocolLimits())
    received = session.receive(data)
    assert received.close_frame is not None, received
    message = decode(received.close_frame)
    assert "request_id" not in message and message["type"] == "error"
    assert session.receive(frame(HELLO_WORKER)).outputs == []  # nothing after a fatal error
    return message["error"]["code"]


def hello_session(hello: bytes = HELLO_WORKER, **limits: int) -> ProtocolSession:
    session = ProtocolSession(ProtocolLimits(**limits))
    [accepted] = session.receive(frame(hello)).outputs
    assert isinstance(accepted, Hello)
    return session


def one_error(session: ProtocolSession, payload: bytes) -> dict:
    received = session.receive(frame(payload))
    assert received.close_frame is None
    [reply] = received.outputs
    return decode(reply)


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"\x00\x10\x00\x01", "frame_too_large"),
        (b"\x00\x00\x00\x00", "invalid_frame"),
        (frame(b"{not json"), "malformed_json"),
        (frame(b"\xff\xfe"), "malformed_json"),
        (frame(b'{"version":1,"type":"hello","request_id":"r","x":NaN}'), "malformed_json"),
        (frame(b'{"version":1,"type":"hello","request_id":"r","x":1e999}'), "malformed_json"),
        (frame(b"[1,2]"), "invalid_frame"),
        (frame(b'"hello"'), "invalid_frame"),
        (frame(b'{"type":"hello","request_id":"r"}'), "unsupported_version"),
        (frame(b'{"version":2,"type":"hello","request_id":"r"}'), "unsupported_version"),
        (frame(b'{"version":true,"type":"hello","request_id":"r"}'), "unsupported_version"),
        (frame(b'{"version":1.0,"type":"hello","request_id":"r"}'), "unsupported_version"),
        (frame(b'{"version":1,"v":2,"type":"hello","request_id":"r"}'), "invalid_frame"),
        (frame(b'{"version":1,"type":"launch_rockets","request_id":"r"}'), "unknown_message"),
        (frame(b'{"version":1,"type":7,"request_id":"r"}'), "invalid_frame"),
        (frame(b'{"version":1,"request_id":"r"}'), "invalid_frame"),
        (frame(b'{"version":1,"type":"hello"}'), "invalid_frame"),
        (frame(b'{"version":1,"type":"hello","request_id":""}'), "invalid_frame"),
        (frame(b'{"version":1,"type":"hello","request_id":"a\\u0000b"}'), "invalid_frame"),
        (frame(b'{"version":1,"type":"hello","request_id":"' + b"r" * 129 + b'"}'), "invalid_frame"),
        (frame(b'{"version":1,"type":"hello","request_id":5}'), "invalid_frame"),
    ],
)
def test_connection_fatal_errors(data: bytes, code: str) -> None:
    assert fatal_code(data) == code


def test_legacy_v_is_accepted_and_may_repeat_version() -> None:
    for payload in (
        b'{"v":1,"type":"heartbeat","request_id":"r"}',
        b'{"v":1,"version":1,"type":"heartbeat","request_id":"r"}',
    ):
        session = ProtocolSession(ProtocolLimits())
        [reply] = session.receive(frame(payload)).outputs
        assert reply == frame(b'{"version":1,"type":"heartbeat_ok","request_id":"r"}')


def test_identifier_of_128_multibyte_bytes_is_accepted() -> None:
    rid = "é" * 64  # 128 UTF-8 bytes
    session = ProtocolSession(ProtocolLimits())
    payload = orjson.dumps({"version": 1, "type": "heartbeat", "request_id": rid})
    assert session.receive(frame(payload)).close_frame is None
    rid = "é" * 64 + "x"
    payload = orjson.dumps({"version": 1, "type": "heartbeat", "request_id": rid})
    assert session.receive(frame(payload)).close_frame is not None


def nested(depth: int) -> bytes:
    """An envelope whose deepest container sits at ``depth`` (the envelope is level 1)."""
    inner = b"[]"
    for _ in range(depth - 2):
        inner = b"[" + inner + b"]"
    return b'{"version":1,"type":"heartbeat","request_id":"r","x":' + inner + b"}"


def test_depth_limit_counts_the_envelope() -> None:
    session = ProtocolSession(ProtocolLimits())
    assert session.receive(frame(nested(32))).close_frame is None
    assert fatal_code(frame(nested(33))) == "invalid_frame"


def test_node_limit_counts_the_whole_message() -> None:
    # envelope (1) + 4 fields (4) + list items: 10,000 nodes in total is the maximum.
    def with_items(count: int) -> bytes:
        items = b",".join(b"0" for _ in range(count))
        return b'{"version":1,"type":"heartbeat","request_id":"r","x":[' + items + b"]}"

    assert ProtocolSession(ProtocolLimits()).receive(frame(with_items(9_995))).close_frame is None
    assert fatal_code(frame(with_items(9_996))) == "invalid_frame"


def test_key_size_limit() -> None:
    ok = b'{"version":1,"type":"heartbeat","request_id":"r","' + b"k" * 4096 + b'":1}'
    bad = b'{"version":1,"type":"heartbeat","request_id":"r","' + b"k" * 4097 + b'":1}'
    assert ProtocolSession(ProtocolLimits()).receive(frame(ok)).close_frame is None
    assert fatal_code(frame(bad)) == "invalid_frame"


def test_frame_limit_is_checked_before_the_payload_arrives() -> None:
    limits = ProtocolLimits(max_frame_bytes=300)
    session = ProtocolSession(limits)
    received = session.receive((301).to_bytes(4, "big"))  # only the header
    assert decode(received.close_frame)["error"]["code"] == "frame_too_large"


def test_partial_frames_are_reassembled_byte_by_byte() -> None:
    session = ProtocolSession(ProtocolLimits())
    outputs = []
    for byte in frame(HELLO_WORKER):
        outputs += session.receive(bytes([byte])).outputs
    assert outputs == [Hello("h1", "worker", "w-1", 4)]


def test_frames_before_a_fatal_one_are_still_processed() -> None:
    session = ProtocolSession(ProtocolLimits())
    received = session.receive(frame(HELLO_WORKER) + b"\x00\x00\x00\x00")
    assert received.outputs == [Hello("h1", "worker", "w-1", 4)]
    assert decode(received.close_frame)["error"]["code"] == "invalid_frame"


def test_buffer_limit_closes_the_connection() -> None:
    from tay.protocol.framing import FrameDecoder

    decoder = FrameDecoder(max_frame=1_000, buffer_limit=100)
    assert decoder.feed((900).to_bytes(4, "big") + b"x" * 96) == []
    assert decoder.fatal is None
    decoder.feed(b"x")
    assert decoder.fatal is not None and decoder.fatal.code == "buffer_limit"
    assert ProtocolLimits(max_frame_bytes=1_000).buffer_limit == 2_008


def test_requests_before_hello_are_refused_but_connection_lives() -> None:
    session = ProtocolSession(ProtocolLimits())
    reply = one_error(session, b'{"version":1,"type":"enqueue","request_id":"e1","task":"t","args":{}}')
    assert reply == {"version": 1, "type": "error", "request_id": "e1",
                     "error": {"code": "hello_required", "message": "the first request must be hello"}}
    assert session.receive(frame(HELLO_WORKER)).outputs == [Hello("h1", "worker", "w-1", 4)]
    assert one_error(session, HELLO_WORKER)["error"]["code"] == "already_hello"


@pytest.mark.parametrize(
    "fields",
    [
        b'"mode":"boss","runtime_id":"r","max_concurrency":1',
        b'"mode":"client","runtime_id":"r","max_concurrency":1',
        b'"mode":"worker","runtime_id":"r","max_concurrency":0',
        b'"mode":"worker","runtime_id":"r"',
        b'"mode":"worker","runtime_id":"r","max_concurrency":65536',
        b'"mode":"worker","runtime_id":"r","max_concurrency":true',
        b'"mode":"worker","runtime_id":"","max_concurrency":1',
        b'"mode":"worker","max_concurrency":1',
    ],
)
def test_invalid_hello(fields: bytes) -> None:
    session = ProtocolSession(ProtocolLimits())
    reply = one_error(session, b'{"version":1,"type":"hello","request_id":"h",' + fields + b"}")
    assert reply["error"]["code"] == "invalid_hello"
    assert session.hello is None


def test_client_mode_defaults_to_zero_concurrency() -> None:
    session = ProtocolSession(ProtocolLimits())
    payload = b'{"version":1,"type":"hello","request_id":"h","mode":"client","runtime_id":"c"}'
    assert session.receive(frame(payload)).outputs == [Hello("h", "client", "c", 0)]


def test_register_tasks_rules() -> None:
    session = hello_session(max_tasks_per_message=2)
    ok = b'{"version":1,"type":"register_tasks","request_id":"t","tasks":["a","b"]}'
    assert session.receive(frame(ok)).outputs == [RegisterTasks("t", ("a", "b"))]
    for tasks in (b'["a","a"]', b'["a","b","c"]', b'[]', b'"a"', b'[""]', b'[1]',
                  b'["' + b"x" * 256 + b'"]'):
        payload = b'{"version":1,"type":"register_tasks","request_id":"t","tasks":' + tasks + b"}"
        assert one_error(session, payload)["error"]["code"] == "invalid_tasks"
    client = hello_session(HELLO_CLIENT)
    assert one_error(client, ok)["error"]["code"] == "client_cannot_execute"


def test_enqueue_shape() -> None:
    session = hello_session(HELLO_CLIENT)
    good = b'{"version":1,"type":"enqueue","request_id":"e","task":"t","args":{"a":null},"options":{"retries":2}}'
    assert session.receive(frame(good)).outputs == [
        Enqueue("e", "t", {"a": None}, {"retries": 2}, size=len(good))]  # size: for admission
    no_options = b'{"version":1,"type":"enqueue","request_id":"e","task":"t","args":{}}'
    assert session.receive(frame(no_options)).outputs == [
        Enqueue("e", "t", {}, {}, size=len(no_options))]  # absent options: none
    for body in (b'"task":"t"', b'"task":"t","args":[]', b'"task":1,"args":{}',
                 b'"task":"t","args":{},"options":[]'):
        payload = b'{"version":1,"type":"enqueue","request_id":"e",' + body + b"}"
        assert one_error(session, payload)["error"]["code"] == "invalid_enqueue"
    null_options = b'{"version":1,"type":"enqueue","request_id":"e","task":"t","args":{},' \
        b'"options":null}'  # present but not an object: refused, not read as absent
    assert one_error(session, null_options)["error"] == {
        "code": "invalid_enqueue", "field": "options", "message": "options must be a JSON object"}


def test_job_id_checks() -> None:
    session = hello_session(HELLO_CLIENT)
    good = b'{"version":1,"type":"cancel","request_id":"c","job_id":"0123456789abcdef0123456789abcdef"}'
    assert session.receive(frame(good)).outputs == [
        JobRead("c", "cancel", "0123456789abcdef0123456789abcdef")]
    for job_id in (b'"0123456789ABCDEF0123456789abcdef"', b'"' + b"0" * 32 + b'"', b'"abc"', b"7"):
        payload = b'{"version":1,"type":"status","request_id":"s","job_id":' + job_id + b"}"
        assert one_error(session, payload)["error"]["code"] == "invalid_job_id"


def test_pending_limit_and_settle() -> None:
    session = hello_session(HELLO_CLIENT, max_pending_requests=2)
    status = b'{"version":1,"type":"status","request_id":"s","job_id":"0123456789abcdef0123456789abcdef"}'
    assert isinstance(session.receive(frame(status) + frame(status)).outputs[1], JobRead)
    assert one_error(session, status)["error"]["code"] == "too_many_requests"
    session.settle()
    assert isinstance(session.receive(frame(status)).outputs[0], JobRead)


def test_failure_payload_is_normalised() -> None:
    session = hello_session(error_bytes=64)
    good = (b'{"version":1,"type":"failed","request_id":"f","reservation_id":"r","execution_id":"x",'
            b'"job_id":"j","error":{"type":"ValueError","message":"m","cancelled":true}}')
    assert session.receive(frame(good)).outputs == [
        Failed("f", "r", "x", {"type": "ValueError", "message": "m"})]
    cases = {
        b'"error":"boom"': "invalid_failure",
        b'"error":{"other":1}': "invalid_failure",
        b'"error":{"message":5}': "invalid_failure",
        b'"error":{"type":"' + b"T" * 129 + b'"}': "invalid_failure",
        b'"error":{"message":"' + b"m" * 80 + b'"}': "error_too_large",
        b'"execution_id":"x","error":{"type":"E"}': "invalid_execution",
    }
    for body, code in cases.items():
        ids = b'"reservation_id":"r",' if b"execution_id" in body else b'"reservation_id":"r","execution_id":"x",'
        payload = b'{"version":1,"type":"failed","request_id":"f",' + ids + body + b"}"
        if body.startswith(b'"execution_id"'):
            payload = b'{"version":1,"type":"failed","request_id":"f",' + body + b"}"
        assert one_error(session, payload)["error"]["code"] == code, body


def test_result_size_limit() -> None:
    session = hello_session(result_bytes=10)
    head = b'{"version":1,"type":"succeeded","request_id":"s","reservation_id":"r","execution_id":"x",'
    assert len(session.receive(frame(head + b'"result":"12345678"}')).outputs) == 1
    assert one_error(session, head + b'"result":"123456789"}')["error"]["code"] == "result_too_large"


def test_heartbeat_ping_pong_and_bulk_schedules() -> None:
    session = hello_session()
    [beat] = session.receive(frame(b'{"version":1,"type":"heartbeat","request_id":"b"}')).outputs
    assert beat == frame(b'{"version":1,"type":"heartbeat_ok","request_id":"b"}')
    [pong] = session.receive(frame(b'{"version":1,"type":"pong","request_id":"p","ping_id":"x"}')).outputs
    assert pong == frame(b'{"version":1,"type":"accepted","request_id":"p"}')
    [ping] = session.receive(frame(b'{"version":1,"type":"ping","request_id":"q","ping_id":"z"}')).outputs
    assert ping == frame(b'{"version":1,"type":"pong","request_id":"q","ping_id":"z"}')
    reply = one_error(session, b'{"version":1,"type":"register_schedules","request_id":"r"}')
    assert reply["error"]["code"] == "bulk_scheduling_unsupported"


def test_schedule_requests_pass_their_body_through() -> None:
    session = hello_session(HELLO_CLIENT)
    payload = b'{"version":1,"type":"schedules","request_id":"l","limit":5}'
    assert session.receive(frame(payload)).outputs == [ScheduleRequest("l", "schedules", {"limit": 5})]
    assert session.pending == 1


@pytest.mark.parametrize("payload", [
    b'{"version":1,"type":"heartbeat","request_id":"a","request_id":"b"}',
    b'{"version":1,"type":"enqueue","request_id":"r","task":"a","task":"b","args":{}}',
    b'{"version":1,"type":"heartbeat","request_id":"r","x":[{"k":1,"k":1}]}',
    b'{"version":1,"type":"heartbeat","request_id":"r:1","x":{"u":"a:b","u" :"c"}}',
])
def test_duplicate_keys_are_connection_fatal(payload: bytes) -> None:
    session = ProtocolSession(ProtocolLimits())
    received = session.receive(frame(payload))
    assert received.outputs == []
    message = decode(received.close_frame)
    assert message["error"]["code"] == "invalid_frame"
    assert "duplicate object key" in message["error"]["message"]


def test_colons_inside_strings_are_not_duplicate_keys() -> None:
    session = hello_session(HELLO_CLIENT)
    payload = (b'{"version":1,"type":"enqueue","request_id":"r:1","task":"a:b","args":'
               b'{"url":"http://h:1/\\":","at":"12:00"},"options":{"submission_id":"o:1"}}')
    [enqueue] = session.receive(frame(payload)).outputs
    assert isinstance(enqueue, Enqueue) and enqueue.args == {"url": 'http://h:1/":',
                                                             "at": "12:00"}


def test_reports_the_decoder_reads_itself_are_what_the_parsers_build() -> None:
    """Plain started/succeeded reports skip the JSON decoder (tay._native.json_report): the
    same requests come out, byte by byte as well as whole, and a result limit below a null's
    4 bytes still refuses a succeeded report as the parser does."""
    from tay.protocol.requests import Started, Succeeded

    started = b'{"version":1,"type":"started","request_id":"s1","reservation_id":"r-1",' \
              b'"execution_id":"e-1"}'
    succeeded = b'{"type":"succeeded", "version":1,"execution_id":"e-1","request_id":"d1",' \
                b'"reservation_id":"r-1","result":null}'
    wants = [Started("s1", "r-1", "e-1"), Succeeded("d1", "r-1", "e-1", None)]
    session = hello_session()
    assert session.receive(frame(started) + frame(succeeded)).outputs == wants
    data, outputs = frame(started) + frame(succeeded), []
    for index in range(len(data)):
        outputs += session.receive(data[index:index + 1]).outputs
    assert outputs == wants
    tight = hello_session(result_bytes=3)
    assert tight.receive(frame(started)).outputs == wants[:1]
    assert one_error(tight, succeeded)["error"]["code"] == "result_too_large"
    before_hello = ProtocolSession(ProtocolLimits()).receive(frame(started)).outputs
    assert decode(before_hello[0])["error"]["code"] == "hello_required"


def test_enqueues_the_decoder_reads_itself_are_what_the_parsers_build() -> None:
    """An enqueue whose top level is plain (tay._native.json_enqueue) skips the whole
    message's decode, the envelope check and the parse: the same request comes out, byte by
    byte as well as whole; one whose args or options are not valid JSON, the pending limit
    and an enqueue before hello give exactly the general path's refusals."""
    from tay._native import split_frames_marked
    from tests.fuzz.test_session_reports import _Unmarked  # every mark taken back to 1

    limits = ProtocolLimits()
    bounds = (limits.max_frame_bytes, limits.max_depth, limits.max_nodes, limits.max_key_bytes)
    plain = b'{"version":1,"type":"enqueue","request_id":"e1","task":"t.a",' \
            b'"args":{"a":[1,"}"],"b":{"c":null}},"options":{"queue":"q","retries":2}}'
    spaced = b' {"args" : {"x":"\xc3\xa9\\"}"}, "request_id":"e2", "task":"t.b",' \
             b' "type":"enqueue", "version":1 } '
    assert [mark for _, _, mark, _ in split_frames_marked(frame(plain) + frame(spaced),
                                                          *bounds)[0]] == [4, 4]
    wants = [Enqueue("e1", "t.a", {"a": [1, "}"], "b": {"c": None}},
                     {"queue": "q", "retries": 2}, size=len(plain)),
             Enqueue("e2", "t.b", {"x": 'é"}'}, {}, size=len(spaced))]
    session = hello_session(HELLO_CLIENT)
    assert session.receive(frame(plain) + frame(spaced)).outputs == wants
    data, outputs = frame(plain) + frame(spaced), []
    for index in range(len(data)):
        outputs += session.receive(data[index:index + 1]).outputs
    assert outputs == wants
    # a clean, plain top level around args that are not JSON: the exact path's fatal error
    for broken in (b'{"version":1,"type":"enqueue","request_id":"e","task":"t","args":{"a":}}',
                   b'{"version":1,"type":"enqueue","request_id":"e","task":"t","args":{},'
                   b'"options":{"retries":01}}',
                   b'{"version":1,"type":"enqueue","request_id":"e","task":"t",'
                   b'"args":{"a":"\xff"}}'):
        assert split_frames_marked(frame(broken), *bounds)[0][0][2] == 4
        general = ProtocolSession(limits)
        general.receive(frame(HELLO_CLIENT))
        general.decoder = _Unmarked(general.decoder)
        want = general.receive(frame(broken)).close_frame
        assert want is not None and hello_session(HELLO_CLIENT).receive(
            frame(broken)).close_frame == want
    # the pending limit, counted and refused as the general path does
    tight = hello_session(HELLO_CLIENT, max_pending_requests=2)
    assert len(tight.receive(frame(plain) + frame(spaced)).outputs) == 2
    assert one_error(tight, plain) == {
        "version": 1, "type": "error", "request_id": "e1",
        "error": {"code": "too_many_requests", "message": "more than 2 requests pending"}}
    assert tight.pending == 2
    tight.settle()
    assert tight.receive(frame(spaced)).outputs == wants[1:]
    before_hello = ProtocolSession(limits).receive(frame(plain)).outputs
    assert decode(before_hello[0])["error"]["code"] == "hello_required"
