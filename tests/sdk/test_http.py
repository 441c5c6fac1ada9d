"""TayHTTP and TayHTTPWorker against a scripted loopback HTTP peer, plus URL/TLS rules."""

import asyncio
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tay import TayHTTP, TayHTTPWorker
from tay.errors import ConnectionLost, ProtocolError, ServerError, ValidationError

TOKEN = "t" * 43


class Script:
    def __init__(self):
        self.requests = []
        self.connections = set()
        self.claims = []  # queued (status, body) answers for claims
        self.expire_once = False


def make_server(script, host="127.0.0.1"):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _answer(self, status, body=None, headers=()):
            data = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
            self.send_response(status)
            for key, value in headers:
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _route(self, method):
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            script.connections.add(self.client_address)
            script.requests.append((method, self.path, dict(self.headers), body))
            path = self.path
            if method == "POST" and path == "/jobs":
                return self._answer(201, {"type": "enqueued", "job_id": "a" * 32, "job": {"durability": "persistent"}})
            if path == "/jobs/" + "a" * 32 + "/result":
                return self._answer(200, {"type": "result", "result": None})
            if path == "/jobs/missing":
                return self._answer(404, {"error": {"code": "not_found"}})
            if path == "/redirect":
                return self._answer(302, b"", [("Location", "/elsewhere")])
            if path == "/huge":
                return self._answer(200, b"{" + b" " * (1_048_577) + b"}")
            if path == "/workers" and method == "POST":
                return self._answer(201, {"worker_token": TOKEN})
            if path == "/workers" and method == "DELETE":
                return self._answer(200, {"type": "closed"})
            if path.endswith("/claim"):
                if script.expire_once:
                    script.expire_once = False
                    return self._answer(401, {"error": {"code": "unknown_worker"}})
                if script.claims:
                    status, answer = script.claims.pop(0)
                    return self._answer(status, answer)
                threading.Event().wait(0.05)
                return self._answer(204)
            if path in ("/workers/started", "/workers/complete"):
                return self._answer(200, {"type": "accepted"})
            return self._answer(404, {"error": {"code": "not_found"}})

        def do_GET(self):
            self._route("GET")

        def do_POST(self):
            self._route("POST")

        def do_DELETE(self):
            self._route("DELETE")

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    server = type("Server", (ThreadingHTTPServer,), {"address_family": family})((host, 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def http_peer():
    script = Script()
    server = make_server(script)
    yield f"http://127.0.0.1:{server.server_address[1]}", script
    server.shutdown()
    server.server_close()


def test_enqueue_and_result_use_json_endpoints_and_keep_alive(http_peer):
    base, script = http_peer

    async def scenario():
        async with TayHTTP(base) as tay:
            handle = await tay.enqueue("demo.add", {"left": 2}, retries=1)
            assert await handle.result() is None  # a stored JSON null is a result
            return handle

    handle = asyncio.run(scenario())
    assert handle.id == "a" * 32 and handle.durability == "persistent"
    method, path, headers, body = script.requests[0]
    assert (method, path) == ("POST", "/jobs") and headers["Content-Type"] == "application/json"
    assert body == {"task": "demo.add", "args": {"left": 2}, "options": {"retries": 1}}
    assert len(script.connections) == 1  # the second request reused the connection


def test_error_objects_redirects_and_oversized_bodies(http_peer):
    base, _ = http_peer

    async def scenario():
        async with TayHTTP(base) as tay:
            with pytest.raises(ServerError) as caught:
                await tay._request("GET", "/jobs/missing")
            assert caught.value.code == "not_found"
            with pytest.raises(ProtocolError, match="redirect"):
                await tay._request("GET", "/redirect")
            with pytest.raises(ProtocolError, match="exceeds 1048576"):
                await tay._request("GET", "/huge")

    asyncio.run(scenario())


def test_unreachable_server_is_connection_lost():
    async def scenario():
        async with TayHTTP("http://127.0.0.1:9", request_timeout=2) as tay:
            with pytest.raises(ConnectionLost):
                await tay.enqueue("x")

    asyncio.run(scenario())


@pytest.mark.parametrize(("url", "kwargs", "fragment"), [
    ("ftp://127.0.0.1", {}, "origin"),
    ("http://127.0.0.1:8080/path", {}, "origin"),
    ("http://user:pw@127.0.0.1", {}, "origin"),
    ("http://127.0.0.1:99999", {}, "port"),
    ("http://tay.example:8080", {}, "not a loopback"),
    ("https://tay.example", {}, "not a loopback"),
    ("https://tay.example", {"tls_ca_file": "ca.pem"}, "all of"),
    ("http://127.0.0.1", {"tls_pkcs12_password": "x"}, "requires tls_pkcs12_file"),
    ("https://tay.example", {"tls_pkcs12_file": "a.p12", "tls_ca_file": "ca.pem"}, "not both"),
    ("http://localhost", {"tls_ca_file": "a", "tls_cert_file": "b", "tls_key_file": "c"}, "https"),
    ("http://127.0.0.1", {"request_timeout": 0}, "positive"),
])
def test_url_and_tls_rules(url, kwargs, fragment):
    with pytest.raises(ValidationError, match=fragment):
        TayHTTP(url, **kwargs)


@pytest.mark.parametrize("name, bind", [("localhost", "127.0.0.1"), ("127.0.0.5", "127.0.0.5"),
                                        ("[::1]", "::1")])
def test_plain_http_to_loopback_names_is_allowed(name, bind):
    """Each loopback spelling is accepted without TLS and really reaches a plain-HTTP peer."""
    script = Script()
    server = make_server(script, bind)

    async def scenario():
        async with TayHTTP(f"http://{name}:{server.server_address[1]}") as tay:
            return await tay.enqueue("demo.add", {"left": 1})

    try:
        assert asyncio.run(scenario()).id == "a" * 32
        assert [(method, path) for method, path, _, _ in script.requests] == [("POST", "/jobs")]
    finally:
        server.shutdown()
        server.server_close()


def test_worker_needs_long_timeout_and_bounded_capacity():
    with pytest.raises(ValidationError, match="request_timeout >= 25"):
        TayHTTPWorker("http://127.0.0.1", request_timeout=10)
    with pytest.raises(ValidationError, match="1..256"):
        TayHTTPWorker("http://127.0.0.1", capacity=257)


def test_worker_registers_claims_runs_and_reregisters_after_expiry(http_peer):
    base, script = http_peer
    script.expire_once = True
    script.claims.append((200, {"version": 1, "type": "execute", "request_id": "x", "execution_id": "x",
                                "reservation_id": "r", "job_id": "j", "task": "demo.add",
                                "args": {"left": 2, "right": 5}, "timeout_ms": 1000}))

    async def scenario():
        worker = TayHTTPWorker(base, queue="default", capacity=2)

        @worker.task(name="demo.add")
        def add(left, right):
            return {"sum": left + right}

        serving = asyncio.create_task(worker.serve_forever())
        for _ in range(200):
            if any(path == "/workers/complete" for _, path, _, _ in script.requests):
                break
            await asyncio.sleep(0.02)
        serving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await serving

    asyncio.run(scenario())
    paths = [(method, path) for method, path, _, _ in script.requests]
    assert paths.count(("POST", "/workers")) == 2  # registered again after unknown_worker
    complete = next(body for _, path, _, body in script.requests if path == "/workers/complete")
    assert complete == {"reservation_id": "r", "execution_id": "x", "outcome": "success", "result": {"sum": 7}}
    started = next(body for _, path, _, body in script.requests if path == "/workers/started")
    assert started == {"reservation_id": "r", "execution_id": "x"}
    assert all(headers.get("Authorization") == f"Bearer {TOKEN}" for _, path, headers, _ in script.requests
               if path.startswith("/queues") or path.startswith("/workers/"))
    assert paths[-1] == ("DELETE", "/workers")  # the session is closed on the way out
