"""Schedule benchmarks: delivery lag through a real ``tay serve``, and schedule replay cost.

Usage:
    .venv/bin/python benchmarks/schedules.py lag [--schedules 20] [--seconds 15] [--loaders 8]
    .venv/bin/python benchmarks/schedules.py replay [--events 10000]

``lag``: starts ``tay serve`` (strict ``sync`` durability on the bench scratch,
``tay.bench.paths``), declares ``--schedules`` interval schedules (every 1 s, staggered start) with our SDK, and runs a
worker that notes the wall time at which each occurrence starts executing. The lag of an
execution is its start time minus its due time ((t - start_at) mod interval). Two phases:
idle, then with ``--loaders`` separate processes enqueueing jobs back to back (jobs on a
queue no worker serves, so they are pure journal/engine load). Prints p50/p99/max.

``replay``: builds a journal with an in-process engine (registrations and deliveries of
interval schedules), keeps its first ``--events`` schedule events, and times
``Engine.replay`` of exactly those into a fresh engine (best of 3).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tay.bench.paths import bench_scratch  # noqa: E402 (after the path)

SCRATCH = bench_scratch()  # strict sync accepts it wherever the checkout is
INTERVAL_MS = 1_000

LOADER = r'''
import asyncio, sys, time
from tay import Tay

async def main():
    tay = Tay(socket_path=sys.argv[1], mode="client")
    await tay.start()
    end = time.monotonic() + float(sys.argv[2])
    count = 0
    while time.monotonic() < end:
        await tay.enqueue("bench.load", {"n": count}, queue="load")
        count += 1
    await tay.close()
    print(count)

asyncio.run(main())
'''


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def start_server(root: Path) -> subprocess.Popen:
    socket = root / "tay.sock"
    log = open(root / "server.log", "ab")
    server = subprocess.Popen(
        [sys.executable, "-m", "tay.cli", "serve", "--data-dir", str(root / "data"),
         "--socket", str(socket), "--init-if-missing", "--durability", "sync", "--validated-filesystem"],
        cwd=ROOT, stdout=log, stderr=log, env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 10
    while not socket.exists():
        if server.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError((root / "server.log").read_text())
        time.sleep(0.02)
    return server


async def measure_phase(socket: str, schedules: int, seconds: float, loaders: int,
                        tag: str) -> list[float]:
    from tay import Tay

    starts: dict[str, int] = {}
    lags: list[float] = []
    worker = Tay(socket_path=socket, mode="worker", capacity=64)

    @worker.task(name="bench.tick")
    def tick(schedule: str) -> None:
        now = time.time_ns() // 1_000_000
        lags.append(float((now - starts[schedule]) % INTERVAL_MS))

    producer = Tay(socket_path=socket, mode="client")
    await worker.start()
    await producer.start()
    base = time.time_ns() // 1_000_000 + 1_000
    handles = []
    for index in range(schedules):
        name = f"{tag}-{index}"
        starts[name] = base + index * INTERVAL_MS // schedules
        handles.append(await producer.every("bench.tick", seconds=INTERVAL_MS / 1000,
                                            kwargs={"schedule": name}, declaration_id=name,
                                            start_at=starts[name], overlap="allow"))
    procs = [subprocess.Popen([sys.executable, "-c", LOADER, socket, str(seconds + 1)],
                              cwd=tempfile.gettempdir(), stdout=subprocess.PIPE,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
             for _ in range(loaders)]
    await asyncio.sleep(seconds + 1)
    inserted = sum(int(p.communicate()[0] or 0) for p in procs)
    for handle in handles:
        await handle.cancel()
    await producer.close()
    await worker.close()
    if loaders:
        print(f"  loaders inserted {inserted} jobs ({inserted / (seconds + 1):.0f}/s)")
    return lags


def delivery_lags(data_dir: Path) -> dict[str, list[float]]:
    """Per phase tag: ``at - due_at`` of every (11,2) delivery in the stopped store."""
    from tay.storage.events import decode_event
    from tay.storage.recovery.recover import recover
    from tay.storage.events.schedules import SCHEDULE_DELIVERED

    lags: dict[str, list[float]] = {}

    def consumer(sequence: int, rtype: int, schema: int, payload) -> None:
        if (rtype, schema) == SCHEDULE_DELIVERED:
            event = decode_event(rtype, schema, payload)
            tag = event["schedule_id"].split("-")[0]
            lags.setdefault(tag, []).append(float(event["at"] - event["due_at"]))

    recover(str(data_dir), consumer=consumer, activate=False)
    return lags


def summary(lags: list[float]) -> str:
    return (f"samples={len(lags)} p50={percentile(lags, 0.5):.0f} ms "
            f"p99={percentile(lags, 0.99):.0f} ms max={max(lags):.0f} ms")


def run_lag(args: argparse.Namespace) -> None:
    SCRATCH.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="bench-sched-", dir=SCRATCH))
    server = start_server(root)
    phases = ((0, "idle"), (args.loaders, "loaded"))
    try:
        starts = {tag: asyncio.run(measure_phase(str(root / "tay.sock"), args.schedules,
                                                 args.seconds, loaders, tag))
                  for loaders, tag in phases}
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=10)
    try:
        delivered = delivery_lags(root / "data")
        for loaders, tag in phases:
            print(f"{tag:6} loaders={loaders}")
            print(f"  delivery lag (journal at - due_at): {summary(delivered[tag])}")
            print(f"  worker start lag (mod interval):    {summary(starts[tag])}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def build_schedule_journal(events: int) -> list:
    from tay.engine import Engine, commands as c
    from tay.storage.events.schedules import SCHEDULE_PAIRS

    engine = Engine(rng=random.Random(1))
    now, mono, kept, request = 1_767_225_600_000, 0, [], 0
    schedules = max(1, events // 10)
    for index in range(schedules):
        request += 1
        out = engine.handle(c.Schedule("p", f"r{request}", {
            "declaration_id": f"bench-{index:06d}", "task": "t", "every": {"seconds": 1},
            "overlap": "allow", "args": {"index": index}}), now, mono)
        kept.extend(out.events)
    while sum(1 for _, e in kept if e.pair in SCHEDULE_PAIRS) < events:
        kept.extend(engine.tick(now, mono).events)
        now, mono = now + 1_000, mono + 1_000
    schedule_events = [(s, e) for s, e in kept if e.pair in SCHEDULE_PAIRS][:events]
    return schedule_events


def run_replay(args: argparse.Namespace) -> None:
    from tay.engine import Engine
    from tay.storage.events import encode_event

    journal = [(s, e.type, e.schema, encode_event(e)) for s, e in build_schedule_journal(args.events)]
    best = float("inf")
    for _ in range(3):
        engine = Engine(rng=random.Random(2))
        started = time.perf_counter()
        for record in journal:
            engine.replay(*record)
        best = min(best, time.perf_counter() - started)
    print(f"replay of {len(journal)} schedule events ({len(engine.schedules)} schedules): "
          f"{best * 1000:.1f} ms ({best / len(journal) * 1e6:.1f} us/event)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    lag = sub.add_parser("lag")
    lag.add_argument("--schedules", type=int, default=20)
    lag.add_argument("--seconds", type=float, default=15)
    lag.add_argument("--loaders", type=int, default=8)
    replay = sub.add_parser("replay")
    replay.add_argument("--events", type=int, default=10_000)
    args = parser.parse_args()
    run_lag(args) if args.mode == "lag" else run_replay(args)


if __name__ == "__main__":
    main()
