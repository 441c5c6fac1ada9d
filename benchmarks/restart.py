"""Cold restart of ``tay serve`` on an existing store: spawn until the socket accepts.

Usage:
    .venv/bin/python -m benchmarks.restart --store DIR [--runs 5] [--profile]

Each run copies ``DIR`` to a scratch directory beside it (a restart may commit recovery
events or open a segment; every run starts from the same bytes), makes the copy durable
(every file and directory fsynced, as a stopped server leaves its store; else the start's
own fsyncs write the fresh ~20 MB copy back inside the timed start), starts ``tay serve
--durability sync --validated-filesystem`` on the copy in a fresh interpreter, and reports
the wall time from spawn to the first accepted connection (the tay package byte-compiled
first, ``tay.bench.server.byte_compile_tay``), the CPU (user+sys) the process
used until then and its peak RSS (``VmHWM``) at that moment; the copy is removed after.

``--profile`` instead runs recovery in process (``tay.server.app.open_store``, what serve
does before it listens) under cProfile and prints the top functions by cumulative and own
time. The store must live where strict sync accepts it (not /tmp).
"""

from __future__ import annotations

import argparse
import os
import shutil
import stat
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def copy_store(store: Path) -> Path:
    scratch = Path(tempfile.mkdtemp(prefix="restart-", dir=store.parent))
    target = scratch / "data"
    shutil.copytree(store, target, symlinks=True)
    make_durable(target)
    return target


def make_durable(root: Path) -> None:
    """fsync every regular file and directory under ``root`` and ``root``'s parent (the
    copy's entry): the copy then has no dirty pages for the server's first fsyncs to write."""
    for directory, _, names in os.walk(root):
        for name in names:
            path = os.path.join(directory, name)
            if stat.S_ISREG(os.lstat(path).st_mode):  # not the sockets or symlinks
                _fsync_path(path, os.O_RDONLY)
        _fsync_path(directory, os.O_RDONLY | os.O_DIRECTORY)
    _fsync_path(str(root.parent), os.O_RDONLY | os.O_DIRECTORY)


def _fsync_path(path: str, flags: int) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def measure(store: Path, runs: int) -> list[dict]:
    from tay.bench.server import ServerProcess, ServerSettings

    results = []
    for _ in range(runs):
        data = copy_store(store)
        settings = ServerSettings(str(data), str(data.parent / "tay.sock"), {"default": 4},
                                  log_path=str(data.parent / "server.log"))
        server = ServerProcess(settings)
        try:
            wall = server.start()
            results.append({"wall_s": wall, "cpu_s": server.ready_cpu_s,
                            "peak_rss_mib": server.ready_peak_rss / 2**20})
        finally:
            if server.process is not None:
                server.stop()
            shutil.rmtree(data.parent, ignore_errors=True)
    return results


def profile(store: Path, top: int) -> None:
    import cProfile
    import pstats

    from tay.bench.server import byte_compile_tay

    byte_compile_tay()  # recovery imports the engine: from bytecode, as a server would
    from tay.server.app import ServeConfig, open_store

    data = copy_store(store)
    try:
        config = ServeConfig(data_dir=str(data), socket=None, validated_filesystem=True)
        profiler = cProfile.Profile()
        profiler.enable()
        opened = open_store(config)
        profiler.disable()
        opened.close()
        stats = pstats.Stats(profiler).strip_dirs()
        stats.sort_stats("cumulative").print_stats(top)
        stats.sort_stats("tottime").print_stats(top)
    finally:
        shutil.rmtree(data.parent, ignore_errors=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True, help="the store to restart on")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="cProfile recovery in process")
    parser.add_argument("--top", type=int, default=30)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not (args.store / "STORE").is_file():
        parser.error(f"--store {args.store}: no STORE marker there (not a tay store)")
    if args.profile:
        profile(args.store.resolve(), args.top)
        return 0
    results = measure(args.store.resolve(), args.runs)
    for key in ("wall_s", "cpu_s", "peak_rss_mib"):
        values = [round(result[key], 3) for result in results]
        print(f"{key}: min {min(values)} median {statistics.median(values)} runs {values}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
