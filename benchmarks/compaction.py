"""Compaction benchmarks: cold restart before/after compaction, and online compaction under load.

Usage:
    .venv/bin/python -m benchmarks.compaction restart [--jobs 10000] [--repeat 3]
    .venv/bin/python -m benchmarks.compaction online [--jobs 100000] [--seconds 6]

``restart``: the reference history of ``benchmarks/replay.py`` (N completed jobs, 1 KiB
payload each, three events per job) is built as a v1 store, then compacted offline
(``compact_offline``, what ``tay storage compact`` runs) twice over copies: with retention
``infinity`` (every job retained: a base of N snapshots) and with ``24h`` (the reference
jobs finished long ago: all expire). Each store is recovered into the engine in fresh
processes (best of ``--repeat``); the line shows recovery wall time, records and peak RSS.

``online``: a strict-sync ``tay serve`` (``--journal-writer`` as given) on a store holding
N retained completed jobs, with producers (our SDK, ``--producers`` x ``--concurrency``
enqueues in flight) and one worker completing every job. After a warm-up the enqueue ack
latency is recorded for ``--seconds`` without compaction, then an online compaction is
requested through the admin API and the latency is recorded until it answers. Prints the
compaction's report (publish time, writes paused), ack p50/p99/max in both windows, jobs/s and
the server's CPU per job in each window.
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
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.replay import build_store  # noqa: E402  (the reference history)
from tay.bench.paths import bench_scratch  # noqa: E402
from tay.bench.server import engine_cpu, stall_lines  # noqa: E402

SCRATCH = bench_scratch()  # strict sync accepts it wherever the checkout is


# ---- restart -------------------------------------------------------------------------------

def compact(path: Path, retention: str) -> dict:
    from tay.engine import Engine
    from tay.storage.compaction.offline import compact_offline
    from tay.storage.v2.manifest import parse_retention

    started = time.perf_counter()
    result = compact_offline(str(path), consumer=Engine(), retention=parse_retention(retention),
                             durability="write")
    return {"seconds": time.perf_counter() - started, **result.report()}


def recover_child(path: str) -> None:
    import resource

    from tay.engine import Engine
    from tay.storage.recovery.recover import recover

    started = time.perf_counter()
    engine = Engine()
    done = recover(path, consumer=engine, activate=False)
    engine.finish_recovery(int(time.time() * 1000), int(time.monotonic() * 1000))
    seconds = time.perf_counter() - started
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"seconds": seconds, "records": done.records_replayed,
                      "jobs": len(engine.jobs), "peak_kb": peak_kb}))


def measure_recovery(path: Path, repeat: int) -> dict:
    best = None
    for _ in range(repeat):
        out = subprocess.run([sys.executable, "-m", "benchmarks.compaction", "recover-child",
                              str(path)], check=True,
                             capture_output=True, text=True, cwd=ROOT).stdout
        row = json.loads(out)
        if best is None or row["seconds"] < best["seconds"]:
            best = row
    return best


def store_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def restart(jobs: int, repeat: int) -> None:
    SCRATCH.mkdir(parents=True, exist_ok=True)
    base = SCRATCH / f"compaction-bench-{uuid.uuid4().hex}"
    try:
        v1 = base / "v1"
        build_store(v1, jobs)
        rows = [("v1 history (before)", v1, None)]
        for retention in ("infinity", "24h"):
            copy = base / f"v2-{retention}"
            shutil.copytree(v1, copy)
            rows.append((f"compacted, retention {retention}", copy, compact(copy, retention)))
        for label, path, report in rows:
            found = measure_recovery(path, repeat)
            extra = "" if report is None else (
                f"  (compaction {report['seconds']:.2f} s: {report['retained_jobs']} kept, "
                f"{report['expired_jobs']} expired)")
            print(f"{label:32s} {found['seconds'] * 1000:8.1f} ms  {found['records']:7d} records "
                  f"{found['jobs']:7d} jobs  {store_bytes(path) / 1e6:7.1f} MB  peak RSS "
                  f"{found['peak_kb'] / 1024:6.1f} MB{extra}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


# ---- online under load ----------------------------------------------------------------------

class Latencies:
    def __init__(self) -> None:
        self.samples: list[tuple[float, float]] = []  # (monotonic at ack, seconds)

    def window(self, start: float, end: float) -> list[float]:
        return [s for at, s in self.samples if start <= at < end]

    def slowest(self, start: float, end: float) -> str:
        """The slowest acknowledgement in the window and when its enqueue was sent."""
        at, seconds = max(((at, s) for at, s in self.samples if start <= at < end),
                          key=lambda sample: sample[1], default=(start, 0.0))
        return (f"slowest ack {seconds * 1000:.1f} ms, its enqueue sent "
                f"{at - seconds - start:+.2f} s after the window began")


def summarize(name: str, values: list[float], seconds: float, cpu_s: float | None) -> str:
    if not values:
        return f"{name}: no acknowledgements"
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    cpu = "" if cpu_s is None else \
        f"  server CPU {cpu_s / max(1, len(values)) * 1e6:6.0f} us/enqueue"
    return (f"{name:24s} {len(values):7d} acks  {len(values) / seconds:8.0f} enqueues/s  "
            f"ack p50 {statistics.median(ordered) * 1000:7.2f} ms  p99 {p99 * 1000:7.2f} ms  "
            f"max {ordered[-1] * 1000:7.2f} ms{cpu}")


async def load(socket_path: str, producers: int, concurrency: int, latencies: Latencies,
               stop: asyncio.Event) -> None:
    from tay import Tay

    async def producer() -> None:
        tay = Tay(socket_path=socket_path, mode="client", request_timeout=120)
        async with tay:
            async def one_lane() -> None:
                n = 0
                while not stop.is_set():
                    started = time.monotonic()
                    await tay.enqueue("bench.echo", {"account_key": "benchmark-account",
                                                     "payload": "x" * 1024, "n": n})
                    now = time.monotonic()
                    latencies.samples.append((now, now - started))
                    n += 1
            await asyncio.gather(*(one_lane() for _ in range(concurrency)))

    async def worker() -> None:
        tay = Tay(socket_path=socket_path, mode="worker", capacity=32)

        @tay.task(name="bench.echo")
        def echo(account_key: str = "", payload: str = "", n: int = 0) -> dict:
            return {"n": n}

        async with tay:
            await stop.wait()

    await asyncio.gather(worker(), *(producer() for _ in range(producers)))


def cpu_seconds(pid: int) -> float:
    import psutil

    return sum(engine_cpu(psutil.Process(pid).cpu_times()))


def online(jobs: int, seconds: float, producers: int, concurrency: int, writer: str) -> None:
    from tay.admin.client import SocketAdmin

    SCRATCH.mkdir(parents=True, exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix="compaction-online-", dir=SCRATCH))
    sockets = tempfile.mkdtemp(prefix="tcb-", dir="/tmp")
    socket_path = os.path.join(sockets, "tay.sock")
    server = None
    try:
        data = base / "data"
        started = time.perf_counter()
        build_store(data, jobs)
        adopted = compact(data, "infinity")  # what serve's adoption does, timed here
        print(f"store: {jobs} retained completed jobs, adopted in {adopted['seconds']:.1f} s, "
              f"base {adopted['base_bytes'] / 1e6:.1f} MB (built in "
              f"{time.perf_counter() - started:.1f} s)")
        log = open(base / "serve.log", "ab")
        server = subprocess.Popen(
            [sys.executable, "-m", "tay.cli", "serve", "--data-dir", str(data), "--socket",
             socket_path, "--durability", "sync", "--validated-filesystem",
             "--journal-writer", writer, "--group-commit-max-events", "64",
             "--group-commit-interval-ms", "2", "--compact-history-bytes", "1024GiB",
             "--max-state-bytes", "4GiB", "--request-timeout-ms", "900000"],
            cwd=ROOT, stdout=log, stderr=log, env={**os.environ, "PYTHONPATH": str(ROOT)})
        deadline = time.monotonic() + 120
        while not os.path.exists(socket_path):
            assert server.poll() is None and time.monotonic() < deadline, "serve did not start"
            time.sleep(0.05)
        admin = SocketAdmin(socket_path, timeout_s=600)
        latencies = Latencies()
        marks: dict[str, float] = {}
        outcome: dict = {}

        async def scenario() -> None:
            stop = asyncio.Event()
            running = asyncio.ensure_future(load(socket_path, producers, concurrency,
                                                 latencies, stop))
            await asyncio.sleep(2.0)  # warm-up
            marks["baseline"], marks["cpu_baseline"] = time.monotonic(), cpu_seconds(server.pid)
            await asyncio.sleep(seconds)
            marks["compact"], marks["cpu_compact"] = time.monotonic(), cpu_seconds(server.pid)

            def request() -> None:
                outcome["report"] = admin.call("compact", {})
                marks["compacted"] = time.monotonic()
                marks["cpu_compacted"] = cpu_seconds(server.pid)

            thread = threading.Thread(target=request)
            thread.start()
            while thread.is_alive():
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.0)
            stop.set()
            await running

        asyncio.run(scenario())
        report = outcome["report"]
        base_s = marks["compact"] - marks["baseline"]
        comp_s = marks["compacted"] - marks["compact"]
        print(f"online compaction: {report['duration_ms']} ms to publish and reclaim "
              f"(timings {report['timings_ms']}), the capture held the loop "
              f"{report['capture_ms']:.1f} ms (fork {report['fork_ms']:.1f} ms), writes paused "
              f"{report['pause_ms']:.1f} ms, the check's fork {report['check_fork_ms']:.1f} ms, "
              f"{report['catch_up_records']} catch-up records, {report['retained_jobs']} jobs "
              f"kept, history {report['bytes_before'] / 1e6:.1f} MB -> "
              f"{report['bytes_after'] / 1e6:.1f} MB")
        print(summarize("without compaction", latencies.window(marks["baseline"],
                                                               marks["compact"]), base_s,
                        marks["cpu_compact"] - marks["cpu_baseline"]))
        print(summarize("during compaction", latencies.window(marks["compact"],
                                                              marks["compacted"]), comp_s,
                        marks["cpu_compacted"] - marks["cpu_compact"]))
        # the phases, from the report's steps (ms since the compaction started, which is
        # about when the request was sent)
        steps = report["timings_ms"]
        edges = [("  to the candidate", marks["compact"]),
                 ("  catch-up and switch", marks["compact"] + steps["candidate_verified"] / 1000),
                 ("  check and reclaim", marks["compact"] + steps["switched"] / 1000),
                 ("", marks["compacted"])]
        for (name, start), (_, end) in zip(edges, edges[1:]):
            if end > start:
                print(summarize(name, latencies.window(start, end), end - start, None))
        print("during compaction: " + latencies.slowest(marks["compact"], marks["compacted"]))
        loop = admin.call("status", {})["loop"]
        print(f"event loop: {loop['stalls']} stall(s) over {loop['stall_threshold_s']} s, "
              f"longest {loop['longest_stall_s']:.3f} s")
        log.flush()
        print("".join(stall_lines((base / "serve.log").read_text())), end="")
    finally:
        if server is not None and server.poll() is None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(60)
            except subprocess.TimeoutExpired:
                server.kill()
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(sockets, ignore_errors=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compaction",
                                     description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("restart")
    one.add_argument("--jobs", type=int, default=10_000)
    one.add_argument("--repeat", type=int, default=3)
    two = sub.add_parser("online")
    two.add_argument("--jobs", type=int, default=100_000)
    two.add_argument("--seconds", type=float, default=6.0)
    two.add_argument("--producers", type=int, default=2)
    two.add_argument("--concurrency", type=int, default=8)
    two.add_argument("--journal-writer", default="auto", choices=("auto", "c", "python"))
    child = sub.add_parser("recover-child")
    child.add_argument("path")
    return parser


def main() -> None:
    options = build_parser().parse_args()
    if options.command == "recover-child":
        recover_child(options.path)
    elif options.command == "restart":
        restart(options.jobs, options.repeat)
    else:
        online(options.jobs, options.seconds, options.producers, options.concurrency,
               options.journal_writer)


if __name__ == "__main__":
    main()
