"""A starved daemon: does a real ``tay serve`` still answer its operator and acknowledge
its producers while other processes take the CPU and the store is compacted again and
again?

Usage:
    .venv/bin/python -m benchmarks.overload [--seconds 90] [--hogs 2] [--compact-every 3]
        [--retention 1m] [--backlog 0] [--probe-every 0.25] [--json FILE]

What runs, each its own process as in production: ``tay serve`` in strict sync mode on the
bench scratch (``tay.bench.paths``) with serve's defaults, ``--terminal-retention`` and
``--max-state-bytes`` (1 GiB: a minute of finished jobs at full speed is over serve's 256
MiB budget, which charges ~6.8 KB a job; a refusal is counted, and the producer goes on); one
worker (our SDK, capacity 8); one producer (our SDK) that enqueues reference-shape jobs one
at a time, each as soon as the last was acknowledged, and times every acknowledgement;
``--hogs`` processes that spin on the CPU (``while 1: pass``) for the whole run; ``tay
compact`` (the CLI, as an operator would run it) every ``--compact-every`` seconds;
with ``--backlog N``, N jobs of a task no worker takes, enqueued before the load and
waiting through it (what a full collection walks: tay.engine.retained.jobs.ParkedJobEntry);
and, in this process, a status probe every ``--probe-every`` seconds: a new connection to the
socket, ``admin_status``, timed to the reply (``tay status`` without the CLI's start).
The kernel ends every process it starts when it ends, however it ends
(``PR_SET_PDEATHSIG``): SIGTERM to the server (a clean stop), SIGKILL to the others.

It prints and returns: the status probes answered, failed and their latency (all, and those
that overlapped a compaction); the producer's acknowledgement latency (p50, p99, p999,
max), refusals and jobs/s; the compactions, their durations and their longest write pause; the
server's CPU per job and peak RSS; the server's event-loop stalls (tay.server.loop_watch: over
500 ms, or ``TAY_LOOP_STALL_MS`` in the environment) and their log lines, which say where the
loop was. A probe that is not answered within ``--probe-timeout``
counts as failed and the run goes on. The question: does a busy, compacting daemon keep
its operator's view and its acknowledgements within a second, with no stall?
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402

from benchmarks.soak_daemon import (  # noqa: E402
    WORKER, Serve, add_store_options, die_with_parent, spawn, spawn_client,
)
from tay.admin.client import AdminRefused, AdminUnreachable, SocketAdmin  # noqa: E402
from tay.bench.metrics import percentile  # noqa: E402
from tay.bench.paths import bench_scratch  # noqa: E402
from tay.bench.server import engine_cpu, peak_rss_bytes, stall_lines  # noqa: E402

PRODUCER = r'''
import asyncio, json, sys, time
from tay import Tay
from tay.errors import ServerError

async def main():
    tay = Tay(socket_path=sys.argv[1], mode="client")
    await tay.start()
    print("ready", flush=True)
    stop = asyncio.ensure_future(asyncio.get_running_loop().run_in_executor(None, sys.stdin.read))
    payload = "x" * 1024
    latencies = []
    refused = {}
    sent = 0
    started = time.monotonic()
    while not stop.done():
        before = time.perf_counter()
        try:
            await tay.enqueue("soak.job.v1", {"account_key": f"account-{sent % 1000}",
                                                  "payload": payload, "version": 1})
        except ServerError as error:  # a refusal (a budget, a deadline): counted, then on
            refused[error.code] = refused.get(error.code, 0) + 1
            await asyncio.sleep(0.01)
            continue
        latencies.append(time.perf_counter() - before)
        sent += 1
    print("done", json.dumps({"acked": sent, "refused": refused,
                              "seconds": time.monotonic() - started,
                              "latencies_s": latencies}), flush=True)
    await tay.close()

asyncio.run(main())
'''

HOG = "while 1: pass"

# ``--backlog``: jobs of a task no worker takes, enqueued 64 at a time (the most a
# connection may have pending), before the load
FILLER = r'''
import asyncio, sys
from tay import Tay

async def main():
    tay = Tay(socket_path=sys.argv[1], mode="client")
    await tay.start()
    print("ready", flush=True)
    total, sent = int(sys.argv[2]), 0
    while sent < total:
        batch = range(sent, min(total, sent + 64))
        await asyncio.gather(*(tay.enqueue("backlog.idle.v1", {"n": n, "note": "x" * 100})
                               for n in batch))
        sent += len(batch)
    print("done", sent, flush=True)
    await tay.close()

asyncio.run(main())
'''


def spin_hog() -> subprocess.Popen[bytes]:
    """A process that spins on a CPU until it is killed, or this process ends."""
    return subprocess.Popen([sys.executable, "-c", HOG],
                            preexec_fn=die_with_parent(signal.SIGKILL))


@dataclass
class Probe:
    at: float  # monotonic, when it was sent
    seconds: float | None  # None: not answered (refused, closed or timed out)
    error: str = ""


@dataclass
class Compaction:
    started: float
    ended: float
    report: dict[str, Any] = field(default_factory=dict)
    error: str = ""


class Repeating:
    """``_run`` on a thread of its own, from construction until ``close`` (which waits for
    the step in progress); ``_run`` ends when ``_stop`` is set."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


class Prober(Repeating):
    """Times ``admin_status`` on a new connection every ``every`` seconds."""

    def __init__(self, socket_path: str, every: float, timeout_s: float) -> None:
        self.socket_path = socket_path
        self.every = every
        self.timeout_s = timeout_s
        self.probes: list[Probe] = []
        super().__init__()

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            sent = time.monotonic()
            admin = SocketAdmin(self.socket_path, timeout_s=self.timeout_s)
            try:
                admin.call("status", {})
                self.probes.append(Probe(sent, time.monotonic() - sent))
            except (AdminRefused, AdminUnreachable) as error:
                self.probes.append(Probe(sent, None, f"{type(error).__name__}: {error}"))
            finally:
                admin.close()
            next_at = max(next_at + self.every, time.monotonic())
            self._stop.wait(next_at - time.monotonic())


class Compactor(Repeating):
    """Runs ``tay compact --json`` every ``every`` seconds (from the end of the last one)."""

    def __init__(self, socket_path: str, every: float) -> None:
        self.socket_path = socket_path
        self.every = every
        self.runs: list[Compaction] = []
        super().__init__()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            started = time.monotonic()
            done = subprocess.run([sys.executable, "-m", "tay.cli", "compact", "--socket",
                                   self.socket_path, "--json"], cwd=ROOT, capture_output=True,
                                  text=True, timeout=300)
            run = Compaction(started, time.monotonic())
            if done.returncode == 0:
                run.report = json.loads(done.stdout)
            else:
                run.error = done.stderr.strip()[-500:] or f"exit status {done.returncode}"
            self.runs.append(run)


def spread(seconds: list[float]) -> dict[str, float | None]:
    """p50, p99, p999 and max in milliseconds (None when there is nothing)."""
    values = sorted(seconds)
    if not values:
        return {"p50_ms": None, "p99_ms": None, "p999_ms": None, "max_ms": None}
    return {"p50_ms": round(percentile(values, 0.50) * 1000, 2),
            "p99_ms": round(percentile(values, 0.99) * 1000, 2),
            "p999_ms": round(percentile(values, 0.999) * 1000, 2),
            "max_ms": round(values[-1] * 1000, 2)}


def overlapped(probe: Probe, compactions: list[Compaction]) -> list[Compaction]:
    """The compactions that ran while the probe was in flight."""
    end = probe.at + (probe.seconds or 0.0)
    return [run for run in compactions if run.started <= end and probe.at <= run.ended]


def during(probe: Probe, compactions: list[Compaction]) -> bool:
    """Whether the probe was in flight while a compaction ran."""
    return bool(overlapped(probe, compactions))


def slowest(probes: list[Probe], compactions: list[Compaction],
            count: int = 5) -> list[dict[str, float | None]]:
    """The slowest answered probes: their latency and when they were sent, in seconds after
    the start of the compaction they overlapped (None: they overlapped none)."""
    out = []
    for probe in sorted((p for p in probes if p.seconds is not None),
                        key=lambda p: p.seconds, reverse=True)[:count]:
        runs = overlapped(probe, compactions)
        out.append({"ms": round(probe.seconds * 1000, 2),
                    "after_compaction_start_s": round(probe.at - runs[0].started, 3)
                    if runs else None})
    return out


def summarize(probes: list[Probe], compactions: list[Compaction], produced: dict[str, Any],
              cpu_s: float, peak_rss: int, options: argparse.Namespace) -> dict[str, Any]:
    answered = [p for p in probes if p.seconds is not None]
    overlapping = [p.seconds for p in answered if during(p, compactions)]
    reports = [run.report for run in compactions if not run.error]
    acked = produced["acked"]
    return {
        "seconds": options.seconds, "hogs": options.hogs, "compact_every_s": options.compact_every,
        "backlog": options.backlog,
        "retention": options.retention,
        "status": {"probes": len(probes), "answered": len(answered),
                   "failed": [p.error for p in probes if p.seconds is None],
                   **spread([p.seconds for p in answered]),
                   "during_compaction": {"answered": len(overlapping), **spread(overlapping)},
                   "slowest": slowest(probes, compactions)},
        "enqueue": {"acked": acked, "refused": produced["refused"],
                    "jobs_per_s": round(acked / produced["seconds"], 1),
                    **spread(produced["latencies_s"])},
        "compactions": {"runs": len(compactions), "succeeded": len(reports),
                        "failed": [run.error for run in compactions if run.error],
                        "duration_ms": [r["duration_ms"] for r in reports],
                        "max_pause_ms": max((r["pause_ms"] for r in reports), default=None),
                        "expired_jobs": sum(r["expired_jobs"] for r in reports)},
        "server": {"cpu_us_per_job": round(cpu_s * 1e6 / max(1, acked), 1),
                   "peak_rss_bytes": peak_rss},
    }


def show(summary: dict[str, Any]) -> None:
    status, enqueue, compactions = summary["status"], summary["enqueue"], summary["compactions"]
    overlap = status["during_compaction"]

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:,.1f}"

    print(f"status: {status['answered']} of {status['probes']} answered, p50 "
          f"{ms(status['p50_ms'])} ms, p99 {ms(status['p99_ms'])} ms, max "
          f"{ms(status['max_ms'])} ms; during a compaction {overlap['answered']}, max "
          f"{ms(overlap['max_ms'])} ms")
    print("  slowest: " + ", ".join(
        f"{p['ms']:,.1f} ms" + ("" if p["after_compaction_start_s"] is None else
                                f" ({p['after_compaction_start_s']:+.2f} s into a compaction)")
        for p in status["slowest"]))
    for error in status["failed"][:5]:
        print(f"  not answered: {error}")
    print(f"enqueue: {enqueue['acked']:,} acknowledged, {enqueue['jobs_per_s']:,.1f} jobs/s, "
          f"p50 {ms(enqueue['p50_ms'])} ms, p99 {ms(enqueue['p99_ms'])} ms, p999 "
          f"{ms(enqueue['p999_ms'])} ms, max {ms(enqueue['max_ms'])} ms; refused "
          f"{sum(enqueue['refused'].values()):,} {enqueue['refused'] or ''}")
    durations = compactions["duration_ms"]
    print(f"compactions: {compactions['succeeded']} of {compactions['runs']} succeeded, "
          f"{min(durations, default=0):,}-{max(durations, default=0):,} ms, longest write "
          f"pause {ms(compactions['max_pause_ms'])} ms, {compactions['expired_jobs']:,} jobs "
          f"expired")
    for error in compactions["failed"][:5]:
        print(f"  failed: {error}")
    server = summary["server"]
    print(f"server: {server['cpu_us_per_job']:,.1f} µs CPU per job, peak RSS "
          f"{server['peak_rss_bytes'] / 2**20:.1f} MiB")
    loop = summary["loop"]
    print(f"event loop: {loop['stalls']} stall(s) over {loop['stall_threshold_s']:g} s "
          f"(TAY_LOOP_STALL_MS), longest {loop['longest_stall_s']:.3f} s")
    print("".join(loop["stall_lines"]), end="")


def fill_backlog(socket_path: str, jobs: int) -> None:
    """``jobs`` waiting jobs that no worker takes, then two seconds: the server's rounds
    (tay.server.finished_rounds) find them waiting and park them before the load."""
    started = time.monotonic()
    filler, _ = spawn(FILLER, socket_path, str(jobs))
    line = filler.stdout.readline().split()
    filler.wait(timeout=60)
    if line[:2] != ["done", str(jobs)]:
        raise RuntimeError(f"the backlog filler did not finish: {line!r}")
    print(f"backlog: {jobs:,} jobs waiting after {time.monotonic() - started:.1f} s",
          flush=True)
    time.sleep(2.0)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=90,
                        help="how long the load runs (past the retention: jobs expire)")
    parser.add_argument("--hogs", type=int, default=2,
                        help="processes that spin on the CPU meanwhile (0: a calm machine)")
    parser.add_argument("--compact-every", type=float, default=3.0, metavar="SECONDS",
                        help="pause between one `tay compact` and the next")
    parser.add_argument("--retention", default="1m", help="serve's --terminal-retention")
    # a minute's finished jobs at ~1,000 jobs/s are ~60,000, charged ~6.8 KB each against
    # the budget (1 KB args; the budget is an estimate, not RSS): serve's 256 MiB refuses
    parser.add_argument("--max-state-bytes", default="1GiB", help="serve's --max-state-bytes")
    parser.add_argument("--backlog", type=int, default=0, metavar="JOBS",
                        help="jobs that wait the whole run (a task no worker takes), "
                             "enqueued before the load")
    parser.add_argument("--probe-every", type=float, default=0.25, metavar="SECONDS")
    parser.add_argument("--probe-timeout", type=float, default=10.0, metavar="SECONDS")
    add_store_options(parser)
    return parser


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = build_parser()
    options = parser.parse_args(argv)
    if options.seconds <= 0 or options.hogs < 0 or options.compact_every <= 0 \
            or options.probe_every <= 0 or options.probe_timeout <= 0 or options.backlog < 0:
        parser.error("--seconds, --compact-every, --probe-every and --probe-timeout must be "
                     "positive, --hogs and --backlog at least 0")

    root = (options.dir or bench_scratch()) / f"overload-{uuid.uuid4().hex[:8]}"
    root.mkdir(parents=True)
    serve = Serve(root, {}, ["--terminal-retention", options.retention,
                             "--max-state-bytes", options.max_state_bytes])
    hogs: list[subprocess.Popen[bytes]] = []
    clients: list[subprocess.Popen[str]] = []
    watchers: list[Prober | Compactor] = []
    print(f"overload: {options.seconds:g} s, {options.hogs} CPU hogs, `tay compact` every "
          f"{options.compact_every:g} s, retention {options.retention}, store {serve.data_dir}",
          flush=True)
    try:
        serve.start(faked=False)
        server = psutil.Process(serve.process.pid)
        if options.backlog:
            fill_backlog(serve.socket, options.backlog)
        worker, _ = spawn_client(serve, WORKER, serve.socket)
        clients.append(worker)
        producer, _ = spawn_client(serve, PRODUCER, serve.socket)
        clients.append(producer)
        cpu_before = server.cpu_times()
        hogs = [spin_hog() for _ in range(options.hogs)]
        prober = Prober(serve.socket, options.probe_every, options.probe_timeout)
        compactor = Compactor(serve.socket, options.compact_every)
        watchers += [prober, compactor]
        time.sleep(options.seconds)
        for watcher in watchers:
            watcher.close()
        producer.stdin.close()  # the producer stops after its enqueue in flight
        line = producer.stdout.readline().split(maxsplit=1)
        if not line or line[0] != "done":
            raise RuntimeError(f"the producer did not report: {line!r}")
        produced = json.loads(line[1])
        for hog in hogs:
            hog.kill()
        cpu_after = server.cpu_times()
        if serve.process.poll() is not None:
            raise RuntimeError(f"tay serve {serve.ended()}")
        cpu_s = sum(engine_cpu(cpu_after)) - sum(engine_cpu(cpu_before))
        summary = summarize(prober.probes, compactor.runs, produced, cpu_s,
                            peak_rss_bytes(server.pid), options)
        summary["loop"] = SocketAdmin(serve.socket, timeout_s=60).call("status", {})["loop"]
        worker.stdin.close()
        worker.wait(timeout=30)
        serve.stop()
        summary["loop"]["stall_lines"] = stall_lines(serve.log_path.read_text())
        show(summary)
        if options.json is not None:
            options.json.write_text(json.dumps(summary, indent=1))
    except BaseException:  # a failure, or an interrupt
        serve.unfinished("the run")  # its store and log are kept
        options.keep = True
        raise
    finally:
        for watcher in watchers:
            watcher.close()  # again after a failure: the threads end before the server
        for child in [*hogs, *clients]:
            if child.poll() is None:
                child.kill()
                child.wait()
        if serve.process is not None and serve.process.poll() is None:
            serve.process.kill()
        shutil.rmtree(serve.socket_dir, ignore_errors=True)
        if not options.keep:
            shutil.rmtree(root, ignore_errors=True)
    return summary


if __name__ == "__main__":
    # a SIGTERM unwinds like an interrupt: the server, clients and hogs are stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    main()
