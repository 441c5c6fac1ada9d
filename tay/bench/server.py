"""The ``tay serve`` process under measurement: start, wait for the socket, read its
resources from /proc (peak RSS is the kernel's ``VmHWM``), stop with SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import psutil

from tay.failures import ConfigurationError

# `tay serve` logs its committer's counters at shutdown as "commit_stats {json}"
# (tay.server.app.COMMIT_STATS_MARKER; not imported, to keep the bench free of the server stack).
COMMIT_STATS_MARKER = " commit_stats "
_compiled: list[bool] = []  # byte_compile_tay() ran in this process


def byte_compile_tay() -> bool:
    """Write the tay package's missing or stale ``.pyc`` files, once per process, before a
    server is timed: what an installed package has. An editable checkout otherwise has
    none until a run writes them, and with ``PYTHONDONTWRITEBYTECODE`` set no run does, so
    every start compiled ~120 modules from source (a cold restart of the compacted
    reference store 0.41 s instead of 0.14). Then the bundle ``make venv`` writes, which
    ``tay serve`` imports its modules from while their sources are unchanged
    (``tay._bundle``). A package directory that cannot be written is left as it is
    (False)."""
    if not _compiled:
        import compileall

        import tay
        from tay import _bundle

        package = os.path.dirname(os.path.abspath(tay.__file__))
        compiled = bool(compileall.compile_dir(package, quiet=2))
        try:
            _bundle.write(package)  # what `make venv` writes: tay serve's checked bundle
        except OSError:
            compiled = False
        _compiled.append(compiled)
    return _compiled[0]


@dataclass
class ServerSettings:
    data_dir: str
    socket_path: str
    queues: dict[str, int]
    durability: str = "sync"
    group_commit_max_events: int = 1
    group_commit_interval_ms: int = 0
    log_path: str = os.devnull
    compact_on_stop: bool = False  # --compact-on-stop on: a clean stop leaves a compacted epoch

    def argv(self) -> list[str]:
        args = [sys.executable, "-m", "tay.cli", "serve",
                "--data-dir", self.data_dir, "--socket", self.socket_path, "--init-if-missing",
                "--durability", self.durability,
                "--group-commit-max-events", str(self.group_commit_max_events),
                "--group-commit-interval-ms", str(self.group_commit_interval_ms),
                "--log-level", "INFO"]  # INFO: the shutdown counters line
        if self.durability == "sync":
            args.append("--validated-filesystem")
        if self.compact_on_stop:
            args += ["--compact-on-stop", "on"]
        for name, credits in self.queues.items():
            args += ["--queue", f"{name}={credits}"]
        return args


@dataclass
class ServerReading:
    """What one server lifetime cost."""

    ready_s: float
    peak_rss_bytes: int
    cpu_user_s: float
    cpu_system_s: float
    exit_code: int | None
    commit_stats: dict | None = None
    stop_s: float = 0.0  # SIGTERM to exit: drain, close, and a compaction when asked
    samples: list[tuple[float, int]] = field(default_factory=list)


class ServerProcess:
    """One ``tay serve`` lifetime. ``start()`` returns once the socket accepts connections."""

    def __init__(self, settings: ServerSettings, ready_timeout_s: float = 60.0) -> None:
        self.settings = settings
        self.ready_timeout_s = ready_timeout_s
        self.process: subprocess.Popen[bytes] | None = None
        self.ready_s = 0.0
        self.ready_peak_rss = 0
        self.ready_cpu_s = 0.0  # user+sys the process used until it accepted: steadier than wall
        self._log_start = 0

    def start(self) -> float:
        """Launch and wait for readiness; returns seconds from spawn to an accepted connect."""
        byte_compile_tay()  # not timed
        env = dict(os.environ)
        log = open(self.settings.log_path, "ab")
        self._log_start = log.tell()
        started = time.perf_counter()
        self.process = subprocess.Popen(self.settings.argv(), stdout=log, stderr=log, env=env,
                                        stdin=subprocess.DEVNULL)
        log.close()
        deadline = started + self.ready_timeout_s
        while not socket_accepts(self.settings.socket_path):
            if self.process.poll() is not None:
                raise ConfigurationError("tay serve", f"exited with {self.process.returncode} "
                                         f"before listening; see {self.settings.log_path}")
            if time.perf_counter() > deadline:
                self.stop()
                raise ConfigurationError("tay serve", f"socket {self.settings.socket_path} not "
                                         f"ready after {self.ready_timeout_s} s")
            time.sleep(0.001)
        self.ready_s = time.perf_counter() - started
        self.ready_peak_rss = peak_rss_bytes(self.process.pid)
        try:
            times = psutil.Process(self.process.pid).cpu_times()
            self.ready_cpu_s = times.user + times.system
        except psutil.Error:
            self.ready_cpu_s = float("nan")
        return self.ready_s

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def stop(self, timeout_s: float = 30.0) -> ServerReading:
        """Read peak RSS and CPU, SIGTERM, wait (SIGKILL after ``timeout_s``)."""
        assert self.process is not None
        peak = peak_rss_bytes(self.process.pid)
        try:
            user, system = engine_cpu(psutil.Process(self.process.pid).cpu_times())
        except psutil.Error:
            user = system = float("nan")
        stopping = time.perf_counter()
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        return ServerReading(self.ready_s, peak, user, system, code,
                             read_commit_stats(self.settings.log_path, self._log_start),
                             stop_s=time.perf_counter() - stopping)


def engine_cpu(times: Any) -> tuple[float, float]:
    """User and system CPU of the server from psutil's ``cpu_times``, with its reaped
    children's: an online compaction runs in processes of its own."""
    return times.user + times.children_user, times.system + times.children_system


def peak_rss_bytes(pid: int) -> int:
    """The kernel's high-water mark of resident memory for ``pid`` (0 if unavailable)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def read_commit_stats(log_path: str, start: int = 0) -> dict | None:
    """The last committer-counters line the server logged after byte ``start`` of its log."""
    if not os.path.isfile(log_path):
        return None
    with open(log_path, "rb") as handle:
        handle.seek(start)
        text = handle.read().decode("utf-8", "replace")
    found = None
    for line in text.splitlines():
        marker = line.find(COMMIT_STATS_MARKER)
        if marker >= 0:
            found = json.loads(line[marker + len(COMMIT_STATS_MARKER):])
    return found


def socket_accepts(path: str) -> bool:
    """True once a server listens on the Unix socket ``path`` (a stale socket file refuses)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
        return True
    except OSError:
        return False
    finally:
        probe.close()


def stall_lines(log_text: str) -> list[str]:
    """The server's stall warnings (tay.server.loop_watch) with their sampled stacks."""
    lines, inside = [], False
    for line in log_text.splitlines(keepends=True):
        if "event loop stalled" in line:
            inside = True
        elif not line.startswith("  "):
            inside = False
        if inside:
            lines.append(line)
    return lines
