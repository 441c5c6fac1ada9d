"""Weeks of a daemon's life in minutes: a real ``tay serve`` under a steady load, its wall
clock moved ``--speed`` times faster than real time (Debian's libfaketime), the monotonic
clock real.

Usage:
    .venv/bin/python -m benchmarks.soak_daemon [--days 30] [--speed 3600] [--rate 150]
        [--retention 24h] [--schedule "0 * * * *"] [--queues N] [--operator-every S]
        [--json FILE]

What runs, each its own process as in production: ``tay serve`` in strict sync mode on
the bench scratch (``tay.bench.paths``) with serve's defaults (compaction on, its
triggers, packing), under libfaketime with its offset in a file that this process moves
forward four times a second (``FAKETIME_TIMESTAMP_FILE``, read by the server at most once a
second: ``FAKETIME_CACHE_DURATION=1``) and ``FAKETIME_DONT_FAKE_MONOTONIC=1``. So the wall
clock runs at real speed and steps forward once a real second by the ``--speed`` - 1
seconds that passed meanwhile. (libfaketime's own speed-up, ``x<speed>``, also shortens
every poll and sleep timeout by the same factor: the event loop then spins.) One worker (our SDK, capacity 8) and one producer that
enqueues ``--rate`` reference-shape jobs per real second (args ``{"account_key",
"payload": "x" * 1024, "version"}``), one at a time, each acknowledged before the next;
and one cron schedule (``--schedule``, ``catch_up=all``, ``overlap=allow``: every
occurrence is a job) whose occurrences the worker runs. ``--queues N`` spreads the jobs
over N queues named ``tenant-<k>`` (0: a new queue name for every job, as an application
that makes up a queue per customer or per request would), to show that names used once do
not stay in the engine's memory. ``--operator-every S`` adds an operator who clears the
completed jobs by hand every S real seconds (``tay delete-all completed``: pages of
deletions of jobs the server packed, held in columns since a restart, or just finished),
so the store's tails hold an operator's deletions as well as the load's records.

Delayed jobs, schedules and terminal retention run on the wall clock, so at ``--speed``
3600 a real second is an hour of the daemon's life: ``--rate`` 150 is 150 jobs an hour,
3,600 a day, and a job is expired by the first compaction after it is ``--retention``
old. Execution timeouts and request deadlines run on the monotonic clock and stay real.
The engine reads the wall clock at least once a real second, so an hourly schedule is
delivered on time and a five-minute one in bursts of twelve.

Once a simulated day it prints (and ``--json`` keeps) one row: simulated day, jobs
acknowledged and completed, retained jobs, the data directory's bytes, the server's RSS
and its peak since start (``status.process``), its CPU per job so far (with its online
compactions' processes, reaped children), compactions so far (from the server's log), the
last compaction process's peak RSS (which counts the pages it shared with the server) and
all of them's CPU (``status.storage``), and schedule occurrences run. At the end: the
server's clean stop, then cold restarts (spawn to an
accepted connection; with the real clock, days before the store's last events, since
libfaketime slows a start that replays a store by 0.1-0.15 s) of the store as the load
left it, and the schedule's occurrences
against the hours that passed, and the day history (``tay history``) against the jobs
run, before the stop and after a start. The question it answers: do disk, memory, restart time
and CPU stay flat while the days pass?

The processes it starts end with it, however it ends (``die_with_parent``): the kernel
sends the server SIGTERM (a clean stop) and the clients SIGKILL.

Run it alone. Under libfaketime a timed wait on the monotonic clock misbehaves
(``time.sleep`` fails with EINVAL; the GIL's waits return early, so waiting threads spin):
its CPU per job is higher than the reference profile's, and two soaks side by side on two
cores stalled their servers for 30 s and more (docs/benchmarks.md, thirty-seventh session).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402

from benchmarks.soak import dir_bytes  # noqa: E402
from tay.bench import faketime  # noqa: E402
from tay.bench.paths import bench_scratch  # noqa: E402
from tay.bench.server import engine_cpu, socket_accepts  # noqa: E402

DAY_S = 86_400

WORKER = r'''
import asyncio, sys
from tay import Tay

async def main():
    worker = Tay(socket_path=sys.argv[1], mode="worker", capacity=8)

    @worker.task(name="soak.job.v1")
    def job(account_key, payload, version):
        return None

    @worker.task(name="soak.hourly.v1")
    def hourly():
        print("occurrence", flush=True)
        return None

    await worker.start()
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await worker.close()

asyncio.run(main())
'''

PRODUCER = r'''
import asyncio, sys, time
from tay import Tay

async def main():
    rate = float(sys.argv[2])
    queues = int(sys.argv[4])  # 0: a new queue name for every job
    tay = Tay(socket_path=sys.argv[1], mode="client")
    await tay.start()
    hourly = await tay.schedule("soak.hourly.v1", cron=sys.argv[3], catch_up="all",
                                overlap="allow", declaration_id="soak-hourly")
    state = await hourly.status()  # the first occurrence: run at once, or next
    print("ready", state["next_at"] if state["last_at"] is None else state["last_at"],
          flush=True)
    payload = "x" * 1024
    start = time.monotonic()
    sent = 0
    while True:
        due = start + sent / rate
        pause = due - time.monotonic()
        if pause > 0:
            await asyncio.sleep(pause)
        queue = "default" if queues == 1 else f"tenant-{sent % queues if queues else sent}"
        await tay.enqueue("soak.job.v1", {"account_key": f"account-{sent % 1000}",
                                         "payload": payload, "version": 1}, queue=queue)
        sent += 1
        if sent % 10 == 0:
            print("sent", sent, flush=True)

asyncio.run(main())
'''


def occurrences_between(cron: str, first_ms: int, last_ms: int | None) -> int:
    """How many times ``cron`` (UTC) falls due from ``first_ms`` through ``last_ms``, both
    included (0 when nothing was delivered: ``last_ms`` None)."""
    from tay.engine.schedules.cron import next_after, parse_cron

    if last_ms is None:
        return 0
    spec = parse_cron(cron)
    count, due = 0, first_ms
    while due is not None and due <= last_ms:
        count += 1
        due = next_after(spec, 0, due)
    return count


def same_days(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> bool:
    """Whether two ``tay history`` answers agree on every day: the last N days end at the
    engine's today, which the fast clock may move on between them, so a day in one window
    only must have counted nothing."""
    one, other = ({day["day"]: day for day in days} for days in (before, after))
    counted = ("enqueued", "completed", "failed")
    return all(one.get(day) == other.get(day) if day in one and day in other
               else not any((one.get(day) or other.get(day))[key] for key in counted)
               for day in one.keys() | other.keys())


def admin(socket_path: str, *args: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "tay.cli", *args, "--socket", socket_path,
                           "--json"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"tay {' '.join(args)} failed: {done.stderr}")
    return json.loads(done.stdout)


class Serve:
    """``tay serve`` on one data directory; ``env`` adds to the environment."""

    def __init__(self, root: Path, env: dict[str, str], extra: list[str]) -> None:
        self.root = root
        self.data_dir = root / "data"
        # a socket path has at most 100 bytes; the store's directory may be deeper
        self.socket_dir = tempfile.mkdtemp(prefix="tay-soak-")
        self.socket = os.path.join(self.socket_dir, "tay.sock")
        self.log_path = root / "server.log"
        self.env = env
        self.extra = extra
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, faked: bool = True) -> float:
        """Spawn and wait until the socket accepts; the seconds it took. ``faked``: under
        libfaketime (which costs a start that replays a store 0.1-0.15 s here: the cold
        restarts are timed without it)."""
        if os.path.exists(self.socket):
            os.unlink(self.socket)
        started = time.perf_counter()
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tay.cli", "serve", "--data-dir", str(self.data_dir),
                 "--socket", self.socket, "--init-if-missing", "--durability", "sync",
                 "--validated-filesystem", *self.extra],
                cwd=ROOT, stdout=log, stderr=log,
                env={**os.environ, **self.env} if faked else dict(os.environ),
                preexec_fn=die_with_parent(signal.SIGTERM))  # a clean stop, if orphaned
        while not (os.path.exists(self.socket) and socket_accepts(self.socket)):
            if self.process.poll() is not None:
                raise RuntimeError(f"tay serve {self.ended()} before it served:\n"
                                   + self.log_tail())
            time.sleep(0.002)
        return time.perf_counter() - started

    def stop(self) -> float:
        assert self.process is not None
        started = time.perf_counter()
        self.process.terminate()
        self.process.wait(timeout=120)
        return time.perf_counter() - started

    def ended(self) -> str:
        """How the server process stands: running, or how it exited."""
        assert self.process is not None
        code = self.process.poll()
        if code is None:
            return "was still running"
        if code < 0:
            return f"was killed by signal {-code} ({signal.Signals(-code).name})"
        return f"exited with status {code}"

    def unfinished(self, run: str) -> None:
        """Say, on stderr, that ``run`` did not finish: how the server ended, where its store
        and log are kept (the caller keeps them) and how the log ends."""
        ended = self.ended() if self.process is not None else "never started"
        print(f"{run} did not finish; tay serve {ended}. Its store and log are kept in "
              f"{self.root}; the log ends:\n{self.log_tail()}", file=sys.stderr, flush=True)

    def log_tail(self, limit: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-limit:]
        except OSError as error:
            return f"(unreadable: {error})"

    def compactions(self) -> int:
        return self.log_path.read_text().count("compacted the store online")


class Operator:
    """An operator who clears the completed jobs (``tay delete-all completed``) every
    ``every`` real seconds, on a thread; ``deleted`` so far, and the first error, which
    ``close`` raises."""

    def __init__(self, socket_path: str, every: float) -> None:
        self.socket_path = socket_path
        self.every = every
        self.deleted = 0
        self.rounds = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self.deleted += admin(self.socket_path, "delete-all", "completed")["deleted"]
                self.rounds += 1
            except BaseException as error:  # kept for close(), which raises it
                self.error = error
                return

    def stop(self) -> None:
        """No round after the one in flight (which fails once the server is gone)."""
        self._stop.set()

    def close(self) -> None:
        self.stop()
        self._thread.join()
        if self.error is not None:
            raise RuntimeError(f"the operator's deletions failed: {self.error}")


class FastClock:
    """The server's wall clock (``OffsetClock``), moved forward on a thread: it gains
    ``speed - 1`` seconds each real second (across restarts too)."""

    def __init__(self, clock: faketime.OffsetClock, speed: int) -> None:
        self.clock = clock
        self.speed = speed
        self.origin = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            self.clock.set(int((time.monotonic() - self.origin) * (self.speed - 1)))

    def stop(self) -> None:
        """No round after the one in flight (which fails once the server is gone)."""
        self._stop.set()

    def close(self) -> None:
        self.stop()
        self._thread.join()


PR_SET_PDEATHSIG = 1  # prctl(2)


def die_with_parent(signum: int) -> Any:
    """A ``preexec_fn`` after which the kernel sends the child ``signum`` when this process
    ends, however it ends: a benchmark killed with SIGKILL (no cleanup of its own runs)
    leaves no server, client or CPU hog behind. The signal follows the thread that spawns
    (spawn from the main thread); a parent already gone by then ends the child at once."""
    parent = os.getpid()
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: no dlopen in the child

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, signum)
        if os.getppid() != parent:  # the parent died before the death signal was armed
            os.kill(os.getpid(), signum)

    return arm


def spawn(script: str, *args: str) -> tuple[subprocess.Popen[str], list[str]]:
    """A client process, once it printed ``ready``; the words after it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    child = subprocess.Popen([sys.executable, "-s", "-c", script, *args],
                             cwd=tempfile.gettempdir(), env={**env, "PYTHONPATH": str(ROOT)},
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             preexec_fn=die_with_parent(signal.SIGKILL))
    line = child.stdout.readline().split()
    if not line or line[0] != "ready":
        raise RuntimeError(f"a client did not start: {line!r}")
    return child, line[1:]


def spawn_client(serve: Serve, script: str,
                 *args: str) -> tuple[subprocess.Popen[str], list[str]]:
    """``spawn`` for a client of ``serve``: a client that could not start because the server
    died meanwhile says how the server ended, not only that the client failed."""
    try:
        return spawn(script, *args)
    except RuntimeError as error:
        assert serve.process is not None
        try:
            serve.process.wait(timeout=2)  # a killed server may not be reaped yet
        except subprocess.TimeoutExpired:
            raise error from None  # the server runs: the client failed on its own
        raise RuntimeError(f"tay serve {serve.ended()} as the clients started") from error


class LineCounter:
    """Counts a child's output lines that start with ``word``, read on a thread."""

    def __init__(self, child: subprocess.Popen[str], word: str) -> None:
        self.count = 0
        self.last = 0
        self._word = word
        self._thread = threading.Thread(target=self._read, args=(child,), daemon=True)
        self._thread.start()

    def _read(self, child: subprocess.Popen[str]) -> None:
        for line in child.stdout:
            if line.startswith(self._word):
                parts = line.split()
                self.count += 1
                self.last = int(parts[1]) if len(parts) > 1 else self.count


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=float, default=30)
    parser.add_argument("--speed", type=int, default=3600,
                        help="simulated seconds per real second of the wall clock")
    parser.add_argument("--rate", type=float, default=150, help="jobs per real second")
    parser.add_argument("--retention", default="24h")
    parser.add_argument("--schedule", default="0 * * * *")
    parser.add_argument("--history-bytes", type=int, default=None,
                        help="serve's --compact-history-bytes (default: serve's, 64 MiB)")
    parser.add_argument("--restarts", type=int, default=3)
    parser.add_argument("--queues", type=int, default=1,
                        help="queues the jobs are spread over (0: a new one for every job)")
    parser.add_argument("--operator-every", type=float, default=0.0,
                        help="real seconds between an operator's deletions of the completed "
                             "jobs (tay delete-all completed); 0: no operator")
    add_store_options(parser)
    return parser


def add_store_options(parser: argparse.ArgumentParser) -> None:
    """``--dir``, ``--keep`` and ``--json`` of a benchmark that serves a throw-away store."""
    parser.add_argument("--dir", type=Path, default=None,
                        help="where the store goes (default: the bench scratch, "
                             "tay.bench.paths; strict sync refuses /tmp)")
    parser.add_argument("--keep", action="store_true", help="keep the store afterwards")
    parser.add_argument("--json", type=Path)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = build_parser()
    options = parser.parse_args(argv)
    if options.days <= 0 or options.speed < 1 or options.rate <= 0 or options.restarts < 1:
        parser.error("--days, --speed, --rate and --restarts must be positive")
    if options.queues < 0:
        parser.error("--queues must be 0 (a new queue for every job) or more")
    if options.operator_every < 0:
        parser.error("--operator-every must be 0 (no operator) or more seconds")

    root = (options.dir or bench_scratch()) / f"soak-daemon-{uuid.uuid4().hex[:8]}"
    root.mkdir(parents=True)
    library = faketime.library()
    if library is None:
        raise SystemExit("soak_daemon needs Debian's faketime (apt-get install faketime)")
    offset = faketime.OffsetClock(library, root / "faketime-offset")
    clock = FastClock(offset, options.speed)
    fake = offset.env(cache_s=1)  # read at most once a second: the clock steps each second
    extra = ["--terminal-retention", options.retention]
    if options.history_bytes is not None:
        extra += ["--compact-history-bytes", str(options.history_bytes)]
    serve = Serve(root, fake, extra)
    rows: list[dict[str, Any]] = []
    print(f"daemon soak: {options.days:g} days at {options.speed}x wall clock, "
          f"{options.rate:g} jobs/s real ({options.rate * 3600 / options.speed * 24:,.0f} a "
          f"day), retention {options.retention}, schedule {options.schedule!r}"
          + (f", the completed jobs deleted every {options.operator_every:g} s real"
             if options.operator_every else "") + f", store {serve.data_dir}")
    print(f"{'day':>5} {'acked':>9} {'completed':>9} {'retained':>9} {'data_MB':>8} {'rss_MB':>7} "
          f"{'peak_MB':>7} {'cpu_us/job':>10} {'compact':>7} {'c_peak_MB':>9} {'c_cpu_s':>7} "
          f"{'occurs':>6} {'deleted':>8}")
    operator = None
    try:
        serve.start()
        server = psutil.Process(serve.process.pid)
        worker, _ = spawn_client(serve, WORKER, serve.socket)
        producer, (first_due,) = spawn_client(serve, PRODUCER, serve.socket,
                                              str(options.rate), options.schedule,
                                              str(options.queues))
        acked = LineCounter(producer, "sent")
        occurrences = LineCounter(worker, "occurrence")
        if options.operator_every:
            operator = Operator(serve.socket, options.operator_every)
        started = time.monotonic()
        day_s = DAY_S / options.speed
        for day in range(1, int(options.days) + 1):
            time.sleep(max(0.0, started + day * day_s - time.monotonic()))
            if serve.process.poll() is not None:
                raise RuntimeError(f"tay serve {serve.ended()} on day {day}")
            for child in (worker, producer):
                if child.poll() is not None:
                    raise RuntimeError(f"a client exited on day {day}")
            status = admin(serve.socket, "status")
            jobs = status["engine"]["jobs"]
            used = sum(engine_cpu(server.cpu_times()))
            storage = status["storage"]
            last = (storage["last_compaction"] or {}).get("process") or {}
            row = {"day": day, "acked": acked.last,
                   "completed": jobs["by_state"]["completed"], "retained": jobs["total"],
                   "data_bytes": dir_bytes(serve.data_dir),
                   "rss_bytes": status["process"]["rss_bytes"],
                   "peak_rss_bytes": status["process"]["peak_rss_bytes"],
                   "cpu_us_per_job": used * 1e6 / max(1, acked.last),
                   "compactions": serve.compactions(),
                   "compaction_peak_rss_bytes": last.get("peak_rss_bytes"),
                   "compaction_cpu_s": storage["compaction"]["processes_cpu_s"],
                   "occurrences": occurrences.count,
                   "deleted": operator.deleted if operator is not None else 0}
            rows.append(row)
            compaction_peak = row["compaction_peak_rss_bytes"]
            print(f"{day:5d} {row['acked']:9,d} {row['completed']:9,d} {row['retained']:9,d} "
                  f"{row['data_bytes'] / 1e6:8.1f} {row['rss_bytes'] / 1e6:7.1f} "
                  f"{row['peak_rss_bytes'] / 1e6:7.1f} {row['cpu_us_per_job']:10.1f} "
                  f"{row['compactions']:7d} "
                  f"{'-' if compaction_peak is None else f'{compaction_peak / 1e6:.1f}':>9} "
                  f"{row['compaction_cpu_s']:7.1f} {row['occurrences']:6d} "
                  f"{row['deleted']:8,d}", flush=True)
            if operator is not None and operator.error is not None:
                operator.close()  # raises it
        if operator is not None:
            operator.close()
        producer.kill()
        producer.wait()
        simulated_h = (time.monotonic() - started) * options.speed / 3600
        # no occurrence after this one: each one up to it must have run once
        last_due = admin(serve.socket, "schedule", "cancel", "soak-hourly")["schedule"]["last_at"]
        expected = occurrences_between(options.schedule, int(first_due), last_due)
        time.sleep(1)  # the last acknowledged jobs and occurrences finish
        worker.stdin.close()
        worker.wait(timeout=30)
        # the day history (tay history): every job and occurrence counted once, in its day,
        # and the same days after a clean stop and a start
        span = int(simulated_h // 24) + 3
        history = admin(serve.socket, "history", "--days", str(span))["days"]
        stop_s = serve.stop()
        serve.start()
        history_after = admin(serve.socket, "history", "--days", str(span))["days"]
        serve.stop()
        counted = {key: sum(day[key] for day in history)
                   for key in ("enqueued", "completed", "failed")}
        restarts = []
        for _ in range(options.restarts):
            restarts.append(serve.start(faked=False))
            restart_rss = psutil.Process(serve.process.pid).memory_info().rss
            serve.stop()
        summary = {"days": options.days, "speed": options.speed, "rate": options.rate,
                   "retention": options.retention, "schedule": options.schedule,
                   "simulated_hours": round(simulated_h, 1),
                   "occurrences_run": occurrences.count, "occurrences_due": expected,
                   "clean_stop_s": round(stop_s, 3),
                   "cold_restart_s": [round(s, 3) for s in restarts],
                   "restart_rss_bytes": restart_rss, "data_bytes": dir_bytes(serve.data_dir),
                   "history_days": sum(1 for day in history if day["enqueued"]),
                   "history_totals": counted, "jobs_run": acked.last + occurrences.count,
                   "history_same_after_restart": same_days(history, history_after),
                   "deleted_by_hand": operator.deleted if operator is not None else 0}
        print(f"stopped in {stop_s:.3f} s; cold restarts {', '.join(f'{s:.3f}' for s in restarts)} "
              f"s (RSS {restart_rss / 1e6:.1f} MB); schedule occurrences run "
              f"{occurrences.count} of {expected} due over {simulated_h:,.1f} simulated hours; data "
              f"{summary['data_bytes'] / 1e6:.1f} MB")
        print(f"day history: {summary['history_days']} days counted; enqueued "
              f"{counted['enqueued']:,}, completed {counted['completed']:,}, failed "
              f"{counted['failed']:,} for {summary['jobs_run']:,} jobs run; the same after a "
              f"restart: {summary['history_same_after_restart']}")
        if not summary["history_same_after_restart"]:
            print(f"  before the stop: {history}\n  after a start: {history_after}")
        if operator is not None:
            print(f"an operator deleted {operator.deleted:,} completed jobs by hand in "
                  f"{operator.rounds} rounds")
        if options.json is not None:
            options.json.write_text(json.dumps({"rows": rows, "summary": summary}, indent=1))
        result = {"rows": rows, "summary": summary}
    except BaseException:  # a failure, or an interrupt
        # keep what explains it: the store, the server's log, how the server ended
        serve.unfinished("the soak")
        options.keep = True
        raise
    finally:
        if operator is not None:
            operator.stop()
        if serve.process is not None and serve.process.poll() is None:
            serve.process.kill()
        clock.close()
        shutil.rmtree(serve.socket_dir, ignore_errors=True)
        if not options.keep:
            shutil.rmtree(root, ignore_errors=True)
    return result


if __name__ == "__main__":
    main()
