"""HTTP/2 on the HTTP listener, in process: prior-knowledge h2c and ALPN h2 over mTLS with
``httpx[http2]``, the same routes, bodies and errors as HTTP/1.1, long-poll claims, flow
control, body limits, and the stream/connection deadlines (driven with the sans-IO ``h2``
client where httpx would hide them)."""

from __future__ import annotations

import asyncio
import ssl

import h2.config
import h2.connection
import h2.events
import httpx
import pytest

from tay.server.http.config import HttpConfig, HttpLimits, tls_context

from .certs import scratch_pki
from .conftest import SCRATCH, http_stack, run


@pytest.fixture(scope="module")
def pki():
    with scratch_pki(SCRATCH) as paths:
        yield paths


def h2_client(port: int, **kwargs) -> httpx.AsyncClient:
    return httpx.AsyncClient(http1=False, http2=True, base_url=f"http://127.0.0.1:{port}",
                             timeout=30, **kwargs)


def test_prior_knowledge_h2c_serves_the_same_routes_and_errors():
    async def scenario():
        async with http_stack() as server:
            port = await server.start("127.0.0.1", 0, None)
            async with h2_client(port) as client:
                created = await client.post("/jobs", json={"task": "demo.add", "args": {"a": 1}})
                assert (created.http_version, created.status_code) == ("HTTP/2", 201)
                job_id = created.json()["job_id"]
                status = await client.get(f"/jobs/{job_id}")
                assert status.json()["status"] == "available"
                assert (await client.get(f"/jobs/{job_id}/result")).json()["error"]["code"] \
                    == "result_not_ready"
                missing = await client.get("/nope")
                assert (missing.status_code, missing.json()["error"]["code"]) == (404,
                                                                                  "not_found")
                wrong = await client.put("/jobs")
                assert wrong.status_code == 405 and wrong.headers["allow"] == "POST"
                duplicate = await client.post("/jobs", content=b'{"task":"a","task":"b"}',
                                              headers={"content-type": "application/json"})
                assert duplicate.json()["error"]["code"] == "invalid_json_object"
                head = await client.head("/nope")  # headers only, the GET's length
                assert head.status_code == 404 and head.content == b""
                assert int(head.headers["content-length"]) == len(missing.content)
    run(scenario())


def test_many_concurrent_streams_on_one_connection():
    async def scenario():
        async with http_stack() as server:
            port = await server.start("127.0.0.1", 0, None)
            async with h2_client(port) as client:
                replies = await asyncio.gather(*(
                    client.post("/jobs", json={"task": "demo.add", "args": {"n": n}})
                    for n in range(60)))
                assert {r.status_code for r in replies} == {201}
                assert len({r.json()["job_id"] for r in replies}) == 60
            assert len(server.connections) <= 1
    run(scenario())


def test_a_long_poll_claim_waits_on_its_stream_while_others_are_served():
    async def scenario():
        async with http_stack() as server:
            port = await server.start("127.0.0.1", 0, None)
            async with h2_client(port) as client:
                token = (await client.post("/workers", json={
                    "runtime_id": "w", "tasks": ["demo.add"], "capacity": 1})).json()["worker_token"]
                auth = {"authorization": f"Bearer {token}", "content-type": "application/json"}
                claim = asyncio.ensure_future(client.post("/queues/default/claim", headers=auth))
                await asyncio.sleep(0.1)
                assert not claim.done()
                job_id = (await client.post("/jobs", json={"task": "demo.add", "args": {}})
                          ).json()["job_id"]  # same connection, another stream
                execute = (await asyncio.wait_for(claim, 5)).json()
                assert execute["type"] == "execute" and execute["job_id"] == job_id
                ids = {k: execute[k] for k in ("reservation_id", "execution_id")}
                done = await client.post("/workers/complete", headers=auth,
                                         json={**ids, "outcome": "success", "result": 7})
                assert done.json() == {"type": "accepted"}
                assert (await client.get(f"/jobs/{job_id}/result")).json()["result"] == 7
    run(scenario())


def test_a_response_larger_than_the_peers_window_is_sent_as_it_reopens():
    async def scenario():
        async with http_stack() as server:
            port = await server.start("127.0.0.1", 0, None)
            async with h2_client(port) as client:
                blob = "x" * 200_000  # above the default 65,535-byte stream window
                job_id = (await client.post("/jobs", json={"task": "t", "args": {"b": blob}})
                          ).json()["job_id"]
                replies = await asyncio.gather(*(client.get(f"/jobs/{job_id}")
                                                  for _ in range(5)))
                assert all(r.json()["job"]["args"]["b"] == blob for r in replies)
    run(scenario())


def test_an_oversized_body_is_413_and_the_connection_goes_on():
    async def scenario():
        async with http_stack(HttpLimits(max_body_bytes=100_000)) as server:
            port = await server.start("127.0.0.1", 0, None)
            async with h2_client(port) as client:
                body = b'{"task":"a","args":{"b":"' + b"x" * 2_000_000 + b'"}}'
                big = await client.post("/jobs", content=body,
                                        headers={"content-type": "application/json"})
                assert (big.status_code, big.json()["error"]["code"]) == (413,
                                                                          "request_too_large")
                declared = await client.post("/jobs", content=body, headers={
                    "content-type": "application/json", "content-length": str(len(body))})
                assert declared.status_code == 413
                after = await client.post("/jobs", json={"task": "a", "args": {}})
                assert after.status_code == 201  # the connection window was given back
    run(scenario())


def test_alpn_h2_over_mtls_and_no_certificate_no_stream(pki):
    async def scenario():
        async with http_stack() as server:
            config = HttpConfig("127.0.0.1", 0, pki["server_cert"], pki["server_key"], pki["ca"])
            port = await server.start("127.0.0.1", 0, tls_context(config))
            context = ssl.create_default_context(cafile=pki["ca"])
            context.load_cert_chain(pki["client_cert"], pki["client_key"])
            async with httpx.AsyncClient(http2=True, verify=context,
                                         base_url=f"https://127.0.0.1:{port}") as client:
                created = await client.post("/jobs", json={"task": "demo.add", "args": {}})
                assert (created.http_version, created.status_code) == ("HTTP/2", 201)
            async with httpx.AsyncClient(http2=False, verify=context,
                                         base_url=f"https://127.0.0.1:{port}") as client:
                assert (await client.get("/nope")).http_version == "HTTP/1.1"  # no ALPN h2
            anonymous = ssl.create_default_context(cafile=pki["ca"])
            async with httpx.AsyncClient(http2=True, verify=anonymous,
                                         base_url=f"https://127.0.0.1:{port}") as client:
                with pytest.raises((httpx.ConnectError, httpx.ReadError, httpx.WriteError,
                                    httpx.RemoteProtocolError)):
                    await client.post("/jobs", json={"task": "demo.add", "args": {}})
            assert len(server.driver.engine.jobs) == 1
    run(scenario())


class RawH2:
    """A sans-IO h2 client on an asyncio stream, for what httpx does not let a test do."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.h2.initiate_connection()
        self.flush()

    @classmethod
    async def open(cls, port: int) -> "RawH2":
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    def flush(self) -> None:
        self.writer.write(self.h2.data_to_send())

    async def events(self, timeout: float = 5.0) -> list:
        data = await asyncio.wait_for(self.reader.read(65536), timeout)
        if not data:
            return [None]  # closed
        events = self.h2.receive_data(data)
        self.flush()
        return events

    async def until(self, kind, timeout: float = 5.0) -> list:
        seen: list = []
        while not any(isinstance(e, kind) for e in seen):
            batch = await self.events(timeout)
            seen += batch
            if batch == [None]:
                break
        return seen


def request_headers(method: str, path: str, **extra: str) -> list[tuple[str, str]]:
    return [(":method", method), (":path", path), (":scheme", "http"),
            (":authority", "t"), *extra.items()]


def test_a_stream_that_never_finishes_gets_request_timeout():
    async def scenario():
        async with http_stack(HttpLimits(request_timeout_s=0.2)) as server:
            port = await server.start("127.0.0.1", 0, None)
            raw = await RawH2.open(port)
            raw.h2.send_headers(1, request_headers("POST", "/jobs",
                                                   **{"content-type": "application/json"}))
            raw.h2.send_data(1, b'{"task":')  # and never the rest
            raw.flush()
            events = await raw.until(h2.events.StreamReset)
            [response] = [e for e in events if isinstance(e, h2.events.ResponseReceived)]
            assert dict(response.headers)[b":status"] == b"503"
            body = b"".join(e.data for e in events if isinstance(e, h2.events.DataReceived))
            assert b"request_timeout" in body
            raw.h2.send_headers(3, request_headers("GET", "/nope"), end_stream=True)
            raw.flush()  # the connection itself lives on
            events = await raw.until(h2.events.StreamEnded)
            assert any(isinstance(e, h2.events.ResponseReceived) for e in events)
            raw.writer.close()
    run(scenario())


def test_an_idle_connection_gets_goaway_and_shutdown_says_goodbye():
    async def scenario():
        async with http_stack(HttpLimits(keepalive_timeout_s=0.2)) as server:
            port = await server.start("127.0.0.1", 0, None)
            idle = await RawH2.open(port)
            events = await idle.until(h2.events.ConnectionTerminated)
            assert any(isinstance(e, h2.events.ConnectionTerminated) for e in events)
            busy = await RawH2.open(port)
            await busy.events()  # settings
            await server.close()
            events = await busy.until(h2.events.ConnectionTerminated)
            assert any(isinstance(e, h2.events.ConnectionTerminated) for e in events)
    run(scenario())


def test_too_many_headers_are_413():
    async def scenario():
        async with http_stack(HttpLimits(max_headers=8)) as server:
            port = await server.start("127.0.0.1", 0, None)
            async with h2_client(port) as client:
                headers = {f"x-h{n}": "v" for n in range(10)}
                response = await client.get("/nope", headers=headers)
                assert response.status_code == 413
    run(scenario())


def test_garbage_after_the_preface_is_a_goaway_not_a_crash():
    async def scenario():
        async with http_stack() as server:
            port = await server.start("127.0.0.1", 0, None)
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x04\x09" + b"x" * 40)
            data = b""
            while True:
                chunk = await asyncio.wait_for(reader.read(65536), 5)
                if not chunk:
                    break
                data += chunk
            assert b"\x07" in data  # a GOAWAY frame (type 7) before the close
            writer.close()
            async with h2_client(port) as client:
                assert (await client.get("/nope")).status_code == 404
    run(scenario())


def test_request_bodies_held_per_connection_are_bounded_by_flow_control():
    """Many streams sending large bodies slowly: once twice the body limit is held, the
    server stops reopening the window and the peer has to wait; finishing one stream
    lets the others go on."""
    async def scenario():
        limits = HttpLimits(max_body_bytes=100_000)
        async with http_stack(limits) as server:
            port = await server.start("127.0.0.1", 0, None)
            raw = await RawH2.open(port)
            await raw.events()
            streams = [1 + 2 * n for n in range(8)]
            for stream_id in streams:
                raw.h2.send_headers(stream_id, request_headers(
                    "POST", "/jobs", **{"content-type": "application/json"}))
            chunk = b" " * 4096  # JSON whitespace: a valid prefix of any body
            open_streams = set(streams)

            async def push() -> int:
                sent = 0
                while True:
                    moved = False
                    for stream_id in streams:
                        window = min(raw.h2.local_flow_control_window(stream_id),
                                     raw.h2.max_outbound_frame_size)
                        if window >= len(chunk) and stream_id in open_streams:
                            raw.h2.send_data(stream_id, chunk)
                            sent += len(chunk)
                            moved = True
                    raw.flush()
                    if not moved:
                        try:
                            await raw.events(0.3)
                        except asyncio.TimeoutError:
                            return sent
            sent = await push()
            (connection,) = server.connections
            assert sent >= 2 * limits.max_body_bytes  # the budget was reached ...
            assert connection.buffered <= 2 * limits.max_body_bytes + 65_535  # ... and held
            for stream_id in streams[:5]:  # finish most of them: their bodies are let go
                raw.h2.send_data(stream_id, b'{"task":"a"}', end_stream=True)
                open_streams.discard(stream_id)
            raw.flush()
            events = await raw.until(h2.events.ResponseReceived)
            status = [e for e in events if isinstance(e, h2.events.ResponseReceived)]
            assert dict(status[0].headers)[b":status"] in (b"201", b"400", b"413")
            assert await push() > 0  # the others may send again
            raw.writer.close()
    run(scenario())
