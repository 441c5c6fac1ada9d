"""The server's CPU per job on the Unix-socket path, in one process, without sockets.

    .venv/bin/python -m benchmarks.server_path [--jobs 5000] [--mode group|per-event]
        [--durability sync|write] [--store v2|v1] [--dir DIR] [--profile out.prof]
        [--rounds 3] [--reads buffer|frame] [--gather-us US] [--release loop|inline]
        [--metrics off|on]

A real store, committer (the default C writer), driver, engine, listener and two
``Connection`` objects (a producer and a worker with capacity 8) run on uvloop; the
transports are in-memory fakes, so what is measured is exactly the server's own work per
job: three requests in (``enqueue``, ``started``, ``succeeded``), four frames out
(``enqueued``, ``execute``, two ``accepted``), four journal records. Eight enqueues stay in
flight, like the reference profile's eight callers, over queues ``alpha``/``beta`` with two
credits each. The fake clients build their frames ahead of time and only parse the
``execute`` frames; their time is measured apart and subtracted.

Reported: process CPU (user+sys, every thread: the writer's too) per job, the clients'
share, and the server's share (the figure to compare between commits; machine noise
moves it far less than wall time). The minimum over rounds is the figure.

``--reads buffer`` (the default) hands each side's frames of a turn to the server in one
``data_received``; ``--reads frame`` gives every frame its own ``data_received`` and loop
turn, as tay-client's processes do through a real socket (each caller's enqueue and each
report is its own write there, so the server reads ~1.5-1.9 times per job): that mode
shows the per-read and per-turn cost.

``--release inline`` (for instruction counts): after each read the harness waits for the
journal itself and runs the driver's completion (``_on_durable``) at once, instead of the
loop reacting to the writer's eventfd whenever it gets to it. Every submission is then
released by one completion of its own, so per-event runs do the same work on every run
(under callgrind the loop's timing otherwise decides how many stages a wake-up releases).

``--metrics on`` attaches the server's metrics as ``tay serve`` does (the enqueue-ack
histogram fed per released stage, the writer's commit histograms); the default ``off``
keeps the figures comparable with the earlier sessions' runs, which had none attached.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import struct
import sys
import tempfile
import time

import orjson

from tay.bench.paths import bench_scratch

ARGS = {"account_key": "benchmark-account", "payload": "x" * 1024, "version": 1}
TASK = "tay.benchmark.v1"
IN_FLIGHT = 8
_LENGTH = struct.Struct(">I")


def frame(message: dict) -> bytes:
    payload = orjson.dumps(message)
    return _LENGTH.pack(len(payload)) + payload


def split(chunks: list[bytes]) -> list[dict]:
    data = b"".join(chunks)
    chunks.clear()
    messages, offset = [], 0
    while offset < len(data):
        (length,) = _LENGTH.unpack_from(data, offset)
        messages.append(orjson.loads(data[offset + 4:offset + 4 + length]))
        offset += 4 + length
    return messages


class FakeTransport:
    """What ``Connection`` needs of a transport; writes are kept for the fake client, and
    wake it (so it never spins while the server waits for an fsync)."""

    def __init__(self, wake: asyncio.Event) -> None:
        self.chunks: list[bytes] = []
        self.wake = wake

    def write(self, data: bytes) -> None:
        self.chunks.append(data)
        self.wake.set()

    def is_closing(self) -> bool:
        return False

    def set_write_buffer_limits(self, high: int, low: int) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


async def run_round(data_dir: str, jobs: int, mode: str, durability: str,
                    store_version: int = 2, reads: str = "buffer",
                    gather_us: int | None = None,
                    release: str = "loop", metrics: bool = False) -> dict[str, float]:
    from tay.engine.config import EngineConfig
    from tay.storage.compaction.trigger import CompactionPolicy
    from tay.protocol.limits import ProtocolLimits
    from tay.server.app import ServeConfig, open_store
    from tay.server.uds.connection import Connection
    from tay.server.driver import EngineDriver
    from tay.server.uds.listener import Listener

    max_events = 64 if mode == "group" else 1
    store = open_store(ServeConfig(
        data_dir=data_dir, socket=None, init_if_missing=True, durability=durability,
        validated_filesystem=True, group_commit_max_events=max_events,
        **({} if gather_us is None else {"group_commit_gather_us": gather_us}),
        engine=EngineConfig(queues={"alpha": 2, "beta": 2}),
        compaction=CompactionPolicy(enabled=store_version == 2)))  # off: the store stays v1
    assert store.store_version == store_version, store.store_version
    loop = asyncio.get_running_loop()
    driver = EngineDriver(store.engine, store.committer, loop)
    if metrics:  # as tay.server.app wires them
        from tay.server.metrics import ServerMetrics

        driver.metrics = ServerMetrics()
        driver.metrics.attach_commit(store.committer)
    listener = Listener(driver, ProtocolLimits())
    producer, worker = Connection(listener), Connection(listener)
    wake = asyncio.Event()
    producer_out, worker_out = FakeTransport(wake), FakeTransport(wake)
    producer.connection_made(producer_out)
    worker.connection_made(worker_out)
    producer.data_received(frame({"version": 1, "type": "hello", "request_id": "hp",
                                  "mode": "client", "runtime_id": "bench-producer"}))
    worker.data_received(frame({"version": 1, "type": "hello", "request_id": "hw",
                                "mode": "worker", "runtime_id": "bench-worker",
                                "max_concurrency": 8}))
    worker.data_received(frame({"version": 1, "type": "register_tasks", "request_id": "rt",
                                "tasks": [TASK]}))
    enqueues = [frame({"version": 1, "type": "enqueue", "request_id": os.urandom(16).hex(),
                       "task": TASK, "args": ARGS,
                       "options": {"queue": "alpha" if index % 2 == 0 else "beta",
                                   "retries": 0}})
                for index in range(jobs)]
    while producer_out.chunks == [] or worker_out.chunks == []:
        await asyncio.sleep(0.001)
    producer_out.chunks.clear()
    worker_out.chunks.clear()
    committer = store.committer

    def settle() -> None:  # --release inline: every stage out now, each by its own wake-up
        while driver._stages:
            committer.wait(max(stage[1] for stage in driver._stages))  # its ticket
            driver._on_durable()

    if release == "inline":
        loop.remove_reader(committer.completion_fd)

    client_s = 0.0
    sent = done = enqueued = 0
    cpu0, wall0 = time.process_time(), time.perf_counter()
    while done < jobs:
        client0 = time.thread_time()
        burst = []
        while sent < jobs and sent - enqueued < IN_FLIGHT:
            burst.append(enqueues[sent])
            sent += 1
        if producer_out.chunks:
            for message in split(producer_out.chunks):
                if message["type"] != "enqueued":
                    raise RuntimeError(f"the server refused an enqueue: {message}")
                enqueued += 1
        reports = []
        if worker_out.chunks:
            for message in split(worker_out.chunks):
                if message["type"] == "error":
                    raise RuntimeError(f"the server refused a report: {message}")
                if message["type"] == "execute":
                    ids = {"reservation_id": message["reservation_id"],
                           "execution_id": message["execution_id"]}
                    reports.append(frame({"version": 1, "type": "started",
                                          "request_id": message["execution_id"] + "s", **ids}))
                    reports.append(frame({"version": 1, "type": "succeeded",
                                          "request_id": message["execution_id"] + "d", **ids,
                                          "result": None}))
                    done += 1
        client_s += time.thread_time() - client0
        if reads == "frame":  # one read and one loop turn per frame
            for conn, frames in ((producer, burst), (worker, reports)):
                for one in frames:
                    conn.data_received(one)
                    if release == "inline":
                        settle()
                    await asyncio.sleep(0)
        else:
            if burst:
                producer.data_received(b"".join(burst))
            if reports:
                worker.data_received(b"".join(reports))
            if release == "inline":
                settle()
                await asyncio.sleep(0)
        if not (producer_out.chunks or worker_out.chunks):
            wake.clear()
            await wake.wait()
    while not driver.idle:
        if release == "inline":
            settle()
        await asyncio.sleep(0.001)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    if metrics:
        if driver.metrics.enqueue_ack.count != jobs:
            raise RuntimeError(f"{driver.metrics.enqueue_ack.count} enqueue acks observed, "
                               f"{jobs} jobs")
        driver.metrics.detach_commit()
    driver.close()
    store.close()
    return {"cpu_us": cpu / jobs * 1e6, "client_us": client_s / jobs * 1e6,
            "server_us": (cpu - client_s) / jobs * 1e6, "jobs_per_s": jobs / wall,
            "fsyncs": store.committer.stats().fsyncs,
            "gathered": store.committer.stats().gathered}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--mode", choices=("group", "per-event"), default="group")
    parser.add_argument("--durability", choices=("sync", "write"), default="sync")
    parser.add_argument("--dir", default=str(bench_scratch()),
                        help="where the store goes (default: the bench scratch, "
                             "tay.bench.paths; strict sync refuses /tmp)")
    parser.add_argument("--store", choices=("v1", "v2"), default="v2",
                        help="v2 (what serve makes of a new store: an epoch) or v1 (compaction "
                             "off, the Event-v1 journal); default v2")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reads", choices=("buffer", "frame"), default="buffer",
                        help="one data_received per side and turn (buffer) or one per frame "
                             "and its own loop turn, as through a real socket (frame)")
    parser.add_argument("--gather-us", type=int, default=None,
                        help="the group-commit gather cap (default: the server's)")
    parser.add_argument("--release", choices=("loop", "inline"), default="loop",
                        help="inline: the harness releases each read's stages at once "
                             "(steady instruction counts; see the module docstring)")
    parser.add_argument("--metrics", choices=("off", "on"), default="off",
                        help="on: the server's metrics attached, as tay serve has them "
                             "(default off, as in the earlier sessions' figures)")
    parser.add_argument("--profile", help="write a cProfile of the last round here")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import uvloop

    os.makedirs(args.dir, exist_ok=True)
    results = []
    for round_number in range(args.rounds):
        root = tempfile.mkdtemp(prefix="server-path-", dir=args.dir)
        try:
            coroutine = run_round(os.path.join(root, "data"), args.jobs, args.mode,
                                  args.durability, int(args.store[1]), args.reads,
                                  args.gather_us, args.release, args.metrics == "on")
            if args.profile and round_number == args.rounds - 1:
                import cProfile

                profiler = cProfile.Profile(time.thread_time)  # CPU, not waits
                profiler.enable()
                results.append(uvloop.run(coroutine))
                profiler.disable()
                profiler.dump_stats(args.profile)
            else:
                results.append(uvloop.run(coroutine))
        finally:
            shutil.rmtree(root, ignore_errors=True)
    best = min(results, key=lambda r: r["server_us"])
    for result in results:
        print(" ".join(f"{k}={v:,.1f}" for k, v in result.items()), file=sys.stderr)
    print(f"{args.mode} {args.durability} {args.store} reads={args.reads} "
          f"metrics={args.metrics}: server {best['server_us']:.1f} us/job "
          f"(process {best['cpu_us']:.1f}, clients {best['client_us']:.1f}), "
          f"{best['jobs_per_s']:,.0f} jobs/s, {best['fsyncs']} fsyncs, "
          f"{best['gathered']} gathered")
    return 0


if __name__ == "__main__":
    sys.exit(main())
