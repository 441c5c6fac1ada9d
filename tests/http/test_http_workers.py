"""HTTP worker sessions end to end through the connection protocol and a real engine:
registration, tokens, long-poll claims, reports, cancellation, expiry and recovery."""

from __future__ import annotations

import os
from pathlib import Path

from tay.server.http.config import HttpLimits
from tay.storage.layout import LOCK_NAME

from .conftest import Client, claim_waiting, http_stack, request, run, until

REGISTER = {"runtime_id": "w1", "tasks": ["demo.add"], "capacity": 1}


async def register(client: Client, **overrides) -> str:
    response = await client.call(request("POST", "/workers", {**REGISTER, **overrides}))
    assert response.status == 201, response.body
    token = response.json()["worker_token"]
    assert set(response.json()) == {"worker_token"} and len(token) == 43
    return token


def auth(token: str, body=None, path="/queues/default/claim", method="POST") -> bytes:
    return request(method, path, body, headers=(b"authorization: Bearer " + token.encode(),))


async def enqueue(client: Client, **options) -> str:
    response = await client.call(request("POST", "/jobs", {"task": "demo.add", "args": {},
                                                           "options": options}))
    assert response.status == 201, response.body
    return response.json()["job_id"]


def test_claim_execute_complete_and_read_the_result():
    async def scenario():
        async with http_stack() as server:
            producer, worker = Client(server), Client(server)
            job_id = await enqueue(producer)
            token = await register(worker)
            event = (await worker.call(auth(token))).json()
            assert event["version"] == 1 and event["type"] == "execute"
            assert event["job_id"] == job_id and event["request_id"] == event["execution_id"]
            ids = {k: event[k] for k in ("reservation_id", "execution_id")}
            started = await worker.call(auth(token, ids, "/workers/started"))
            assert started.json() == {"type": "accepted"}
            done = await worker.call(auth(token, {**ids, "outcome": "success",
                                                  "result": {"sum": 3}}, "/workers/complete"))
            assert done.json() == {"type": "accepted"}
            result = await producer.call(request("GET", f"/jobs/{job_id}/result"))
            assert result.json() == {"type": "result", "result": {"sum": 3}}
            again = await worker.call(auth(token, {**ids, "outcome": "success", "result": 1},
                                           "/workers/complete"))
            assert again.status == 200  # a stale report is accepted, not an error
            wrong = await worker.call(auth(token, {"reservation_id": "x", "execution_id": "y"},
                                           "/workers/started"))
            assert (wrong.status, wrong.code) == (400, "unknown_execution")
    run(scenario())


def test_failure_outcome_makes_result_task_failed():
    async def scenario():
        async with http_stack() as server:
            producer, worker = Client(server), Client(server)
            job_id = await enqueue(producer)
            token = await register(worker)
            event = (await worker.call(auth(token))).json()
            ids = {k: event[k] for k in ("reservation_id", "execution_id")}
            await worker.call(auth(token, {**ids, "outcome": "failure",
                                           "error": {"type": "ValueError", "message": "no"}},
                                   "/workers/complete"))
            result = await producer.call(request("GET", f"/jobs/{job_id}/result"))
            assert (result.status, result.code) == (409, "task_failed")
    run(scenario())


def test_long_poll_returns_204_and_one_claim_waits_per_session():
    async def scenario():
        async with http_stack(HttpLimits(claim_wait_s=0.05)) as server:
            worker = Client(server)
            token = await register(worker)
            empty = await worker.call(auth(token))
            assert (empty.status, empty.body) == (204, b"")
            server.sessions.claim_wait_s = 5  # the next claim waits long enough to be seen
            worker.send(auth(token))
            await until(lambda: claim_waiting(server), "the claim is parked")
            other = Client(server)
            busy = await other.call(auth(token))
            assert (busy.status, busy.code) == (400, "claim_in_progress")
    run(scenario())


def test_waiting_claim_is_woken_by_a_dispatch():
    async def scenario():
        async with http_stack(HttpLimits(claim_wait_s=5)) as server:
            producer, worker = Client(server), Client(server)
            token = await register(worker)
            worker.send(auth(token))
            await until(lambda: claim_waiting(server), "the claim is parked")
            job_id = await enqueue(producer)  # the enqueue's dispatch wakes the parked claim
            event = (await worker.responses(2))[1]  # after the registration response
            assert event.json()["job_id"] == job_id
    run(scenario())


def test_a_parked_claim_is_woken_by_a_writer_stop():
    """A real journal failure (a second name for the owner lock fails the post-write path
    check) stops the writer; a claim parked on an empty queue answers 503 at once."""
    async def scenario():
        async with http_stack(HttpLimits(claim_wait_s=20)) as server:
            producer, worker = Client(server), Client(server)
            token = await register(worker)
            worker.send(auth(token))
            await until(lambda: claim_waiting(server), "the claim is parked")
            data_dir = Path(server.admin.config.data_dir)
            os.link(data_dir / LOCK_NAME, data_dir.parent / "second-name.lock")
            failed = await producer.call(request("POST", "/jobs", {"task": "demo.add", "args": {}}))
            assert (failed.status, failed.code) == (503, "unknown_outcome")
            claim = (await worker.responses(2, timeout=5))[1]  # not the 20 s timeout
            assert (claim.status, claim.code) == (503, "unavailable")
    run(scenario())


def test_tokens_are_checked():
    async def scenario():
        async with http_stack() as server:
            client = Client(server)
            token = await register(client)
            other = "B" * 43 if token != "B" * 43 else "C" * 43
            unknown = await client.call(auth(other))
            assert (unknown.status, unknown.code) == (401, "unknown_worker")
            wrong = await client.call(auth(token, path="/queues/other/claim"))
            assert (wrong.status, wrong.code) == (409, "wrong_queue")
            closed = await client.call(auth(token, path="/workers", method="DELETE"))
            assert closed.json() == {"type": "closed"}
            after = await client.call(auth(token))
            assert (after.status, after.code) == (401, "unknown_worker")
    run(scenario())


def test_cancelling_a_running_job_delivers_cancel_execution():
    async def scenario():
        async with http_stack() as server:
            producer, worker = Client(server), Client(server)
            job_id = await enqueue(producer)
            token = await register(worker)
            execute = (await worker.call(auth(token))).json()
            cancelled = await producer.call(request("DELETE", f"/jobs/{job_id}"))
            assert cancelled.json()["type"] == "cancelled"
            event = (await worker.call(auth(token))).json()
            assert event["type"] == "cancel_execution"
            assert event["execution_id"] == execute["execution_id"]
    run(scenario())


def test_expired_session_releases_capacity_and_its_job_is_redelivered():
    async def scenario():
        async with http_stack(HttpLimits(session_idle_s=0.1, claim_wait_s=2)) as server:
            producer, first, second = Client(server), Client(server), Client(server)
            job_id = await enqueue(producer)
            lost = await register(first, runtime_id="lost")
            assert (await first.call(auth(lost))).json()["job_id"] == job_id
            survivor = await register(second, runtime_id="survivor")
            second.send(auth(survivor))  # a waiting claim keeps the survivor alive
            # the first session stops claiming and expires after 0.1 s idle
            await until(lambda: len(server.sessions) == 1, "the idle session expired")
            gone = await first.call(auth(lost))
            assert gone.code == "unknown_worker"
            event = (await second.responses(2, timeout=5))[1].json()
            assert event["job_id"] == job_id and event["type"] == "execute"
            status = await producer.call(request("GET", f"/jobs/{job_id}"))
            assert status.json()["job"]["attempt"] >= 1
    run(scenario())


def test_registration_refused_at_the_connection_limit():
    async def scenario():
        async with http_stack(spare_connections=lambda: 1) as server:
            client = Client(server)
            await register(client)
            refused = await client.call(request("POST", "/workers", REGISTER))
            assert (refused.status, refused.code) == (400, "invalid_worker")
    run(scenario())


def test_buffer_overflow_ends_the_session():
    async def scenario():
        async with http_stack() as server:
            client = Client(server)
            token = await register(client)
            (session,) = server.sessions.sessions.values()
            from tay.engine.effects import CancelExecution
            for index in range(session.buffer_limit + 1):
                session.deliver(CancelExecution(session, f"r{index}", "res", "exe"))
            response = await client.call(auth(token))
            assert response.code == "unknown_worker"
    run(scenario())


def test_schedule_routes_reach_the_engine():
    async def scenario():
        async with http_stack() as server:
            client = Client(server)
            for name in ("s-b", "s-a", "s-c"):
                created = await client.call(request("POST", "/schedules", {
                    "declaration_id": name, "task": "demo.add", "every": {"hours": 1}}))
                assert created.status == 201, created.body
                assert created.json()["type"] == "scheduled"
            page = (await client.call(request("GET", "/schedules?limit=2"))).json()
            assert [s["id"] for s in page["schedules"]] == ["s-a", "s-b"]
            rest = (await client.call(request("GET", f"/schedules?cursor={page['next_cursor']}")))
            assert [s["id"] for s in rest.json()["schedules"]] == ["s-c"]
            assert rest.json()["next_cursor"] is None
            one = await client.call(request("GET", "/schedules/s-a"))
            assert one.json()["schedule"]["id"] == "s-a"
            gone = await client.call(request("DELETE", "/schedules/s-a"))
            assert gone.json()["type"] == "schedule_cancelled"
            assert gone.json()["schedule"]["cancelled_at"] is not None
            missing = await client.call(request("GET", "/schedules/nope"))
            assert (missing.status, missing.code) == (404, "schedule_not_found")
            invalid = await client.call(request("POST", "/schedules", {"task": "demo.add"}))
            assert (invalid.status, invalid.code) == (400, "invalid_schedule")
            huge = await client.call(request("POST", "/schedules", {
                "task": "demo.add", "every": {"hours": 1}, "delay": 1e308}))
            assert (huge.status, huge.code) == (400, "invalid_schedule")  # was a 500
            bad_page = await client.call(request("GET", "/schedules?limit=101"))
            assert bad_page.status == 400
    run(scenario())


def test_job_ids_that_are_not_hex_are_invalid_job_id_and_unknown_ones_not_found():
    async def scenario():
        async with http_stack() as server:
            client = Client(server)
            bad = await client.call(request("GET", "/jobs/not-hex"))
            assert (bad.status, bad.code) == (400, "invalid_job_id")
            missing = await client.call(request("GET", "/jobs/" + "ab" * 16 + "/result"))
            assert (missing.status, missing.code) == (404, "not_found")
    run(scenario())


def test_tokens_never_reach_the_logs(caplog):
    async def scenario():
        async with http_stack(HttpLimits(session_idle_s=0.05)) as server:
            client = Client(server)
            token = await register(client)
            (session,) = server.sessions.sessions.values()
            assert token not in repr(session)
            await until(lambda: len(server.sessions) == 0, "the idle session expired")
            return token  # (its expiry logged the session's end)
    caplog.set_level("DEBUG")
    token = run(scenario())
    assert "session ended" in caplog.text and "registered" in caplog.text
    assert token not in caplog.text
