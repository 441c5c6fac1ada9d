"""The asyncio HTTP/1.1 transport of TayHTTP against raw scripted responses: bodies by
length, chunks or close, the size limit, keep-alive reuse and its stale-connection rule,
timeouts."""

import asyncio

import pytest

from tay.errors import ConnectionLost, ProtocolError
from tay.sdk.http_transport import HTTPTransport


async def serve(answers):
    """A loopback server answering the n-th request on each connection with ``answers``'
    next item: bytes to send, "close" (close without answering) or "hang"."""
    requests, connections = [], []
    script = list(answers)

    async def handle(reader, writer):
        connections.append(writer)
        while script:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            requests.append(head + await reader.readexactly(length))
            answer = script.pop(0)
            if answer == "close":
                writer.close()
                return
            if answer == "hang":
                await asyncio.sleep(5)
                return
            writer.write(answer)
            await writer.drain()
            if b"Connection: close" in answer or answer.startswith(b"HTTP/1.0"):
                writer.close()
                return

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], requests, connections


def transport(port, timeout=2.0, max_body=64):
    return HTTPTransport(scheme="http", host="127.0.0.1", port=port, timeout=timeout, context=None, max_body=max_body)


def ok(body=b'{"ok":true}', extra=b""):
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra, body)


def test_bodies_by_length_by_chunks_and_by_close_and_requests_carry_host_and_length():
    async def scenario():
        chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n3\r\n:1}\r\n0\r\n\r\n"
        closing = b"HTTP/1.0 200 OK\r\n\r\n{\"c\":3}"
        server, port, requests, connections = await serve([ok(), chunked, closing])
        http = transport(port)
        assert await http.exchange("POST", "/jobs", b'{"x":1}', {"Content-Type": "application/json"}) == (200, b'{"ok":true}')
        assert await http.exchange("GET", "/a", None, {}) == (200, b'{"a":1}')
        assert await http.exchange("GET", "/c", None, {}) == (200, b'{"c":3}')
        assert len(connections) == 1  # kept alive until the HTTP/1.0 answer
        assert requests[0].startswith(b"POST /jobs HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % port)
        assert b"Content-Length: 7\r\n" in requests[0] and requests[0].endswith(b'\r\n\r\n{"x":1}')
        http.close()
        server.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("answer", [
    ok(b"x" * 65),
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n40\r\n" + b"y" * 64 + b"\r\n1\r\nz\r\n0\r\n\r\n",
])
def test_a_body_over_the_limit_is_refused_and_its_connection_dropped(answer):
    async def scenario():
        server, port, _, connections = await serve([answer, ok()])
        http = transport(port)
        with pytest.raises(ProtocolError, match="exceeds 64 bytes"):
            await http.exchange("GET", "/big", None, {})
        assert await http.exchange("GET", "/small", None, {}) == (200, b'{"ok":true}')
        assert len(connections) == 2
        http.close()
        server.close()

    asyncio.run(scenario())


def test_a_stale_keep_alive_connection_is_retried_only_for_idempotent_requests():
    async def scenario():
        server, port, requests, connections = await serve([ok(), "close", ok(), ok(), "close"])
        http = transport(port)
        await http.exchange("GET", "/1", None, {})
        assert await http.exchange("GET", "/2", None, {}) == (200, b'{"ok":true}')  # retried on a new connection
        assert len(connections) == 2
        await http.exchange("GET", "/3", None, {})
        with pytest.raises(ConnectionLost, match="outcome is unknown"):
            await http.exchange("POST", "/jobs", b"{}", {})
        assert [r.split(b" ")[1] for r in requests] == [b"/1", b"/2", b"/2", b"/3", b"/jobs"]
        http.close()
        server.close()

    asyncio.run(scenario())


def test_no_answer_in_time_is_connection_lost_and_nothing_listening_too():
    async def scenario():
        server, port, _, _ = await serve(["hang"])
        with pytest.raises(ConnectionLost, match="outcome is unknown"):
            await transport(port, timeout=0.2).exchange("POST", "/jobs", b"{}", {})
        server.close()
        with pytest.raises(ConnectionLost, match="cannot connect"):
            await transport(9).exchange("GET", "/", None, {})

    asyncio.run(scenario())


def test_a_redirect_is_refused():
    async def scenario():
        server, port, _, _ = await serve([b"HTTP/1.1 302 Found\r\nLocation: /x\r\nContent-Length: 0\r\n\r\n"])
        with pytest.raises(ProtocolError, match="redirect"):
            await transport(port).exchange("GET", "/", None, {})
        server.close()

    asyncio.run(scenario())
