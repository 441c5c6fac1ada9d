"""Fuzzing the HTTP listener: HTTP/1.1 byte streams (httptools, our limits, the router, the
engine behind it) and HTTP/2 frame streams (h2, the same router), against a real store.

Requests are built from the real routes (jobs, schedules, workers, admin, ops) with
hostile headers and bodies, pipelined, sometimes mutated, and split into reads. Nothing
may raise out of the connection; whatever is written must parse as responses of the
connection's protocol; no request may end as an internal error (500 ``internal``), which
is what a crash in a route looks like from outside.

``make test`` runs a short pass; ``make fuzz`` a long one (``TAY_FUZZ_EXAMPLES``).
"""

from __future__ import annotations

import asyncio

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tay.failures import WIRE_CODES
from tay.protocol.admin_api import ROUTES
from tay.server.http.http2 import Http2Connection
from tay.server.http.config import HttpLimits
from tests.http.conftest import Client, FakeTransport, Response, http_stack

from . import grammar
from .conftest import COUNTS, examples

LIMITS = HttpLimits(max_body_bytes=65_536, claim_wait_s=0.01, request_timeout_s=0.5,
                    linger_s=0.01)
IDS = ["ab" * 16, "0" * 32, "x", "%2F", "a" * 129, "s1", "default"]
PATHS = ["/jobs", "/jobs/{id}", "/jobs/{id}/result", "/schedules", "/schedules/{id}",
         "/schedules?limit={n}&cursor={id}", "/workers", "/workers/started",
         "/workers/complete", "/queues/{id}/claim", "/metrics", "/healthz", "/readyz", "/",
         "*", "http://h:1/jobs/{id}", "/jobs/{id}?x=%zz", "//jobs", "/jobs/../workers",
         *(path.replace("{name}", "{id}").replace("{schedule}", "{id}") + "?limit={n}"
           for method, path in ROUTES.values() if not path.endswith("compact"))]
METHODS = ["GET", "POST", "DELETE", "HEAD", "PUT", "OPTIONS", "PATCH", "CONNECT", "G\x01T"]


@st.composite
def targets(draw: st.DrawFn) -> str:
    path = draw(st.sampled_from(PATHS))
    return (path.replace("{id}", draw(st.sampled_from(IDS)), 1)
            .replace("{n}", str(draw(st.sampled_from([0, 1, 50, 100, 101, -1])))))


@st.composite
def bodies(draw: st.DrawFn) -> bytes | None:
    kind = draw(st.integers(0, 5))
    if kind == 0:
        return None
    if kind == 1:
        return draw(st.binary(max_size=80))
    if kind == 2:  # a worker registration or completion
        return grammar.encode(draw(grammar.some_of({
            "runtime_id": grammar.identifiers, "tasks": st.lists(grammar.keys, max_size=3),
            "capacity": grammar.scalars, "queue": grammar.keys, "outcome": st.sampled_from(
                ["success", "failure", "x"]), "result": grammar.json_values,
            "error": grammar.json_values, "reservation_id": grammar.identifiers,
            "execution_id": grammar.identifiers})))
    message = draw(grammar.messages())
    return draw(grammar.mutated(grammar.encode(
        {k: v for k, v in message.items() if k not in ("version", "request_id")})))


@st.composite
def http1_requests(draw: st.DrawFn) -> bytes:
    body = draw(bodies())
    method = draw(st.sampled_from(METHODS))
    version = draw(st.sampled_from([b"HTTP/1.1"] * 6 + [b"HTTP/1.0", b"HTTP/2.0", b"HTTP/1.x"]))
    lines = [method.encode("latin-1") + b" " + draw(targets()).encode() + b" " + version]
    for _ in range(draw(st.sampled_from([1, 1, 1, 0, 2]))):
        lines.append(b"host: t")
    if body is not None or grammar.chance(draw, 4):
        lines.append(b"content-type: " + draw(st.sampled_from(
            [b"application/json"] * 4 + [b"Application/JSON; charset=utf-8", b"text/plain",
                                         b"application/jsonx", b""])))
    if grammar.chance(draw, 3):
        lines.append(b"authorization: " + draw(st.sampled_from(
            [b"Bearer " + b"A" * 43, b"Bearer x", b"Basic abc", b"bearer " + b"_" * 43])))
    chunked = body is not None and grammar.chance(draw, 4)
    if chunked:
        lines.append(b"transfer-encoding: chunked")
        body = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (
            body[:len(body) // 2], body[len(body) // 2:]) if part) + b"0\r\n\r\n"
    elif body is not None:
        length = len(body)
        if grammar.chance(draw, 10):
            length = draw(st.sampled_from([0, length + 5, 10**9, 2**64]))
        lines.append(b"content-length: %d" % length)
    for name, value in draw(st.lists(st.sampled_from([
            (b"connection", b"close"), (b"expect", b"100-continue"), (b"x-a", b"\xff\x00"),
            (b"upgrade", b"h2c"), (b"content-length", b"-1"), (b"transfer-encoding", b"gzip"),
            (b" bad", b"x"), (b"x-long", b"v" * 300)]), max_size=2)):
        lines.append(name + b": " + value)
    return b"\r\n".join(lines) + b"\r\n\r\n" + (body or b"")


def check_error_bodies(responses) -> None:
    for response in responses:
        assert response.status in (100, 200, 201, 204, 400, 401, 404, 405, 409, 410, 413, 415, 429,
                                   503), response.status
        if response.status >= 400 and response.body:
            code = orjson.loads(response.body)["error"]["code"]
            assert code in WIRE_CODES and code != "internal", response.body


@pytest.fixture(scope="module")
def stack():
    loop = asyncio.new_event_loop()
    context = http_stack(LIMITS)
    server = loop.run_until_complete(context.__aenter__())
    yield loop, server
    loop.run_until_complete(context.__aexit__(None, None, None))
    loop.close()


async def settle(connection, transport: FakeTransport) -> None:
    """Let the engine answer (durability ``write``: a writer-thread round trip each)."""
    end = asyncio.get_running_loop().time() + 3
    while asyncio.get_running_loop().time() < end:
        pending = getattr(connection, "pipeline", None) or getattr(connection, "answering", {})
        if transport.closed or not pending:
            break
        await asyncio.sleep(0.001)
    await asyncio.sleep(0)


@settings(max_examples=examples(80), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                 HealthCheck.data_too_large])
@given(data=st.data())
def test_hostile_http1_streams(stack, data) -> None:
    loop, server = stack
    requests = data.draw(st.lists(http1_requests(), min_size=1, max_size=4))
    stream = data.draw(grammar.mutated(b"".join(requests)))
    pieces = data.draw(grammar.chunked(stream))
    COUNTS["http1_requests"] += len(requests)

    async def exchange() -> bytes:
        client = Client(server)
        for piece in pieces:
            client.send(piece)  # raises if the connection does
        await settle(client.connection, client.transport)
        client.transport.close()
        return bytes(client.transport.written)

    written = loop.run_until_complete(exchange())
    check_error_bodies(split_responses(written))


def split_responses(data: bytes) -> list[Response]:
    """The responses in ``data``; raises if any byte is not part of a well-formed one. A
    response to HEAD has a length but no body: the next response follows its headers."""
    responses, at = [], 0
    while at < len(data):
        assert data.startswith(b"HTTP/1.1 ", at), data[at:at + 80]
        end = data.index(b"\r\n\r\n", at)
        lines = data[at:end].split(b"\r\n")
        headers = dict(line.lower().split(b": ", 1) for line in lines[1:])
        length = int(headers.get(b"content-length", b"0"))
        at = end + 4
        if data.startswith(b"HTTP/1.1 ", at) or at == len(data):
            body = b""  # HEAD
        else:
            body, at = data[at:at + length], at + length
            assert len(body) == length
        responses.append(Response(int(lines[0][9:12]), headers, body))
    return responses


@st.composite
def h2_streams(draw: st.DrawFn) -> list[tuple[list[tuple[str, str]], bytes | None]]:
    streams = []
    for _ in range(draw(st.integers(1, 5))):
        method = draw(st.sampled_from(METHODS[:7]))
        headers = [(":method", method), (":path", draw(targets())), (":scheme", "http"),
                   (":authority", "t")]
        headers = [h for h in headers if not grammar.chance(draw, 30)]  # a pseudo-header missing
        body = draw(bodies())
        if body is not None:
            headers.append(("content-type", "application/json"))
        for name, value in draw(st.lists(st.sampled_from([
                ("content-length", "5"), ("authorization", "Bearer " + "A" * 43),
                ("x-a", "b"), ("te", "trailers"), ("connection", "close")]), max_size=2)):
            headers.append((name, value))
        streams.append((headers, body))
    return streams


@settings(max_examples=examples(60), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                 HealthCheck.data_too_large])
@given(data=st.data())
def test_hostile_http2_streams(stack, data) -> None:
    loop, server = stack
    client = h2.connection.H2Connection(h2.config.H2Configuration(
        client_side=True, validate_outbound_headers=False, normalize_outbound_headers=False))
    client.initiate_connection()
    for index, (headers, body) in enumerate(data.draw(h2_streams())):
        stream_id = 1 + 2 * index
        try:
            client.send_headers(stream_id, headers, end_stream=body is None)
            if body is not None:
                client.send_data(stream_id, body, end_stream=True)
        except (h2.exceptions.ProtocolError, IndexError):
            # the client library refuses to send it at all (an empty header list fails in
            # its frame split with an IndexError, h2 4.x)
            break
        COUNTS["http2_streams"] += 1
    sent = client.data_to_send()
    stream = data.draw(grammar.mutated(sent))
    pieces = data.draw(grammar.chunked(stream))

    async def exchange() -> bytes:
        transport = FakeTransport()
        connection = Http2Connection(server)
        transport.protocol = connection
        connection.connection_made(transport)
        for piece in pieces:
            connection.data_received(piece)  # raises if the connection does
        await settle(connection, transport)
        transport.close()
        return bytes(transport.written)

    written = loop.run_until_complete(exchange())
    if stream != sent:
        return  # mutated: the client's view of the streams no longer holds
    statuses = []
    bodies_by_stream: dict[int, bytes] = {}
    for event in client.receive_data(written):  # the server's frames must be valid HTTP/2
        if isinstance(event, h2.events.ResponseReceived):
            statuses.append(int(dict(event.headers)[b":status"]))
        if isinstance(event, h2.events.DataReceived):
            bodies_by_stream[event.stream_id] = bodies_by_stream.get(event.stream_id, b"") \
                + event.data
    assert all(status != 500 for status in statuses), (statuses, bodies_by_stream)
