"""A running ``tay serve`` as the dashboard tests use it: plain HTTP requests to /ui/,
SDK producer calls (on their own thread, away from Playwright's loop) and admin reads."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlencode, urlsplit

from tay import Tay
from tay.admin.client import SocketAdmin
from tests.sdk.server import REPO, Server, scratch_dirs

_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


class Response:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body
        self.text = body.decode("utf-8", "replace")

    def csrf(self) -> str:
        found = _CSRF.search(self.text)
        assert found, "no action form with a CSRF token on this page"
        return found.group(1)


class UiEngine:
    def __init__(self, server: Any, scratch: str) -> None:
        self.server = server
        self.scratch = scratch
        self.socket_path = server.socket_path
        self.admin = SocketAdmin(server.socket_path)
        self.url = wait_for(lambda: self.admin.call("status", {})["http"])["address"]
        self._pool = ThreadPoolExecutor(1)

    def close(self) -> None:
        self.admin.close()
        self._pool.shutdown()

    def wait_for_worker(self) -> None:
        wait_for(lambda: any("ui.ok" in w["tasks"]
                             for w in self.admin.call("workers", {})["workers"]), 15)

    # ---- SDK producer calls ------------------------------------------------------------
    def produce(self, body) -> Any:
        """Run ``await body(tay)`` with a client-mode SDK connection on a helper thread."""
        async def scenario():
            async with Tay(mode="client", socket_path=self.socket_path) as tay:
                return await body(tay)
        return self._pool.submit(asyncio.run, scenario()).result(60)

    def enqueue(self, task: str, args: dict | None = None, **options: Any) -> str:
        async def body(tay):
            return (await tay.enqueue(task, args or {}, **options)).id
        return self.produce(body)

    def job(self, job_id: str) -> dict[str, Any]:
        return self.admin.call("job", {"job_id": job_id})["job"]

    def wait_state(self, job_id: str, state: str, timeout: float = 10.0) -> dict[str, Any]:
        return wait_for(lambda: (job := self.job(job_id))["state"] == state and job, timeout)

    # ---- plain HTTP (no browser, no JavaScript) ----------------------------------------
    def request(self, method: str, path: str, body: bytes = b"",
                headers: dict[str, str] | None = None) -> Response:
        parts = urlsplit(self.url)
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        try:
            connection.request(method, path, body=body or None, headers=headers or {})
            answer = connection.getresponse()
            return Response(answer.status, {k.lower(): v for k, v in answer.getheaders()},
                            answer.read())
        finally:
            connection.close()

    def get(self, path: str, **headers: str) -> Response:
        return self.request("GET", path, headers=headers)

    def post(self, path: str, form: dict[str, str], headers: dict[str, str] | None = None) -> Response:
        return self.request("POST", path, urlencode(form).encode(), {
            "Content-Type": "application/x-www-form-urlencoded", **(headers or {})})


def wait_for(check, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)
    return value


@contextlib.contextmanager
def started_engine() -> Iterator[UiEngine]:
    """``tay serve`` (HTTP on an ephemeral loopback port, a configured queue) and one
    ``tay-worker tests.dashboard.worker_app`` process; both stopped on exit."""
    data, sockets = scratch_dirs()
    with data, sockets:
        socket_path = os.path.join(sockets.name, "tay.sock")
        server = Server(os.path.join(data.name, "data"), socket_path, "--http-port", "0",
                        "--queue", "ui-configured=3").start()
        env = {**os.environ, "PYTHONPATH": str(REPO), "TAY_SOCKET_PATH": socket_path}
        worker = subprocess.Popen([sys.executable, "-m", "tay.worker", "tests.dashboard.worker_app",
                                   "--grace", "2"], env=env, cwd=str(REPO),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        engine = None
        try:
            engine = UiEngine(server, data.name)
            engine.wait_for_worker()
            yield engine
        finally:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(10)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait(5)
            if engine is not None:
                engine.close()
            server.stop()
