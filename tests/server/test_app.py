"""``app.serve`` in process: one start-up path for every listener, history caps attached
after recovery, recovery through the engine's batch consumer, and the committer's counters
logged as one line at shutdown."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

import pytest

from tay.engine.config import EngineConfig
from tay.failures import RecoveryRefused
from tay.server import app
from tay.server.app import COMMIT_STATS_MARKER, ServeConfig, open_store
from tay.engine import commands
from tay.server.driver import mono_ms, wall_ms
from tay.storage.compaction.trigger import CompactionPolicy
from tay.storage.events import encode_event
from tests.scratch import scratch_root

SCRATCH = scratch_root()  # strict sync accepts it wherever the checkout is


@pytest.fixture
def data_dir():
    SCRATCH.mkdir(exist_ok=True)
    root = tempfile.mkdtemp(prefix="app-", dir=SCRATCH)
    yield f"{root}/data"
    shutil.rmtree(root, ignore_errors=True)


def config(data_dir: str, compaction: bool = True, **engine: object) -> ServeConfig:
    return ServeConfig(data_dir=data_dir, socket=None, init_if_missing=True,
                       durability="write", engine=EngineConfig(**engine),
                       compaction=CompactionPolicy(enabled=compaction))


def stats_lines(records: list[logging.LogRecord]) -> list[dict]:
    return [json.loads(r.getMessage()[len(COMMIT_STATS_MARKER):]) for r in records
            if r.getMessage().startswith(COMMIT_STATS_MARKER)]


def test_store_close_logs_commit_stats_once(data_dir: str, caplog) -> None:
    caplog.set_level(logging.INFO, logger="tay.server")
    enqueue_jobs(data_dir, 2)
    [stats] = stats_lines(caplog.records)
    expected = {"submissions", "events", "batches", "fsyncs", "largest_batch", "gathered",
                "max_events", "interval_ms", "linger", "gather_us", "writer"}
    # the C writer adds its time by step; the Python twin has no such counters
    assert set(stats) == (expected | {"phases"} if stats["writer"] == "c" else expected)
    if stats["writer"] == "c":
        assert stats["phases"]["batches"] == 2
    assert stats["submissions"] == 2 and stats["events"] == 2 and stats["batches"] == 2
    assert stats["fsyncs"] == 0  # durability "write" never fsyncs
    assert stats["max_events"] == 1 and stats["interval_ms"] == 0


def enqueue_jobs(data_dir: str, count: int, compaction: bool = True) -> None:
    """Write ``count`` inserted jobs through a real store, then close it."""
    store = open_store(config(data_dir, compaction=compaction))
    for n in range(count):
        outcome = store.engine.handle(commands.Enqueue("p", f"r{n}", "t.v1", {"n": n}, {}),
                                      wall_ms(), mono_ms())
        store.committer.submit([(seq, e.type, e.schema, encode_event(e))
                                for seq, e in outcome.events]).result()
    store.close()


def test_history_caps_are_attached_at_the_journal_tail(data_dir: str) -> None:
    enqueue_jobs(data_dir, 3)
    store = open_store(config(data_dir, max_segments=3))
    try:
        budget = store.engine.history
        assert budget.caps.max_segments == 3
        assert budget.layout.segments == 1
        # the budget starts where the writer is: the active segment's bytes so far
        assert budget.layout.active_size == store.journal.size > 3 * 24
        assert budget.history_bytes == store.journal.history_bytes
    finally:
        store.close()


def test_history_caps_refuse_inserts_once_reached(data_dir: str) -> None:
    enqueue_jobs(data_dir, 1)
    store = open_store(config(data_dir, max_history_bytes=1))
    try:
        outcome = store.engine.handle(commands.Enqueue("p", "r", "t.v1", {}, {}),
                                      wall_ms(), mono_ms())
        assert not outcome.events
        [refusal] = outcome.effects
        assert refusal.failure.code == "capacity"
        assert "max_history_bytes" in str(refusal.failure.details) + refusal.failure.message
    finally:
        store.close()


def test_a_v1_store_is_adopted_at_start_and_its_epoch_feeds_the_engine(data_dir: str,
                                                                       monkeypatch) -> None:
    enqueue_jobs(data_dir, 5, compaction=False)
    assert os.path.isdir(os.path.join(data_dir, "segments"))
    from tay.engine import Engine

    seen: list[bytes] = []
    original, original_live = Engine.epoch_install, Engine.epoch_install_base_live
    monkeypatch.setattr(Engine, "epoch_install",
                        lambda self, state, event: (seen.append(state.id),
                                                    original(self, state, event)))
    # the base's available jobs, held as rows
    monkeypatch.setattr(Engine, "epoch_install_base_live",
                        lambda self, jobs, rows, befores: (
                            seen.extend(row.id for row in rows),
                            original_live(self, jobs, rows, befores)))
    store = open_store(config(data_dir))
    try:
        assert store.store_version == 2 and len(seen) == 5
        assert set(os.listdir(data_dir)) - {"SEGMENT-LEDGER"} == {
            ".tay-owner.lock", "CURRENT", "STORE", "STORE-V2", "epochs"}
        assert store.engine.state_counts().get("available") == 5
        assert store.retention.to_value() == {"hours": 24}
        outcome = store.engine.handle(commands.Enqueue("p", "r", "t.v1", {}, {}), wall_ms(),
                                      mono_ms())
        assert [e.pair for _, e in outcome.events] == [(8, 1)]  # written into the epoch
    finally:
        store.close()


def test_recovery_feeds_the_engine_batch_consumer(data_dir: str, monkeypatch) -> None:
    enqueue_jobs(data_dir, 5, compaction=False)
    from tay.engine import Engine

    seen: list[int] = []
    original = Engine.consume_event

    def spy(self, sequence, event):
        seen.append(sequence)
        return original(self, sequence, event)

    monkeypatch.setattr(Engine, "consume_event", spy)
    monkeypatch.setattr(Engine, "replay", lambda *a: pytest.fail("per-record path used"))
    store = open_store(config(data_dir, compaction=False))
    try:
        assert len(seen) >= 5 and seen == sorted(seen)
        assert store.engine.state_counts().get("available") == 5
    finally:
        store.close()


def test_replay_runs_without_the_cycle_collector_and_gives_it_back(data_dir: str,
                                                                    monkeypatch) -> None:
    """The collector is off while records replay and as it was after, refused or not."""
    enqueue_jobs(data_dir, 3)
    from tay.engine import Engine

    during: list[bool] = []

    def spied(original):  # a record replayed, or a waiting job held as its row
        def spy(self, *args):
            during.append(gc.isenabled())
            return original(self, *args)
        return spy

    monkeypatch.setattr(Engine, "epoch_install", spied(Engine.epoch_install))
    monkeypatch.setattr(Engine, "epoch_install_live", spied(Engine.epoch_install_live))
    monkeypatch.setattr(Engine, "epoch_install_base_live",
                        spied(Engine.epoch_install_base_live))
    was = gc.isenabled()
    try:
        for collecting in (True, False):
            (gc.enable if collecting else gc.disable)()
            open_store(config(data_dir)).close()
            assert gc.isenabled() is collecting
        assert during and not any(during)
        os.remove(os.path.join(data_dir, "CURRENT"))  # refused: the collector comes back
        gc.enable()
        with pytest.raises(RecoveryRefused):
            open_store(config(data_dir))
        assert gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()


def test_serve_starts_extra_listeners_on_the_driver_and_closes_them(data_dir: str,
                                                                    caplog) -> None:
    caplog.set_level(logging.INFO, logger="tay.server")
    calls: list[str] = []
    before = sys.getswitchinterval()

    async def extra(driver, listener):
        calls.append(f"start:{driver.engine is not None}:{len(listener.connections)}")
        assert sys.getswitchinterval() == pytest.approx(app.SWITCH_INTERVAL_S)
        assert gc.get_freeze_count() > 0  # the recovered state is out of the collector's walk

        async def close() -> None:
            calls.append("close")
        return close

    async def main() -> int:
        ready = asyncio.Event()
        task = asyncio.create_task(app.serve(config(data_dir), ready, extra_listeners=(extra,)))
        await asyncio.wait({task, asyncio.create_task(ready.wait())}, timeout=10,
                           return_when=asyncio.FIRST_COMPLETED)
        assert ready.is_set(), task.exception() if task.done() else "not ready"
        os.kill(os.getpid(), signal.SIGTERM)
        return await asyncio.wait_for(task, 10)

    assert asyncio.run(main()) == 0
    assert calls == ["start:True:0", "close"]
    assert sys.getswitchinterval() == before
    assert gc.get_freeze_count() == 0
    assert len(stats_lines(caplog.records)) == 1


RECOVER_WHILE_IMPORTING = """
import sys, threading
from tay.server import app
from tay.server.app import ServeConfig
from tay.server.http.config import HttpConfig

seen = {}
real_open = app.open_store
real_imports = app._import_loop_stack

def spy_open(config):
    seen["open_thread"] = threading.current_thread() is not threading.main_thread()
    store = real_open(config)
    seen["imported_at_end"] = "uvloop" in sys.modules  # whichever finished first
    return store

def spy_imports(with_http):
    seen["import_thread"] = threading.current_thread() is threading.main_thread()
    seen["with_http"] = with_http
    real_imports(with_http)

async def stop(*args, **kwargs):
    kwargs["store"].close()
    raise RuntimeError("recovered")

app.open_store = spy_open
app._import_loop_stack = spy_imports
app._base_dominates = lambda data_dir: True  # a fresh store is all tail: force the thread
app.serve = stop
http = HttpConfig(port=0) if sys.argv[2] == "http" else None
app.serve_with_http = lambda config, http, store, ui: stop(store=store)
try:
    app.run_serve(ServeConfig(data_dir=sys.argv[1], socket=None, init_if_missing=True,
                              durability="write"), http)
except RuntimeError:
    pass
loaded = sorted(m for m in ("asyncio", "uvloop", "httptools", "tay.server.uds.listener")
                if m in sys.modules)
print(seen["open_thread"], seen["import_thread"], seen["with_http"], loaded)
"""


@pytest.mark.parametrize("listeners", ["socket", "http"])
def test_run_serve_recovers_on_a_thread_while_importing_the_event_loop_stack(data_dir,
                                                                            listeners):
    """Recovery runs off the main thread while the main thread imports the loop stack
    (the HTTP listener's too when HTTP is on); both are done before serving starts."""
    import subprocess

    done = subprocess.run([sys.executable, "-c", RECOVER_WHILE_IMPORTING, data_dir, listeners],
                          capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    http = listeners == "http"
    loaded = ["asyncio", "httptools", "tay.server.uds.listener", "uvloop"] if http else \
        ["asyncio", "tay.server.uds.listener", "uvloop"]
    assert done.stdout.strip() == f"True True {http} {loaded}"
    assert os.path.isdir(data_dir)  # the store really was opened (initialized) then


def test_recovery_takes_a_thread_only_when_the_base_dominates(data_dir) -> None:
    """The thread overlaps the base's physical pass with the imports; a store that is all
    tail (fresh, uncompacted, not there yet, v1) is recovered on the main thread."""
    from tay.engine import Engine
    from tay.storage.compaction.offline import compact_offline
    from tay.storage.v2.manifest import Retention

    assert not app._base_dominates(data_dir)  # missing: initialized on open
    enqueue_jobs(data_dir, 3)
    assert not app._base_dominates(data_dir)  # all tail
    compact_offline(data_dir, consumer=Engine(EngineConfig()), retention=Retention("infinity"),
                    durability="write")
    assert app._base_dominates(data_dir)
    os.remove(os.path.join(data_dir, "CURRENT"))  # damaged: recovery says what is wrong
    assert not app._base_dominates(data_dir)


@pytest.fixture(params=["thread", "serial"])
def recovery_path(request, monkeypatch) -> str:
    """Run the test with recovery on its thread and on the main thread (the store's shape
    chooses one; these tests hold for both)."""
    monkeypatch.setattr(app, "_base_dominates", lambda data_dir: request.param == "thread")
    return request.param


def test_run_serve_raises_what_recovery_raised_on_its_thread(data_dir, monkeypatch,
                                                             recovery_path) -> None:
    """A refusal found on the recovery thread (or on the main thread) is raised by
    run_serve itself, the same exception, and nothing is served."""
    enqueue_jobs(data_dir, 2)
    os.remove(os.path.join(data_dir, "CURRENT"))
    raised: list[BaseException] = []
    real_open = app.open_store

    def spy(serve_config):
        try:
            return real_open(serve_config)
        except BaseException as error:
            raised.append(error)
            raise

    monkeypatch.setattr(app, "open_store", spy)
    monkeypatch.setattr(app, "serve", lambda *a, **k: pytest.fail("served a refused store"))
    with pytest.raises(RecoveryRefused) as refused:
        app.run_serve(config(data_dir))
    assert raised == [refused.value]
    assert gc.isenabled()


def test_run_serve_closes_the_recovered_store_when_the_imports_fail(data_dir, monkeypatch,
                                                                    recovery_path) -> None:
    """If importing the loop stack fails, the store recovery opened meanwhile is closed
    (its lock released: it opens again) and the import error is what run_serve raises."""
    enqueue_jobs(data_dir, 2)
    opened: list[app.OpenStore] = []
    real_open = app.open_store

    def spy(serve_config):
        opened.append(real_open(serve_config))
        return opened[-1]

    def broken(with_http):
        raise ImportError("no loop stack")

    monkeypatch.setattr(app, "open_store", spy)
    monkeypatch.setattr(app, "_import_loop_stack", broken)
    before = sys.getswitchinterval()
    with pytest.raises(ImportError, match="no loop stack"):
        app.run_serve(config(data_dir))
    assert len(opened) == 1 and sys.getswitchinterval() == before
    again = real_open(config(data_dir))  # the owner lock was released
    again.close()
    os.remove(os.path.join(data_dir, "CURRENT"))  # a refusal too: it is what is raised,
    with pytest.raises(RecoveryRefused):  # as when recovery ran before the imports
        app.run_serve(config(data_dir))


def test_run_serve_refuses_bad_tls_files_before_touching_the_store(data_dir, tmp_path):
    from tay.failures import ConfigurationError
    from tay.server.http.config import HttpConfig

    missing = str(tmp_path / "missing.pem")
    http = HttpConfig(port=0, certfile=missing, keyfile=missing, cacertfile=missing)
    with pytest.raises(ConfigurationError) as refused:
        app.run_serve(config(data_dir), http)
    assert refused.value.option == "--http-tls-certfile"
    assert not os.path.exists(data_dir)


def test_run_serve_with_http_serves_on_the_recovered_store(data_dir, monkeypatch):
    """The store ``run_serve`` opened is the one HTTP serves (no second open)."""
    from tay.server.http.config import HttpConfig

    opened: list[object] = []
    real_open = app.open_store

    def counting_open(serve_config):
        opened.append(serve_config.data_dir)
        assert not gc.isenabled()  # recovery runs without the cycle collector
        return real_open(serve_config)

    async def stop_when_ready(serve_config, http, ready=None, store=None, ui=None):
        assert store is not None
        ready = asyncio.Event()
        task = asyncio.ensure_future(real_serve_with_http(serve_config, http, ready, store, ui))
        await ready.wait()
        assert gc.isenabled() and gc.get_freeze_count() > 0  # on again, past the frozen state
        os.kill(os.getpid(), signal.SIGTERM)
        return await task

    real_serve_with_http = app.serve_with_http
    monkeypatch.setattr(app, "open_store", counting_open)
    monkeypatch.setattr(app, "serve_with_http", stop_when_ready)
    assert app.run_serve(config(data_dir), HttpConfig(port=0)) == 0
    assert opened == [data_dir]
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_an_epoch_of_more_records_than_one_timer_step_reopens(data_dir: str) -> None:
    """Replay checks the recovery deadline every 4,096 records of an epoch (that check
    once raised a TypeError, so no Store-v2 store beyond 4,096 records could restart)."""
    enqueue_jobs(data_dir, 4200)
    store = open_store(config(data_dir))
    try:
        assert store.store_version == 2 and len(store.engine.jobs) == 4200
    finally:
        store.close()


def test_recovery_makes_the_engine_only_after_its_physical_pass(data_dir: str,
                                                                monkeypatch) -> None:
    """The engine is made once the store's segments are listed, hashed and scanned (so
    run_serve can import it meanwhile); a store refused by that pass never makes one."""
    from tay.engine.core import Engine
    from tay.storage.recovery import epoch_recover

    enqueue_jobs(data_dir, 3)
    steps: list[str] = []
    real_init, real_preflight = Engine.__init__, epoch_recover.preflight_v2

    def init(self, *args, **kwargs):
        steps.append("engine")
        real_init(self, *args, **kwargs)

    def preflight(*args, **kwargs):
        view = real_preflight(*args, **kwargs)
        steps.append("physical")
        return view

    monkeypatch.setattr(Engine, "__init__", init)
    monkeypatch.setattr(epoch_recover, "preflight_v2", preflight)
    store = open_store(config(data_dir))
    try:
        assert steps == ["physical", "engine"] and len(store.engine.jobs) == 3
    finally:
        store.close()
    steps.clear()
    [segment] = [os.path.join(d, f) for d, _, files in os.walk(data_dir) for f in files
                 if f.endswith("1.tay") and "epochs" in d]
    with open(segment, "r+b") as handle:  # a torn header: the physical pass refuses
        handle.truncate(10)
    with pytest.raises(RecoveryRefused):
        open_store(config(data_dir))
    assert steps == []


def test_an_interrupt_during_start_up_is_raised_without_waiting_for_recovery(
        data_dir: str, monkeypatch) -> None:
    """SIGINT (KeyboardInterrupt) while the loop stack imports is raised at once, as it
    interrupted recovery itself before; the recovery thread is a daemon (it ends with
    the process instead of holding its exit)."""
    import threading
    import time

    release = threading.Event()
    threads: list[threading.Thread] = []

    def slow_open(serve_config):
        threads.append(threading.current_thread())
        release.wait(10)
        raise RuntimeError("not reached by the caller")

    def interrupted(with_http):
        raise KeyboardInterrupt

    monkeypatch.setattr(app, "open_store", slow_open)
    monkeypatch.setattr(app, "_import_loop_stack", interrupted)
    monkeypatch.setattr(app, "_base_dominates", lambda data_dir: True)
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            app.run_serve(config(data_dir))
        assert time.monotonic() - started < 5
        assert threads and threads[0].daemon
    finally:
        release.set()
        for thread in threads:
            thread.join(10)
