"""``tay serve`` at run time: open (or initialize) the store, replay it into the engine,
commit the recovery events, then listen until SIGTERM/SIGINT or a stopped writer.

Startup order matters: nothing listens before recovery's own events are durable, so no
client can observe a state that a crash right now would lose. ``run_serve`` recovers on a
thread *while* the main thread imports the event-loop stack (asyncio, uvloop, the
listeners): recovery needs none of it, so the imports no longer delay it. This module
imports none of them at its own import.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from tay._frozen import Record
from tay.failures import StorageFailure
from tay.storage.fsio import RealIO
from tay.storage.v2.manifest import Retention
from tay.storage.journal.commit import GroupCommitter
from tay.storage.journal.native_commit import NativeCommitter, make_committer
from tay.storage.events import journal_records
from tay.storage.journal.writer import Journal, init_store
from tay.storage.modes import describe_loose, loose_modes

from .recovery import recover_engine
from .serve_config import ServeConfig
from .uds.socket_path import check_outside_data_dir

if TYPE_CHECKING:
    import asyncio

    from .driver import EngineDriver
    from .uds.listener import Listener

log = logging.getLogger("tay.server")

COMMIT_STATS_MARKER = "commit_stats "
# The journal writer thread must re-take the GIL after every fdatasync; with the default
# 5 ms switch interval it waits behind the event loop (see docs/benchmarks.md).
SWITCH_INTERVAL_S = 0.0002

# An extra listener: started on the driver once recovery is durable; returns its closer.
ExtraListener = Callable[["EngineDriver", "Listener"], Awaitable[Callable[[], Awaitable[None]]]]
# What the HTTP listener serves under /ui/, made from the admin service's ``call``: the
# dashboard, which the command line hands in (the server imports no layer above it).
UiFactory = Callable[[Callable[..., Any]], Any]


class OpenStore(Record):
    __slots__ = ("engine", "journal", "committer", "store_version", "retention", "base_bytes")
    engine: Any
    journal: Journal
    committer: GroupCommitter | NativeCommitter
    store_version: int
    retention: Retention | None  # the durable retention in force (Store v2)
    base_bytes: int  # of the selected epoch (what the compaction trigger compares to)

    def __init__(self, engine: Any, journal: Journal, committer: GroupCommitter | NativeCommitter,
                 store_version: int = 1, retention: Retention | None = None,
                 base_bytes: int = 0) -> None:
        self.engine = engine
        self.journal = journal
        self.committer = committer
        self.store_version = store_version
        self.retention = retention
        self.base_bytes = base_bytes

    def close(self) -> None:
        self.committer.close()
        log.info("%s%s", COMMIT_STATS_MARKER, json.dumps(self.commit_stats()))
        self.journal.close()

    def commit_facts(self) -> dict[str, Any]:
        """The committer's counters and batching settings (admin status, the shutdown line)."""
        committer = self.committer
        return {**committer.stats().as_dict(), "max_events": committer.max_events,
                "interval_ms": round(committer.interval_s * 1000),
                "linger": committer.linger, "gather_us": committer.gather_us}

    def commit_stats(self) -> dict[str, Any]:
        """``commit_facts`` with the writer and its time by step (one shutdown log line)."""
        stats = self.commit_facts()
        stats["writer"] = self.committer.implementation
        phases = getattr(self.committer, "phases", None)
        if phases is not None and (taken := phases()) is not None:
            stats["phases"] = taken  # the C writer's time by step (benchmarks)
        return stats


def open_store(config: ServeConfig) -> OpenStore:
    """Initialize if asked and missing, recover into a fresh engine (``recover_engine``, the
    path ``tay storage inspect`` takes too), commit what recovery settles."""
    if config.init_if_missing and _store_missing(config.data_dir):
        init_store(config.data_dir, config.durability, config.validated_filesystem)
        log.info("initialized a new store in %s", config.data_dir)
    if config.compaction.enabled:
        adopt_if_v1(config)
    done = recover_engine(config.data_dir, config.engine, activate=True,
                          durability=config.durability,
                          validated_filesystem=config.validated_filesystem)
    recovered = done.recovered
    journal = recovered.journal
    assert journal is not None
    retention = None
    base_bytes = 0
    if recovered.store_version == 2:
        retention = recovered.view.manifest.terminal_retention
        base_bytes = recovered.view.base_bytes
        if retention != config.terminal_retention:
            log.info("the store keeps its durable terminal retention %s (from its last "
                     "compaction); --terminal-retention %s applies to stores without one "
                     "(change it with tay storage compact --terminal-retention)",
                     retention.to_value(), config.terminal_retention.to_value())
    committer = make_committer(journal, config.group_commit_max_events,
                               config.group_commit_interval_ms, linger=config.group_commit_linger,
                               writer=config.journal_writer,
                               gather_us=config.group_commit_gather_us,
                               rt_priority=config.journal_writer_rt_priority)
    store = OpenStore(done.engine, journal, committer, recovered.store_version, retention,
                      base_bytes)
    try:
        if done.settle.events:
            committer.submit(journal_records(done.settle.events)).result()
    except BaseException:
        store.close()
        raise
    log.info("recovered %d records from %s", done.recovered.records_replayed, config.data_dir)
    loose = loose_modes(config.data_dir)
    if loose:  # reported, never changed: the operator decides (the command is in the line)
        log.warning("%s", describe_loose(config.data_dir, loose))
    return store


def adopt_if_v1(config: ServeConfig) -> None:
    """The first v1->v2 adoption, offline, before the store is served (storage.md §3.8):
    a v1 store (or one whose interrupted adoption rolls back) becomes Store v2 with the
    configured terminal retention. A store that cannot be opened is left for recovery to
    refuse with its own reason."""
    from tay.storage.recovery.adoption import root_shape

    try:
        shape = root_shape(RealIO(), config.data_dir)
    except StorageFailure:
        return
    if shape == "v2" or not os.path.exists(os.path.join(config.data_dir, "STORE")):
        return
    from tay.engine import Engine  # the adoption machinery loads only for a v1 store
    from tay.storage.compaction.offline import compact_offline

    result = compact_offline(config.data_dir, consumer=Engine(config.engine),
                             retention=config.terminal_retention, durability=config.durability,
                             validated_filesystem=config.validated_filesystem)
    log.info("adopted the v1 store in %s to Store v2 (epoch %s, %d jobs kept, %d expired, "
             "retention %s)", config.data_dir, result.epoch_id.hex(), result.retained_jobs,
             result.expired_jobs, result.retention.to_value())


def _store_missing(data_dir: str) -> bool:
    return not os.path.exists(data_dir) or (os.path.isdir(data_dir) and not os.listdir(data_dir))


def describe_durability(config: ServeConfig) -> str:
    """``sync (validated filesystem, group commit 32 events / 2 ms)`` and the like."""
    if config.durability != "sync":
        return f"{config.durability} (no power-loss claim)"
    batching = ("one fsync per event" if config.group_commit_max_events == 1 else
                f"group commit {config.group_commit_max_events} events / "
                f"{config.group_commit_interval_ms} ms")
    return f"sync (validated filesystem, {batching})"


def run_serve(config: ServeConfig, http: Any = None, ui: UiFactory | None = None) -> int:
    """``tay serve``: run the start-up checks (data dir, lock, socket, TLS files, port)
    before creating anything, recover and commit recovery, and only then import the loop
    stack (uvloop, the listeners, httptools) and listen. ``http``: the HTTP listener's
    ``HttpConfig`` (None: off); ``ui``: what it serves under /ui/ (``serve_with_http``)."""
    from .preflight import preflight

    preflight(config, http)
    # Recovery builds state that lives as long as the server; the cycle collector would
    # walk it again and again as it grows (a full pass of tens of ms on a large history).
    # It is off until serve() has frozen that state (gc.freeze), then on again.
    gc.disable()
    try:
        store = open_while_importing(config, http is not None)
        try:
            import uvloop

            if http is None:
                main = serve(config, store=store)
            else:
                main = serve_with_http(config, http, store=store, ui=ui)
        except BaseException:
            store.close()
            raise
        return uvloop.run(main)
    finally:
        gc.enable()


def open_while_importing(config: ServeConfig, with_http: bool) -> OpenStore:
    """``open_store(config)`` on a thread while this one imports the engine and the loop
    stack (uvloop, asyncio, the listeners): recovery's physical pass needs none of them
    (it makes the engine only after it), and its hashing, reads, native scans and fsyncs
    release the GIL, so on a second core most of the imports cost no wall time.
    Whatever ``open_store`` raises is raised here, unchanged; a store it opened while the
    imports failed is closed. Nothing listens before this returns. An interrupt (SIGINT)
    is raised at once, as it interrupted recovery itself before: the thread is a daemon
    and ends with the process, as recovery ended at a kill (nothing it did is visible
    before it is durable). A store whose replay is mostly its tail is opened on this
    thread and then the imports run (``_base_dominates``)."""
    if not _base_dominates(config.data_dir):
        return _open_then_import(config, with_http)
    import threading

    done: list[Any] = []

    def recover() -> None:
        try:
            done.append(open_store(config))
        except BaseException as error:  # handed to the caller as it is
            done.append(error)

    thread = threading.Thread(target=recover, name="tay-recovery", daemon=True)
    # Each native call and system call of either thread hands the GIL over; a short switch
    # interval bounds how long the recovery thread waits for it (serve() sets the same).
    previous_interval = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    try:
        thread.start()
        try:
            _import_loop_stack(with_http)
        except Exception:
            thread.join()
            if not isinstance(done[0], OpenStore):  # recovery refused: raised first before
                raise done[0] from None
            done[0].close()
            raise
        thread.join()
    finally:
        sys.setswitchinterval(previous_interval)
    if isinstance(done[0], BaseException):
        raise done[0]
    return done[0]


def _base_dominates(data_dir: str) -> bool:
    """Whether recovery is mostly the base's physical pass (hashing, reads, native scans:
    they release the GIL, so a thread overlaps them with the imports). A tail's replay
    (an uncompacted store, an empty one, v1) is not: its one long native call (the tail
    walk, ~20 ms on 40,000 records) needs the engine, which the main thread is importing,
    and the rest is Python. On a thread it cost 20M more instructions to ``listen`` (+3.9 %)
    and 4.7 MiB more peak RSS, and gave no wall time (docs/benchmarks.md, twentieth
    session)."""
    from tay.storage.v2.shape import replay_shape

    shape = replay_shape(data_dir)
    return shape is not None and shape[0] >= shape[1]


def _open_then_import(config: ServeConfig, with_http: bool) -> OpenStore:
    """``open_store`` and then the imports, on this thread (a refusal comes first)."""
    store = open_store(config)
    try:
        _import_loop_stack(with_http)
    except BaseException:
        store.close()
        raise
    return store


def _import_loop_stack(with_http: bool) -> None:
    """The engine (which recovery makes after its physical pass), and what ``serve`` (and
    ``serve_with_http``) import before they listen."""
    import tay.engine.core  # noqa: F401

    import asyncio  # noqa: F401
    import signal  # noqa: F401

    import uvloop  # noqa: F401

    from . import admin, driver, lifecycle  # noqa: F401
    from .compaction import compactor  # noqa: F401
    from .uds import listener  # noqa: F401

    if with_http:
        from .http import listener as http_listener  # noqa: F401


async def serve(config: ServeConfig, ready: "asyncio.Event | None" = None,
                extra_listeners: tuple[ExtraListener, ...] = (),
                store: OpenStore | None = None) -> int:
    """Run until SIGTERM/SIGINT (the first drains, see ``lifecycle``). Exit 1 if the journal
    writer stopped meanwhile (the server answered ``unavailable`` rather than degrading, and
    stops on its own ``WRITER_STOP_EXIT_S`` later), else 0.

    ``store``: already opened by ``run_serve`` (recovery durable); None opens it here.
    ``extra_listeners`` (the HTTP listener) start after the socket, on the same driver,
    and close before it.
    """
    import asyncio
    import signal

    from .admin import AdminService
    from .driver import EngineDriver
    from .lifecycle import Lifecycle
    from .uds.listener import Listener

    if store is None:
        if config.socket is not None:
            check_outside_data_dir(config.socket.path, config.data_dir)
        store = open_store(config)
    loop = asyncio.get_running_loop()
    previous_interval = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    # The recovered state lives as long as the server: out of the cycle collector's sight,
    # a full collection walks only what was made since (a large recovered history made
    # each one a pause of tens of ms). Unfrozen on the way out (tests serve in-process).
    gc.freeze()
    gc.enable()  # run_serve kept it off through recovery
    driver = EngineDriver(store.engine, store.committer, loop)
    lifecycle = Lifecycle(driver, store.engine, config.drain_timeout_s)
    listener = Listener(driver, config.limits)
    listener.admin = admin = AdminService(driver, store, config)
    admin.facts["socket"] = lambda: None if config.socket is None else {
        "path": config.socket.path, "connections": len(listener.connections)}
    admin.facts["http"] = lambda: None  # the HTTP listener replaces it once it listens
    driver.metrics = admin.metrics
    admin.metrics.attach_commit(store.committer)
    admin.metrics.watch_collections()
    from .loop_watch import LoopWatch

    loop_watch = LoopWatch(loop, admin.metrics.loop_lag, config.loop_stall_ms / 1000.0,
                           collections=admin.metrics.full_collections)
    admin.metrics.loop_watch = loop_watch
    admin.facts["loop"] = loop_watch.facts
    from .compaction.compactor import OnlineCompactor

    admin.compactor = compactor = OnlineCompactor(driver, store, config, admin.metrics)
    from .finished_rounds import FinishedRounds

    finished_rounds = FinishedRounds(driver, store)
    closers: list[Callable[[], Awaitable[None]]] = []
    try:
        # before anything listens: a SIGTERM right after the socket accepts is a clean stop
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, lifecycle.on_signal)
        if config.socket is not None:
            await listener.start(config.socket, config.socket_mode)
        for start_extra in extra_listeners:
            closers.append(await start_extra(driver, listener))
        if config.metrics_port is not None:
            from .http.listener import start_ops_listener

            closers.append(await start_ops_listener(driver, admin, config.metrics_port))
        driver.on_stopped = lifecycle.on_writer_stopped
        lifecycle.start()
        compactor.start()
        finished_rounds.start()
        loop_watch.start()
        admin.start_sampling()
        admin.start_recording()
        driver.tick()  # dispatch recovered work and arm the wake-up timer
        log.info("tay serving: data dir %s, durability %s, socket %s", config.data_dir,
                 describe_durability(config), config.socket.path if config.socket else "off")
        if ready is not None:
            ready.set()
        await lifecycle.stop.wait()
        if driver.stopped is None:
            await admin.record_days()  # the day history, before a base would checkpoint it
            await compactor.at_stop()  # --compact-on-stop
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        lifecycle.close()
        loop_watch.stop()
        admin.stop_sampling()
        finished_rounds.stop()
        await compactor.close()
        for close in reversed(closers):
            await close()
        await listener.close()
        admin.metrics.detach_commit()
        admin.metrics.unwatch_collections()
        admin.close()
        driver.close()
        store.close()
        sys.setswitchinterval(previous_interval)
        gc.unfreeze()
    if driver.stopped is not None:
        log.error("journal writer stopped: %s", driver.stopped)
        return 1
    log.info("tay stopped cleanly")
    return 0


async def serve_with_http(config: ServeConfig, http: Any,
                          ready: "asyncio.Event | None" = None, store: OpenStore | None = None,
                          ui: UiFactory | None = None) -> int:
    """``tay serve`` with the HTTP listener: ``serve`` (its one start-up order, recovery
    durable before anything listens) with HTTP as an extra listener on the same driver.

    ``http``: its ``HttpConfig`` (None: ``serve`` alone). ``store``: an ``OpenStore``
    already recovered by ``run_serve`` (which checked the TLS files before opening it);
    None checks TLS here, then ``serve`` opens the store. ``ui``: what the listener serves
    under /ui/ (None: nothing, /ui/ is not found).
    """
    if http is None:
        return await serve(config, ready, store=store)
    from .http.config import tls_context
    from .http.listener import start_http_listener

    if http.tls and store is None:
        tls_context(http)  # refuse bad TLS files before touching the store

    async def start_http(driver: "EngineDriver", listener: "Listener") -> Callable[[], Any]:
        server = await start_http_listener(
            driver, http, config.limits,
            lambda: config.limits.max_connections - len(listener.connections))
        server.admin = listener.admin
        if server.admin is not None and ui is not None:
            server.ui = ui(server.admin.call)
        if server.admin is not None:
            scheme = "https" if http.tls else "http"
            server.admin.facts["http"] = lambda: {
                "address": f"{scheme}://{http.ip}:{server.bound_port}",
                "connections": len(server.connections), "worker_sessions": len(server.sessions)}
        return server.close

    return await serve(config, ready, extra_listeners=(start_http,), store=store)
