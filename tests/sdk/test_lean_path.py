"""The SDK's per-message path: spliced report frames, checks without copies, the fast
strict decoder, a connection that splits whole buffers and times requests out with one
timer, and the real server driven from uvloop (as workers and the benchmark run it)."""

import asyncio
import json
import math

import pytest
import uvloop
from hypothesis import given, settings
from hypothesis import strategies as st

from tay import Tay
from tay.errors import ConnectionLost, ProtocolError, ValidationError
from tay.sdk.connection import Link
from tay.sdk.wire import (RequestIds, decode_payload, json_bytes, normalize_json, plain_json, report_frame,
                          report_ids)

from .peer import Peer

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=20,
)
identifiers = st.text(min_size=1, max_size=40) | st.sampled_from(
    ['x","reservation_id":"y', ',"reservation_id":', '\\",\"reservation_id\":', "\u2028\"\\"])
request_ids = st.builds(lambda prefix, number: f"{prefix:016x}-{number:x}",  # what RequestIds gives
                        st.integers(0, 2**64 - 1), st.integers(1, 2**40))


@settings(max_examples=200, deadline=None)
@given(identifiers, identifiers, identifiers, request_ids, st.sampled_from(["started", "succeeded"]),
       st.none() | json_values)
def test_a_spliced_report_is_byte_for_byte_the_encoded_message(execution, job, reservation, request, kind, result):
    ids = {"reservation_id": reservation, "execution_id": execution, "job_id": job}
    message = {**ids, "request_id": request, "type": kind, "version": 1}
    if kind == "succeeded":
        message["result"] = result
    frame = report_frame(kind, request, report_ids(ids), json_bytes(result) if kind == "succeeded" else None)
    payload = json_bytes(message)
    assert frame == len(payload).to_bytes(4, "big") + payload


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_plain_json_is_normalize_json_without_the_copy(value):
    assert plain_json(value) is value
    assert normalize_json(value) == value


@pytest.mark.parametrize("value", [(1, 2), {1, 2}, b"x", math.nan, math.inf, {1: "a"}, object(), [[{"a": (1,)}]]])
def test_plain_json_refuses_what_normalize_json_refuses(value):
    with pytest.raises(ValidationError):
        plain_json({"v": value})
    with pytest.raises(ValidationError):
        normalize_json({"v": value})


def test_plain_json_copies_other_mappings_into_dicts():
    from types import MappingProxyType

    value = {"outer": MappingProxyType({"inner": [1, 2]})}
    copied = plain_json(value)
    assert copied == {"outer": {"inner": [1, 2]}} and type(copied["outer"]) is dict


@settings(max_examples=200, deadline=None)
@given(json_values, st.text(alphabet="0123456789:,[ ", max_size=60))
def test_the_fast_decoder_gives_what_the_exact_parse_gives(value, tricky):
    # digit runs and colons inside strings look like long integers and extra members
    payload = json_bytes({"version": 1, "type": "x", "request_id": "1234567890123456789012",
                          "value": value, "text": tricky})
    assert decode_payload(payload) == json.loads(payload)


@pytest.mark.parametrize(("payload", "fragment"), [
    (b'{"version":1,"type":"a","request_id":"x","k":"a:b","k":2}', "repeats the key 'k'"),
    (b'{"version":1,"type":"a","request_id":"x","o":{"k":"1:2","k":3}}', "repeats the key 'k'"),
])
def test_a_repeated_key_is_refused_even_with_colons_in_strings(payload, fragment):
    with pytest.raises(ProtocolError, match=fragment):
        decode_payload(payload)


def test_integers_beyond_64_bits_stay_exact():
    payload = b'{"version":1,"type":"x","request_id":"r","n":[1, -123456789012345678901234567890]}'
    assert decode_payload(payload)["n"] == [1, -123456789012345678901234567890]


def test_request_ids_are_unique_per_connection_and_differ_between_connections():
    first, second = RequestIds(), RequestIds()
    seen = [first() for _ in range(70_000)]
    assert len(set(seen)) == 70_000 and all(len(rid) <= 128 for rid in seen)
    assert second() not in seen


class _Wire:
    """The transport a Link writes to, recording what left."""

    def __init__(self):
        self.written = []
        self.closed = False

    def write(self, data):
        self.written.append(bytes(data))

    def is_closing(self):
        return self.closed

    def close(self):
        self.closed = True


def _frame(message):
    payload = json_bytes({"version": 1, **message})
    return len(payload).to_bytes(4, "big") + payload


def test_a_link_dispatches_frames_split_at_any_byte_and_writes_once_per_loop_turn():
    async def scenario():
        seen = []
        data = b"".join(_frame({"type": "ping", "request_id": f"p{i}", "n": i}) for i in range(3))
        for cut in range(1, len(data)):
            link = Link(max_frame_bytes=1024, on_message=lambda _link, message: seen.append(message["n"]))
            wire = _Wire()
            link.connection_made(wire)
            link.data_received(data[:cut])
            link.data_received(data[cut:])
            assert link.is_open
        assert seen == [0, 1, 2] * (len(data) - 1)
        link.send_event("pong", {"ping_id": 1})
        link.send_event("pong", {"ping_id": 2})
        assert wire.written == []
        await asyncio.sleep(0)
        assert len(wire.written) == 1 and wire.written[0].count(b'"pong"') == 2

    asyncio.run(scenario())


@pytest.mark.parametrize("pieces", [[(65).to_bytes(4, "big")], [b"\x00\x00", b"\x00\x41"],
                                    [b"\x00", b"\x00\x00\x00"]])
def test_a_link_drops_the_connection_on_a_bad_length_as_soon_as_it_is_whole(pieces):
    async def scenario():
        link = Link(max_frame_bytes=64, on_message=lambda *_: None)
        wire = _Wire()
        link.connection_made(wire)
        for piece in pieces:
            link.data_received(piece)
        assert not link.is_open and wire.closed and isinstance(link.close_reason, ProtocolError)

    asyncio.run(scenario())


def test_requests_time_out_one_by_one_on_one_timer():
    async def scenario():
        link = Link(max_frame_bytes=1024, on_message=lambda *_: None)
        link.connection_made(_Wire())
        late = link.request("status", {"job_id": "a"}, timeout=0.3)
        early = link.request("status", {"job_id": "b"}, timeout=0.05)
        answered = link.request("status", {"job_id": "c"}, timeout=0.05)
        sent = [json.loads(frame[4:]) for frame in link._outgoing]  # not flushed yet
        link.data_received(_frame({"type": "status", "request_id": sent[2]["request_id"], "status": "completed"}))
        assert (await answered)["status"] == "completed"
        with pytest.raises(ConnectionLost, match="within 0.05s"):
            await early
        assert not late.done()
        with pytest.raises(ConnectionLost, match="within 0.3s"):
            await late
        assert link.is_open  # a timeout fails the request, not the connection

    asyncio.run(scenario())


@pytest.mark.slow
def test_producer_and_worker_on_uvloop_against_the_real_server(tay_server):
    async def scenario():
        tay = Tay(socket_path=tay_server.socket_path, capacity=8)

        @tay.task(name="lean.echo.v1")
        async def echo(value: int) -> dict:
            await asyncio.sleep(0)
            return {"value": value}

        @tay.task(name="lean.square.v1")
        def square(value: int) -> int:
            return value * value

        @tay.task(name="lean.huge.v1")
        async def huge() -> str:
            return "x" * 70_000

        async with tay:
            echoes = await asyncio.gather(*(echo.enqueue(i) for i in range(40)))
            squares = await asyncio.gather(*(square.enqueue(i) for i in range(40)))
            too_big = await huge.enqueue()
            assert [await h.result(timeout=20) for h in echoes] == [{"value": i} for i in range(40)]
            assert [await h.result(timeout=20) for h in squares] == [i * i for i in range(40)]
            with pytest.raises(Exception, match="70002 bytes of JSON"):
                await too_big.result(timeout=20)

    uvloop.run(asyncio.wait_for(scenario(), 60))


def test_a_peer_sees_reports_of_one_execution_in_order(run, peer_path):
    async def scenario():
        peer = await Peer(peer_path).start()
        tay = Tay(socket_path=peer_path, mode="worker", capacity=2)

        @tay.task(name="lean.one")
        async def one() -> int:
            return 1

        async with tay:
            await peer.wait_type("register_tasks")
            for number in range(2):
                peer.send({"type": "execute", "request_id": f"e{number}", "execution_id": f"e{number}",
                           "reservation_id": f"r{number}", "job_id": f"j{number}", "task": "lean.one", "args": {}})
            await peer.wait_type("succeeded", 2)
        await peer.stop()
        return [(m["type"], m.get("execution_id"), m.get("result")) for m in peer.received[2:]]

    reports = run(scenario())
    for number in range(2):
        mine = [r for r in reports if r[1] == f"e{number}"]
        assert mine == [("started", f"e{number}", None), ("succeeded", f"e{number}", 1)]


def _keywords(a, b=2, *, c=3):
    return (a, b, c)


def _mixed(a, /, b, *rest, c=3, **extra):
    return (a, b, rest, c, extra)


@pytest.mark.parametrize(("function", "arguments"), [
    (_keywords, {"a": 1}), (_keywords, {"a": 1, "b": 5, "c": 6}), (_keywords, {"a": 1, "unknown": 9}),
    (_keywords, {"b": 1}), (_mixed, {"a": 1, "b": 2, "rest": [3, 4], "extra": {"z": 1}}),
])
def test_call_with_takes_the_keyword_shortcut_only_where_it_is_the_same_call(function, arguments):
    tay = Tay(socket_path="/tmp/unused.sock")
    task = tay.task(function, name=f"lean.{function.__name__}")
    general = tay.task(function, name=f"lean.general.{function.__name__}")
    general._keyword_names = None  # the parameter-by-parameter path

    def outcome(chosen):
        try:
            return chosen.call_with(arguments)
        except TypeError as exc:
            return type(exc)

    assert outcome(task) == outcome(general)


def _serve_enqueued(request_id, job):
    """An enqueued reply as tay serve writes it (compact, its keys in this order)."""
    payload = json.dumps({"version": 1, "type": "enqueued", "request_id": request_id, "job_id": "00ff", "job": job},
                         separators=(",", ":")).encode()
    return payload


@pytest.mark.parametrize(("payload", "lean"), [
    (_serve_enqueued("@", {"id": "00ff", "args": {"n": [1, 2.5, None, True]}, "durability": "volatile"}), True),
    (_serve_enqueued("@", {"id": "00ff", "args": {"durability": "volatile"}}), True),  # not the job's own
    (_serve_enqueued("@", {"id": "00ff", "durability": None}), True),
    (_serve_enqueued("@", {"id": "00ff", "args": {"t": "caf\\u00e9"}, "durability": "persistent"}), False),  # an escape
    (_serve_enqueued("@", {"id": "00ff", "durability": "persistent"}).replace(b'"job_id":"00ff",', b""), False),
])
def test_an_enqueue_reply_read_lean_gives_what_the_decoded_reply_gives(payload, lean):
    from tay.sdk.wire import reply_durability, reply_identifier

    async def scenario():
        results = []
        for lean_request in (True, False):
            link = Link(max_frame_bytes=4096, on_message=lambda *_: None)
            link.connection_made(_Wire())
            future = link.request("enqueue", {"task": "t", "args": {}}, timeout=5.0, lean=lean_request)
            request_id = next(iter(link._pending))
            frame_payload = payload.replace(b'"request_id":"@"', b'"request_id":"%s"' % request_id.encode())
            link.data_received(len(frame_payload).to_bytes(4, "big") + frame_payload)
            results.append(await future)
            assert link.is_open
        lean_reply, decoded = results
        assert type(decoded) is dict
        assert type(lean_reply) is (tuple if lean else dict)
        if lean:
            assert lean_reply == (reply_identifier(decoded, "job_id", "job"), reply_durability(decoded))

    asyncio.run(scenario())


@pytest.mark.parametrize("fault", [b'"attempt":01', b'"a":1,"a":2', b'"x":[1,}', b'"big":12345678901234567890'])
def test_a_faulty_enqueued_reply_still_drops_the_connection_or_reads_exactly(fault):
    async def scenario():
        link = Link(max_frame_bytes=4096, on_message=lambda *_: None)
        wire = _Wire()
        link.connection_made(wire)
        future = link.request("enqueue", {"task": "t", "args": {}}, timeout=5.0, lean=True)
        request_id = next(iter(link._pending))
        payload = _serve_enqueued(request_id, {"id": "00ff", "durability": "persistent"})
        payload = payload[:-2] + b"," + fault + b"}}"
        link.data_received(len(payload).to_bytes(4, "big") + payload)
        if fault.startswith(b'"big"'):  # valid JSON: decoded in full, the big integer exactly
            reply = await future
            assert reply["job"]["big"] == 12345678901234567890 and link.is_open
            return
        assert not link.is_open and wire.closed and isinstance(link.close_reason, ProtocolError)
        with pytest.raises(ConnectionLost):
            await future

    asyncio.run(scenario())
