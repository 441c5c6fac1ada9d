"""The operations API through a real ``tay serve`` (socket and HTTP), the CLI, and a restart.

One server per module; every read and action is driven over both transports with the
CLI's own clients (``SocketAdmin``, ``HttpAdmin``), and the CLI commands themselves run as
subprocesses. Work is done by our SDK's embedded worker.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from tay import Tay
from tay import _native as native
from tay.admin.client import AdminRefused, HttpAdmin, SocketAdmin
from tay.errors import RemoteTaskError
from tests.sdk.server import REPO, Server, scratch_dirs

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def engine():
    data, sockets = scratch_dirs()
    with data, sockets:
        socket_path = os.path.join(sockets.name, "tay.sock")
        server = Server(os.path.join(data.name, "data"), socket_path, "--http-port", "0").start()
        try:
            yield server
        finally:
            server.stop()


def clients(server: Server) -> dict[str, object]:
    via_socket = SocketAdmin(server.socket_path)
    address = wait_for(lambda: via_socket.call("status", {})["http"])["address"]
    return {"socket": via_socket, "http": HttpAdmin(address)}


def wait_for(check, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)
    return value


def cli(server: Server, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TAY_SOCKET_PATH": server.socket_path}
    return subprocess.run([sys.executable, "-m", "tay.cli", *args], capture_output=True,
                          text=True, env=env, cwd=str(REPO), timeout=30)


def metrics_text(server: Server) -> str:
    address = SocketAdmin(server.socket_path).call("status", {})["http"]["address"]
    with urllib.request.urlopen(f"{address}/metrics", timeout=10) as response:
        return response.read().decode()


def run_with_worker(server: Server, body):
    """Run ``body(tay)`` with an embedded worker for ops.ok / ops.boom connected."""
    async def scenario():
        tay = Tay(socket_path=server.socket_path, capacity=4)

        @tay.task(name="ops.ok")
        def ok(n: int = 0) -> dict:
            return {"n": n}

        @tay.task(name="ops.boom")
        def boom() -> None:
            raise ValueError("bad input 42")

        async with tay:
            return await body(tay)
    return asyncio.run(asyncio.wait_for(scenario(), 60))


async def until(check, timeout=10.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while not (value := check()):
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.02)
    return value


@pytest.mark.parametrize("transport", ["socket", "http"])
def test_failure_details_timeline_retry_and_activity(engine, transport):
    admin = clients(engine)[transport]

    async def body(tay):
        handle = await tay.enqueue("ops.boom", {}, queue=f"fail-{transport}")
        await until(lambda: admin.call("job", {"job_id": handle.id})["job"]["state"] == "discarded")
        job = admin.call("job", {"job_id": handle.id})["job"]
        assert job["failure"]["type"] == "ValueError"
        assert job["failure"]["message"] == "bad input 42"
        assert "bad input 42" in job["failure"]["traceback"]
        assert [a["outcome"] for a in job["attempts"]] == ["discarded"]
        assert job["error_type"] == "ValueError" and job["diagnostic"] == {"code": 1, "version": 1}
        with pytest.raises(RemoteTaskError) as raised:
            await handle.result()
        assert raised.value.remote_type == "ValueError"
        assert "bad input 42" in raised.value.remote_traceback and "ValueError" in str(raised.value)
        rows = admin.call("jobs", {"state": "discarded", "queue": f"fail-{transport}"})["jobs"]
        assert [row["id"] for row in rows] == [handle.id], rows
        found = await asyncio.to_thread(
            cli, engine, "jobs", "--queue", f"fail-{transport}", "--error", "BAD INPUT", "--json",
            *(["--url", admin.call("status", {})["http"]["address"]]
              if transport == "http" else []))
        assert [row["id"] for row in json.loads(found.stdout)["jobs"]] == [handle.id], found
        assert admin.call("jobs", {"queue": f"fail-{transport}", "error": "KeyError"})[
            "jobs"] == []
        activity = admin.call("activity", {})
        assert any(f["job_id"] == handle.id and f["error_type"] == "ValueError"
                   for f in activity["failures"])
        # the failure is counted in the current minute, or the one before when a minute
        # turned between the failure and this call
        assert len(activity["per_minute"]) == 60
        assert sum(minute["failed"] for minute in activity["per_minute"][-2:]) >= 1
        # a discarded job starts a new cycle and fails again: two attempts on the timeline
        retried = admin.call("retry_job", {"job_id": handle.id})["job"]
        assert retried["state"] in ("available", "executing", "discarded")
        await until(lambda: len(admin.call("job", {"job_id": handle.id})["job"]["attempts"]) == 2
                    and admin.call("job", {"job_id": handle.id})["job"]["state"] == "discarded")
        with pytest.raises(AdminRefused) as refused:
            admin.call("retry_job", {"job_id": "0" * 31 + "1"})
        assert refused.value.code == "not_found"

    run_with_worker(engine, body)


@pytest.mark.parametrize("transport", ["socket", "http"])
def test_pause_cancel_requeue_resume_and_purge(engine, transport):
    admin = clients(engine)[transport]
    queue = f"steer-{transport}"

    async def body(tay):
        paused = admin.call("pause_queue", {"queue": queue})["queue"]
        assert paused["paused"] and paused["name"] == queue
        first = await tay.enqueue("ops.ok", {"n": 1}, queue=queue)
        second = await tay.enqueue("ops.ok", {"n": 2}, queue=queue)
        await asyncio.sleep(0.2)  # a paused queue dispatches nothing
        assert await first.status() == "available" and await second.status() == "available"
        view = {q["name"]: q for q in admin.call("queues", {})["queues"]}[queue]
        assert view["paused"] and view["waiting"] == 2
        assert admin.call("cancel_job", {"job_id": first.id})["job"]["state"] == "cancelled"
        assert admin.call("retry_job", {"job_id": first.id})["job"]["state"] == "available"
        with pytest.raises(AdminRefused) as refused:
            admin.call("retry_job", {"job_id": second.id})
        assert refused.value.code == "retry_rejected"
        workers = admin.call("workers", {})["workers"]
        assert any(w["transport"] == "socket" and "ops.ok" in w["tasks"] and w["capacity"] == 4
                   for w in workers)
        assert not admin.call("resume_queue", {"queue": queue})["queue"]["paused"]
        await until(lambda: admin.call("queues", {})["queues"] and all(
            q["by_state"]["completed"] == 2 for q in admin.call("queues", {})["queues"]
            if q["name"] == queue))
        assert await first.result() == {"n": 1}
        # purge: waiting jobs of a paused queue become cancelled, in batches
        admin.call("pause_queue", {"queue": queue})
        handles = [await tay.enqueue("ops.ok", {"n": n}, queue=queue) for n in range(5)]
        purged = admin.call("purge_queue", {"queue": queue, "limit": 3})
        assert (purged["purged"], purged["remaining"]) == (3, 2)
        assert admin.call("purge_queue", {"queue": queue})["remaining"] == 0
        assert {await h.status() for h in handles} == {"cancelled"}
        admin.call("resume_queue", {"queue": queue})

    run_with_worker(engine, body)


@pytest.mark.parametrize("transport", ["socket", "http"])
def test_retry_jobs_follows_its_cursor_and_tay_retry_all_does_it_for_you(engine, transport):
    admin = clients(engine)[transport]
    queue = f"bulk-{transport}"

    async def body(tay):
        admin.call("pause_queue", {"queue": queue})
        handles = [await tay.enqueue("ops.ok", {"n": n}, queue=queue) for n in range(5)]
        assert admin.call("purge_queue", {"queue": queue})["purged"] == 5
        retried, cursor, batches = 0, None, 0
        while True:
            reply = admin.call("retry_jobs", {"state": "cancelled", "queue": queue, "limit": 2,
                                              **({"cursor": cursor} if cursor else {})})
            assert reply["state"] == "cancelled" and reply["queue"] == queue
            retried, batches = retried + reply["retried"], batches + 1
            if (cursor := reply["next_cursor"]) is None:
                break
        assert (retried, batches) == (5, 3)
        assert {await h.status() for h in handles} == {"available"}
        assert admin.call("purge_queue", {"queue": queue})["purged"] == 5
        done = cli(engine, "retry-all", "cancelled", "--queue", queue, "--json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["retried"] == 5
        text = cli(engine, "retry-all", "cancelled", "--queue", queue)
        assert text.stdout == f"0 cancelled job(s) queue {queue} retried\n"
        with pytest.raises(AdminRefused) as refused:
            admin.call("retry_jobs", {"state": "completed"})
        assert refused.value.code == "invalid_request"
        admin.call("resume_queue", {"queue": queue})
        await until(lambda: {q["name"]: q for q in admin.call("queues", {})["queues"]}[
            queue]["by_state"]["completed"] == 5)
        assert [await h.result() for h in handles] == [{"n": n} for n in range(5)]

    run_with_worker(engine, body)


@pytest.mark.parametrize("transport", ["socket", "http"])
def test_tay_cancel_all_cancels_the_waiting_jobs_of_a_task(engine, transport):
    admin = clients(engine)[transport]
    queue = f"cancel-all-{transport}"
    address = admin.call("status", {})["http"]["address"] if transport == "http" else None

    async def body(tay):
        admin.call("pause_queue", {"queue": queue})
        doomed = [await tay.enqueue("ops.ok", {"n": n}, queue=queue) for n in range(4)]
        later = await tay.enqueue("ops.ok", {"n": 9}, queue=queue, delay=3_600)
        kept = await tay.enqueue("ops.boom", {}, queue=queue)
        where = ["--url", address] if address else []
        done = await asyncio.to_thread(cli, engine, "cancel-all", "waiting", "--task",
                                       "ops.ok", "--queue", queue, *where)
        assert done.returncode == 0, done.stderr
        assert done.stdout == f"5 waiting job(s) queue {queue} task ops.ok cancelled\n"
        assert {await h.status() for h in doomed + [later]} == {"cancelled"}
        assert await kept.status() == "available"
        again = json.loads((await asyncio.to_thread(
            cli, engine, "cancel-all", "available", "--queue", queue, "--json")).stdout)
        assert again["cancelled"] == 1 and await kept.status() == "cancelled"
        admin.call("resume_queue", {"queue": queue})

    run_with_worker(engine, body)
    assert cli(engine, "cancel-all", "completed").returncode == 2  # not a cancellable state


@pytest.mark.parametrize("transport", ["socket", "http"])
def test_jobs_picked_by_their_args_are_listed_and_cancelled(engine, transport):
    """``--args`` (an object in the socket's body, JSON text in the HTTP query) picks the
    jobs whose args hold it, for ``tay jobs`` and ``tay cancel-all``."""
    admin = clients(engine)[transport]
    queue = f"by-args-{transport}"
    address = admin.call("status", {})["http"]["address"] if transport == "http" else None
    where = ["--url", address] if address else []

    async def body(tay):
        admin.call("pause_queue", {"queue": queue})
        of_42 = [(await tay.enqueue("ops.ok", {"account": 42, "n": n}, queue=queue)).id
                 for n in range(3)]
        of_7 = [(await tay.enqueue("ops.ok", {"account": 7, "n": n}, queue=queue)).id
                for n in range(2)]
        return of_42, of_7

    of_42, of_7 = run_with_worker(engine, body)
    listed = admin.call("jobs", {"queue": queue, "args": {"account": 42.0}})
    assert {row["id"] for row in listed["jobs"]} == set(of_42)
    shown = cli(engine, "jobs", "--queue", queue, "--args", '{"account": 7}', "--json", *where)
    assert shown.returncode == 0, shown.stderr
    assert {row["id"] for row in json.loads(shown.stdout)["jobs"]} == set(of_7)
    done = cli(engine, "cancel-all", "available", "--queue", queue, "--args",
               '{"account": 42, "n": 1}', *where)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (f"1 available job(s) queue {queue} args "
                           '{"account": 42, "n": 1} cancelled\n')
    states = {row["id"]: row["state"] for row in admin.call("jobs", {"queue": queue})["jobs"]}
    assert states.pop(of_42[1]) == "cancelled" and set(states.values()) == {"available"}
    bad = cli(engine, "jobs", "--args", "[1]", *where)
    assert bad.returncode == 2 and "is not a JSON object" in bad.stderr
    with pytest.raises(AdminRefused) as refused:
        admin.call("jobs", {"args": {}})
    assert refused.value.code == "invalid_request"
    admin.call("purge_queue", {"queue": queue})


@pytest.mark.parametrize("transport", ["socket", "http"])
def test_tay_delete_and_delete_all_remove_finished_jobs(engine, transport):
    """Finished jobs are deleted one by one or by state (and args); a waiting one is
    refused; a deleted job reads as not found, and its id can be enqueued again."""
    admin = clients(engine)[transport]
    queue = f"delete-{transport}"
    address = admin.call("status", {})["http"]["address"] if transport == "http" else None
    where = ["--url", address] if address else []

    async def body(tay):
        done = [await tay.enqueue("ops.ok", {"n": n}, queue=queue) for n in range(4)]
        assert [await h.result(timeout=30) for h in done] == [{"n": n} for n in range(4)]
        admin.call("pause_queue", {"queue": queue})
        waiting = await tay.enqueue("ops.ok", {"n": 9}, queue=queue)
        return [h.id for h in done], waiting.id

    done, waiting = run_with_worker(engine, body)
    one = cli(engine, "delete", done[0], *where)
    assert one.returncode == 0, one.stderr
    assert one.stdout == f"deleted {done[0]} (completed)\n"
    gone = cli(engine, "job", done[0], *where)
    assert gone.returncode == 1 and "not_found" in gone.stderr
    refused = cli(engine, "delete", waiting, *where)
    assert refused.returncode == 1 and "delete_rejected" in refused.stderr
    by_args = cli(engine, "delete-all", "completed", "--queue", queue, "--args", '{"n": 1}',
                  *where)
    assert by_args.stdout == f"1 completed job(s) queue {queue} args {{\"n\": 1}} deleted\n"
    rest = cli(engine, "delete-all", "completed", "--queue", queue, "--json", *where)
    assert json.loads(rest.stdout)["deleted"] == 2
    listed = admin.call("jobs", {"queue": queue})["jobs"]
    assert [row["id"] for row in listed] == [waiting]

    async def again(tay):
        return (await tay.enqueue("ops.ok", {"n": 7}, queue=queue, id=done[0])).id

    assert run_with_worker(engine, again) == done[0]
    assert admin.call("job", {"job_id": done[0]})["job"]["args"] == {"n": 7}
    admin.call("purge_queue", {"queue": queue})
    admin.call("resume_queue", {"queue": queue})


@pytest.mark.parametrize("transport", ["socket", "http"])
def test_job_pages_follow_cursors_with_filters(engine, transport):
    admin = clients(engine)[transport]
    queue = f"pages-{transport}"
    admin.call("pause_queue", {"queue": queue})

    async def body(tay):
        return [(await tay.enqueue("ops.ok", {"n": n}, queue=queue)).id for n in range(7)]

    ids = run_with_worker(engine, body)
    seen, cursor = [], None
    while True:
        page = admin.call("jobs", {"queue": queue, "state": "available", "limit": 3,
                                   **({"cursor": cursor} if cursor else {})})
        seen += [row["id"] for row in page["jobs"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(ids))  # most recent change first, each once
    assert admin.call("jobs", {"queue": queue, "task": "nope"})["jobs"] == []
    for bad in ({"state": "nope"}, {"limit": 0}, {"cursor": "x"}, {"extra": 1}):
        with pytest.raises(AdminRefused) as refused:
            admin.call("jobs", bad)
        assert refused.value.code == "invalid_request"
    admin.call("purge_queue", {"queue": queue})


@pytest.mark.parametrize("transport", ["socket", "http"])
def test_one_schedule_and_its_cancellation(engine, transport):
    admin = clients(engine)[transport]
    schedule_id = f"admin-every-{transport}"

    async def body(tay):
        await tay.every("ops.ok", minutes=1, kwargs={"n": 3}, declaration_id=schedule_id)
        delivered = await until(lambda: admin.call("schedule", {"schedule_id": schedule_id})
                                ["schedule"]["last_job"])
        one = admin.call("schedule", {"schedule_id": schedule_id})["schedule"]
        assert one["every_ms"] == 60_000 and len(one["next_occurrences"]) == 5
        job = admin.call("job", {"job_id": delivered["id"]})["job"]
        assert job["schedule_id"] == schedule_id and job["args"] == {"n": 3}
        cancelled = admin.call("cancel_schedule", {"schedule_id": schedule_id})["schedule"]
        assert cancelled["cancelled_at"] is not None and cancelled["next_occurrences"] == []
        assert (await tay.get_schedule(schedule_id))["cancelled_at"] == cancelled["cancelled_at"]
        with pytest.raises(AdminRefused) as refused:
            admin.call("cancel_schedule", {"schedule_id": "no-such-schedule"})
        assert refused.value.code == "schedule_not_found"

    run_with_worker(engine, body)


def test_status_reads_on_both_transports(engine):
    for admin in clients(engine).values():
        status = admin.call("status", {})
        assert status["tay_version"] and status["writer"] == {
            "running": True, "error": None, "implementation": native.IMPLEMENTATION,
            "rt_priority": 0}
        assert status["durability"] == "write" and status["storage"]["free_bytes"] > 0
        commit = status["commit"]  # the counters and the settings that steer them
        assert commit["fsyncs"] == 0 and commit["batches"] >= commit["gathered"] >= 0
        assert (commit["max_events"], commit["interval_ms"], commit["linger"],
                commit["gather_us"]) == (1, 0, False, 1000)  # the defaults
        assert status["engine"]["jobs"]["total"] == sum(status["engine"]["jobs"]["by_state"].values())
        assert status["socket"]["path"] == engine.socket_path
        loop = status["loop"]  # the event loop's watch (--loop-stall-ms 500, the default)
        assert (loop["beat_s"], loop["stall_threshold_s"]) == (0.1, 0.5)
        assert loop["stalls"] >= 0 and (loop["last_stall"] is None) == (loop["stalls"] == 0)
        assert all(s["id"].startswith("admin-every-")
                   for s in admin.call("schedules", {})["schedules"])
        assert status["storage"]["format"] == "v2"  # adopted at start
        compacted = admin.call("compact", {})
        assert compacted["type"] == "admin_compact" and compacted["trigger"] == "admin"
        assert compacted["source_epoch_id"] == status["storage"]["epoch"]
        after = admin.call("status", {})["storage"]
        assert after["epoch"] == compacted["epoch_id"] and after["last_compaction"] == {
            key: value for key, value in compacted.items() if key != "type"}
        with pytest.raises(AdminRefused) as refused:
            admin.call("compact", {"terminal_retention": "soon"})
        assert refused.value.code == "invalid_request"


@pytest.mark.parametrize("transport", ["socket", "http"])
def test_scale_holds_running_jobs_to_the_credits_and_configured_restores(engine, transport):
    admin = clients(engine)[transport]
    queue, task = f"scale-{transport}", f"ops.gated-{transport}"
    gate = threading.Event()

    def row() -> dict:
        return next(q for q in admin.call("queues", {})["queues"] if q["name"] == queue)

    async def scenario():
        tay = Tay(socket_path=engine.socket_path, capacity=8)

        @tay.task(name=task)
        def gated() -> dict:
            gate.wait(30)
            return {}

        async with tay:
            view = admin.call("scale_queue", {"queue": queue, "concurrency": 1})["queue"]
            assert (view["credits"], view["configured_credits"], view["scaled"]) == (1, 10, True)
            handles = [await tay.enqueue(task, {}, queue=queue) for _ in range(4)]
            await until(lambda: row()["executing"] == 1)
            await asyncio.sleep(0.3)  # one credit: the other three wait
            assert (row()["executing"], row()["waiting"]) == (1, 3)
            admin.call("scale_queue", {"queue": queue, "concurrency": 3})
            await until(lambda: row()["executing"] == 3)
            back = admin.call("scale_queue", {"queue": queue, "concurrency": None})["queue"]
            assert (back["credits"], back["scaled"]) == (10, False)
            await until(lambda: row()["executing"] == 4)
            gate.set()
            for handle in handles:
                assert await handle.result(timeout=20) == {}
            for concurrency in (0, 65_537):
                with pytest.raises(AdminRefused) as refused:
                    admin.call("scale_queue", {"queue": queue, "concurrency": concurrency})
                assert refused.value.code == "invalid_request"
    try:
        asyncio.run(asyncio.wait_for(scenario(), 60))
    finally:
        gate.set()


def test_cli_workers_lists_what_each_worker_runs(engine):
    gate = threading.Event()

    async def scenario():
        tay = Tay(socket_path=engine.socket_path, capacity=2, client_id="cli-workers-rt")

        @tay.task(name="ops.held")
        def held() -> str:
            gate.wait(30)
            return "done"

        async with tay:
            handle = await tay.enqueue("ops.held", {}, queue="cli-busy")
            await until(lambda: SocketAdmin(engine.socket_path).call(
                "job", {"job_id": handle.id})["job"]["state"] == "executing")
            shown = await asyncio.to_thread(cli, engine, "workers")
            gate.set()
            await handle.result(timeout=20)
            return handle.id, shown
    try:
        job_id, shown = asyncio.run(asyncio.wait_for(scenario(), 60))
    finally:
        gate.set()
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].split()[:3] == ["RUNTIME", "ID", "MODE"]
    assert any(line.startswith("cli-workers-rt ") and "ops.held" in line for line in lines)
    [row] = [line for line in lines if line.startswith(job_id)]
    assert row.split()[1:5] == ["ops.held", "cli-busy", "cli-workers-rt", "1"]


@pytest.mark.parametrize("transport", ["socket", "http"])
def test_a_quiet_worker_takes_no_new_job_until_tay_unquiet(engine, transport):
    runtime = f"quiet-rt-{transport}"
    admin = clients(engine)[transport]

    async def scenario():
        tay = Tay(socket_path=engine.socket_path, capacity=2, client_id=runtime)

        @tay.task(name=f"ops.quiet-{transport}")
        def echo(n: int = 0) -> int:
            return n

        async with tay:
            first = await tay.enqueue(f"ops.quiet-{transport}", {"n": 1})
            assert await first.result(timeout=20) == 1
            quiet = await asyncio.to_thread(admin.call, "quiet_worker", {"runtime_id": runtime})
            assert quiet["quiet"] is True and [w["quiet"] for w in quiet["workers"]] == [True]
            second = await tay.enqueue(f"ops.quiet-{transport}", {"n": 2})
            shown = await asyncio.to_thread(cli, engine, "workers")
            status = await asyncio.to_thread(cli, engine, "status")
            metrics = await asyncio.to_thread(metrics_text, engine)
            state = await asyncio.to_thread(admin.call, "job", {"job_id": second.id})
            unquiet = await asyncio.to_thread(cli, engine, "unquiet", runtime)
            return (shown, status, metrics, state["job"]["state"], unquiet,
                    await second.result(timeout=20))

    shown, status, metrics, state, unquiet, result = asyncio.run(
        asyncio.wait_for(scenario(), 60))
    assert " connected (1 quiet), capacity " in status.stdout, status.stdout
    assert state == "available"  # its only worker is quiet
    assert 'tay_executors_quiet{transport="socket"} 1.0' in metrics
    assert any(line.startswith(runtime + " ") and " quiet " in line
               for line in shown.stdout.splitlines()), shown.stdout
    assert f"no executor for task ops.quiet-{transport}" in shown.stdout
    assert unquiet.returncode == 0 and "offered jobs again" in unquiet.stdout
    assert result == 2
    gone = cli(engine, "quiet", "nobody-here")
    assert gone.returncode != 0 and "not_found" in gone.stderr + gone.stdout


def test_operator_actions_are_logged_and_listed_with_where_they_came_from(engine):
    """Each action (not a read) leaves an INFO line and an ``actions`` entry naming its
    origin: the socket peer's pid and uid, the HTTP peer's address; refusals too."""
    by = clients(engine)
    by["socket"].call("pause_queue", {"queue": "audited"})
    by["http"].call("resume_queue", {"queue": "audited"})
    try:
        by["http"].call("retry_job", {"job_id": "0" * 31 + "5"})
    except AdminRefused as refused:
        assert refused.code == "not_found"
    by["socket"].call("jobs", {"queue": "audited"})  # a read: not an action
    newest = by["socket"].call("actions", {"limit": 3})["actions"]
    assert [a["op"] for a in newest] == ["retry_job", "resume_queue", "pause_queue"]
    retry, resume, pause = newest
    assert pause["origin"] == f"socket pid {os.getpid()} uid {os.getuid()}"
    assert pause["request"] == '{"queue":"audited"}' and pause["outcome"] == "done"
    assert resume["origin"].startswith("http 127.0.0.1:")
    assert retry["outcome"] == "refused" and retry["summary"].startswith("not_found: ")
    log = wait_for(lambda: "admin retry_job from http" in engine.log() and engine.log())
    assert f'admin pause_queue from socket pid {os.getpid()} uid {os.getuid()}: ' \
        '{"queue":"audited"} -> done' in log
    shown = cli(engine, "actions", "--limit", "3")
    assert shown.returncode == 0 and shown.stdout.split("\n")[1].split()[2] == "retry_job"
    assert cli(engine, "actions", "--limit", "1001").returncode == 2
    with pytest.raises(AdminRefused):
        by["socket"].call("actions", {"limit": 0})


def test_a_rate_limited_queue_spaces_its_starts_through_a_real_worker(engine):
    """tay limit 2/1s: six quick jobs with four free worker slots start two per second
    (the engine's own start times say so), and tay queues shows the limit."""
    queue = "cli-limited"
    limited = cli(engine, "limit", queue, "2/1s")
    assert limited.returncode == 0 and "rate limit 2/1s" in limited.stdout, limited.stderr

    async def body(tay):
        handles = [await tay.enqueue("ops.ok", {"n": n}, queue=queue) for n in range(6)]
        for handle in handles:
            await handle.result(timeout=20)
        return [handle.id for handle in handles]

    ids = run_with_worker(engine, body)
    admin = SocketAdmin(engine.socket_path)
    started = sorted(admin.call("job", {"job_id": job_id})["job"]["attempted_at"]
                     for job_id in ids)
    # at most two in any second: each start is a second or more after the one two before
    # (the engine counts on its monotonic clock; 5 ms for the wall clock's drift)
    assert all(later - earlier >= 995 for earlier, later in zip(started, started[2:])), started
    shown = cli(engine, "queues")
    [row] = [line for line in shown.stdout.splitlines() if line.startswith(queue + " ")]
    assert "2/1s" in row
    assert f'tay_queue_rate_limit_per_second{{queue="{queue}"}} 2.0' in metrics_text(engine)
    assert cli(engine, "limit", queue, "none").returncode == 0
    assert cli(engine, "limit", queue, "2/fortnight").returncode == 2
    assert queue not in admin.call("status", {})["engine"]["rate_limited_queues"]


def test_cli_enqueue_submits_a_job_and_waits_for_its_result(engine):
    address = clients(engine)["socket"].call("status", {})["http"]["address"]

    async def body(tay):
        def run(*args):
            return asyncio.to_thread(cli, engine, "enqueue", *args)
        done = await run("ops.ok", "--args", '{"n": 3}', "--queue", "cli-enq", "--wait", "20")
        assert done.returncode == 0 and json.loads(done.stdout) == {"n": 3}, done.stderr
        failed = await run("ops.boom", "--wait", "20")
        assert failed.returncode == 1 and "failed: ValueError: bad input 42" in failed.stderr
        late = await run("nobody.v1", "--queue", "cli-enq-none", "--wait", "0.3")
        assert late.returncode == 1 and "is still available after 0.3 s" in late.stderr
        plain = await run("ops.ok", "--json", "--retries", "2", "--timeout", "5",
                          "--submission-id", "cli-once", "--url", address)
        assert plain.returncode == 0, plain.stderr
        submitted = json.loads(plain.stdout)
        again = json.loads((await run("ops.ok", "--json", "--retries", "2", "--timeout", "5",
                                      "--submission-id", "cli-once")).stdout)
        assert again["job_id"] == submitted["job_id"]  # the same key and definition
        return submitted["job_id"]

    job_id = run_with_worker(engine, body)
    job = clients(engine)["socket"].call("job", {"job_id": job_id})["job"]
    assert (job["max_attempts"], job["timeout_ms"]) == (3, 5_000)
    for bad in (["ops.ok", "--args", "[1]"], ["ops.ok", "--args", "nope"],
                ["ops.ok", "--delay", "-1"], ["ops.ok", "--retries", "x"]):
        assert cli(engine, "enqueue", *bad).returncode == 2, bad
    refused = cli(engine, "enqueue", "ops.ok", "--retries", "70000")
    assert refused.returncode == 1 and "retries" in refused.stderr
    unreachable = cli(engine, "enqueue", "ops.ok", "--socket", "/tmp/tay-no-such-dir/x.sock")
    assert unreachable.returncode == 1 and "no engine reachable" in unreachable.stderr


def test_cli_tasks_shows_what_each_task_did_and_how_long_it_ran(engine):
    queue = "cli-tasks"

    async def body(tay):
        for n in range(3):
            await (await tay.enqueue("ops.ok", {"n": n}, queue=queue)).result(timeout=20)

    run_with_worker(engine, body)
    shown = cli(engine, "tasks", "--limit", "1000")
    assert shown.returncode == 0, shown.stderr
    header, *rows = shown.stdout.splitlines()
    assert header.split()[:4] == ["QUEUE", "TASK", "ENQUEUED", "COMPLETED"]
    [row] = [line.split() for line in rows if line.startswith(queue + " ")]
    assert row[1:4] == ["ops.ok", "3", "3"] and row[9] == "<=" and row[-1] == "0"
    as_json = json.loads(cli(engine, "tasks", "--json", "--limit", "1000").stdout)
    [found] = [t for t in as_json["tasks"] if t["queue"] == queue]
    assert found["runs"] == 3 and sum(found["run_histogram"]) == 3
    hour = cli(engine, "tasks", "--last-hour", "--limit", "1000")
    assert hour.returncode == 0 and hour.stdout.rstrip().endswith(
        "in the last hour; failed counts failures, time-outs and discards"), hour.stdout
    [row] = [line.split() for line in hour.stdout.splitlines() if line.startswith(queue + " ")]
    assert row[1:4] == ["ops.ok", "3", "3"]  # all three within the hour
    assert cli(engine, "tasks", "--limit", "1001").returncode == 2


def test_cli_commands_exit_codes_and_json(engine):
    status = cli(engine, "status", "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["type"] == "admin_status"
    assert cli(engine, "pause", "cli-q").returncode == 0
    queues = cli(engine, "queues")
    assert queues.returncode == 0 and "cli-q" in queues.stdout and "paused" in queues.stdout
    assert cli(engine, "resume", "cli-q", "--json").returncode == 0
    scaled = cli(engine, "scale", "cli-q", "4")
    assert scaled.returncode == 0 and "4 (scaled; configured 10)" in scaled.stdout
    assert "4 (scaled; configured 10)" in cli(engine, "queues").stdout
    assert "cli-q 4" in cli(engine, "status").stdout
    back = cli(engine, "scale", "cli-q", "configured", "--json")
    assert back.returncode == 0 and json.loads(back.stdout)["queue"]["credits"] == 10
    for bad in ("0", "65537", "many"):
        assert cli(engine, "scale", "cli-q", bad).returncode == 2
    missing = cli(engine, "job", "0" * 31 + "2")
    assert missing.returncode == 1 and "not_found" in missing.stderr
    assert cli(engine, "jobs", "--state", "nope").returncode == 2
    assert cli(engine, "jobs", "--limit", "0").returncode == 2
    listing = cli(engine, "jobs", "--limit", "2")
    assert listing.returncode == 0 and listing.stdout.startswith("ID")
    unreachable = cli(engine, "status", "--socket", "/tmp/tay-no-such-dir/none.sock")
    assert unreachable.returncode == 1 and "no engine reachable" in unreachable.stderr
    version = cli(engine, "--version")
    assert version.returncode == 0 and version.stdout.startswith("tay ")


def test_cli_lists_shows_and_cancels_a_schedule(engine):
    schedule_id = "admin-every-cli"  # test_status_reads expects this prefix only
    admin = clients(engine)["socket"]

    async def body(tay):
        await tay.every("ops.ok", minutes=5, kwargs={"n": 5}, declaration_id=schedule_id)
        return await until(lambda: admin.call("schedule", {"schedule_id": schedule_id})
                           ["schedule"]["last_job"])

    delivered = run_with_worker(engine, body)
    listing = cli(engine, "schedules")
    assert listing.returncode == 0, listing.stderr
    header, *rows = listing.stdout.splitlines()
    assert header.split() == ["ID", "TASK", "RULE", "OVERLAP", "NEXT", "LAST"]
    [row] = [line for line in rows if line.startswith(schedule_id + " ")]
    assert "ops.ok" in row and "every 5 min" in row and "cancelled" not in row
    page = json.loads(cli(engine, "schedules", "--json", "--limit", "100").stdout)
    [listed] = [s for s in page["schedules"] if s["id"] == schedule_id]
    assert listed["every_ms"] == 300_000 and len(listed["next_occurrences"]) == 5
    shown = cli(engine, "schedule", "show", schedule_id)
    assert shown.returncode == 0, shown.stderr
    assert "every 5 min" in shown.stdout and delivered["id"] in shown.stdout
    assert "next occurrences:" in shown.stdout and "{'n': 5}" in shown.stdout
    # run now: one more job of the definition, outside the cadence
    ran = cli(engine, "schedule", "run", schedule_id)
    assert ran.returncode == 0 and ran.stdout.startswith(f"schedule {schedule_id}: enqueued "
                                                         "job "), ran.stderr
    ran_id = ran.stdout.split()[4]
    assert ran_id != delivered["id"]
    job = admin.call("job", {"job_id": ran_id})["job"]
    assert (job["task"], job["args"]) == ("ops.ok", {"n": 5})
    after = admin.call("schedule", {"schedule_id": schedule_id})["schedule"]
    assert after["last_job"]["id"] == delivered["id"]  # not an occurrence
    missing = cli(engine, "schedule", "run", "no-such-schedule")
    assert missing.returncode == 1 and "schedule_not_found" in missing.stderr
    # paused: shown as such everywhere; a resume over HTTP names the next due time
    paused = cli(engine, "schedule", "pause", schedule_id)
    assert paused.returncode == 0 and paused.stdout == f"schedule {schedule_id} paused\n"
    assert "yes: no occurrence until resumed" in cli(engine, "schedule", "show",
                                                     schedule_id).stdout
    [row] = [line for line in cli(engine, "schedules").stdout.splitlines()
             if line.startswith(schedule_id + " ")]
    assert " paused " in row
    assert schedule_id in cli(engine, "status").stdout.split("paused:")[1]
    address = admin.call("status", {})["http"]["address"]
    resumed = cli(engine, "schedule", "resume", schedule_id, "--url", address)
    assert resumed.returncode == 0 and resumed.stdout.startswith(
        f"schedule {schedule_id} resumed; next "), resumed.stderr
    assert admin.call("schedule", {"schedule_id": schedule_id})["schedule"]["paused"] is False

    cancelled = cli(engine, "schedule", "cancel", schedule_id)
    assert cancelled.returncode == 0 and cancelled.stdout.startswith(
        f"schedule {schedule_id} cancelled at "), cancelled.stderr
    over_http = json.loads(cli(engine, "schedule", "show", schedule_id, "--json",
                               "--url", address).stdout)["schedule"]
    assert over_http["cancelled_at"] is not None and over_http["next_occurrences"] == []
    again = json.loads(cli(engine, "schedule", "cancel", schedule_id, "--json").stdout)
    assert again["schedule"]["cancelled_at"] == over_http["cancelled_at"]  # changes nothing
    [row] = [line for line in cli(engine, "schedules").stdout.splitlines()
             if line.startswith(schedule_id + " ")]
    assert "cancelled" in row
    missing = cli(engine, "schedule", "cancel", "no-such-schedule")
    assert missing.returncode == 1 and "schedule_not_found" in missing.stderr
    assert cli(engine, "schedules", "--limit", "101").returncode == 2
    assert cli(engine, "schedule", schedule_id).returncode == 2  # show or cancel is required


def test_paused_queue_its_limits_and_failure_details_survive_a_restart(engine):
    admin = clients(engine)["socket"]
    admin.call("pause_queue", {"queue": "durable-q"})
    admin.call("scale_queue", {"queue": "durable-q", "concurrency": 2})
    admin.call("limit_queue", {"queue": "durable-q", "starts": 7, "period_ms": 60_000})

    async def body(tay):
        handle = await tay.enqueue("ops.boom", {}, queue="durable-fail")
        await until(lambda: admin.call("job", {"job_id": handle.id})["job"]["state"] == "discarded")
        tenants = [await tay.enqueue("ops.ok", {"tenant": name}, queue="durable-args")
                   for name in ("a", "b")]
        assert [await h.result(timeout=30) for h in tenants] == [{"n": 0}, {"n": 0}]
        admin.call("delete_job", {"job_id": tenants[1].id})
        return handle.id, tenants[0].id, tenants[1].id

    failed, tenant_a, tenant_b = run_with_worker(engine, body)
    admin.close()
    engine.stop()
    engine.start()
    admin = clients(engine)["socket"]
    assert "durable-q" in admin.call("status", {})["engine"]["paused_queues"]
    assert admin.call("status", {})["engine"]["scaled_queues"]["durable-q"] == 2
    assert admin.call("status", {})["engine"]["rate_limited_queues"]["durable-q"] == {
        "starts": 7, "period_ms": 60_000}
    admin.call("scale_queue", {"queue": "durable-q", "concurrency": None})
    admin.call("limit_queue", {"queue": "durable-q", "starts": None, "period_ms": None})
    job = admin.call("job", {"job_id": failed})["job"]
    assert job["failure"]["type"] == "ValueError" and job["attempts"][-1]["outcome"] == "discarded"
    # finished jobs recovered into columns are read for their args too
    found = admin.call("jobs", {"state": "completed", "args": {"tenant": "a"}})["jobs"]
    assert [row["id"] for row in found] == [tenant_a]
    with pytest.raises(AdminRefused) as deleted:  # deleted before the restart: still gone
        admin.call("job", {"job_id": tenant_b})
    assert deleted.value.code == "not_found"
    admin.call("resume_queue", {"queue": "durable-q"})


def test_the_day_history_counts_jobs_and_survives_a_clean_stop_but_not_a_kill(engine):
    """Today's row counts what ran; a clean stop records it (the restart shows the same
    days); a kill -9 loses what was counted since the last record, never a job."""
    admin = clients(engine)["socket"]
    to_midnight = 86_400 - time.time() % 86_400
    if to_midnight < 60:  # one UTC day for the whole test
        time.sleep(to_midnight + 1)

    def today() -> tuple[int, int, int]:
        row = admin.call("history", {"days": 1})["days"][-1]
        assert row["day"] == time.time_ns() // 1_000_000 // 86_400_000 * 86_400_000
        return row["enqueued"], row["completed"], row["failed"]

    before = today()

    async def body(tay):
        for n in range(3):
            await (await tay.enqueue("ops.ok", {"n": n}, queue="history-q")).result(timeout=20)
        failing = await tay.enqueue("ops.boom", {}, queue="history-q")
        await until(lambda: admin.call("job", {"job_id": failing.id})["job"]["state"]
                    == "discarded")

    run_with_worker(engine, body)
    counted = today()
    assert [now - then for now, then in zip(counted, before)] == [4, 3, 1]
    week = admin.call("history", {"days": 7})["days"]
    assert len(week) == 7 and week == sorted(week, key=lambda row: row["day"])
    assert clients(engine)["http"].call("history", {"days": 7})["days"] == week
    shown = cli(engine, "history", "--days", "2")
    assert shown.returncode == 0, shown.stderr
    header, yesterday, day, total, note = shown.stdout.splitlines()
    assert header.split() == ["DAY", "(UTC)", "ENQUEUED", "COMPLETED", "FAILED"]
    assert day.split()[1:] == [str(n) for n in counted] and total.startswith("total")
    assert cli(engine, "history", "--days", "3661").returncode == 2
    admin.close()

    engine.stop()  # clean: records the days
    engine.start()
    admin = clients(engine)["socket"]
    assert today() == counted

    async def more(tay):
        await (await tay.enqueue("ops.ok", {"n": 9}, queue="history-q")).result(timeout=20)
        return admin.call("jobs", {"queue": "history-q", "state": "completed"})["jobs"]

    finished = run_with_worker(engine, more)
    assert today() == (counted[0] + 1, counted[1] + 1, counted[2])
    admin.close()
    engine.stop(signal.SIGKILL)  # well within the first minute: nothing recorded since start
    os.unlink(engine.socket_path)  # the killed server's (start waits for the new one's)
    engine.start()
    admin = clients(engine)["socket"]
    assert today() == counted  # the counts since the last record are lost...
    again = admin.call("jobs", {"queue": "history-q", "state": "completed"})["jobs"]
    assert {row["id"] for row in again} == {row["id"] for row in finished}  # ...never a job
    admin.close()
