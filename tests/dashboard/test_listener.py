"""The dashboard mounted on a real HTTP listener: on TLS it follows the HTTP API's rule (a
client certificate signed by the configured CA before any page or action), off it is not
there, and after the journal writer stops the overview says so while other pages refuse."""

from __future__ import annotations

import asyncio
import os
import re
import ssl
from urllib.parse import urlencode

import pytest

from tay.dashboard import Dashboard
from tay.server.http.config import HttpConfig, tls_context
from tay.storage.layout import LOCK_NAME
from tests.http.certs import scratch_pki
from tests.http.conftest import SCRATCH, http_stack, parse_responses, run


@pytest.fixture(scope="module")
def pki():
    with scratch_pki(SCRATCH) as paths:
        yield paths


def client(pki, with_certificate: bool) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=pki["ca"])
    if with_certificate:
        context.load_cert_chain(pki["client_cert"], pki["client_key"])
    return context


async def exchange(port: int, context: ssl.SSLContext | None, data: bytes):
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    writer.write(data)
    received = b""
    while not [r for r in parse_responses(received) if r.status]:
        chunk = await asyncio.wait_for(reader.read(65536), 5)
        if not chunk:
            break
        received += chunk
    writer.close()
    answered = [r for r in parse_responses(received) if r.status]
    if not answered:  # TLS 1.3: a refused certificate can arrive as a closed stream
        raise ConnectionError("closed without an answer")
    return answered[0]


def test_pages_and_actions_need_a_trusted_client_certificate(pki):
    async def scenario():
        async with http_stack() as server:
            server.ui = Dashboard(server.admin.call)
            config = HttpConfig("127.0.0.1", 0, pki["server_cert"], pki["server_key"], pki["ca"])
            port = await server.start("127.0.0.1", 0, tls_context(config))
            host = f"127.0.0.1:{port}"
            trusted = client(pki, True)
            page = await exchange(port, trusted, f"GET /ui/queues HTTP/1.1\r\nhost: {host}\r\n\r\n"
                                  .encode())
            assert page.status == 200 and b"<h1>Queues</h1>" in page.body
            token = re.search(rb'name="csrf" value="([^"]+)"', page.body).group(1).decode()
            form = urlencode({"csrf": token}).encode()
            pause = (f"POST /ui/queues/tls-q/pause HTTP/1.1\r\nhost: {host}\r\n"
                     f"origin: https://{host}\r\nsec-fetch-site: same-origin\r\n"
                     "content-type: application/x-www-form-urlencoded\r\n"
                     f"content-length: {len(form)}\r\n\r\n").encode() + form
            done = await exchange(port, trusted, pause)
            assert done.status == 303 and "tls-q" in server.driver.engine.paused
            with pytest.raises((ssl.SSLError, ConnectionError, asyncio.IncompleteReadError)):
                await exchange(port, client(pki, False),
                               f"GET /ui/ HTTP/1.1\r\nhost: {host}\r\n\r\n".encode())
    run(scenario())


def test_without_the_dashboard_ui_paths_are_unknown(pki):
    async def scenario():
        async with http_stack() as server:  # server.ui stays None: --dashboard off
            port = await server.start("127.0.0.1", 0, None)
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /ui/ HTTP/1.1\r\nhost: x\r\n\r\n")
            data = await asyncio.wait_for(reader.read(65536), 5)
            writer.close()
            (response,) = parse_responses(data)
            assert response.status == 404 and response.code == "not_found"
    run(scenario())


def test_after_the_writer_stops_the_overview_says_so_and_pages_refuse():
    async def scenario():
        async with http_stack() as server:
            server.ui = Dashboard(server.admin.call)
            port = await server.start("127.0.0.1", 0, None)
            data_dir = server.admin.config.data_dir
            # a second hard link to the owner lock fails the journal's path check: the next
            # batch stops the writer for good (the fault tests/server/test_writer_stopped uses)
            os.link(os.path.join(data_dir, LOCK_NAME), os.path.join(data_dir, "lock-alias"))
            body = b'{"task":"t","args":{}}'
            await exchange(port, None, b"POST /jobs HTTP/1.1\r\nhost: x\r\ncontent-type: "
                           b"application/json\r\ncontent-length: %d\r\n\r\n%s"
                           % (len(body), body))
            assert server.driver.stopped is not None
            overview = await exchange(port, None, b"GET /ui/ HTTP/1.1\r\nhost: x\r\n\r\n")
            assert overview.status == 200 and b"The journal writer stopped" in overview.body
            assert b"Writer stopped" in overview.body
            jobs = await exchange(port, None, b"GET /ui/jobs HTTP/1.1\r\nhost: x\r\n\r\n")
            assert jobs.status == 503 and b"unavailable" in jobs.body
    run(scenario())

