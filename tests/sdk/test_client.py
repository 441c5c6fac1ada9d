"""``Tay`` against a scripted peer: bootstrap, requests, executions, reconnects."""

import asyncio

import pytest

from tay import Tay
from tay.errors import ConnectionLost, ModeError, ServerError, TaskRegistrationError, ValidationError

from .peer import Peer


def fast(path, **kwargs):
    return Tay(socket_path=path, reconnect_initial_delay=0.01, reconnect_max_delay=0.05, connect_timeout=2, **kwargs)


def add(left: int, right: int) -> dict:
    return {"sum": left + right}


def test_bootstrap_is_hello_then_schedules_then_sorted_registrations(run, peer_path):
    async def scenario():
        peer = await Peer(peer_path).start()
        tay = fast(peer_path, mode="worker", capacity=3, client_id="w-1")
        tay.task(add, name="b.add")
        tay.task(name="a.tick", every={"seconds": 30})(lambda: None)
        async with tay:
            assert tay.connected
        await peer.stop()
        return peer.received

    received = run(scenario())
    assert [m["type"] for m in received] == ["hello", "schedule", "register_tasks"]
    hello = received[0]
    assert {k: hello[k] for k in ("mode", "runtime_id", "max_concurrency", "version")} == {
        "mode": "worker", "runtime_id": "w-1", "max_concurrency": 3, "version": 1}
    assert received[1]["every"] == {"seconds": 30} and received[1]["declaration_id"].startswith("python:a.tick:")
    assert received[2]["tasks"] == ["a.tick", "b.add"]


def test_client_mode_declares_zero_capacity_and_cannot_register(run, peer_path):
    async def scenario():
        peer = await Peer(peer_path).start()
        async with fast(peer_path, mode="client") as tay:
            tay.task(add)
            with pytest.raises(ModeError):
                await tay.register_tasks(add.__module__ + ".add")
        await peer.stop()
        return peer.received

    received = run(scenario())
    assert received[0]["max_concurrency"] == 0 and [m["type"] for m in received] == ["hello"]


def test_enqueue_sends_task_args_options_and_returns_handle(run, peer_path):
    async def scenario():
        peer = await Peer(peer_path).start()
        async with fast(peer_path, mode="client") as tay:
            handle = await tay.enqueue("demo.add", {"left": 1}, submission_id="s-1", durability="volatile")
            with pytest.raises(ValidationError, match="supplied twice: queue"):
                await tay.enqueue("demo.add", options={"queue": "a"}, queue="b")
            with pytest.raises(ValidationError, match="exponential"):
                await tay.enqueue("demo.add", backoff="linear")
        await peer.stop()
        return peer.received[-1], handle

    message, handle = run(scenario())
    assert message["task"] == "demo.add" and message["args"] == {"left": 1}
    assert message["options"] == {"submission_id": "s-1", "durability": "volatile"}
    assert handle.id == "0" * 31 + "1" and handle.durability == "volatile"


def test_worker_mode_refuses_producer_calls(run, peer_path):
    async def scenario():
        peer = await Peer(peer_path).start()
        async with fast(peer_path, mode="worker") as tay:
            with pytest.raises(ModeError, match="worker mode"):
                await tay.enqueue("x")
            with pytest.raises(ModeError):
                await tay.every("x", seconds=1)
        await peer.stop()

    run(scenario())


def test_error_reply_raises_server_error_with_code(run, peer_path):
    async def scenario():
        peer = await Peer(peer_path).start()
        peer.handlers["result"] = lambda m: {"type": "error", "error": {"code": "result_missing"}}
        async with fast(peer_path, mode="client") as tay:
            handle = await tay.enqueue("t")
            with pytest.raises(ServerError) as caught:
                await handle.result()
        await peer.stop()
        return caught.value

    assert run(scenario()).code == "result_missing"


def test_execute_runs_sync_task_in_thread_and_reports_started_then_succeeded(run, peer_path):
    async def scenario():
        peer = await Peer(peer_path).start()
        tay = fast(peer_path, mode="worker")
        tay.task(add, name="demo.add")
        async with tay:
            await peer.wait_type("register_tasks")
            peer.send({"type": "execute", "request_id": "x1", "execution_id": "x1", "reservation_id": "r1",
                       "job_id": "j1", "task": "demo.add", "args": {"left": 3, "right": 4}, "timeout_ms": 1000})
            done = await peer.wait_type("succeeded")
        await peer.stop()
        return peer.types(), done

    types, done = run(scenario())
    assert types[-2:] == ["started", "succeeded"]
    assert (done["reservation_id"], done["execution_id"], done["job_id"], done["result"]) == ("r1", "x1", "j1", {"sum": 7})


def test_failures_unknown_tasks_and_oversized_results_are_reported_as_failed(run, peer_path):
    def boom():
        raise KeyError("missing invoice")

    async def scenario():
        peer = await Peer(peer_path).start()
        tay = fast(peer_path, mode="worker", capacity=3, max_result_bytes=10, include_traceback=False)
        tay.task(boom, name="boom")
        tay.task(name="big")(lambda: "x" * 100)
        async with tay:
            await peer.wait_type("register_tasks")
            for n, task in enumerate(["boom", "nope", "big"]):
                peer.send({"type": "execute", "request_id": f"x{n}", "execution_id": f"x{n}", "reservation_id": "r",
                           "job_id": "j", "task": task, "args": {}})
            await peer.wait_type("failed", 3)
        await peer.stop()
        return {m["execution_id"]: m["error"] for m in peer.received if m["type"] == "failed"}

    errors = run(scenario())
    assert errors["x0"] == {"type": "KeyError", "message": "'missing invoice'"}
    assert errors["x1"]["type"] == "TaskNotRegistered"
    assert errors["x2"]["type"] == "ResultTooLarge"


def test_cancel_execution_cancels_async_task_cooperatively(run, peer_path):
    async def scenario():
        peer = await Peer(peer_path).start()
        tay = fast(peer_path, mode="worker")

        @tay.task(name="slow")
        async def slow():
            await asyncio.sleep(30)

        async with tay:
            await peer.wait_type("register_tasks")
            peer.send({"type": "execute", "request_id": "x", "execution_id": "x", "reservation_id": "r", "job_id": "j",
                       "task": "slow", "args": {}})
            await peer.wait_type("started")
            peer.send({"type": "cancel_execution", "request_id": "c", "execution_id": "x", "reservation_id": "r"})
            failed = await peer.wait_type("failed")
        await peer.stop()
        return failed["error"]

    error = run(scenario())
    assert error["type"] == "CancelledError" and error["cancelled"] is True


def test_capacity_is_bounded_locally(run, peer_path):
    async def scenario():
        peer = await Peer(peer_path).start()
        tay = fast(peer_path, mode="worker", capacity=1)
        gate = asyncio.Event()

        @tay.task(name="wait")
        async def wait():
            await gate.wait()

        async with tay:
            await peer.wait_type("register_tasks")
            for n in range(2):
                peer.send({"type": "execute", "request_id": f"x{n}", "execution_id": f"x{n}", "reservation_id": f"r{n}",
                           "job_id": "j", "task": "wait", "args": {}})
            refused = await peer.wait_type("failed")
            gate.set()
            await peer.wait_type("succeeded")
        await peer.stop()
        return refused

    refused = run(scenario())
    assert refused["execution_id"] == "x1" and "capacity" in refused["error"]["message"]


def test_ping_is_answered_with_pong(run, peer_path):
    async def scenario():
        peer = await Peer(peer_path).start()
        async with fast(peer_path, mode="client"):
            peer.send({"type": "ping", "request_id": "p", "ping_id": "abc"})
            pong = await peer.wait_type("pong")
        await peer.stop()
        return pong

    assert run(scenario())["ping_id"] == "abc"


def test_reconnect_replays_desired_state_but_never_an_rpc(run, peer_path):
    async def scenario():
        peer = await Peer(peer_path).start()
        peer.handlers["status"] = lambda m: None  # never answered
        tay = fast(peer_path, mode="embedded")
        tay.task(add, name="a.add")
        tay.task(name="b.other")(lambda: 1)
        async with tay:
            schedule = await tay.every("a.add", minutes=5, kwargs={"left": 1, "right": 2})
            await tay.unregister_tasks("b.other")
            pending = asyncio.create_task(tay._request("status", {"job_id": "j"}))
            await peer.wait_type("status")
            peer.drop_all()
            with pytest.raises(ConnectionLost):
                await pending
            await peer.wait_type("register_tasks", 2)
            assert tay.connected or await tay.start()
            await schedule.cancel()
        await peer.stop()
        return peer

    peer = run(scenario())
    assert peer.connections == 2
    second = peer.types()[peer.types().index("status") + 1:]
    assert second[:3] == ["hello", "schedule", "register_tasks"] and "status" not in second
    registrations = [m["tasks"] for m in peer.received if m["type"] == "register_tasks"]
    assert registrations[-1] == ["a.add"]
    replayed = [m for m in peer.received if m["type"] == "schedule"][-1]
    assert replayed["declaration_id"] == "sched-1" and replayed["args"] == {"left": 1, "right": 2}


def test_start_times_out_with_a_clear_message_when_nothing_listens(run, socket_dir):
    async def scenario():
        tay = Tay(socket_path=f"{socket_dir}/none.sock", connect_timeout=0.2, mode="client")
        try:
            with pytest.raises(ConnectionLost, match="could not connect to Tay at .*none.sock"):
                await tay.start()
        finally:
            await tay.close()

    run(scenario())


def test_schedules_fetches_every_page(run, peer_path):
    pages = {None: {"schedules": [{"id": "a"}, {"id": "b"}], "next_cursor": "b"},
             "b": {"schedules": [{"id": "c"}], "next_cursor": None}}

    async def scenario():
        peer = await Peer(peer_path).start()
        peer.handlers["schedules"] = lambda m: {"type": "schedules", **pages[m.get("cursor")]}
        peer.handlers["schedule_status"] = lambda m: {"type": "schedule_status", "schedule": {"id": m["schedule_id"]}}
        async with fast(peer_path, mode="client") as tay:
            found = await tay.schedules(page_size=2)
            one = await tay.get_schedule("c")
            with pytest.raises(ValidationError, match="1..100"):
                await tay.schedule_page(limit=101)
        await peer.stop()
        return found, one, [m for m in peer.received if m["type"] == "schedules"]

    found, one, requests = run(scenario())
    assert [s["id"] for s in found] == ["a", "b", "c"] and one == {"id": "c"}
    assert [(r["limit"], r.get("cursor")) for r in requests] == [(2, None), (2, "b")]


def test_cron_schedule_payload(run, peer_path):
    async def scenario():
        peer = await Peer(peer_path).start()
        async with fast(peer_path, mode="client") as tay:
            await tay.schedule("t", cron="*/5 * * * *", kwargs={"x": 1}, timezone="+02:30", catch_up="all",
                               overlap="queue", start_at=1000, retries=2)
            with pytest.raises(ValidationError, match="delay or start_at"):
                await tay.schedule("t", cron="* * * * *", delay=1, start_at=2)
            with pytest.raises(ValidationError, match="timezone"):
                await tay.schedule("t", cron="* * * * *", timezone="Europe/Kyiv")
        await peer.stop()
        return peer.received[-1]

    message = run(scenario())
    assert {k: v for k, v in message.items() if k not in ("request_id", "version", "type")} == {
        "task": "t", "args": {"x": 1}, "cron": "*/5 * * * *", "timezone": "+02:30", "catch_up": "all",
        "overlap": "queue", "start_at": 1000, "options": {"retries": 2}}


def test_duplicate_task_names_are_refused():
    tay = Tay(socket_path="/tmp/x.sock")
    tay.task(add, name="same")
    assert tay.task(add, name="same").function is add
    with pytest.raises(TaskRegistrationError, match="already registered"):
        tay.task(lambda: 0, name="same")


@pytest.mark.parametrize("kwargs", [{"mode": "server"}, {"capacity": 0}, {"capacity": 65536},
                                    {"max_frame_bytes": 255}, {"request_timeout": 0},
                                    {"reconnect_initial_delay": 3, "reconnect_max_delay": 2}, {"client_id": "x" * 129}])
def test_constructor_bounds_are_validated_before_connecting(kwargs):
    with pytest.raises(ValidationError):
        Tay(socket_path="/tmp/x.sock", **kwargs)
