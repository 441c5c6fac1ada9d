"""Run ``tay serve`` as a real subprocess and drive it with either SDK, in subprocesses.

``tay-client``: the REAL tay-client 1.4.0 in its own interpreter (``TAY_CLIENT_PYTHON``)
with ``-I`` and a cwd outside the repository, so it imports the installed package, never
ours. ``ours``: the repository's interpreter with only the repository on ``PYTHONPATH``
(cwd also outside), so ``from tay import Tay`` is our SDK. Test bodies are the same text.

``durability="sync"`` runs the server in strict mode (``--durability sync
--validated-filesystem``); its data dir is under ``tests.scratch`` because strict mode
refuses /tmp by design.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from tests.scratch import scratch_root
from tests.sdk.server import stop_now

import pytest

REPO = Path(__file__).resolve().parents[2]
CLIENT_PYTHON = os.environ.get("TAY_CLIENT_PYTHON", str(REPO / ".venv-tay-client/bin/python"))
OUR_PYTHON = str(REPO / ".venv/bin/python")
SCRATCH = scratch_root()  # strict sync accepts it wherever the checkout is
SDKS = ("tay-client", "ours")


def require_client() -> str:
    """The real tay-client's interpreter; a failure (not a skip) when it is missing, since
    without it nothing here would test compatibility at all."""
    if not os.path.exists(CLIENT_PYTHON):
        pytest.fail(f"the reference tay-client interpreter {CLIENT_PYTHON} is missing: run "
                    f"`make client-venv` (make test does) or set TAY_CLIENT_PYTHON", pytrace=False)
    return CLIENT_PYTHON


def sdk_command(sdk: str) -> tuple[list[str], dict[str, str]]:
    """Interpreter argv prefix and environment that make ``import tay`` mean ``sdk``."""
    if sdk == "tay-client":
        return [require_client(), "-I"], dict(os.environ)
    if sdk == "ours":
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        return [OUR_PYTHON, "-s"], {**env, "PYTHONPATH": str(REPO)}
    raise ValueError(f"unknown SDK {sdk!r}; expected one of {SDKS}")

WORKER_SCRIPT = r'''
import asyncio, os, sys, time
from tay import Tay

async def main():
    worker = Tay(socket_path=sys.argv[1], mode="worker", capacity=int(sys.argv[2]))
    state_dir = sys.argv[3]

    @worker.task(name="demo.add.v1")
    def add(left, right):
        return {"sum": left + right}

    @worker.task(name="demo.fail.v1")
    def fail(reason="boom"):
        raise ValueError(reason)

    @worker.task(name="demo.flaky.v1")
    def flaky(key, failures):
        path = os.path.join(state_dir, key)
        count = int(open(path).read()) if os.path.exists(path) else 0
        open(path, "w").write(str(count + 1))
        if count < failures:
            raise RuntimeError(f"attempt {count + 1} fails")
        return {"attempts": count + 1}

    @worker.task(name="demo.big.v1")
    def big(key, size):
        open(os.path.join(state_dir, key), "a").write("run\n")
        return {"blob": "x" * size}

    @worker.task(name="demo.sleep.v1")
    async def nap(seconds, key=None):
        if key:
            open(os.path.join(state_dir, key), "a").write("started\n")
        await asyncio.sleep(seconds)
        return {"slept": seconds}

    await worker.start()
    print("ready", flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
'''


def wait_for_lines(path: Path, count: int, limit_s: float = 15.0) -> int:
    """Lines in ``path`` once it has ``count`` of them or ``limit_s`` passed (the harness
    worker's ``demo.sleep.v1`` writes one when its body starts: an engine status of
    ``executing`` only says the dispatch left, not that the task body ran)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_text().splitlines()) >= count:
            break
        time.sleep(0.02)
    return len(path.read_text().splitlines()) if path.exists() else 0


class Server:
    """One ``tay serve`` process on a private data dir and socket."""

    def __init__(self, *extra: str, sdk: str = "tay-client", durability: str = "write",
                 env: dict[str, str] | None = None) -> None:
        SCRATCH.mkdir(exist_ok=True)
        self.sdk = sdk
        self.python, self.sdk_env = sdk_command(sdk)
        self.durability = ["--durability", "write"] if durability == "write" else [
            "--durability", "sync", "--validated-filesystem"]
        self.root = Path(tempfile.mkdtemp(prefix="conf-", dir=SCRATCH))
        self.data_dir = self.root / "data"
        self.socket = str(self.root / "tay.sock")
        self.extra = extra
        self.env = env or {}  # the server's alone (tests.wall_clock's, say), not the SDKs'
        self.process: subprocess.Popen[bytes] | None = None
        self.workers: list[subprocess.Popen[bytes]] = []

    def start(self, timeout: float = 10) -> "Server":
        log = open(self.root / "server.log", "ab")
        env = {**os.environ, "PYTHONPATH": str(REPO), **self.env}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tay.cli", "serve", "--data-dir", str(self.data_dir),
             "--socket", self.socket, "--init-if-missing", *self.durability, *self.extra],
            cwd=REPO, stdout=log, stderr=log, env=env)
        try:
            self._wait_listening(time.monotonic() + timeout)
        except BaseException:
            self.process.kill()  # a server that did not come up in time is not left running
            self.process.wait()
            raise
        return self

    def _wait_listening(self, deadline: float) -> None:
        assert self.process is not None
        while not os.path.exists(self.socket):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("tay serve did not start:\n" + self.log())
            time.sleep(0.02)
        if "--http-port" in self.extra:  # the HTTP listener may open after the socket
            port = int(self.extra[self.extra.index("--http-port") + 1])
            while True:
                try:
                    if port == 0:  # a port the kernel picks: open once its line is logged
                        if "tay listening on http" not in self.log():
                            raise OSError("not listening yet")
                    else:
                        socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if self.process.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError("tay serve's HTTP listener did not open:\n"
                                           + self.log()) from None
                    time.sleep(0.02)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            stop_now(self.process)
        self.process = None

    def start_worker(self, capacity: int = 4) -> subprocess.Popen[bytes]:
        worker = subprocess.Popen(
            [*self.python, "-c", WORKER_SCRIPT, self.socket, str(capacity), str(self.root)],
            cwd=tempfile.gettempdir(), env=self.sdk_env, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE)
        line = worker.stdout.readline()
        assert line.strip() == b"ready", worker.stderr.read().decode()
        self.workers.append(worker)
        return worker

    def kill_worker(self, worker: subprocess.Popen[bytes]) -> None:
        worker.kill()
        worker.wait(timeout=5)
        self.workers.remove(worker)

    def close(self) -> None:
        for worker in list(self.workers):
            self.kill_worker(worker)
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def log(self) -> str:
        return (self.root / "server.log").read_text(errors="replace")

    def client(self, body: str, timeout: float = 30) -> object:
        """Run ``body`` inside ``async def main(tay)`` with a started client; return its value."""
        script = (
            "import asyncio, json, sys\nfrom tay import Tay\nfrom tay.errors import *\n"
            "async def wait_for(job, states, limit=15.0):\n"
            "    loop = asyncio.get_running_loop(); end = loop.time() + limit\n"
            "    while True:\n"
            "        status = await job.status()\n"
            "        if status in states or loop.time() > end:\n"
            "            return status\n"
            "        await asyncio.sleep(0.02)\n"
            "async def body(tay):\n" + textwrap.indent(textwrap.dedent(body), "    ") + "\n"
            "async def main():\n"
            "    tay = Tay(socket_path=sys.argv[1], mode='client')\n"
            "    await tay.start()\n"
            "    try:\n"
            "        print(json.dumps(await body(tay)))\n"
            "    finally:\n"
            "        await tay.close()\n"
            "asyncio.run(main())\n"
        )
        done = subprocess.run([*self.python, "-c", script, self.socket], env=self.sdk_env,
                              cwd=tempfile.gettempdir(), capture_output=True, timeout=timeout)
        if done.returncode != 0:
            raise AssertionError(done.stderr.decode() + "\n--- server log ---\n" + self.log())
        return json.loads(done.stdout.decode().strip().splitlines()[-1])
