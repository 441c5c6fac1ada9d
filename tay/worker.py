"""``tay-worker module[:attr]`` (or ``python -m tay.worker``): run a dedicated worker
process for a ``Tay`` instance.

Imports the module, picks ``module:attr`` (or the only ``Tay`` instance the module made),
requires ``mode="worker"``, connects, and runs until SIGTERM/SIGINT. Stopping is graceful:
tasks are withdrawn first so no new work arrives, running executions get ``--grace``
seconds to finish and report, then the connection closes (anything still running is
treated by Tay as interrupted and runs again).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import logging
import signal
import sys
from typing import Any

from tay.errors import TayError

log = logging.getLogger("tay.worker")


def load_instance(specification: str) -> Any:
    """The ``Tay`` object named by ``module:attr``, or the single one ``module`` created."""
    from tay.sdk.client import Tay

    module_name, _, attribute = specification.partition(":")
    before = set(map(id, Tay.instances()))
    module = importlib.import_module(module_name)
    if attribute:
        candidate = getattr(module, attribute)
        if not isinstance(candidate, Tay):
            raise TypeError(f"{specification!r} is a {type(candidate).__name__}, not a Tay instance")
        return candidate
    found = [value for value in vars(module).values() if isinstance(value, Tay)]
    if not found:  # created elsewhere during the import (e.g. in a submodule)
        found = [tay for tay in Tay.instances() if id(tay) not in before]
    unique = list({id(tay): tay for tay in found}.values())
    if len(unique) != 1:
        raise RuntimeError(f"{module_name!r} defines {len(unique)} Tay instances; name one as {module_name}:attribute")
    return unique[0]


async def serve(instance: Any, *, grace: float) -> None:
    """Run ``instance`` until a stop signal, then stop gracefully."""
    if instance.mode != "worker":
        raise RuntimeError(f"tay-worker needs Tay(mode='worker'), this instance is mode={instance.mode!r}")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await instance.start()
    log.info("tay-worker connected to %s with %d task(s)", instance.socket_path, len(instance.tasks))
    try:
        await stop.wait()
        log.info("stopping: withdrawing tasks, waiting up to %gs for running executions", grace)
        if instance.tasks:
            with contextlib.suppress(TayError):
                await asyncio.wait_for(instance.unregister_tasks(*instance.tasks), timeout=min(grace, 5) or None)
        await instance.drain(grace)
    finally:
        await instance.close()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tay-worker", description="Run a dedicated Tay worker process.")
    parser.add_argument("application", help="module or module:attribute of a Tay(mode='worker') instance")
    parser.add_argument("--grace", type=float, default=30.0,
                        help="seconds running executions get to finish after SIGTERM (default 30)")
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    arguments = parser.parse_args(argv)
    logging.basicConfig(level=arguments.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if "" not in sys.path:
        sys.path.insert(0, "")  # like `python -m`: the working directory's modules are importable
    try:
        instance = load_instance(arguments.application)
        asyncio.run(serve(instance, grace=arguments.grace))
    except (ImportError, AttributeError, RuntimeError, TypeError) as exc:
        parser.error(str(exc))
    except TayError as exc:
        print(f"tay-worker: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
