"""The SDK's own CPU per job, in process: a ``Tay`` producer and a ``Tay`` worker against a
fake engine that answers at once, so no socket, system call or server is measured.

    .venv/bin/python -m benchmarks.sdk_path [--jobs 20000] [--callers 4] [--capacity 8]
        [--group N] [--loop uvloop|asyncio] [--only producer|worker]

The producer runs ``--callers`` callers that each await one ``enqueue`` at a time (the
reference profile's shape: 1 KiB args, a queue, ``retries=0``); every request is answered
by an ``enqueued`` frame shaped as ``tay serve`` shapes it (the job with its args). The
worker gets ``execute`` frames and every report is answered by ``accepted``. ``--group 1``
(per-event) hands each reply to the SDK in a buffer of its own, one per loop turn, as a
per-event fsync does; ``--group N`` hands up to N replies in one buffer. Under callgrind
(``valgrind --tool=callgrind``) the instruction count per job is the steady figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import struct
import time
from collections.abc import Callable
from typing import Any

from tay.sdk.client import Tay

ARGS = {"account_key": "benchmark-account", "payload": "x" * 1024, "version": 1}
_HEADER = struct.Struct(">I")


def frame(message: dict[str, Any]) -> bytes:
    payload = json.dumps(message, separators=(",", ":")).encode()
    return _HEADER.pack(len(payload)) + payload


def payloads_of(data: bytes) -> list[bytes]:
    payloads, at = [], 0
    while at < len(data):
        (length,) = _HEADER.unpack_from(data, at)
        payloads.append(data[at + 4 : at + 4 + length])
        at += 4 + length
    return payloads


def field_of(payload: bytes, name: bytes) -> bytes:
    """A string member's raw value, found by bytes (the fake engine must stay cheap)."""
    start = payload.index(b'"' + name + b'":"') + len(name) + 4
    return payload[start : payload.index(b'"', start)]


def kind_of(payload: bytes) -> bytes:
    return field_of(payload, b"type")


# The enqueued reply as tay serve shapes it, split where the request id and job id go.
_ENQUEUED = frame({"version": 1, "type": "enqueued", "request_id": "@R", "job_id": "@J",
                   "job": {"id": "@J", "task": "tay.benchmark.v1", "args": ARGS, "state": "available",
                           "attempt": 0, "max_attempts": 1, "queue": "alpha", "scheduled_at": 1796202762796,
                           "completed_at": None, "errors": [], "durability": "persistent"}})[4:]
_ACCEPTED = frame({"version": 1, "type": "accepted", "request_id": "@R"})[4:]


def reply(template: bytes, request_id: bytes, job_id: bytes = b"") -> bytes:
    payload = template.replace(b"@R", request_id).replace(b"@J", job_id)
    return _HEADER.pack(len(payload)) + payload


def enqueued(payload: bytes, number: int) -> bytes:
    return reply(_ENQUEUED, field_of(payload, b"request_id"), b"%032x" % number)


_EXECUTE = frame({"version": 1, "type": "execute", "request_id": "@R", "reservation_id": "@S",
                  "execution_id": "@R", "job_id": "@J", "task": "tay.benchmark.v1", "args": ARGS,
                  "timeout_ms": 30000})[4:]


def execute(number: int) -> bytes:
    token = b"%024x" % number
    payload = _EXECUTE.replace(b"@R", token).replace(b"@S", b"r" + token[1:]).replace(b"@J", b"%032x" % number)
    return _HEADER.pack(len(payload)) + payload


class FakeEngine(asyncio.Transport):
    """The SDK's transport: what it writes is answered in later loop turns, ``group``
    replies to a buffer at most."""

    def __init__(self, answer: Callable[[bytes], bytes | None], group: int) -> None:
        super().__init__()
        self.answer, self.group = answer, group
        self.protocol: Any = None
        self.queued: list[bytes] = []
        self.scheduled = False
        self.closing = False

    def write(self, data: bytes) -> None:  # type: ignore[override]
        for payload in payloads_of(bytes(data)):
            answer = self.answer(payload)
            if answer is not None:
                self.queued.append(answer)
        if self.queued and not self.scheduled:
            self.scheduled = True
            asyncio.get_running_loop().call_soon(self.deliver)

    def push(self, data: bytes) -> None:
        self.queued.append(data)
        if not self.scheduled:
            self.scheduled = True
            asyncio.get_running_loop().call_soon(self.deliver)

    def deliver(self) -> None:
        self.scheduled = False
        batch, self.queued = self.queued[: self.group], self.queued[self.group :]
        if batch:
            self.protocol.data_received(b"".join(batch))
        if self.queued and not self.scheduled:
            self.scheduled = True
            asyncio.get_running_loop().call_soon(self.deliver)

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


def handshake(payload: bytes) -> bytes | None:
    message = json.loads(payload)
    kind = message["type"]
    if kind == "hello":
        return frame({"version": 1, "type": "hello_ok", "request_id": message["request_id"],
                      "mode": message["mode"], "max_concurrency": message["max_concurrency"]})
    if kind == "register_tasks":
        return frame({"version": 1, "type": "tasks_registered", "request_id": message["request_id"],
                      "tasks": message["tasks"]})
    return None


def attach(tay: Tay, engine: FakeEngine) -> None:
    async def open_transport(new_link: Callable[[], Any]) -> tuple[FakeEngine, Any]:
        link = new_link()
        engine.protocol = link
        link.connection_made(engine)
        return engine, link

    tay._open_transport = open_transport  # type: ignore[assignment]


async def producer(jobs: int, callers: int, group: int) -> float:
    count = [0]

    def answer(payload: bytes) -> bytes | None:
        if kind_of(payload) == b"enqueue":
            count[0] += 1
            return enqueued(payload, count[0])
        return handshake(payload)

    engine = FakeEngine(answer, group)
    tay = Tay(mode="client", socket_path="/nonexistent/tay.sock", request_timeout=900.0)
    attach(tay, engine)

    async def caller(number: int) -> None:
        for index in range(number, jobs, callers):
            await tay.enqueue("tay.benchmark.v1", ARGS, queue=("alpha", "beta")[index % 2], retries=0)

    async with tay:
        cpu = time.process_time()
        await asyncio.gather(*(caller(number) for number in range(callers)))
        cpu = time.process_time() - cpu
    return cpu / jobs


async def worker(jobs: int, capacity: int, group: int) -> float:
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    executed = [0]
    sent = [0]

    def answer(payload: bytes) -> bytes | None:
        kind = kind_of(payload)
        if kind == b"started" or kind == b"succeeded":
            if kind == b"succeeded" and sent[0] < jobs:
                sent[0] += 1
                engine.push(execute(sent[0]))
            return reply(_ACCEPTED, field_of(payload, b"request_id"))
        return handshake(payload)

    engine = FakeEngine(answer, group)
    tay = Tay(mode="worker", socket_path="/nonexistent/tay.sock", capacity=capacity)
    attach(tay, engine)

    @tay.task(name="tay.benchmark.v1", retries=0)
    async def no_op(account_key: str, payload: str, version: int) -> None:
        executed[0] += 1
        if executed[0] == jobs:
            done.set_result(None)

    async with tay:
        cpu = time.process_time()
        for _ in range(min(capacity, jobs)):
            sent[0] += 1
            engine.push(execute(sent[0]))
        await done
        await asyncio.sleep(0)
        cpu = time.process_time() - cpu
    return cpu / jobs


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--callers", type=int, default=4)
    parser.add_argument("--capacity", type=int, default=8)
    parser.add_argument("--group", type=int, default=1)
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    parser.add_argument("--only", choices=("producer", "worker"))
    return parser


def main() -> None:
    options = build_parser().parse_args()
    run: Callable[[Any], Any] = asyncio.run
    if options.loop == "uvloop":
        import uvloop

        run = uvloop.run
    if options.only != "worker":
        per_job = run(producer(options.jobs, options.callers, options.group))
        print(f"producer: {per_job * 1e6:.1f} us CPU per job")
    if options.only != "producer":
        per_job = run(worker(options.jobs, options.capacity, options.group))
        print(f"worker: {per_job * 1e6:.1f} us CPU per job")


if __name__ == "__main__":
    main()
