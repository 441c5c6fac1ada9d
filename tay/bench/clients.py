"""Producer and worker processes of a run, with either SDK: ours or the unmodified
``tay-client`` 1.4.0 (its own virtualenv, ``python -I``).

Both SDKs share one public API, so one script body (``PRODUCER``, ``WORKER``) runs under
either interpreter; each process is a fresh interpreter like a real deployment. They talk
to the harness by lines: the producer prints ``ready``, waits for ``go`` on stdin, prints
``submitted N`` as it goes and one final JSON line (first send time, its own CPU from the
go signal to its last acknowledgement, the last acknowledgement's time, and every insert
round trip, send to durable acknowledgement); the worker prints ``ready`` once its task is
registered, ``executed N`` as jobs run, and stops when stdin closes.

Caller ``c`` submits every job ``i`` with ``i % callers == c``, one at a time; our SDK runs
on uvloop when it is installed (tay-client's venv has no uvloop: it runs as users run it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tay.failures import ConfigurationError

REPO = Path(__file__).resolve().parents[2]
SDKS = ("ours", "tay-client")

_PRELUDE = r'''
import asyncio, base64, json, sys, time
from array import array
try:
    import uvloop
    run = uvloop.run
except ImportError:
    run = asyncio.run
from tay import Tay
'''

PRODUCER = _PRELUDE + r'''
plan = json.loads(sys.argv[1])
ARGS = {"account_key": "benchmark-account", "payload": "x" * plan["payload_bytes"], "version": 1}

async def main():
    round_trips, first, submitted = array("d"), [], [0]
    queues = plan["queues"]

    async def caller(number, tay):
        for index in range(number, plan["jobs"], plan["callers"]):
            if not first:
                first.append(time.time_ns())
            started = time.perf_counter()
            await tay.enqueue(plan["task"], ARGS, queue=queues[index % len(queues)],
                              retries=plan["retries"])
            round_trips.append(time.perf_counter() - started)
            submitted[0] += 1

    async def report():
        while True:
            await asyncio.sleep(0.1)
            print("submitted", submitted[0], flush=True)

    async with Tay(mode="client", socket_path=plan["socket"], request_timeout=900.0) as tay:
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        cpu = time.process_time()
        progress = asyncio.ensure_future(report())
        await asyncio.gather(*(caller(number, tay) for number in plan["mine"]))
        last_ack_ns = time.time_ns()
        progress.cancel()
        cpu = time.process_time() - cpu
    print(json.dumps({"first_send_ns": first[0] if first else None, "cpu_s": cpu,
                      "last_ack_ns": last_ack_ns,
                      "round_trips": base64.b64encode(round_trips.tobytes()).decode()}),
          flush=True)

run(main())
'''

WORKER = _PRELUDE + r'''
plan = json.loads(sys.argv[1])

async def main():
    tay = Tay(mode="worker", socket_path=plan["socket"], capacity=plan["capacity"])
    executed = [0]

    @tay.task(name=plan["task"], retries=0)
    async def no_op(account_key, payload, version):
        executed[0] += 1

    async with tay:
        print("ready", flush=True)
        stdin_closed = asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        shown = -1
        while not stdin_closed.done():
            if executed[0] != shown:
                shown = executed[0]
                print("executed", shown, flush=True)
            await asyncio.sleep(0.02)

run(main())
'''


def interpreter(sdk: str) -> list[str]:
    """The command that runs a script body with ``sdk``'s ``tay`` package."""
    if sdk == "ours":
        return [sys.executable, "-s"]
    if sdk == "tay-client":
        python = Path(os.environ.get("TAY_CLIENT_PYTHON")
                      or REPO / ".venv-tay-client" / "bin" / "python")
        if not python.exists():
            raise ConfigurationError("--client", f"tay-client needs {python} (make client-venv)")
        return [str(python), "-I"]
    raise ConfigurationError("--client", f"{sdk!r} is not one of {', '.join(SDKS)}")


@dataclass
class ClientProcess:
    """One producer or worker process and what it has reported so far."""

    process: subprocess.Popen[str]
    ready: threading.Event
    count: int = 0  # submitted (producer) or executed (worker)
    result: dict[str, Any] | None = None
    error: str = ""

    @classmethod
    def start(cls, sdk: str, body: str, plan: dict[str, Any]) -> "ClientProcess":
        env = dict(os.environ)
        if sdk == "ours":
            env["PYTHONPATH"] = str(REPO)
        process = subprocess.Popen([*interpreter(sdk), "-c", body, json.dumps(plan)],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, env=env, cwd=os.getcwd())
        client = cls(process, threading.Event())
        threading.Thread(target=client._read, daemon=True).start()
        threading.Thread(target=client._read_errors, daemon=True).start()
        return client

    def _read(self) -> None:
        for line in self.process.stdout:  # type: ignore[union-attr]
            word, _, rest = line.strip().partition(" ")
            if word == "ready":
                self.ready.set()
            elif word in ("submitted", "executed"):
                self.count = int(rest)
            elif word.startswith("{"):
                self.result = json.loads(line)

    def _read_errors(self) -> None:
        self.error = self.process.stderr.read()[-4000:]  # type: ignore[union-attr]

    def send(self, line: str) -> None:
        self.process.stdin.write(line + "\n")  # type: ignore[union-attr]
        self.process.stdin.flush()  # type: ignore[union-attr]

    def stop(self, timeout_s: float = 10.0) -> None:
        try:
            self.process.stdin.close()  # type: ignore[union-attr]
        except OSError:
            pass
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
