"""Our SDK against tay-client 1.4.0, over the Unix socket AND over HTTP, in one run against
one ``tay serve`` (a script, not a unit test).

    .venv/bin/python benchmarks/sdk_compare.py [--jobs 2000] [--concurrency 32] [--capacity 16]

For each transport and SDK (each SDK in its own interpreter: tay-client with ``python -I``
from its venv, ours from the repository's): a producer process enqueues ``--jobs`` jobs
with at most ``--concurrency`` in flight (enqueue/s, and its CPU per job over the
enqueues), then a worker process of the same SDK with ``--capacity`` runs exactly those
jobs (jobs/s and CPU per job from the first execution to the last).
Each (transport, SDK) pair uses its own task name, so no worker sees another's jobs. The
server runs strict ``sync`` durability with group commit on a data dir under the bench
scratch (``tay.bench.paths``). Jobs carry a 1 KiB argument.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tay.bench.paths import bench_scratch

REPO = Path(__file__).resolve().parents[1]
SCRATCH = bench_scratch()  # strict sync accepts it wherever the checkout is
SDK_PYTHON = {
    "tay-client": [str(REPO / ".venv-tay-client/bin/python"), "-I"],
    "ours": [str(REPO / ".venv/bin/python"), "-s"],
}
SERVE_FLAGS = ["--durability", "sync", "--validated-filesystem",
               "--client-slots", "4096", "--group-commit-max-events", "64",
               "--group-commit-interval-ms", "1"]

# Both scripts get: endpoint, count, concurrency-or-capacity, task name.
SETUP = r'''
import asyncio, sys, time
from tay import Tay, TayHTTP, TayHTTPWorker
ARGS = {"account_key": "benchmark-account", "payload": "x" * 1024, "version": 1}
endpoint, count, width, task = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
over_http = endpoint.startswith("http")
'''

PRODUCER = SETUP + r'''
async def main():
    client = TayHTTP(endpoint) if over_http else Tay(socket_path=endpoint, mode="client")
    async with client:
        gate = asyncio.Semaphore(width)
        async def one():
            async with gate:
                await client.enqueue(task, ARGS)
        started, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(one() for _ in range(count)))
        print(time.perf_counter() - started, time.process_time() - cpu, flush=True)
asyncio.run(main())
'''

WORKER = SETUP + r'''
async def main():
    if over_http:
        worker = TayHTTPWorker(endpoint, capacity=width)
    else:
        worker = Tay(socket_path=endpoint, mode="worker", capacity=width)
    done = asyncio.Event()
    seen, cpu = [], []
    @worker.task(name=task)
    async def noop(**kwargs):
        seen.append(time.perf_counter())
        if len(seen) == 1:
            cpu.append(time.process_time())
        if len(seen) == count:
            cpu.append(time.process_time())
            done.set()
        return {"ok": True}
    if over_http:
        runner = asyncio.create_task(worker.serve_forever())
    else:
        await worker.start()
    await asyncio.wait_for(done.wait(), 300)
    await asyncio.sleep(0.3)  # let the last reports reach the server
    print(seen[-1] - seen[0], cpu[-1] - cpu[0], flush=True)
    if over_http:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
    else:
        await worker.close()
asyncio.run(main())
'''


class Serve:
    """``tay serve`` with both listeners: an explicit socket and HTTP on a free port."""

    def __init__(self) -> None:
        SCRATCH.mkdir(parents=True, exist_ok=True)
        self.root = Path(tempfile.mkdtemp(prefix="bench-sdk-", dir=SCRATCH))
        self.socket = str(self.root / "tay.sock")
        self.log_path = self.root / "server.log"
        self.log = open(self.log_path, "ab")
        command = [sys.executable, "-m", "tay.cli", "serve", "--data-dir", str(self.root / "data"),
                   "--socket", self.socket, "--init-if-missing", "--http-port", "0", *SERVE_FLAGS]
        env = {k: v for k, v in os.environ.items() if not k.startswith("TAY_")}
        self.process = subprocess.Popen(command, cwd=REPO, stdout=self.log, stderr=self.log,
                                        env={**env, "PYTHONPATH": str(REPO)})
        self.url = self._wait_for_http()

    def _wait_for_http(self) -> str:
        deadline = time.monotonic() + 15
        while True:
            found = re.search(r"listening on (http://127\.0\.0\.1:\d+)", self.log_path.read_text())
            if found and os.path.exists(self.socket):
                return found.group(1)
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("tay serve did not start:\n" + self.log_path.read_text())
            time.sleep(0.02)

    def close(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=15)
        self.log.close()
        shutil.rmtree(self.root, ignore_errors=True)


def run_sdk(sdk: str, script: str, *argv: object) -> tuple[float, float]:
    """Wall and CPU seconds the script measured, from its last stdout line."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONPATH"] = str(REPO)  # only our interpreter honours it (tay-client runs with -I)
    done = subprocess.run([*SDK_PYTHON[sdk], "-c", script, *map(str, argv)],
                          cwd=tempfile.gettempdir(), env=env, capture_output=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"{sdk}: {done.stderr.decode()}")
    wall, cpu = done.stdout.decode().split()[-2:]
    return float(wall), float(cpu)


def measure(jobs: int, concurrency: int, capacity: int) -> list[dict]:
    rows = []
    server = Serve()
    try:
        for transport, endpoint in (("socket", server.socket), ("http", server.url)):
            for sdk in ("tay-client", "ours"):
                task = f"bench.{transport}.{sdk.replace('-', '_')}.v1"
                enqueue_s, enqueue_cpu = run_sdk(sdk, PRODUCER, endpoint, jobs, concurrency, task)
                worker_s, worker_cpu = run_sdk(sdk, WORKER, endpoint, jobs, capacity, task)
                rows.append({"transport": transport, "sdk": sdk, "enqueue_per_s": jobs / enqueue_s,
                             "worker_jobs_per_s": (jobs - 1) / worker_s,
                             "producer_cpu_us_per_job": enqueue_cpu / jobs * 1e6,
                             "worker_cpu_us_per_job": worker_cpu / (jobs - 1) * 1e6})
    finally:
        server.close()
    return rows


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32, help="producer requests in flight")
    parser.add_argument("--capacity", type=int, default=16, help="worker capacity")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return parser


def main() -> None:
    parser = build_parser()
    args = parser.parse_args()
    if args.jobs < 2:
        parser.error("--jobs must be at least 2")
    rows = measure(args.jobs, args.concurrency, args.capacity)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{args.jobs} jobs, producer concurrency {args.concurrency}, worker capacity {args.capacity}, "
          "strict sync + group commit 64/1ms")
    print(f"{'transport':>10} {'sdk':>12} {'enqueue/s':>12} {'worker jobs/s':>14} "
          f"{'producer CPU us/job':>20} {'worker CPU us/job':>18}")
    for row in rows:
        print(f"{row['transport']:>10} {row['sdk']:>12} {row['enqueue_per_s']:>12.0f} "
              f"{row['worker_jobs_per_s']:>14.0f} {row['producer_cpu_us_per_job']:>20.1f} "
              f"{row['worker_cpu_us_per_job']:>18.1f}")


if __name__ == "__main__":
    main()
