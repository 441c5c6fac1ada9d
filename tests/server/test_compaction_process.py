"""The process an online compaction's storage work runs in (``tay.storage.compaction.forked``):
what the server sees when it fails or dies, what an operator sees while it runs, and that it
does not outlive the server."""

from __future__ import annotations

import asyncio
import os
import select
import signal
import subprocess
import sys
import time

import pytest

from tay.storage.compaction import forked, online
from tay.storage.v2 import layout as v2_layout
from tests.crash.cluster import REPO
from tay.server.compaction import compactor as compactor_module
from tests.server.test_online_compaction import (Gate, Harness, every_state, recovered_states,
                                                 scratch_store)

data_dir = pytest.fixture(scratch_store, name="data_dir")


def candidates(data_dir: str) -> list[str]:
    return [name for name in os.listdir(os.path.join(data_dir, v2_layout.EPOCHS_DIR))
            if name.startswith(".tay-candidate-")]


def gone(pid: int) -> bool:
    """No such process, or a zombie nobody reaped yet (it runs nothing)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_a_killed_compaction_process_leaves_the_store_serving_and_the_next_one_publishes(
        data_dir, monkeypatch):
    """The process is killed once its candidate is written: the compaction fails with
    ``process_exited``, the old epoch keeps serving, and the next compaction removes the
    leaked candidate and publishes."""
    real = online._replay
    killed = []

    def killed_after_writing(*args):
        if os.environ.get("TAY_TEST_KILL_COMPACTION") == "1":
            os.kill(os.getpid(), signal.SIGKILL)  # in the compaction process
        return real(*args)

    monkeypatch.setattr(online, "_replay", killed_after_writing)

    async def scenario():
        h = Harness(data_dir, "auto")
        try:
            ids = [await h.enqueue(n) for n in range(5)]
            epoch = h.store.journal.epoch_id
            os.environ["TAY_TEST_KILL_COMPACTION"] = "1"
            try:
                failed = await h.failed_compaction()
            finally:
                del os.environ["TAY_TEST_KILL_COMPACTION"]
            assert failed.reason == "process_exited"
            assert "killed by SIGKILL" in str(failed)
            assert h.metrics.compaction_cpu_s > 0  # a failed one's process is counted too
            killed.append(candidates(data_dir))
            assert h.store.journal.epoch_id == epoch and h.driver.stopped is None
            assert h.compactor._process is None
            ids.append(await h.enqueue(9))  # still serving
            h.compactor.retry_at = 0.0
            report = await h.compactor.request("admin")
            assert h.metrics.compactions == {"failed": 1, "published": 1}
            return ids, report, every_state(h.store.engine)
        finally:
            h.close()

    ids, report, live = asyncio.run(scenario())
    # the killed process's candidate was left (its parent removes what it knows of; it
    # died before saying where), and the next compaction removed it
    assert len(killed[0]) == 1 and candidates(data_dir) == []
    assert report["retained_jobs"] == 6 and len(live) == 6
    assert recovered_states(data_dir) == live


def test_a_process_that_dies_in_the_last_check_leaves_the_published_epoch_serving(
        data_dir, monkeypatch):
    """Killed during step 10 (the catch-up replayed and compared): the epoch is published
    and CURRENT names it, so it stays authoritative; the compaction has no verdict, which is
    logged and counted, and the server serves on."""
    def killed(*args):
        os.kill(os.getpid(), signal.SIGKILL)  # in the compaction process

    monkeypatch.setattr(online, "verify_totals", killed)

    async def scenario():
        h = Harness(data_dir, "auto")
        try:
            ids = [await h.enqueue(n) for n in range(3)]
            epoch = h.store.journal.epoch_id
            failed = await h.failed_compaction()
            assert failed.reason == "process_exited"
            assert h.metrics.compactions == {"verification_incomplete": 1}
            assert h.store.journal.epoch_id != epoch and h.driver.stopped is None
            assert h.compactor._process is None
            ids.append(await h.enqueue(9))  # into the new epoch's tail
            return ids, every_state(h.store.engine)
        finally:
            h.close()

    ids, live = asyncio.run(scenario())
    assert len(live) == 4 and recovered_states(data_dir) == live


def test_records_and_jobs_cross_to_the_process_in_chunks(data_dir, monkeypatch):
    """Three records or jobs a message: the catch-up rounds, the switch's last records and
    the jobs the check compares all span several messages, and the epoch replays to the
    engine's jobs."""
    monkeypatch.setattr(forked, "CHUNK", 3)
    monkeypatch.setattr(compactor_module, "SWITCH_RECORDS", 0)
    gate = Gate(monkeypatch)

    async def scenario():
        h = Harness(data_dir, "auto")
        try:
            ids = [await h.enqueue(n) for n in range(4)]
            task = h.compactor.request("admin")
            await gate.wait_entered()
            during = [await h.enqueue(10 + n) for n in range(7)]
            for job_id in during[:3]:
                await h.cancel(job_id)
            gate.release()
            report = await task
            return ids + during, report, every_state(h.store.engine)
        finally:
            h.close()

    ids, report, live = asyncio.run(scenario())
    assert report["catch_up_records"] >= 10 and report["switch_records"] == 0
    assert len(live) == 11 and recovered_states(data_dir) == live


def test_a_touched_job_the_engine_holds_otherwise_stops_writing(data_dir, monkeypatch):
    """Step 10 compares each job the catch-up touched as the engine holds it with the
    replay, in the process, chunk by chunk: one field that differs (here: as the engine's
    side reports it) is a mismatch, and writing stops."""
    monkeypatch.setattr(forked, "CHUNK", 2)
    gate = Gate(monkeypatch)
    real = online.live_fields

    def altered(live, states_of, chunk=2):
        for part in real(live, states_of, chunk):
            yield [(job_id, fields if fields is None or n else
                    fields[:2] + ("bogus",) + fields[3:])
                   for n, (job_id, fields) in enumerate(part)]

    monkeypatch.setattr(online, "live_fields", altered)

    async def scenario():
        h = Harness(data_dir, "auto")
        try:
            await h.enqueue(1)
            task = h.compactor.request("admin")
            await gate.wait_entered()
            for n in range(3):
                await h.enqueue(10 + n)
            gate.release()
            failed = await h.failed_compaction(task)
            return failed, h.driver.stopped, dict(h.metrics.compactions)
        finally:
            h.close()

    failure, stopped, counted = asyncio.run(scenario())
    assert failure.reason == "verification_mismatch"
    assert stopped.reason == "compaction_mismatch"
    assert counted == {"verification_failed": 1}


def test_a_read_only_mapping_crosses_as_a_dict():
    from types import MappingProxyType

    import pickle

    sent = forked._dumps(("ok", {"diagnostic": MappingProxyType({"code": 3})}))
    assert pickle.loads(sent) == ("ok", {"diagnostic": {"code": 3}})


def test_a_killed_checking_process_leaves_the_published_epoch_serving(data_dir, monkeypatch):
    """Step 10's engine side is built in a second fork taken at the switch; killed while it
    builds it, the check has no verdict: the published epoch serves on, the compaction
    process is reaped, and the failure is counted."""
    def killed(live, states_of, chunk=None):
        os.kill(os.getpid(), signal.SIGKILL)  # in the checking process
        yield []

    monkeypatch.setattr(online, "live_fields", killed)

    async def scenario():
        h = Harness(data_dir, "auto")
        try:
            await h.enqueue(1)
            epoch = h.store.journal.epoch_id
            process = []
            real_start = forked.CompactionProcess.start

            def start(*args, **options):
                process.append(real_start(*args, **options))
                return process[-1]

            monkeypatch.setattr(forked.CompactionProcess, "start", start)
            failed = await h.failed_compaction()
            assert h.metrics.compactions == {"verification_incomplete": 1}
            assert h.store.journal.epoch_id != epoch and h.driver.stopped is None
            await h.enqueue(2)
            return failed, process[0].pid, every_state(h.store.engine)
        finally:
            h.close()

    failure, pid, live = asyncio.run(scenario())
    assert failure.reason == "process_exited" and "checking process" in str(failure)
    assert "killed by SIGKILL" in str(failure)
    assert not os.path.exists(f"/proc/{pid}")  # the compaction process was reaped too
    assert len(live) == 2 and recovered_states(data_dir) == live


def test_a_failure_in_the_process_travels_with_its_reason(data_dir, monkeypatch):
    def broken(*args, **options):
        raise ValueError("injected in the compaction process")

    monkeypatch.setattr(online, "base_records", broken)

    async def scenario():
        h = Harness(data_dir, "auto")
        try:
            await h.enqueue(1)
            failed = await h.failed_compaction()
            assert h.driver.stopped is None and h.compactor._process is None
            return failed, h.compactor.last_failure, candidates(data_dir)
        finally:
            h.close()

    failure, last_failure, left = asyncio.run(scenario())
    assert failure.reason == "ValueError"
    assert "injected in the compaction process" in last_failure["error"]
    assert len(left) == 1  # written before the failure: the next compaction removes it


def test_an_operator_sees_the_running_compaction_process(data_dir, monkeypatch):
    """``status.storage.compaction.process_pid`` names the process while it runs, and
    ``process`` says what it holds and used so far; the process is named ``tay-compaction``
    (``ps``, ``top``); it is reaped afterwards, and the report says what it used (its CPU is
    counted for ``/metrics``)."""
    release_r, release_w = os.pipe()
    entered_r, entered_w = os.pipe()
    real = online.prepare

    def held(capture, **options):
        os.write(entered_w, b"in")
        assert select.select([release_r], [], [], 20)[0]
        return real(capture, **options)

    monkeypatch.setattr(online, "prepare", held)

    async def scenario():
        h = Harness(data_dir, "auto")
        try:
            await h.enqueue(1)
            task = h.compactor.request("admin")
            while not select.select([entered_r], [], [], 0)[0]:
                await asyncio.sleep(0.005)
            running = h.compactor.facts()["compaction"]
            pid = running["process_pid"]
            with open(f"/proc/{pid}/comm") as comm:
                name = comm.read().strip()
            parent = os.getpid()
            with open(f"/proc/{pid}/stat") as stat:
                ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
            os.write(release_w, b"go")
            report = await task
            return (pid, name, ppid, parent, report, running["process"],
                    h.compactor.facts()["compaction"], h.metrics.compaction_cpu_s)
        finally:
            h.close()

    try:
        pid, name, ppid, parent, report, figures, facts, cpu_counted = asyncio.run(scenario())
    finally:
        for fd in (release_r, release_w, entered_r, entered_w):
            os.close(fd)
    assert name == forked.PROCESS_NAME.decode() and ppid == parent
    assert facts["process_pid"] is None and facts["process"] is None
    assert facts["processes_cpu_s"] == round(cpu_counted, 3)
    assert report["fork_ms"] > 0
    # while it ran: most of its resident pages were still the server's (copy on write)
    assert figures["pid"] == pid and 0 < figures["unique_bytes"] < figures["rss_bytes"]
    assert figures["cpu_user_s"] >= 0 and figures["cpu_system_s"] >= 0
    used = report["process"]
    assert used["pid"] == pid and used["peak_rss_bytes"] >= figures["rss_bytes"]
    assert used["check"] is not None and used["check"]["peak_rss_bytes"] > 0
    total = sum(u["cpu_user_s"] + u["cpu_system_s"] for u in (used, used["check"]))
    assert total > 0 and abs(cpu_counted - total) < 0.005
    steps = report["timings_ms"]
    assert list(steps) == ["captured", "planned", "candidate_written", "candidate_verified",
                           "switched", "verified"]
    assert list(steps.values()) == sorted(steps.values())
    assert not os.path.exists(f"/proc/{pid}")  # reaped


SERVER = """
import asyncio, os, sys, time
from tay.storage.compaction import online
from tests.server.test_online_compaction import Harness

def held(capture, **options):
    time.sleep(60)

online.prepare = held

async def main():
    h = Harness(sys.argv[1], "auto")
    await h.enqueue(1)
    h.compactor.request("admin")
    while h.compactor._process is None:
        await asyncio.sleep(0.005)
    print(h.compactor._process.pid, flush=True)
    await asyncio.sleep(60)

asyncio.run(main())
"""


def test_the_compaction_process_dies_with_a_killed_server(data_dir):
    """kill -9 of the server while its compaction process works: the process does not
    live on (it would hold the store's files and a slot of the machine)."""
    server = subprocess.Popen([sys.executable, "-c", SERVER, data_dir], cwd=REPO,
                              stdout=subprocess.PIPE)
    try:
        line = server.stdout.readline()
        assert line, "the server script ended without starting a compaction"
        pid = int(line)
        assert not gone(pid)
        server.kill()
        server.wait(10)
        deadline = time.monotonic() + 10
        while not gone(pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert gone(pid)
    finally:
        server.kill()
        server.wait(10)
        server.stdout.close()
