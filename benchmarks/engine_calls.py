"""Instructions per job of one engine command kind or function, under callgrind.

    valgrind --tool=callgrind --collect-atstart=no --toggle-collect=_operator_call \\
        .venv/bin/python -m benchmarks.engine_calls TARGET --jobs N

runs ``benchmarks.engine_path``'s jobs (one round, nothing else timed) with TARGET called
through ``operator.call``, which nothing else on the path calls, so callgrind collects
exactly TARGET's calls and what they call. TARGET is a command class name (``Enqueue``,
``Started``, ``Succeeded``: ``Engine.handle`` of that kind, its dispatch included) or
``module:Owner.attribute`` / ``module:function`` (a function the engine looks up at call
time, e.g. ``tay.engine.state:EngineState._dispatch`` or
``tay.engine.handlers.producer:parse_enqueue``). Instructions per job are the difference of two runs
(``--jobs 2500`` minus ``--jobs 500``) over 2,000, as for ``engine_path``.
"""

from __future__ import annotations

import argparse
import importlib
import operator
import os
import shutil
import tempfile
from typing import Callable

from benchmarks import engine_path
from tay.bench.paths import bench_scratch


def route(target: str) -> Callable[[], None]:
    """Make every call of ``target`` go through ``operator.call``; returns the undo."""
    call = operator.call
    if ":" not in target:
        from tay.engine.core import Engine

        handle = Engine.handle

        def kind_handle(self, command, now_ms, mono_ms):
            if type(command).__name__ == target:
                return call(handle, self, command, now_ms, mono_ms)
            return handle(self, command, now_ms, mono_ms)

        Engine.handle = kind_handle
        return lambda: setattr(Engine, "handle", handle)
    module_name, path = target.split(":")
    holder = importlib.import_module(module_name)
    *owners, attribute = path.split(".")
    for owner in owners:
        holder = getattr(holder, owner)
    function = getattr(holder, attribute)

    def routed(*args, **kwargs):
        return call(function, *args, **kwargs)

    setattr(holder, attribute, routed)
    return lambda: setattr(holder, attribute, function)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", help="a command class name or module:Owner.function")
    parser.add_argument("--jobs", type=int, default=2500)
    parser.add_argument("--dir", default=str(bench_scratch()),
                        help="where the throw-away store goes (default: the bench scratch)")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    undo = route(args.target)
    os.makedirs(args.dir, exist_ok=True)
    root = tempfile.mkdtemp(prefix="engine-calls-", dir=args.dir)
    try:
        store = engine_path.open_engine(os.path.join(root, "data"), 2)
        try:
            engine_path.run_jobs(store.engine, args.jobs)
        finally:
            store.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
        undo()


if __name__ == "__main__":
    main()
