"""Load generator for the HTTP/JSON API: ``POST /jobs`` throughput and latency percentiles
over keep-alive connections (plain HTTP or mTLS), and HTTP-worker end-to-end jobs/s.

It starts ``tay serve --http-port`` as a subprocess on a fresh store under the bench
scratch (``tay.bench.paths``; strict ``sync`` durability needs a real filesystem outside
/tmp) and drives it with raw asyncio connections.

    .venv/bin/python benchmarks/http_load.py --seconds 5 --connections 16
    .venv/bin/python benchmarks/http_load.py --tls --group-commit-max-events 64 \
        --group-commit-interval-ms 2
    .venv/bin/python benchmarks/http_load.py --workers 4 --jobs 2000
    .venv/bin/python benchmarks/http_load.py --http2 --connections 16   # 16 streams, 1 conn

``server_cpu_us_per_request`` is the server process's user+sys CPU over the run divided by
the requests (the least noisy figure on a shared machine).
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
from tay.bench.paths import bench_scratch  # noqa: E402 (after the path)

SCRATCH = bench_scratch()  # strict sync accepts it wherever the checkout is


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


class Http2Client:
    """One HTTP/2 connection (sans-IO ``h2``) whose streams are awaited concurrently."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        import h2.config
        import h2.connection

        self.reader, self.writer = reader, writer
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.h2.initiate_connection()
        self.writer.write(self.h2.data_to_send())
        self.waiting: dict[int, asyncio.Future[int]] = {}
        self.reading = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        import h2.events

        while data := await self.reader.read(65536):
            for event in self.h2.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived):
                    self.waiting[event.stream_id].status = int(dict(event.headers)[b":status"])
                elif isinstance(event, h2.events.DataReceived):
                    self.h2.acknowledge_received_data(event.flow_controlled_length,
                                                      event.stream_id)
                elif isinstance(event, h2.events.StreamEnded):
                    future = self.waiting.pop(event.stream_id)
                    future.set_result(future.status)
            self.writer.write(self.h2.data_to_send())

    async def post(self, path: str, body: bytes) -> int:
        stream_id = self.h2.get_next_available_stream_id()
        future = asyncio.get_running_loop().create_future()
        self.waiting[stream_id] = future
        self.h2.send_headers(stream_id, [(":method", "POST"), (":path", path),
                                         (":scheme", "http"), (":authority", "bench"),
                                         ("content-type", "application/json")])
        self.h2.send_data(stream_id, body, end_stream=True)
        self.writer.write(self.h2.data_to_send())
        return await future


async def http2_stream(client: Http2Client, until: float, latencies: list[float]) -> None:
    body = json.dumps({"task": "bench.noop", "args": {"n": 1}}).encode()
    while time.perf_counter() < until:
        started = time.perf_counter()
        status = await client.post("/jobs", body)
        assert status == 201, status
        latencies.append(time.perf_counter() - started)


async def enqueue_load(args, port: int, tls) -> dict:
    latencies: list[float] = []
    until = time.perf_counter() + args.seconds
    begin = time.perf_counter()
    if args.http2:  # --connections streams on one prior-knowledge (or ALPN h2) connection
        if tls is not None:
            tls.set_alpn_protocols(["h2"])
        client = Http2Client(*await asyncio.open_connection("127.0.0.1", port, ssl=tls))
        await asyncio.gather(*(http2_stream(client, until, latencies)
                               for _ in range(args.connections)))
        client.writer.close()
    else:
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
    parser.add_argument("--http2", action="store_true",
                        help="POST /jobs as --connections streams of one HTTP/2 connection")
    args = parser.parse_args()
    SCRATCH.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="http-bench-", dir=SCRATCH))
    pki = None
    if args.tls:
        from tests.http.certs import make_pki

        pki = make_pki(root)
    process, port = start_server(args, root, pki)
    try:
        import psutil

        tls = client_tls(pki) if pki else None
        run = worker_load if args.workers else enqueue_load
        server = psutil.Process(process.pid)
        cpu_before = server.cpu_times()
        result = asyncio.run(run(args, port, tls))
        cpu_after = server.cpu_times()
        cpu_s = (cpu_after.user - cpu_before.user) + (cpu_after.system - cpu_before.system)
        done = result.get("requests") or result.get("jobs") or 1
        result["server_cpu_us_per_request"] = round(cpu_s / done * 1e6, 1)
        print(json.dumps({"tls": args.tls, "http2": args.http2, "durability": args.durability,
                          "group_commit": [args.group_commit_max_events,
                                           args.group_commit_interval_ms], **result}))
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
