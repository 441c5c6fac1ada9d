"""``tay serve`` at run time: open (or initialize) the store, replay it into the engine,
commit the recovery events, then listen until SIGTERM/SIGINT or a stopped writer.

Startup order matters: nothing listens before recovery's own events are durable, so no
client can observe a state that a crash right now would lose.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from dataclasses import dataclass, field
from typing import Any

from tay.engine.config import EngineConfig
from tay.protocol.limits import ProtocolLimits
from tay.storage.commit import GroupCommitter
from tay.storage.events import encode_event
from tay.storage.journal import Journal, init_store
from tay.storage.recovery import recover

from .driver import EngineDriver, mono_ms, wall_ms
from .listener import Listener
from .socket_path import SocketPlan, check_outside_data_dir

log = logging.getLogger("tay.server")


@dataclass(frozen=True)
class ServeConfig:
    """Everything ``tay serve`` needs, already validated by the CLI."""

    data_dir: str
    socket: SocketPlan | None
    socket_mode: int = 0o600
    init_if_missing: bool = False
    durability: str = "sync"
    validated_filesystem: bool = False
    group_commit_max_events: int = 1
    group_commit_interval_ms: int = 0
    engine: EngineConfig = field(default_factory=EngineConfig)
    limits: ProtocolLimits = field(default_factory=ProtocolLimits)


@dataclass
class OpenStore:
    engine: Any
    journal: Journal
    committer: GroupCommitter

    def close(self) -> None:
        self.committer.close()
        self.journal.close()


def open_store(config: ServeConfig) -> OpenStore:
    """Initialize if asked and missing, recover into a fresh engine, commit recovery events."""
    from tay.engine import Engine  # the engine package exposes its facade lazily

    if config.init_if_missing and _store_missing(config.data_dir):
        init_store(config.data_dir, config.durability, config.validated_filesystem)
        log.info("initialized a new store in %s", config.data_dir)
    engine = Engine(config.engine)
    recovered = recover(config.data_dir, consumer=engine.replay, durability=config.durability,
                        validated_filesystem=config.validated_filesystem)
    assert recovered.journal is not None
    committer = GroupCommitter(recovered.journal, config.group_commit_max_events,
                               config.group_commit_interval_ms)
    store = OpenStore(engine, recovered.journal, committer)
    try:
        outcome = engine.finish_recovery(wall_ms(), mono_ms())
        if outcome.events:
            records = [(seq, ev.type, ev.schema, encode_event(ev)) for seq, ev in outcome.events]
            committer.submit(records).result()
    except BaseException:
        store.close()
        raise
    log.info("recovered %d records from %s", recovered.records_replayed, config.data_dir)
    return store


def _store_missing(data_dir: str) -> bool:
    return not os.path.exists(data_dir) or (os.path.isdir(data_dir) and not os.listdir(data_dir))


async def serve(config: ServeConfig, ready: asyncio.Event | None = None) -> int:
    """Run until SIGTERM/SIGINT. Exit 1 if the journal writer stopped meanwhile (the server
    kept answering ``unavailable`` rather than degrading), else 0."""
    if config.socket is not None:
        check_outside_data_dir(config.socket.path, config.data_dir)
    loop = asyncio.get_running_loop()
    store = open_store(config)
    driver = EngineDriver(store.engine, store.committer, loop)
    stop = asyncio.Event()
    listener = Listener(driver, config.limits)
    try:
        if config.socket is not None:
            await listener.start(config.socket, config.socket_mode)
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        driver.on_stopped = lambda: log.error(
            "journal writer stopped (%s); refusing every request with unavailable", driver.stopped)
        driver.tick()  # dispatch recovered work and arm the wake-up timer
        if ready is not None:
            ready.set()
        await stop.wait()
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        await listener.close()
        driver.close()
        store.close()
    if driver.stopped is not None:
        log.error("journal writer stopped: %s", driver.stopped)
        return 1
    log.info("tay stopped cleanly")
    return 0
