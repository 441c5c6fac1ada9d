"""Socket-level measurements of a real ``tay serve`` (a script, not a unit test).

    .venv/bin/python benchmarks/socket_rtt.py [--requests 2000] [--jobs 3000] [--quick]

1. Enqueue round trip (raw frames, no SDK overhead): p50/p99 and requests/s with 1 and 8
   concurrent callers (one connection each), in strict ``sync`` durability on a data dir
   under the bench scratch (``tay.bench.paths``), with one fdatasync per event and with
   group commit (``--group-commit-max-events 64 --group-commit-interval-ms 1``).
2. SDK comparison against one server: producer enqueue/s and out-of-process worker jobs/s
   for tay-client 1.4.0 (its own venv, ``python -I``) and for our SDK (repo interpreter).

Jobs carry the reference args (1 KiB string). Output is one table per part on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

from tay.bench.paths import bench_scratch

REPO = Path(__file__).resolve().parents[1]
SCRATCH = bench_scratch()  # strict sync accepts it wherever the checkout is
SDK_PYTHON = {
    "tay-client": [str(REPO / ".venv-tay-client/bin/python"), "-I"],
    "ours": [str(REPO / ".venv/bin/python"), "-s"],
}
ARGS = {"account_key": "benchmark-account", "payload": "x" * 1024, "version": 1}
GROUP_COMMIT = ["--group-commit-max-events", "64", "--group-commit-interval-ms", "1"]


class Serve:
    """One ``tay serve`` in strict sync mode on a fresh data dir under the bench scratch."""

    def __init__(self, *flags: str) -> None:
        SCRATCH.mkdir(parents=True, exist_ok=True)
        self.root = Path(tempfile.mkdtemp(prefix="bench-", dir=SCRATCH))
        self.socket = str(self.root / "tay.sock")
        command = [sys.executable, "-m", "tay.cli", "serve", "--data-dir",
                   str(self.root / "data"), "--socket", self.socket, "--init-if-missing",
                   "--durability", "sync", "--validated-filesystem", "--log-level", "WARNING",
                   "--client-slots", "65536", *flags]
        self.log = open(self.root / "server.log", "ab")
        self.process = subprocess.Popen(command, cwd=REPO, stdout=self.log, stderr=self.log,
                                        env={**os.environ, "PYTHONPATH": str(REPO)})
        deadline = time.monotonic() + 15
        while not os.path.exists(self.socket):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((self.root / "server.log").read_text())
            time.sleep(0.02)

    def close(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=15)
        self.log.close()
        shutil.rmtree(self.root, ignore_errors=True)


# -- part 1: raw round trips ---------------------------------------------------------------
def frame(message: dict) -> bytes:
    payload = orjson.dumps(message)
    return len(payload).to_bytes(4, "big") + payload


async def read_message(reader: asyncio.StreamReader) -> dict:
    length = int.from_bytes(await reader.readexactly(4), "big")
    return orjson.loads(await reader.readexactly(length))


async def one_caller(path: str, caller: int, count: int, latencies: list[float]) -> None:
    reader, writer = await asyncio.open_unix_connection(path)
    writer.write(frame({"version": 1, "type": "hello", "request_id": "h", "mode": "client",
                        "runtime_id": f"bench-{caller}", "max_concurrency": 0}))
    assert (await read_message(reader))["type"] == "hello_ok"
    for index in range(count):
        request_id = f"{caller}-{index}"
        started = time.perf_counter()
        writer.write(frame({"version": 1, "type": "enqueue", "request_id": request_id,
                            "task": "bench.noop", "args": ARGS, "options": {}}))
        reply = await read_message(reader)
        latencies.append(time.perf_counter() - started)
        if reply.get("type") != "enqueued":
            raise RuntimeError(f"enqueue refused: {reply}")
    writer.close()


async def round_trips(path: str, callers: int, total: int) -> tuple[list[float], float]:
    latencies: list[float] = []
    started = time.perf_counter()
    await asyncio.gather(*(one_caller(path, c, total // callers, latencies)
                           for c in range(callers)))
    return latencies, time.perf_counter() - started


def part_round_trips(requests: int) -> list[dict]:
    rows = []
    for label, flags in (("fsync per event", []), ("group commit 64/1ms", GROUP_COMMIT)):
        for callers in (1, 8):
            server = Serve(*flags)
            try:
                asyncio.run(round_trips(server.socket, callers, 100))  # warm-up
                latencies, elapsed = asyncio.run(round_trips(server.socket, callers, requests))
            finally:
                server.close()
            cuts = statistics.quantiles(latencies, n=100)
            rows.append({"commit": label, "callers": callers, "p50_ms": cuts[49] * 1e3,
                         "p99_ms": cuts[98] * 1e3, "enqueue_per_s": len(latencies) / elapsed})
    return rows


# -- part 2: the two SDKs against one server -------------------------------------------------
PRODUCER = r'''
import asyncio, sys, time
from tay import Tay
ARGS = {"account_key": "benchmark-account", "payload": "x" * 1024, "version": 1}
async def main():
    path, count, concurrency, task = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    async with Tay(socket_path=path, mode="client") as tay:
        await tay.enqueue(task, ARGS)  # warm-up
        gate = asyncio.Semaphore(concurrency)
        async def one():
            async with gate:
                await tay.enqueue(task, ARGS)
        started = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(count)))
        print(time.perf_counter() - started, flush=True)
asyncio.run(main())
'''

WORKER = r'''
import asyncio, sys, time
from tay import Tay
async def main():
    path, expected, capacity, task = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    worker = Tay(socket_path=path, mode="worker", capacity=capacity)
    done = asyncio.Event()
    seen = []
    @worker.task(name=task)
    async def noop(**kwargs):
        seen.append(time.perf_counter())
        if len(seen) == expected:
            done.set()
        return {"ok": True}
    await worker.start()
    await done.wait()
    await asyncio.sleep(0.3)  # let the last reports reach the server
    print(seen[-1] - seen[0], flush=True)
    await worker.close()
asyncio.run(main())
'''


def run_sdk(sdk: str, script: str, *argv: object) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run([*SDK_PYTHON[sdk], "-c", script, *map(str, argv)],
                          cwd=tempfile.gettempdir(), env=env, capture_output=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{sdk}: {done.stderr.decode()}")
    return float(done.stdout.decode().split()[-1])


def part_sdks(jobs: int) -> list[dict]:
    rows = []
    server = Serve(*GROUP_COMMIT)
    try:
        for sdk in ("tay-client", "ours"):
            task = f"bench.{sdk.replace('-', '_')}.v1"
            enqueue_s = run_sdk(sdk, PRODUCER, server.socket, jobs, 64, task)
            # The queued jobs (plus the warm-up one) wait for this worker.
            worker_s = run_sdk(sdk, WORKER, server.socket, jobs + 1, 16, task)
            rows.append({"sdk": sdk, "enqueue_per_s": jobs / enqueue_s,
                         "worker_jobs_per_s": jobs / worker_s})
    finally:
        server.close()
    return rows


def print_table(title: str, rows: list[dict]) -> None:
    print(f"\n{title}")
    keys = list(rows[0])
    print("  ".join(f"{k:>20}" for k in keys))
    for row in rows:
        print("  ".join(f"{v:>20.2f}" if isinstance(v, float) else f"{v!s:>20}"
                        for v in row.values()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    args = parser.parse_args()
    rtt = part_round_trips(args.requests)
    sdks = part_sdks(args.jobs)
    if args.json:
        print(json.dumps({"round_trips": rtt, "sdks": sdks}, indent=2))
        return
    print_table("enqueue round trip, strict sync (bench scratch)", rtt)
    print_table("SDKs against one server (group commit 64/1ms, producer concurrency 64, "
                "worker capacity 16)", sdks)


if __name__ == "__main__":
    main()
