"""Load generator for the HTTP/JSON API: ``POST /jobs`` throughput and latency percentiles
over keep-alive connections (plain HTTP or mTLS), and HTTP-worker end-to-end jobs/s.

It starts ``tay serve --http-port`` as a subprocess on a fresh store under .tmp/ (strict
``sync`` durability needs a real filesystem) and drives it with raw asyncio connections.

    .venv/bin/python benchmarks/http_load.py --seconds 5 --connections 16
    .venv/bin/python benchmarks/http_load.py --tls --group-commit-max-events 64 \
        --group-commit-interval-ms 2
    .venv/bin/python benchmarks/http_load.py --workers 4 --jobs 2000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SCRATCH = REPO / ".tmp"


def start_server(args: argparse.Namespace, root: Path, pki: dict[str, str] | None):
    command = [sys.executable, "-m", "tay.cli", "serve", "--data-dir", str(root / "data"),
               "--init-if-missing", "--durability", args.durability, "--http-port", "0",
               "--group-commit-max-events", str(args.group_commit_max_events),
               "--group-commit-interval-ms", str(args.group_commit_interval_ms),
               "--default-queue-concurrency", "65536"]
    if args.durability == "sync":
        command.append("--validated-filesystem")
    if pki:
        command += ["--http-tls-certfile", pki["server_cert"], "--http-tls-keyfile",
                    pki["server_key"], "--http-tls-cacertfile", pki["ca"]]
    log_path = root / "server.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))}
    process = subprocess.Popen(command + ["--log-level", "INFO"], cwd=REPO, env=env,
                               stdout=open(log_path, "ab"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 20
    while True:
        found = re.search(r"listening on https?://127\.0\.0\.1:(\d+)", log_path.read_text())
        if found:
            return process, int(found.group(1))
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("tay serve did not start:\n" + log_path.read_text())
        time.sleep(0.02)


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = int(re.search(rb"content-length: (\d+)", head, re.I).group(1)) \
        if status != 204 else 0
    return status, await reader.readexactly(length)


def request(method: str, path: str, body: dict | None = None, token: str | None = None) -> bytes:
    data = json.dumps(body).encode() if body is not None else b""
    head = f"{method} {path} HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\n" \
           f"content-length: {len(data)}\r\n"
    if token:
        head += f"authorization: Bearer {token}\r\n"
    return head.encode() + b"\r\n" + data


async def producer(port: int, tls: ssl.SSLContext | None, until: float,
                   latencies: list[float]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=tls)
    body = request("POST", "/jobs", {"task": "bench.noop", "args": {"n": 1}})
    while time.perf_counter() < until:
        started = time.perf_counter()
        writer.write(body)
        status, _ = await read_response(reader)
        assert status == 201, status
        latencies.append(time.perf_counter() - started)
    writer.close()


async def enqueue_load(args, port: int, tls) -> dict:
    latencies: list[float] = []
    until = time.perf_counter() + args.seconds
    begin = time.perf_counter()
    await asyncio.gather(*(producer(port, tls, until, latencies)
                           for _ in range(args.connections)))
    elapsed = time.perf_counter() - begin
    latencies.sort()
    return {"requests": len(latencies), "per_second": round(len(latencies) / elapsed),
            "p50_ms": round(statistics.median(latencies) * 1000, 2),
            "p99_ms": round(latencies[int(len(latencies) * 0.99) - 1] * 1000, 2)}


async def worker(port: int, tls, done: asyncio.Event, counter: list[int], total: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=tls)
    writer.write(request("POST", "/workers", {"runtime_id": f"bench-{id(counter)}-{os.getpid()}"
                                              f"-{time.monotonic_ns()}", "tasks": ["bench.noop"],
                                              "capacity": 1}))
    token = json.loads((await read_response(reader))[1])["worker_token"]
    while not done.is_set():
        writer.write(request("POST", "/queues/default/claim", None, token))
        status, body = await read_response(reader)
        if status == 204:
            continue
        event = json.loads(body)
        ids = {"reservation_id": event["reservation_id"], "execution_id": event["execution_id"]}
        writer.write(request("POST", "/workers/started", ids, token))
        await read_response(reader)
        writer.write(request("POST", "/workers/complete", {**ids, "outcome": "success",
                                                           "result": {"ok": True}}, token))
        await read_response(reader)
        counter[0] += 1
        if counter[0] >= total:
            done.set()
    writer.close()


async def worker_load(args, port: int, tls) -> dict:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=tls)
    body = request("POST", "/jobs", {"task": "bench.noop", "args": {}})
    for _ in range(args.jobs):
        writer.write(body)
        await read_response(reader)
    done, counter = asyncio.Event(), [0]
    begin = time.perf_counter()
    workers = [asyncio.ensure_future(worker(port, tls, done, counter, args.jobs))
               for _ in range(args.workers)]
    await asyncio.wait_for(done.wait(), 300)
    elapsed = time.perf_counter() - begin
    for task in workers:  # the rest are parked in 20 s long polls
        task.cancel()
    await asyncio.gather(*workers, return_exceptions=True)
    return {"jobs": counter[0], "jobs_per_second": round(counter[0] / elapsed)}


def client_tls(pki: dict[str, str]) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=pki["ca"])
    context.load_cert_chain(pki["client_cert"], pki["client_key"])
    return context


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--durability", choices=("sync", "write"), default="sync")
    parser.add_argument("--group-commit-max-events", type=int, default=1)
    parser.add_argument("--group-commit-interval-ms", type=int, default=0)
    parser.add_argument("--tls", action="store_true")
    parser.add_argument("--workers", type=int, default=0, help="HTTP-worker run instead")
    parser.add_argument("--jobs", type=int, default=1000)
    args = parser.parse_args()
    SCRATCH.mkdir(exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="http-bench-", dir=SCRATCH))
    pki = None
    if args.tls:
        from tests.http.certs import make_pki

        pki = make_pki(root)
    process, port = start_server(args, root, pki)
    try:
        tls = client_tls(pki) if pki else None
        run = worker_load if args.workers else enqueue_load
        result = asyncio.run(run(args, port, tls))
        print(json.dumps({"tls": args.tls, "durability": args.durability,
                          "group_commit": [args.group_commit_max_events,
                                           args.group_commit_interval_ms], **result}))
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
