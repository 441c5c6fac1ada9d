"""Client admission on both transports of a real ``tay serve``: an enqueue bigger than one
permit's bytes is ``capacity``/``client_bytes``; enqueues beyond ``--client-slots`` in flight
are ``capacity``/``client_slots``; a permit comes back once its reply is sent.

The server lingers 300 ms per group-commit batch, so the first enqueue keeps its permit
while the rest of a pipelined burst arrives: the count of refusals is exact."""

from __future__ import annotations

import http.client
import json
import socket

import orjson
import pytest

from tests.conformance.harness import Server

from .raw import RawClient, frame, read_frame

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]

BURST = 10


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    port = free_port()
    server = Server("--client-slots", "1", "--client-bytes", "1024", "--http-port", str(port),
                    "--group-commit-max-events", "64", "--group-commit-interval-ms", "300",
                    "--group-commit-linger", durability="sync").start()
    server.http_port = port
    yield server
    server.close()


def enqueue_frame(request_id: str, args: dict | None = None) -> bytes:
    return frame(orjson.dumps({"version": 1, "type": "enqueue", "request_id": request_id,
                               "task": "admission.t", "args": args or {}, "options": {}}))


def test_socket_enqueue_over_the_permit_bytes_is_client_bytes(server: Server) -> None:
    client = RawClient(server.socket)
    try:
        client.hello()
        reply = client.request("enqueue", task="admission.t", args={"blob": "x" * 5000},
                               options={})
        assert reply["type"] == "error"
        assert (reply["error"]["code"], reply["error"]["reason"]) == ("capacity", "client_bytes")
        ok = client.request("enqueue", task="admission.t", args={"blob": "x" * 100}, options={})
        assert ok["type"] == "enqueued"  # a request within the permit passes
    finally:
        client.close()


def test_socket_pipelined_enqueues_beyond_the_slots_are_client_slots(server: Server) -> None:
    client = RawClient(server.socket)
    try:
        client.hello()
        client.sock.sendall(b"".join(enqueue_frame(f"p{n}") for n in range(BURST)))
        replies = [read_frame(client.sock) for _ in range(BURST)]
        kinds = sorted((r["type"], r.get("error", {}).get("reason")) for r in replies)
        assert kinds == [("enqueued", None)] + [("error", "client_slots")] * (BURST - 1)
        # the permit came back with the reply: the next enqueue is admitted
        assert client.request("enqueue", task="admission.t", args={}, options={})["type"] \
            == "enqueued"
    finally:
        client.close()


def http_request(server: Server, body: bytes) -> tuple[int, dict]:
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=10)
    try:
        connection.request("POST", "/jobs", body, {"content-type": "application/json"})
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def test_http_enqueue_over_the_permit_bytes_is_429_client_bytes(server: Server) -> None:
    body = orjson.dumps({"task": "admission.t", "args": {"blob": "x" * 5000}})
    status, reply = http_request(server, body)
    assert (status, reply["error"]["code"], reply["error"]["reason"]) == (
        429, "capacity", "client_bytes")
    assert http_request(server, orjson.dumps({"task": "admission.t"}))[0] == 201


def test_http_pipelined_enqueues_beyond_the_slots_are_429_client_slots(server: Server) -> None:
    body = orjson.dumps({"task": "admission.t", "args": {}})
    one = (b"POST /jobs HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\n"
           b"content-length: %d\r\n\r\n%s" % (len(body), body))
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=10) as sock:
        sock.sendall(one * BURST)
        data = b""
        while data.count(b"HTTP/1.1 ") < BURST or not data.endswith(b"}"):
            chunk = sock.recv(65536)
            assert chunk, data
            data += chunk
    statuses = sorted(int(part[:3]) for part in data.split(b"HTTP/1.1 ")[1:])
    assert statuses == [201] + [429] * (BURST - 1)
    assert data.count(b'"reason":"client_slots"') == BURST - 1


def test_http2_streams_share_the_same_permits(server: Server) -> None:
    import asyncio

    import httpx

    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(http1=False, http2=True,
                                     base_url=f"http://127.0.0.1:{server.http_port}") as client:
            return await asyncio.gather(*(client.post("/jobs", json={"task": "admission.t"})
                                          for _ in range(BURST)))

    replies = asyncio.run(burst())
    assert {r.http_version for r in replies} == {"HTTP/2"}
    assert sorted(r.status_code for r in replies) == [201] + [429] * (BURST - 1)
    assert all(r.json()["error"]["reason"] == "client_slots" for r in replies
               if r.status_code == 429)
    big = orjson.dumps({"task": "admission.t", "args": {"blob": "x" * 5000}})
    with httpx.Client(http1=False, http2=True,
                      base_url=f"http://127.0.0.1:{server.http_port}") as client:
        refused = client.post("/jobs", content=big, headers={"content-type": "application/json"})
    assert (refused.status_code, refused.json()["error"]["reason"]) == (429, "client_bytes")
