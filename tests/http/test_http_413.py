"""An oversized body gets a 413 the client can read: the server answers, half-closes and
reads (and drops) the rest of the body, bounded in bytes and time, instead of closing
with data unread (which makes the kernel reset the connection under the client).

Clients are Python's ``http.client`` in a thread, as in the report: it sends the whole
body before it reads the response."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import ssl

import pytest

from tay.server.http.config import HttpConfig, HttpLimits, tls_context

from tests.conformance.harness import Server

from .certs import scratch_pki
from .conftest import SCRATCH, http_stack, run

LIMIT = 1_048_576
BODY = b'{"task":"demo.add","args":{"blob":"' + b"x" * (2 * LIMIT) + b'"}}'


@pytest.fixture(scope="module")
def pki():
    with scratch_pki(SCRATCH) as paths:
        yield paths


def post(connection: http.client.HTTPConnection, body: bytes) -> tuple[int, dict]:
    connection.request("POST", "/jobs", body, {"content-type": "application/json"})
    response = connection.getresponse()
    return response.status, json.loads(response.read())


@pytest.fixture(scope="module")
def served():
    """A real ``tay serve`` (the reset needs a separate process to show reliably)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = Server("--http-port", str(port)).start()
    server.http_port = port
    yield server
    server.close()


@pytest.mark.slow
@pytest.mark.parametrize("framing", ["content-length", "chunked"])
@pytest.mark.parametrize("megabytes", [2, 8])
def test_an_oversized_body_gets_a_readable_413(served, framing, megabytes):
    body = b'{"task":"demo.add","args":{"blob":"' + b"x" * (megabytes << 20) + b'"}}'
    connection = http.client.HTTPConnection("127.0.0.1", served.http_port, timeout=10)
    try:
        if framing == "chunked":
            parts = (body[at:at + 65536] for at in range(0, len(body), 65536))
            connection.request("POST", "/jobs", parts, {"content-type": "application/json"},
                               encode_chunked=True)
        else:
            connection.request("POST", "/jobs", body, {"content-type": "application/json"})
        response = connection.getresponse()  # on main: ConnectionResetError / BrokenPipeError
        reply = json.loads(response.read())
    finally:
        connection.close()
    assert (response.status, reply["error"]["code"]) == (413, "request_too_large")


def test_a_2_mb_body_gets_a_readable_413_over_mtls(pki):
    async def scenario():
        async with http_stack() as server:
            config = HttpConfig("127.0.0.1", 0, pki["server_cert"], pki["server_key"], pki["ca"])
            port = await server.start("127.0.0.1", 0, tls_context(config))
            context = ssl.create_default_context(cafile=pki["ca"])
            context.load_cert_chain(pki["client_cert"], pki["client_key"])

            def client() -> tuple[int, dict]:
                connection = http.client.HTTPSConnection("127.0.0.1", port, timeout=10,
                                                         context=context)
                try:
                    return post(connection, BODY)
                finally:
                    connection.close()

            status, reply = await asyncio.to_thread(client)
            assert (status, reply["error"]["code"]) == (413, "request_too_large")
    run(scenario())


def test_a_peer_that_keeps_sending_is_cut_off_after_the_linger_bounds():
    async def scenario():
        limits = HttpLimits(max_body_bytes=1024, linger_s=0.3, linger_bytes=256 * 1024)
        async with http_stack(limits) as server:
            port = await server.start("127.0.0.1", 0, None)

            def client() -> bytes:
                with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                    sock.sendall(b"POST /jobs HTTP/1.1\r\nhost: t\r\ncontent-type: "
                                 b"application/json\r\ncontent-length: 100000000\r\n\r\n")
                    head = sock.recv(65536)
                    try:  # the half-close: the response, then EOF, while we still send
                        while sock.recv(65536):
                            pass
                        for _ in range(1000):
                            sock.sendall(b"x" * 65536)
                    except (ConnectionResetError, BrokenPipeError):
                        pass
                    return head

            head = await asyncio.wait_for(asyncio.to_thread(client), 10)
            assert head.startswith(b"HTTP/1.1 413 ")
            assert not server.connections  # the drain stopped at its bound
    run(scenario())
