"""Real TCP sockets: keep-alive, slow clients, and mTLS (client certificate required,
verified against the CA, TLS 1.2+)."""

from __future__ import annotations

import asyncio
import ssl

import pytest

from tay.server.http.config import HttpConfig, HttpLimits, tls_context

from .certs import scratch_pki
from .conftest import SCRATCH, http_stack, parse_responses, request, run

ENQUEUE = request("POST", "/jobs", {"task": "demo.add", "args": {}})


@pytest.fixture(scope="module")
def pki():
    with scratch_pki(SCRATCH) as paths:
        yield paths


async def read_responses(reader: asyncio.StreamReader, count: int) -> list:
    data = b""
    while len([r for r in parse_responses(data) if r.status]) < count:
        chunk = await asyncio.wait_for(reader.read(65536), 5)
        if not chunk:
            break
        data += chunk
    return parse_responses(data)


def test_keep_alive_serves_many_requests_on_one_socket():
    async def scenario():
        async with http_stack() as server:
            port = await server.start("127.0.0.1", 0, None)
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            for _ in range(5):
                writer.write(ENQUEUE)
                (response,) = await read_responses(reader, 1)
                assert response.status == 201
            writer.write(ENQUEUE * 10)  # pipelined
            responses = await read_responses(reader, 10)
            assert [r.status for r in responses] == [201] * 10
            writer.close()
    run(scenario())


def test_slow_loris_is_cut_off_and_others_are_served():
    async def scenario():
        async with http_stack(HttpLimits(request_timeout_s=0.2)) as server:
            port = await server.start("127.0.0.1", 0, None)
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"POST /jobs HTTP/1.1\r\nhost: x\r\n")
            other_reader, other_writer = await asyncio.open_connection("127.0.0.1", port)
            other_writer.write(ENQUEUE)
            assert (await read_responses(other_reader, 1))[0].status == 201
            (late,) = await read_responses(reader, 1)
            assert late.code == "request_timeout"
            assert await asyncio.wait_for(reader.read(), 2) == b""  # closed
            other_writer.close()
            writer.close()
    run(scenario())


def client_context(pki, cert=None, key=None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=pki["ca"])
    if cert:
        context.load_cert_chain(cert, key)
    return context


def tls_server_config(pki) -> HttpConfig:
    return HttpConfig("127.0.0.1", 0, pki["server_cert"], pki["server_key"], pki["ca"])


def test_mtls_accepts_a_client_signed_by_the_ca(pki):
    async def scenario():
        async with http_stack() as server:
            port = await server.start("127.0.0.1", 0, tls_context(tls_server_config(pki)))
            context = client_context(pki, pki["client_cert"], pki["client_key"])
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
            writer.write(ENQUEUE)
            assert (await read_responses(reader, 1))[0].status == 201
            writer.close()
    run(scenario())


@pytest.mark.parametrize("who", ["no certificate", "other CA"])
def test_mtls_refuses_clients_without_a_trusted_certificate(pki, who):
    async def scenario():
        async with http_stack() as server:
            port = await server.start("127.0.0.1", 0, tls_context(tls_server_config(pki)))
            context = (client_context(pki) if who == "no certificate"
                       else client_context(pki, pki["rogue_cert"], pki["rogue_key"]))
            with pytest.raises((ssl.SSLError, ConnectionError, asyncio.IncompleteReadError)):
                reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
                writer.write(ENQUEUE)
                data = await asyncio.wait_for(reader.read(), 5)
                if not data:  # TLS 1.3: the refusal can arrive as a closed stream
                    raise ConnectionError("closed without a response")
            assert not server.driver.engine.jobs  # nothing reached the engine
    run(scenario())


def test_tls_context_requires_client_certificates_and_tls_1_2(pki):
    context = tls_context(tls_server_config(pki))
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2


def test_admin_routes_follow_the_same_mtls_rules(pki):
    async def scenario():
        async with http_stack() as server:
            port = await server.start("127.0.0.1", 0, tls_context(tls_server_config(pki)))
            context = client_context(pki, pki["client_cert"], pki["client_key"])
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
            writer.write(b"GET /admin/status HTTP/1.1\r\nhost: x\r\n\r\n")
            (response,) = await read_responses(reader, 1)
            assert response.status == 200 and response.json()["type"] == "admin_status"
            writer.write(b"POST /admin/queues/q/pause HTTP/1.1\r\nhost: x\r\n"
                         b"content-length: 0\r\n\r\n")
            (response,) = await read_responses(reader, 1)
            assert response.status == 200
            # the operator's trail names the client certificate
            local_port = writer.get_extra_info("sockname")[1]
            assert server.admin.actions[-1]["origin"] == f"http 127.0.0.1:{local_port} CN=client"
            writer.close()
            with pytest.raises((ssl.SSLError, ConnectionError, asyncio.IncompleteReadError)):
                reader, writer = await asyncio.open_connection("127.0.0.1", port,
                                                               ssl=client_context(pki))
                writer.write(b"GET /admin/status HTTP/1.1\r\nhost: x\r\n\r\n")
                await writer.drain()
                assert not await asyncio.wait_for(reader.read(), 5)
                raise ConnectionError("closed without an answer")
    run(scenario())
