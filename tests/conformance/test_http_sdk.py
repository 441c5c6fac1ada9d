"""``TayHTTP`` / ``TayHTTPWorker`` of BOTH SDKs (the real tay-client 1.4.0 and ours, same
script text, subprocesses) against ``tay serve --http-port`` as a subprocess: over plain
loopback HTTP and over mTLS with certificates made here, a worker re-registering after a
restart lost its session, and clients lacking a certificate or holding one from another CA
refused."""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from tests.http.certs import scratch_pki
from tests.sdk.server import stop_now

from .harness import REPO, SCRATCH, SDKS, sdk_command

pytestmark = [pytest.mark.conformance, pytest.mark.timeout(120)]

WORKER = r'''
import asyncio, json, sys
from tay import TayHTTPWorker

async def main():
    worker = TayHTTPWorker(sys.argv[1], capacity=2, **json.loads(sys.argv[2]))

    @worker.task(name="demo.add.v1")
    def add(left, right):
        return {"sum": left + right}

    @worker.task(name="demo.fail.v1")
    def fail(reason="boom"):
        raise ValueError(reason)

    @worker.task(name="demo.sleep.v1")
    async def nap(seconds):
        await asyncio.sleep(seconds)
        return {"slept": seconds}

    await worker.register()
    print("ready", flush=True)
    await worker.serve_forever()

asyncio.run(main())
'''


def python_path() -> str:
    """The repository first, then whatever the caller had."""
    return os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))


class HttpServer:
    """``tay serve`` with only the HTTP listener (the implicit socket is off)."""

    def __init__(self, tls: dict[str, str] | None = None, *extra: str, sdk: str = "tay-client") -> None:
        SCRATCH.mkdir(exist_ok=True)
        self.sdk = sdk
        self.python, self.sdk_env = sdk_command(sdk)
        self.root = Path(tempfile.mkdtemp(prefix="conf-http-", dir=SCRATCH))
        self.tls = tls
        self.extra = list(extra)
        self.process: subprocess.Popen[bytes] | None = None
        self.workers: list[subprocess.Popen[bytes]] = []
        self.port = 0

    def start(self, port: int = 0) -> "HttpServer":
        extra = list(self.extra)
        if self.tls:
            extra += ["--http-tls-certfile", self.tls["server_cert"], "--http-tls-keyfile",
                     self.tls["server_key"], "--http-tls-cacertfile", self.tls["ca"]]
        log = open(self.root / "server.log", "ab")
        env = {k: v for k, v in os.environ.items() if not k.startswith("TAY_")}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tay.cli", "serve", "--data-dir", str(self.root / "data"),
             "--init-if-missing", "--durability", "write", "--http-port", str(port), *extra],
            cwd=REPO, stdout=log, stderr=log, env={**env, "PYTHONPATH": python_path()})
        deadline = time.monotonic() + 15
        while not self.port:
            found = re.search(r"listening on https?://127\.0\.0\.1:(\d+)", self.log())
            if found:
                self.port = int(found.group(1))
            elif self.process.poll() is not None or time.monotonic() > deadline:
                self.process.kill()  # a server that did not come up in time is not left running
                self.process.wait()
                raise RuntimeError("tay serve did not start:\n" + self.log())
            time.sleep(0.02)
        return self

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def log(self) -> str:
        return (self.root / "server.log").read_text(errors="replace")

    def client_options(self, cert: str = "client") -> dict[str, str]:
        if not self.tls:
            return {}
        options = {"tls_ca_file": self.tls["ca"]}
        if cert:
            options.update(tls_cert_file=self.tls[f"{cert}_cert"],
                           tls_key_file=self.tls[f"{cert}_key"])
        return options

    def start_worker(self) -> None:
        worker = subprocess.Popen(
            [*self.python, "-c", WORKER, self.url, json.dumps(self.client_options())],
            cwd=tempfile.gettempdir(), env=self.sdk_env, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE)
        line = worker.stdout.readline()
        assert line.strip() == b"ready", worker.stderr.read().decode() + self.log()
        self.workers.append(worker)

    def producer(self, body: str, cert: str = "client", timeout: float = 60) -> object:
        """Run ``body`` inside ``async def body(tay)`` with this SDK's ``TayHTTP``."""
        script = (
            "import asyncio, json, sys\nfrom tay import TayHTTP\nfrom tay.errors import *\n"
            "async def wait_for(job, states, limit=20.0):\n"
            "    loop = asyncio.get_running_loop(); end = loop.time() + limit\n"
            "    while True:\n"
            "        status = await job.status()\n"
            "        if status in states or loop.time() > end:\n"
            "            return status\n"
            "        await asyncio.sleep(0.05)\n"
            "async def body(tay):\n" + textwrap.indent(textwrap.dedent(body), "    ") + "\n"
            "async def main():\n"
            "    async with TayHTTP(sys.argv[1], **json.loads(sys.argv[2])) as tay:\n"
            "        print(json.dumps(await body(tay)))\n"
            "asyncio.run(main())\n")
        done = subprocess.run(
            [*self.python, "-c", script, self.url, json.dumps(self.client_options(cert))],
            cwd=tempfile.gettempdir(), env=self.sdk_env, capture_output=True, timeout=timeout)
        if done.returncode != 0:
            raise AssertionError(done.stderr.decode() + "\n--- server log ---\n" + self.log())
        return json.loads(done.stdout.decode().strip().splitlines()[-1])

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            stop_now(self.process)

    def restart(self) -> None:
        """Same store and port; every worker session is gone."""
        port = self.port
        self.stop()
        (self.root / "server.log").write_text("")
        self.port = 0
        self.start(port)

    def close(self) -> None:
        for worker in self.workers:
            worker.kill()
            worker.wait(timeout=5)
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


SCENARIO = '''
add = await tay.enqueue("demo.add.v1", {"left": 2, "right": 5})
fail = await tay.enqueue("demo.fail.v1", {"reason": "nope"})
slow = await tay.enqueue("demo.sleep.v1", {"seconds": 30})
out = {"add": await wait_for(add, {"completed"}), "sum": await add.result(),
       "fail": await wait_for(fail, {"discarded"})}
try:
    await fail.result()
except RemoteTaskError as error:
    out["remote"] = error.code
    out["remote_failure"] = [(error.details.get("failure") or {}).get(k) for k in ("type", "message")]
await wait_for(slow, {"executing"})
out["cancel"] = await slow.cancel()
try:
    await slow.result()
except ServerError as error:
    out["cancelled_result"] = error.code
try:
    await tay.enqueue("demo.add.v1", {"left": 1}, options={"priority": 3})
except ServerError as error:
    out["bad_option"] = error.code
try:
    await tay._request("GET", "/jobs/" + "ab" * 16)
except ServerError as error:
    out["missing"] = error.code
return out
'''


def check_scenario(result: dict) -> None:
    assert result["add"] == "completed" and result["sum"] == {"sum": 7}
    assert result["fail"] == "discarded" and result["remote"] == "task_failed"
    assert result["remote_failure"] == ["ValueError", "nope"]  # both SDKs see the details
    assert result["cancel"] == "cancelled"
    assert result["cancelled_result"] in ("task_cancelled", "result_not_ready")
    assert result["bad_option"] == "invalid_enqueue"
    assert result["missing"] == "not_found"


@pytest.fixture(params=SDKS)
def sdk(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def plain_server(sdk: str):
    server = HttpServer(sdk=sdk).start()
    yield server
    server.close()


@pytest.fixture(scope="module")
def pki():
    with scratch_pki(SCRATCH) as paths:
        yield paths


def test_producer_and_worker_over_plain_loopback(plain_server):
    plain_server.start_worker()
    check_scenario(plain_server.producer(SCENARIO))
    assert not os.path.exists(plain_server.root / "tay.sock")


def test_worker_reregisters_after_its_session_is_closed(plain_server):
    plain_server.start_worker()
    result = plain_server.producer('''
    first = await tay.enqueue("demo.add.v1", {"left": 1, "right": 1})
    await wait_for(first, {"completed"})
    return await first.result()
    ''')
    assert result == {"sum": 2}
    # a restart loses every session: the SDK gets unknown_worker and re-registers
    plain_server.restart()
    again = plain_server.producer('''
    job = await tay.enqueue("demo.add.v1", {"left": 3, "right": 4})
    return [await wait_for(job, {"completed"}, 30), await job.result()]
    ''')
    assert again == ["completed", {"sum": 7}]


def test_each_sdk_imports_the_package_it_claims(plain_server):
    location = Path(plain_server.producer("import tay as sdk_module\nreturn sdk_module.__file__"))
    assert location.is_relative_to(REPO / "tay") == (plain_server.sdk == "ours"), location


def test_producer_and_worker_over_mtls(pki, sdk):
    server = HttpServer(tls=pki, sdk=sdk).start()
    try:
        server.start_worker()
        check_scenario(server.producer(SCENARIO))
    finally:
        server.close()


def test_mtls_refuses_clients_without_a_trusted_certificate(pki, sdk):
    server = HttpServer(tls=pki, sdk=sdk).start()
    try:
        # the SDK refuses to run without a client certificate, so that client is plain ssl
        context = ssl.create_default_context(cafile=pki["ca"])
        connection = http.client.HTTPSConnection("127.0.0.1", server.port, context=context,
                                                 timeout=10)
        with pytest.raises((ssl.SSLError, ConnectionError)):
            connection.request("POST", "/jobs", body=b'{"task":"a","args":{}}',
                               headers={"Content-Type": "application/json"})
            connection.getresponse()
        rogue = server.producer('''
        try:
            await tay.enqueue("demo.add.v1", {"left": 1, "right": 2})
        except ConnectionLost:
            return "refused"
        return "accepted"
        ''', cert="rogue")
        assert rogue == "refused"
        trusted = server.producer('''
        job = await tay.enqueue("demo.add.v1", {"left": 1, "right": 2})
        return await job.status()
        ''')
        assert trusted == "available"
    finally:
        server.close()


def test_non_loopback_without_tls_is_refused_at_start(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "tay.cli", "serve", "--data-dir", str(tmp_path / "data"),
         "--init-if-missing", "--http-port", "0", "--http-ip", "0.0.0.0"],
        cwd=REPO, capture_output=True, timeout=30, env={**os.environ, "PYTHONPATH": python_path()})
    assert done.returncode == 2
    assert b"--http-ip" in done.stderr
    assert not (tmp_path / "data").exists()


def test_an_explicit_socket_keeps_both_listeners(sdk):
    SCRATCH.mkdir(exist_ok=True)
    socket_dir = Path(tempfile.mkdtemp(prefix="sock-", dir=SCRATCH))
    server = HttpServer(None, "--socket", str(socket_dir / "tay.sock"), sdk=sdk).start()
    try:
        assert (socket_dir / "tay.sock").exists()
        assert server.producer('''
        job = await tay.enqueue("demo.add.v1", {"left": 1, "right": 2})
        return await job.status()
        ''') == "available"
    finally:
        server.close()
        shutil.rmtree(socket_dir, ignore_errors=True)
