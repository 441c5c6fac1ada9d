"""The operations API behind both transports (docs/admin.md).

``AdminService.call(op, body)`` answers one admin request with a ``Reply`` or ``Refuse``
effect. Engine ops go through the driver on the service's own engine handle, so a read is
released only after every earlier write is durable and an action only once its own events
are. ``status`` adds what only the server knows (version, uptime, durability, commit and
fsync figures, disk and store bytes, the process's memory and CPU, listeners) to the
engine's overview, and still answers after the journal writer stopped (that is when an
operator needs it most).
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import orjson

from tay._version import __version__
from tay.engine.handlers.admin import ADMIN_OPS
from tay.engine.commands import Admin
from tay.engine.day_history import RECORD_EVERY_MS
from tay.engine.effects import Refuse, Reply
from tay.failures import RequestRefused
from tay.protocol.admin_api import ACTIONS

from .driver import EngineDriver
from . import process_figures
from .engine_port import EnginePort
from .metrics import ServerMetrics, collector, readiness, render

log = logging.getLogger("tay.server")

# The ops of the wire API: the engine's (minus its internal ones), plus server ones.
SERVER_OPS = frozenset({"status", "compact", "actions"})
OPS = (ADMIN_OPS - {"overview", "record_days"}) | SERVER_OPS
LATENCY_SAMPLE_S = 5.0  # how often the queues' latency is recorded (the latency chart)
ACTIONS_KEPT = 1_000  # operator actions ``actions`` remembers (all of them are logged)
ACTIONS_DEFAULT = 50
REQUEST_SHOWN_CHARS = 300  # of an action's request, in the log and in ``actions``


class AdminService:
    """Admin requests of every transport, answered on the driver's loop."""

    def __init__(self, driver: EngineDriver, store: Any, config: Any) -> None:
        self.driver = driver
        self.store = store
        self.config = config
        self.port = EnginePort(driver, "a")
        self.started_wall_ms = time.time_ns() // 1_000_000
        self._started_mono = time.monotonic()
        # name -> callable giving a JSON-safe fact (listeners add theirs: socket, http)
        self.facts: dict[str, Callable[[], Any]] = {}
        self.compactor: Any = None  # tay.server.compaction.compactor.OnlineCompactor, set by serve
        self.metrics = ServerMetrics()
        self._collect: Callable[[], Any] | None = None  # prometheus_client on the first scrape
        self._sampling: Any = None  # the timer handle of the next queue sample
        self._recording: Any = None  # the timer handle of the next day-history record
        self._record_task: Any = None  # a record in flight
        self.actions: deque[dict[str, Any]] = deque(maxlen=ACTIONS_KEPT)  # oldest first

    # -- the queues' latency and throughput history (tay.engine.activity) -----------------------
    def start_sampling(self) -> None:
        """Record each queue's latency and what it finished every LATENCY_SAMPLE_S, on the
        loop, until ``stop_sampling``. A read of the engine's ready heaps and activity
        counts, no command: it runs even while the driver waits for a commit, and stops
        when the writer stopped."""
        self._sampling = self.driver.loop.call_later(LATENCY_SAMPLE_S, self._sample)

    def _sample(self) -> None:
        if self.driver.stopped is None:
            self.driver.engine.sample_queues(self.driver.wall_ms())
        self._sampling = self.driver.loop.call_later(LATENCY_SAMPLE_S, self._sample)

    def stop_sampling(self) -> None:
        if self._sampling is not None:
            self._sampling.cancel()
            self._sampling = None
        if self._recording is not None:
            self._recording.cancel()
            self._recording = None
        if self._record_task is not None and not self._record_task.done():
            self._record_task.cancel()  # a periodic one: a clean stop recorded the days before

    # -- the per-day history (tay.engine.day_history) --------------------------------------
    def start_recording(self) -> None:
        """Record the days counted since their last record every RECORD_EVERY_MS (one
        (32,2) each), until ``stop_sampling``; ``record_days`` at a clean stop."""
        self._recording = self.driver.loop.call_later(RECORD_EVERY_MS / 1000, self._record)

    def _record(self) -> None:
        if self._record_task is None or self._record_task.done():
            self._record_task = self.driver.loop.create_task(self.record_days())
        self._recording = self.driver.loop.call_later(RECORD_EVERY_MS / 1000, self._record)

    async def record_days(self) -> int:
        """The days counted since their last record, durable once this returns (how many
        were written; 0 when the writer stopped or the history caps refused them)."""
        if self.driver.stopped is not None:
            return 0
        reply = await self.port.request(lambda rid: Admin(self.port, rid, "record_days", {}))
        if isinstance(reply, Refuse):
            log.warning("recording the day history failed: %s", reply.failure.message)
            return 0
        return reply.fields["recorded"]

    # -- /metrics, /healthz, /readyz (plain endpoints, not admin ops) ------------------------
    def metrics_text(self) -> bytes:
        if self._collect is None:
            self._collect = collector(self.store.engine, self.driver, self.store, self.metrics,
                                      lambda: storage_facts(self.config.data_dir),
                                      self._started_mono, self._compaction_process)
        return render(self._collect)

    def _compaction_process(self) -> dict[str, Any] | None:
        return self.compactor.process_figures() if self.compactor is not None else None

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        ready, problems = readiness(self.driver, storage_facts(self.config.data_dir)["free_bytes"])
        return ready, {"status": "ready" if ready else "not_ready", "problems": problems}

    async def call(self, op: str, body: Any, origin: str = "") -> Reply | Refuse:
        """One admin request; never raises (a refusal or a bug is the returned effect).
        An action (an op that changes something) is logged with ``origin`` (who asked:
        ``socket pid P uid U``, ``http HOST:PORT CN=NAME``, ``dashboard ...``) and what
        it did, and kept for ``actions``."""
        try:
            effect = await self._call(op, body)
        except Exception as error:  # a bug must not leave the caller without an answer
            log.error("admin %s failed", op, exc_info=error)
            effect = _refuse(RequestRefused("internal error", code="internal"))
        if op in ACTIONS:
            self._record(op, body, origin or "unknown", effect)
        return effect

    def _record(self, op: str, body: Any, origin: str, effect: Reply | Refuse) -> None:
        """The operator's trail: one INFO line per action, and the last ACTIONS_KEPT."""
        try:
            request = orjson.dumps(body).decode()
        except TypeError:
            request = repr(body)
        request = request[:REQUEST_SHOWN_CHARS]
        if isinstance(effect, Refuse):
            outcome, summary = "refused", f"{effect.failure.code}: {effect.failure.message}"
        else:  # the reply's counts (retried, cancelled, purged...) say what it did
            outcome = "done"
            summary = ", ".join(f"{key} {value}" for key, value in sorted(effect.fields.items())
                                if type(value) is int)
        self.actions.append({"at": time.time_ns() // 1_000_000, "op": op, "origin": origin,
                             "request": request, "outcome": outcome, "summary": summary})
        log.info("admin %s from %s: %s -> %s%s", op, origin, request, outcome,
                 f" ({summary})" if summary else "")

    def _actions(self, body: Any) -> Reply | Refuse:
        """The last operator actions, newest first (``limit`` 1..1,000, default 50)."""
        if body is None:
            body = {}
        if not isinstance(body, dict) or set(body) - {"limit"}:
            return _refuse(RequestRefused("actions takes only limit", code="invalid_request"))
        limit = body.get("limit", ACTIONS_DEFAULT)
        if type(limit) is not int or not 1 <= limit <= ACTIONS_KEPT:
            return _refuse(RequestRefused(f"limit must be 1..{ACTIONS_KEPT}",
                                          code="invalid_request", field="limit"))
        newest = list(self.actions)[::-1][:limit]
        return Reply(None, None, "admin_actions", {"actions": newest,
                                                    "kept": len(self.actions)})

    async def _call(self, op: str, body: Any) -> Reply | Refuse:
        if op not in OPS:
            return _refuse(RequestRefused(f"unknown admin operation {str(op)[:64]!r}",
                                          code="invalid_request", field="op"))
        if op == "status":
            return await self._status(body)
        if op == "compact":
            return await self._compact(body)
        if op == "actions":
            return self._actions(body)
        return await self.port.request(lambda rid: Admin(self.port, rid, op, body))

    async def _status(self, body: Any) -> Reply | Refuse:
        if body:
            return _refuse(RequestRefused("status takes no fields", code="invalid_request"))
        engine: Any = None
        if self.driver.stopped is None:
            overview = await self.port.request(lambda rid: Admin(self.port, rid, "overview", {}))
            if isinstance(overview, Refuse):
                if overview.failure.code not in ("unavailable", "unknown_outcome"):
                    return overview
            else:
                engine = overview.fields
        return Reply(None, None, "admin_status", {**self.server_facts(), "engine": engine})

    async def _compact(self, body: Any) -> Reply | Refuse:
        """Compact now (online); ``terminal_retention`` (optional) is applied and stored."""
        from tay.storage.v2.manifest import parse_retention

        if body is not None and not isinstance(body, dict):
            return _refuse(RequestRefused("compact takes an object", code="invalid_request"))
        body = body or {}
        unknown = set(body) - {"terminal_retention"}
        if unknown:
            return _refuse(RequestRefused(f"unknown field {sorted(unknown)[0]!r}",
                                          code="invalid_request", field=sorted(unknown)[0]))
        retention = None
        if "terminal_retention" in body:
            try:
                retention = parse_retention(body["terminal_retention"])
            except ValueError as error:
                return _refuse(RequestRefused(f"terminal_retention: {error}",
                                              code="invalid_request",
                                              field="terminal_retention"))
        if self.compactor is None:
            return _refuse(RequestRefused("online compaction is not running in this server",
                                          code="compaction_unavailable"))
        try:
            report = await self.compactor.compact(retention)
        except RequestRefused as refusal:
            return _refuse(refusal)
        return Reply(None, None, "admin_compact", report)

    def server_facts(self) -> dict[str, Any]:
        config = self.config
        stopped = self.driver.stopped
        committer = self.store.committer
        facts: dict[str, Any] = {
            "tay_version": __version__,
            "started_at": self.started_wall_ms,
            "uptime_s": round(time.monotonic() - self._started_mono, 3),
            "durability": config.durability,
            "data_dir": config.data_dir,
            "writer": {"running": stopped is None,
                       "error": None if stopped is None else stopped.message,
                       "implementation": getattr(committer, "implementation", "python"),
                       "rt_priority": config.journal_writer_rt_priority},
            "commit": self.store.commit_facts(),
            "storage": storage_facts(config.data_dir),
            "process": process_figures.server(),
        }
        if self.compactor is not None:
            facts["storage"].update(self.compactor.facts())
        for name, fact in self.facts.items():
            facts[name] = fact()
        return facts

    def close(self) -> None:
        self.port.detach()


def storage_facts(data_dir: str) -> dict[str, Any]:
    """Bytes of the store's files and of the free disk under it (a few stat calls)."""
    store_bytes = 0
    files = 0
    for root, _, names in os.walk(data_dir):
        for name in names:
            try:
                store_bytes += os.stat(os.path.join(root, name)).st_size
                files += 1
            except OSError:
                continue  # a file replaced while we looked
    try:
        import shutil  # on the first status request, not at every start

        usage = shutil.disk_usage(data_dir)
        disk = {"free_bytes": usage.free, "total_bytes": usage.total}
    except OSError:
        disk = {"free_bytes": None, "total_bytes": None}
    return {"format": "v1", "store_bytes": store_bytes, "files": files, **disk,
            "epoch": None, "retention": None, "last_compaction": None}


def _refuse(failure: RequestRefused) -> Refuse:
    return Refuse(None, None, failure)
