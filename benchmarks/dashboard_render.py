"""Server time of dashboard pages with many retained jobs (docs/dashboard.md, "Speed").

Starts ``tay serve`` (HTTP on, ``write`` durability, group commit) on a fresh store under
the bench scratch (``tay.bench.paths``), fills it with ``--jobs`` jobs through the SDK
(most wait in a paused queue; a share runs on an in-process SDK worker, some of them
failing, so every page has real rows, failures and tracebacks), then requests each page
``--requests`` times on one keep-alive connection and reports, per page:

* server time from the ``Server-Timing`` header (admin ops + rendering, measured inside
  the server around the page handler), p50 / p95 / max;
* wall time at the client over loopback (an upper bound that includes HTTP);
* server CPU per page: user+sys of the ``tay serve`` process over the requests / requests.

``queue=bulk-a task=bench.report`` matches nothing while both filters' indexes hold more
than 20,000 entries: the worst case of a jobs page, which stops after examining 20,000
(docs/admin.md) and offers an "Older" link.

    .venv/bin/python -m benchmarks.dashboard_render --jobs 100000
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tay.bench.paths import bench_scratch  # noqa: E402 (after the path)

SCRATCH = bench_scratch()  # strict sync accepts it wherever the checkout is
PAUSED_QUEUES = ("bulk-a", "bulk-b")  # bulk-a holds bench.ok jobs, bulk-b bench.report ones
_TIMING = re.compile(r"admin;dur=([0-9.]+), render;dur=([0-9.]+)")


def start_server(root: Path) -> tuple[subprocess.Popen[bytes], int, str]:
    socket_path = os.path.join(tempfile.mkdtemp(prefix="tayui-", dir="/tmp"), "tay.sock")
    command = [sys.executable, "-m", "tay.cli", "serve", "--data-dir", str(root / "data"),
               "--init-if-missing", "--durability", "write", "--http-port", "0",
               "--socket", socket_path, "--group-commit-max-events", "512",
               "--group-commit-interval-ms", "2", "--max-state-bytes", str(8 << 30),
               "--log-level", "INFO"]
    log_path = root / "server.log"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=open(log_path, "ab"),
                               stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while True:
        found = re.search(r"listening on http://127\.0\.0\.1:(\d+)", log_path.read_text())
        if found and os.path.exists(socket_path):
            return process, int(found.group(1)), socket_path
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("tay serve did not start:\n" + log_path.read_text())
        time.sleep(0.02)


async def fill(socket_path: str, jobs: int, worked: int) -> dict[str, str]:
    """Enqueue ``jobs`` jobs: ``worked`` of them run (one in ten fails), the rest wait in two
    paused queues. Returns sample ids for the detail pages."""
    from tay import Tay
    from tay.admin.client import SocketAdmin

    for queue in PAUSED_QUEUES:
        SocketAdmin(socket_path).call("pause_queue", {"queue": queue})
    worker = Tay(mode="worker", socket_path=socket_path, capacity=64)

    @worker.task(name="bench.ok")
    def ok(n: int) -> dict:
        return {"n": n}

    @worker.task(name="bench.fail", retries=0)
    def fail(n: int) -> None:
        raise ValueError(f"order {n} was rejected by the payment provider")

    samples: dict[str, str] = {}
    async with worker:
        producers = [Tay(mode="client", socket_path=socket_path) for _ in range(4)]
        for producer in producers:
            await producer.start()

        async def run(share: range, index: int) -> None:
            producer = producers[index]
            for start in range(share.start, share.stop, 64):
                batch = []
                for n in range(start, min(start + 64, share.stop)):
                    if n < worked:
                        task = "bench.fail" if n % 10 == 0 else "bench.ok"
                        batch.append(producer.enqueue(task, {"n": n}, queue="work"))
                    else:
                        batch.append(producer.enqueue(
                            ("bench.ok", "bench.report")[n % 2],
                            {"n": n, "customer": f"c-{n % 977}", "items": [n % 7, n % 11]},
                            queue=PAUSED_QUEUES[n % 2]))
                handles = await asyncio.gather(*batch)
                if start == share.start:
                    samples.setdefault(f"waiting-{index}", handles[0].id)
        for k in range(20):  # a schedules page with real rows (their first runs go to "work")
            await producers[0].every("bench.ok", minutes=k + 1, kwargs={"n": -k},
                                     declaration_id=f"bench-every-{k + 1}m", queue="work")
        step = -(-jobs // len(producers))
        await asyncio.gather(*(run(range(i * step, min(jobs, (i + 1) * step)), i)
                               for i in range(len(producers))))
        admin = SocketAdmin(socket_path)
        deadline = time.monotonic() + 600
        while admin.call("status", {})["engine"]["jobs"]["by_state"]["available"] > jobs - worked:
            if time.monotonic() > deadline:
                raise SystemExit("the worker did not finish the worked share")
            await asyncio.sleep(0.2)
        failed = admin.call("jobs", {"state": "discarded", "limit": 1})["jobs"]
        samples["failed"] = failed[0]["id"]
        for producer in producers:
            await producer.close()
    return samples


def measure(port: int, server: psutil.Process, path: str, requests: int) -> dict[str, float]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    for _ in range(10):  # warm-up
        connection.request("GET", path)
        connection.getresponse().read()
    server_ms, wall_ms = [], []
    cpu_before = server.cpu_times()
    for _ in range(requests):
        started = time.perf_counter()
        connection.request("GET", path)
        response = connection.getresponse()
        body = response.read()
        wall_ms.append((time.perf_counter() - started) * 1000)
        if response.status != 200:
            raise SystemExit(f"{path}: HTTP {response.status}: {body[:300]!r}")
        admin, render = map(float, _TIMING.match(response.getheader("server-timing")).groups())
        server_ms.append(admin + render)
    cpu_after = server.cpu_times()
    connection.close()
    cpu = (cpu_after.user - cpu_before.user) + (cpu_after.system - cpu_before.system)
    server_ms.sort()
    return {"p50": statistics.median(server_ms),
            "p95": server_ms[int(len(server_ms) * 0.95) - 1], "max": server_ms[-1],
            "wall_p50": statistics.median(wall_ms), "cpu_ms": cpu * 1000 / requests,
            "bytes": len(body)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000, help="jobs retained (100000)")
    parser.add_argument("--worked", type=int, default=5_000,
                        help="of which run on a worker, one in ten failing (5000)")
    parser.add_argument("--requests", type=int, default=200, help="requests per page (200)")
    args = parser.parse_args()
    if not 0 < args.worked <= args.jobs:
        parser.error("--worked must be in 1..--jobs")
    SCRATCH.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="bench-dashboard-", dir=SCRATCH))
    process, port, socket_path = start_server(root)
    try:
        started = time.monotonic()
        samples = asyncio.run(fill(socket_path, args.jobs, args.worked))
        print(f"filled {args.jobs:,} jobs ({args.worked:,} worked) in "
              f"{time.monotonic() - started:.1f} s", flush=True)
        pages = {
            "overview": "/ui/",
            "jobs (50, no filter)": "/ui/jobs",
            "jobs state=available": "/ui/jobs?state=available",
            "jobs queue=work state=completed": "/ui/jobs?queue=work&state=completed",
            "jobs task=bench.fail (sparse)": "/ui/jobs?task=bench.fail",
            "jobs state=discarded queue=bulk-a (empty)": "/ui/jobs?state=discarded&queue=bulk-a",
            "jobs queue=bulk-a task=bench.report (scan limit)":
                "/ui/jobs?queue=bulk-a&task=bench.report",
            "job detail (failed)": f"/ui/jobs/{samples['failed']}",
            "job detail (waiting)": f"/ui/jobs/{samples['waiting-0']}",
            "queues": "/ui/queues",
            "workers": "/ui/workers",
            "schedules": "/ui/schedules",
            "storage": "/ui/storage",
        }
        server = psutil.Process(process.pid)
        print(f"{'page':50} {'server p50':>10} {'p95':>7} {'max':>7} {'wall p50':>9} "
              f"{'CPU/page':>9} {'bytes':>7}")
        for name, path in pages.items():
            r = measure(port, server, path, args.requests)
            print(f"{name:50} {r['p50']:8.2f}ms {r['p95']:6.2f} {r['max']:7.2f} "
                  f"{r['wall_p50']:7.2f}ms {r['cpu_ms']:7.2f}ms {r['bytes']:7}", flush=True)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(os.path.dirname(socket_path), ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
