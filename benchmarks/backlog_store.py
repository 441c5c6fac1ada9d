"""A store holding a backlog: jobs enqueued while no worker ran, then the server killed.

Usage:
    .venv/bin/python -m benchmarks.backlog_store --store DIR [--jobs 8000] [--payload-bytes 1000]
        [--executing 0]

``tay serve`` (strict sync) runs on ``DIR``; our SDK enqueues ``--jobs`` jobs of task ``t``
on queue ``default`` with a ``payload`` string of ``--payload-bytes`` bytes, 50 at a time,
and no worker connects; then the server is killed with SIGKILL. What is left is an
uncompacted tail of inserts only: the shape `benchmarks.restart --store DIR` restarts on
when it measures a backlog (every job waits at its insert). With ``--executing N`` a worker
of capacity N (queue ``default`` given N credits) then starts the first N jobs and never
finishes them: the kill leaves N jobs executing (an insert and a start each) beside the
waiting ones, the shape of a store cut mid-load. ``DIR`` must not exist yet and must be
where strict sync accepts a store (not /tmp).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tay.bench.server import ServerProcess, ServerSettings  # noqa: E402
from tay.sdk.client import Tay  # noqa: E402

_AT_ONCE = 50


async def enqueue_backlog(socket_path: str, jobs: int, payload_bytes: int) -> None:
    body = {"payload": "x" * payload_bytes}
    async with Tay(socket_path=socket_path) as client:
        for first in range(0, jobs, _AT_ONCE):
            await asyncio.gather(*(client.enqueue("t", body)
                                   for _ in range(first, min(jobs, first + _AT_ONCE))))


async def start_jobs(socket_path: str, executing: int) -> None:
    """A worker of capacity ``executing`` that starts that many jobs and finishes none: it
    returns once each has reached the task (its start is durable before it is sent)."""
    worker = Tay(socket_path=socket_path, capacity=executing)
    started = 0
    all_started, never = asyncio.Event(), asyncio.Event()

    @worker.task(name="t")
    async def hold(payload: str) -> None:
        nonlocal started
        started += 1
        if started == executing:
            all_started.set()
        await never.wait()

    async with worker:
        await asyncio.wait_for(all_started.wait(), 300)


def make_backlog(store: Path, jobs: int, payload_bytes: int, executing: int = 0) -> None:
    """``jobs`` enqueues acknowledged on a new store at ``store``, ``executing`` of them
    started, then a kill -9."""
    sockets = Path(tempfile.mkdtemp(prefix="tay-backlog-"))  # short: a socket path is <108 B
    try:
        server = ServerProcess(ServerSettings(str(store), str(sockets / "tay.sock"),
                                              {"default": max(4, executing)}))
        server.start()
        try:
            asyncio.run(enqueue_backlog(str(sockets / "tay.sock"), jobs, payload_bytes))
            if executing:
                asyncio.run(start_jobs(str(sockets / "tay.sock"), executing))
        finally:
            assert server.process is not None
            server.process.kill()
            server.process.wait()
    finally:
        shutil.rmtree(sockets, ignore_errors=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True, help="the store to create")
    parser.add_argument("--jobs", type=int, default=8000)
    parser.add_argument("--payload-bytes", type=int, default=1000)
    parser.add_argument("--executing", type=int, default=0,
                        help="of those, how many a worker starts and never finishes")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.store.exists():
        parser.error(f"--store {args.store}: exists already (the backlog needs a new store)")
    if args.jobs < 1 or args.payload_bytes < 0 or not 0 <= args.executing <= args.jobs:
        parser.error("--jobs must be at least 1, --payload-bytes not negative and "
                     "--executing in 0..jobs")
    make_backlog(args.store.resolve(), args.jobs, args.payload_bytes, args.executing)
    print(f"backlog of {args.jobs} jobs ({args.executing} executing) at {args.store}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
