"""benchmarks/overload.py on a short run: a real ``tay serve`` beside a CPU hog, compacted
every second, answers every status probe and acknowledges the producer throughout."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import tempfile

import pytest

from tests.scratch import scratch_dir

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def test_a_starved_compacting_server_answers_every_probe(capsys, monkeypatch) -> None:
    from benchmarks import overload

    monkeypatch.setenv("TAY_LOOP_STALL_MS", "1")  # the server inherits it
    scratch = scratch_dir("overload-")  # accepted by strict sync wherever the checkout is
    summary = overload.main(["--seconds", "4", "--hogs", "1", "--compact-every", "1",
                             "--probe-every", "0.1", "--dir", str(scratch)])
    status, enqueue, compactions = summary["status"], summary["enqueue"], summary["compactions"]
    assert status["probes"] >= 10 and status["answered"] == status["probes"]
    assert status["failed"] == [] and status["max_ms"] is not None
    assert status["during_compaction"]["answered"] >= 1
    slowest = status["slowest"]
    assert len(slowest) == 5 and slowest[0]["ms"] == status["max_ms"]
    assert [p["ms"] for p in slowest] == sorted((p["ms"] for p in slowest), reverse=True)
    assert compactions["succeeded"] == compactions["runs"] >= 2 and compactions["failed"] == []
    assert all(ms >= 0 for ms in compactions["duration_ms"])
    assert enqueue["acked"] >= 100 and enqueue["p50_ms"] <= enqueue["max_ms"]
    assert enqueue["refused"] == {}
    assert summary["server"]["cpu_us_per_job"] > 0 and summary["server"]["peak_rss_bytes"] > 0
    loop = summary["loop"]  # the server's own watch, read before it stopped
    assert loop["stall_threshold_s"] == 0.001 and loop["stalls"] >= 0
    # the first stall is always logged, with its samples (the log is read after the stop:
    # it may hold later ones too)
    assert loop["stall_lines"] or loop["stalls"] == 0
    assert all("event loop stalled" in line or line.startswith("  ")
               for line in loop["stall_lines"])
    out = capsys.readouterr().out
    assert f"status: {status['answered']} of {status['probes']} answered" in out
    assert f"event loop: {loop['stalls']} stall(s) over 0.001 s" in out
    assert os.listdir(scratch) == []  # the store was removed afterwards
    os.rmdir(scratch)


def test_a_probe_that_finds_no_server_is_counted_as_not_answered() -> None:
    from benchmarks import overload

    with tempfile.TemporaryDirectory() as directory:
        prober = overload.Prober(os.path.join(directory, "none.sock"), every=0.01, timeout_s=1)
        while len(prober.probes) < 3:
            pass
        prober.close()
    assert all(p.seconds is None and "cannot connect" in p.error for p in prober.probes)
    options = argparse.Namespace(seconds=1, hogs=0, compact_every=1, retention="1m",
                                 backlog=0)
    compaction = overload.Compaction(started=prober.probes[0].at - 1,
                                     ended=prober.probes[0].at + 0.001,
                                     report={"duration_ms": 5, "pause_ms": 1.5,
                                             "expired_jobs": 2})
    summary = overload.summarize(prober.probes, [compaction],
                                 {"acked": 2, "refused": {"capacity": 1}, "seconds": 1.0,
                                  "latencies_s": [0.001, 0.003]},
                                 cpu_s=0.001, peak_rss=1, options=options)
    assert summary["status"]["answered"] == 0 and summary["status"]["max_ms"] is None
    assert len(summary["status"]["failed"]) == len(prober.probes)
    assert summary["enqueue"]["max_ms"] == 3.0 and summary["enqueue"]["p50_ms"] == 1.0
    assert summary["enqueue"]["refused"] == {"capacity": 1}
    assert summary["compactions"]["expired_jobs"] == 2
    assert summary["compactions"]["max_pause_ms"] == 1.5


def test_a_probe_overlaps_a_compaction_only_while_both_run() -> None:
    from benchmarks.overload import Compaction, Probe, during

    runs = [Compaction(started=10.0, ended=12.0)]
    assert during(Probe(at=9.9, seconds=0.2), runs)  # answered after the compaction began
    assert during(Probe(at=11.0, seconds=0.01), runs)
    assert not during(Probe(at=9.0, seconds=0.5), runs)
    assert not during(Probe(at=12.5, seconds=0.1), runs)
    assert during(Probe(at=11.5, seconds=None), runs)  # a failed probe, sent meanwhile


def test_the_slowest_probes_say_when_in_a_compaction_they_were_sent() -> None:
    from benchmarks.overload import Compaction, Probe, slowest

    probes = [Probe(at=1.0, seconds=0.002), Probe(at=10.5, seconds=0.080),
              Probe(at=20.0, seconds=0.030), Probe(at=11.0, seconds=None, error="x")]
    assert slowest(probes, [Compaction(started=10.0, ended=12.0)], count=2) == [
        {"ms": 80.0, "after_compaction_start_s": 0.5},
        {"ms": 30.0, "after_compaction_start_s": None}]


def test_a_hog_dies_with_the_benchmark_even_killed() -> None:
    import signal
    import subprocess
    import sys

    import psutil

    from benchmarks.overload import ROOT

    parent = subprocess.Popen(
        [sys.executable, "-c", "import time; from benchmarks.overload import spin_hog; "
         "print(spin_hog().pid, flush=True); time.sleep(60)"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True)
    hog = psutil.Process(int(parent.stdout.readline()))
    try:
        assert hog.is_running() and hog.status() != psutil.STATUS_ZOMBIE
        parent.send_signal(signal.SIGKILL)  # no cleanup runs in the benchmark
        parent.wait()
        hog.wait(timeout=10)  # the kernel killed it
    finally:
        parent.kill()
        with contextlib.suppress(psutil.NoSuchProcess):
            hog.kill()  # the test failed: no spinning process is left behind


def test_the_server_and_its_clients_end_with_the_benchmark_even_killed() -> None:
    """A killed benchmark's server gets SIGTERM (a clean stop) and its clients SIGKILL."""
    import signal
    import subprocess
    import sys

    import psutil

    from benchmarks.overload import ROOT

    scratch = scratch_dir("orphans-")
    parent = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from pathlib import Path\n"
         "from benchmarks.soak_daemon import Serve, spawn\n"
         "serve = Serve(Path(sys.argv[1]), {}, [])\n"
         "serve.start(faked=False)\n"
         # a client that reads no input and talks to no server: only the signal ends it
         "client, _ = spawn('import time; print(\"ready\", flush=True); time.sleep(60)')\n"
         "print(serve.process.pid, client.pid, flush=True)\n"
         "time.sleep(60)\n", str(scratch)],
        cwd=ROOT, stdout=subprocess.PIPE, text=True)
    children = [psutil.Process(int(pid)) for pid in parent.stdout.readline().split()]
    server, client = children
    try:
        assert len(children) == 2 and all(child.is_running() for child in children)
        parent.send_signal(signal.SIGKILL)  # no cleanup runs in the benchmark
        parent.wait()
        client.wait(timeout=10)  # the kernel killed it
        server.wait(timeout=30)  # stopped on its SIGTERM
        log = (scratch / "server.log").read_text()
        assert "tay stopped cleanly" in log
    finally:
        parent.kill()
        for child in children:
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()  # the test failed: nothing is left behind
        shutil.rmtree(scratch, ignore_errors=True)
