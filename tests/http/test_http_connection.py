"""The listener's connection protocol with byte-literal requests on a fake transport,
backed by a real store, engine and driver."""

from __future__ import annotations

import asyncio

from hypothesis import HealthCheck, example, given, settings, strategies as st

from tay.server.http.http2 import Http2Connection
from tay.server.http.config import HttpLimits
from tay.server.http.listener import PREFACE

from .conftest import Client, http_stack, parse_responses, request, run, until

ENQUEUE = request("POST", "/jobs", {"task": "demo.add", "args": {"x": 1}})


def test_pipelined_requests_are_answered_in_order_on_one_connection():
    async def scenario():
        async with http_stack() as server:
            client = Client(server)
            client.send(ENQUEUE + request("GET", "/nope") + ENQUEUE)
            first, missing, second = await client.responses(3)
            assert (first.status, missing.status, second.status) == (201, 404, 201)
            assert first.json()["type"] == "enqueued"
            assert first.json()["job_id"] != second.json()["job_id"]
            status = await client.call(request("GET", f"/jobs/{first.json()['job_id']}"))
            assert status.json()["status"] == "available"
            assert not client.transport.closed and b"connection" not in first.headers
    run(scenario())


def test_request_split_into_single_bytes_is_reassembled():
    async def scenario():
        async with http_stack() as server:
            client = Client(server)
            for index in range(len(ENQUEUE)):
                client.send(ENQUEUE[index:index + 1])
            (response,) = await client.responses(1)
            assert response.status == 201
    run(scenario())


def test_malformed_request_gets_400_json_and_close():
    async def scenario():
        async with http_stack() as server:
            client = Client(server)
            client.send(b"GARBAGE\x00 / HTTP/1.1\r\n\r\n")
            (response,) = await client.responses(1)
            assert (response.status, response.code) == (400, "invalid_request")
            assert response.headers[b"connection"] == b"close"
            await until(lambda: client.transport.closed, "the connection is closed")
    run(scenario())


def test_oversized_headers_are_refused_and_closed():
    async def scenario():
        async with http_stack(HttpLimits(max_header_bytes=512, linger_s=0.05)) as server:
            client = Client(server)
            client.send(b"GET /jobs/a HTTP/1.1\r\nx-big: " + b"a" * 600 + b"\r\n\r\n")
            (response,) = await client.responses(1)
            assert (response.status, response.code) == (413, "request_too_large")
            assert client.transport.eof_written and not client.transport.closed  # lingering
            client.send(b"a" * 1000)  # the rest of the refused request is read and dropped
            assert parse_responses(client.transport.written) == [response]
            await until(lambda: client.transport.closed, "the connection is closed")
    run(scenario())


def test_too_many_headers_are_refused():
    async def scenario():
        async with http_stack(HttpLimits(max_headers=5)) as server:
            client = Client(server)
            headers = tuple(b"x-h%d: v" % i for i in range(6))
            client.send(request("GET", "/jobs/a", headers=headers))
            (response,) = await client.responses(1)
            assert response.code == "request_too_large"
    run(scenario())


def test_content_length_over_the_limit_is_refused_before_the_body():
    async def scenario():
        async with http_stack(HttpLimits(max_body_bytes=100)) as server:
            client = Client(server)
            client.send(b"POST /jobs HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\n"
                        b"content-length: 101\r\n\r\n")
            (response,) = await client.responses(1)
            assert (response.status, response.code) == (413, "request_too_large")
    run(scenario())


def test_chunked_body_over_the_limit_is_refused():
    async def scenario():
        async with http_stack(HttpLimits(max_body_bytes=100)) as server:
            client = Client(server)
            client.send(b"POST /jobs HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\n"
                        b"transfer-encoding: chunked\r\n\r\n"
                        + b"40\r\n" + b"a" * 64 + b"\r\n" + b"40\r\n" + b"a" * 64 + b"\r\n")
            (response,) = await client.responses(1)
            assert response.status == 413
    run(scenario())


def test_bad_media_type_keeps_the_connection_usable():
    async def scenario():
        async with http_stack() as server:
            client = Client(server)
            bad = request("POST", "/jobs", {"task": "a", "args": {}}, content_type=b"text/plain")
            response = await client.call(bad)
            assert (response.status, response.code) == (415, "unsupported_media_type")
            assert (await client.call(ENQUEUE)).status == 201
    run(scenario())


def test_connection_close_and_http_1_0_close_after_the_response():
    async def scenario():
        async with http_stack() as server:
            client = Client(server)
            client.send(request("GET", "/nope", headers=(b"connection: close",)))
            (response,) = await client.responses(1)
            assert response.headers[b"connection"] == b"close"
            await until(lambda: client.transport.closed, "the connection is closed")
            old = Client(server)
            old.send(b"GET /nope HTTP/1.0\r\n\r\n")
            (response,) = await old.responses(1)
            assert response.status == 404
            await until(lambda: old.transport.closed, "the HTTP/1.0 connection is closed")
    run(scenario())


def test_slow_client_gets_request_timeout_and_close():
    async def scenario():
        async with http_stack(HttpLimits(request_timeout_s=0.05)) as server:
            client = Client(server)
            client.send(b"POST /jobs HTTP/1.1\r\ncontent-le")
            (response,) = await client.responses(1, timeout=2)
            assert response.code == "request_timeout"
            await until(lambda: client.transport.closed, "the connection is closed")
    run(scenario())


def test_idle_keep_alive_connection_is_closed_silently():
    async def scenario():
        async with http_stack(HttpLimits(keepalive_timeout_s=0.05)) as server:
            client = Client(server)
            assert (await client.call(ENQUEUE)).status == 201
            await until(lambda: client.transport.closed, "the idle connection is closed")
            assert len(parse_responses(client.transport.written)) == 1
    run(scenario())


def test_deep_pipeline_pauses_reading_until_answers_leave():
    async def scenario():
        async with http_stack(HttpLimits(max_pipeline=2)) as server:
            client = Client(server)
            client.send(ENQUEUE * 3)
            assert not client.transport.reading
            assert len(await client.responses(3)) == 3
            assert client.transport.reading
    run(scenario())


def test_upgrade_requests_are_answered_then_closed():
    async def scenario():
        async with http_stack() as server:
            client = Client(server)
            client.send(request("GET", "/nope", headers=(b"connection: upgrade",
                                                          b"upgrade: h2c")))
            (response,) = await client.responses(1)
            assert response.status == 404
            await until(lambda: client.transport.closed, "the connection is closed")
    run(scenario())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300))
@example(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")  # the h2c preface (found on CI)
@example(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00")
def test_arbitrary_bytes_never_break_the_server(noise):
    async def scenario():
        async with http_stack() as server:
            client = Client(server)
            client.send(noise)
            await asyncio.sleep(0.005)
            if noise.startswith(PREFACE):  # prior-knowledge h2c: the HTTP/2 side answers
                assert isinstance(client.transport.protocol, Http2Connection)
                assert client.transport.closed or client.transport.written[3] == 0x4  # SETTINGS
            else:
                for response in parse_responses(client.transport.written):
                    assert response.status in (400, 404, 405, 413, 415)
                    assert "error" in response.json()
            fresh = Client(server)  # the server still answers others
            assert (await fresh.call(request("GET", "/nope"))).status == 404
    run(scenario())


def test_expect_100_continue_is_acknowledged_before_the_body():
    async def scenario():
        async with http_stack() as server:
            client = Client(server)
            body = b'{"task":"demo.add","args":{}}'
            client.send(b"POST /jobs HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\n"
                        b"expect: 100-continue\r\ncontent-length: %d\r\n\r\n" % len(body))
            assert client.transport.written == b"HTTP/1.1 100 Continue\r\n\r\n"
            client.send(body)

            def final() -> list:
                rest = bytes(client.transport.written).split(b"\r\n\r\n", 1)[1]
                return [r for r in parse_responses(rest) if r.status]

            await until(lambda: final(), "the final response after 100 Continue")
            assert final()[0].status == 201
    run(scenario())


def test_a_peer_that_does_not_read_stops_being_read():
    async def scenario():
        async with http_stack() as server:
            client = Client(server)
            client.connection.pause_writing()
            assert not client.transport.reading
            client.connection.resume_writing()
            assert client.transport.reading
    run(scenario())


def test_head_responses_carry_headers_only_and_keep_the_stream_in_sync():
    async def scenario():
        async with http_stack() as server:
            client = Client(server)
            client.send(b"HEAD /jobs HTTP/1.1\r\nhost: t\r\n\r\n")
            await until(lambda: b"\r\n\r\n" in client.transport.written, "the HEAD response")
            head, _, rest = bytes(client.transport.written).partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 405") and rest == b""
            assert int(head.split(b"content-length: ")[1].split(b"\r\n")[0]) > 0
            assert not client.transport.closed
    run(scenario())
