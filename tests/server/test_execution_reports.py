"""Execution reports over the real Unix socket: ids the engine never gave this connection
are ``unknown_execution``; a late report for an execution it really ran stays ``accepted``.
Also: a schedule ``delay`` too large for a timestamp is ``invalid_schedule``, never a
dropped connection."""

from __future__ import annotations

import time

import pytest

from tests.conformance.harness import Server

from .raw import RawClient

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]


@pytest.fixture(scope="module")
def server():
    server = Server().start()
    yield server
    server.close()


def worker(server: Server, task: str) -> RawClient:
    client = RawClient(server.socket)
    assert client.hello("worker", 1, runtime_id=f"w-{task}")["type"] == "hello_ok"
    assert client.request("register_tasks", tasks=[task])["type"] == "tasks_registered"
    return client


@pytest.mark.parametrize("report", ["started", "succeeded", "failed"])
def test_made_up_execution_ids_are_unknown_execution(server: Server, report: str) -> None:
    client = worker(server, f"made-up.{report}")
    try:
        fields = {"reservation_id": "never-issued", "execution_id": "never-issued"}
        if report == "succeeded":
            fields["result"] = {"stolen": True}
        if report == "failed":
            fields["error"] = {"type": "Boom"}
        reply = client.request(report, **fields)
        assert reply["type"] == "error" and reply["error"]["code"] == "unknown_execution"
        assert client.request("heartbeat")["type"] == "heartbeat_ok"  # the connection lives
    finally:
        client.close()


def test_ids_of_another_connection_are_unknown_execution(server: Server) -> None:
    owner, other = worker(server, "pair.owner"), worker(server, "pair.other")
    producer = RawClient(server.socket)
    try:
        producer.hello()
        enqueued = producer.request("enqueue", task="pair.owner", args={}, options={})
        execute = owner.next_pushed("execute")
        assert execute["job_id"] == enqueued["job_id"]
        ids = {k: execute[k] for k in ("reservation_id", "execution_id")}
        stolen = other.request("succeeded", result=1, **ids)
        assert stolen["error"]["code"] == "unknown_execution"
        assert owner.request("succeeded", result=2, **ids)["type"] == "accepted"
        result = producer.request("result", job_id=enqueued["job_id"])
        assert result == {"version": 1, "type": "result", "request_id": result["request_id"],
                          "result": 2}
    finally:
        for client in (owner, other, producer):
            client.close()


def test_late_report_of_a_timed_out_execution_is_accepted(server: Server) -> None:
    client = worker(server, "late.report")
    try:
        client.request("enqueue", task="late.report", args={}, options={"timeout_ms": 50})
        execute = client.next_pushed("execute")
        cancel = client.next_pushed("cancel_execution")
        assert cancel["execution_id"] == execute["execution_id"]
        ids = {k: execute[k] for k in ("reservation_id", "execution_id")}
        assert client.request("succeeded", result=None, **ids)["type"] == "accepted"
        assert client.request("started", **ids)["type"] == "accepted"
    finally:
        client.close()


@pytest.mark.parametrize("field", [{"delay": 1e308}, {"every": {"seconds": 1e308}}])
def test_overflowing_schedule_times_are_invalid_schedule(server: Server, field: dict) -> None:
    client = RawClient(server.socket)
    try:
        client.hello()
        body = {"task": "t", "every": {"seconds": 1}, **field}
        reply = client.request("schedule", **body)
        assert reply["type"] == "error" and reply["error"]["code"] == "invalid_schedule"
        assert client.request("heartbeat")["type"] == "heartbeat_ok"
        time.sleep(0.05)
        assert "Traceback" not in server.log()
    finally:
        client.close()
