"""kill -9 of a real ``tay serve`` in strict sync mode, then restart on the same data dir.

Each round (seeded; the seed and kill moment are printed and show in a failure) runs
producers and/or a worker against the server, kills it once a seeded amount of work was
acknowledged, restarts it and checks that nothing acknowledged was lost or rewritten: every
acknowledged enqueue exists with the same definition, every acknowledged completion keeps
its result (and never runs again), interrupted executions come back at the same attempt
(not lost) and complete once a worker reconnects, unacknowledged submission ids resubmit idempotently, and
``tay storage inspect --json`` agrees with what the server reported.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from tay.engine.validation.ids import job_id_from_submission
from tests.crash.cluster import ServerProcess, inspect_after_kill, inspect_store
from tests.crash.ledger import DEFINITION_FIELDS, TASK, Ledger, expected_result, produce, work
from tests.crash.wire import WireClient

GROUP_COMMIT = ("--group-commit-max-events", "64", "--group-commit-interval-ms", "2")
ROUNDS = [
    # (phase, seed, extra serve arguments)
    ("enqueue_burst", 11, ()),
    ("enqueue_burst", 12, ()),
    ("completions", 21, ()),
    ("completions", 22, ()),
    ("group_commit", 31, GROUP_COMMIT),
    ("group_commit", 32, GROUP_COMMIT),
]


def make_server(root: Path, *extra: str) -> ServerProcess:
    return ServerProcess(root / "data", str(root / "tay.sock"), root / "server.log", *extra)


async def first_life(server: ServerProcess, ledger: Ledger, phase: str, rng: random.Random) -> str:
    """Run ``phase`` against ``server`` and kill -9 it at a seeded moment; returns that moment.

    The moment is a seeded amount of acknowledged work (then a seeded sub-20 ms pause), not
    a wall-clock delay: on a loaded machine a delay could pass before anything was
    acknowledged and leave the round checking nothing.
    """
    sock = server.socket_path
    stop = asyncio.Event()
    tasks: list[asyncio.Future] = []
    acked = completed = 0
    if phase == "completions":  # a backlog first, then kill while completions stream in
        await asyncio.gather(*(produce(sock, ledger, p, 100, rng, "c") for p in range(3)))
        tasks.append(asyncio.ensure_future(work(sock, ledger, 0, rng.randint(4, 32), stop)))
        completed = rng.randint(5, 150)
    else:
        tasks += [asyncio.ensure_future(produce(sock, ledger, p, 150, rng, phase[0]))
                  for p in range(4)]
        acked = rng.randint(20, 400)
        if phase == "group_commit":
            tasks.append(asyncio.ensure_future(work(sock, ledger, 0, rng.randint(4, 32), stop)))
            completed = rng.randint(5, 80)
    pause = rng.uniform(0, 0.02)
    moment = f"acked>={acked} completed>={completed} +{pause * 1000:.0f}ms"
    await ledger.reached(moment, lambda l: len(l.acked) >= acked and len(l.completed) >= completed,
                         timeout=30)
    await asyncio.sleep(pause)
    server.kill9()
    stop.set()
    await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), timeout=30)
    return moment


async def check_restart(client: WireClient, ledger: Ledger) -> dict[str, dict]:
    """Every acknowledged enqueue and completion survived; returns job_id -> job as found."""
    found: dict[str, dict] = {}
    for submission, acked_job in ledger.acked.items():
        reply = await client.request("status", job_id=acked_job["id"])
        assert reply["type"] == "status", (submission, reply)
        job = reply["job"]
        for name in DEFINITION_FIELDS:
            assert job[name] == acked_job[name], (submission, name, job, acked_job)
        assert job["state"] != "executing", job  # nothing runs right after recovery
        assert job["attempt"] <= 1, job
        if job["id"] in ledger.completed:
            assert job["state"] == "completed", job
            result = await client.request("result", job_id=job["id"])
            assert result["result"] == ledger.completed[job["id"]], (job, result)
        elif job["id"] in ledger.executed:
            # Interrupted: it comes back at the same attempt, not lost. Whether it still reads
            # "retryable" or already "available" depends on the clock (its due time passes
            # about a second after recovery), so the state is not part of the contract.
            assert job["state"] in ("retryable", "available", "completed"), job
            assert job["attempt"] == 1, job
        found[job["id"]] = job
    return found


async def resubmit(client: WireClient, ledger: Ledger, rng: random.Random) -> None:
    """Unacknowledged submission ids land exactly once; acknowledged ones are idempotent."""
    again = list(ledger.unknown.items())
    again += rng.sample([(s, j["args"]) for s, j in ledger.acked.items()], min(20, len(ledger.acked)))
    for submission, args in again:
        reply = await client.request("enqueue", task=TASK, args=args,
                                     options={"submission_id": submission})
        assert reply["type"] == "enqueued", (submission, reply)
        assert reply["job_id"] == job_id_from_submission(submission).hex()
        if submission in ledger.acked:
            for name in DEFINITION_FIELDS:
                assert reply["job"][name] == ledger.acked[submission][name]
        ledger.acked[submission] = reply["job"]
    ledger.unknown.clear()


async def check_inspect_agrees(client: WireClient, ledger: Ledger, at_kill: dict) -> None:
    """The server's view after recovery is what ``inspect`` read from disk at the kill:
    interrupted executions became retryable, resubmissions that never landed are new."""
    counts: dict[str, int] = {}
    for job_id in ledger.job_ids():
        state = (await client.request("status", job_id=job_id))["status"]
        counts[state] = counts.get(state, 0) + 1
    disk = at_kill["job_states"]
    new_jobs = len(ledger.job_ids()) - at_kill["jobs"]
    assert at_kill["ok"] and new_jobs >= 0, (at_kill, counts)
    assert counts.get("completed", 0) == disk["completed"], (disk, counts)
    # Retryable jobs (including the interrupted executions) turn available once their due
    # time passes, which can happen before this count: only the sum is the contract.
    waiting = counts.get("retryable", 0) + counts.get("available", 0)
    assert waiting == disk["retryable"] + disk["executing"] + disk["available"] + new_jobs, (
        disk, counts)
    assert counts.get("available", 0) >= disk["available"] + new_jobs, (disk, counts)
    assert sum(counts.values()) == len(ledger.job_ids())


async def drain(server: ServerProcess, ledger: Ledger, completed_at_restart: dict[str, dict]) -> None:
    """A reconnected worker completes every job; nothing completed before runs again."""
    client = await WireClient.connect(server.socket_path)
    stop = asyncio.Event()
    worker = asyncio.ensure_future(work(server.socket_path, ledger, 1, 32, stop))
    job_ids = ledger.job_ids()

    def all_done(l: Ledger) -> bool:  # each job completed before the kill or by this worker
        return all(i in completed_at_restart or l.completed.get(i, {}).get("life") == 1
                   for i in job_ids)

    try:
        await ledger.reached("every job completed after the restart", all_done, timeout=60)
    finally:
        stop.set()
        received = await worker
    assert not set(received) & set(completed_at_restart), "a completed job was executed again"
    args_of = {job["id"]: job["args"] for job in ledger.acked.values()}
    for job_id in job_ids:
        reply = await client.request("status", job_id=job_id)
        assert reply.get("type") == "status" and reply.get("status") == "completed", reply
        reply = await client.request("result", job_id=job_id)
        assert reply.get("type") == "result" and "result" in reply, (job_id, reply)
        result = reply["result"]
        life = 0 if job_id in completed_at_restart else 1
        assert result == expected_result(args_of[job_id], life), (job_id, result)
    await client.close()


async def second_life(server: ServerProcess, ledger: Ledger, rng: random.Random,
                      at_kill: dict | None = None) -> None:
    """Restart after the kill: every acknowledged job is there, resubmitted unknowns are
    deduplicated, ``inspect`` taken at the kill agrees (when given), and the rest drains."""
    server.start()  # the kill left a stale socket file; the restart must replace it
    client = await WireClient.connect(server.socket_path)
    found = await check_restart(client, ledger)
    completed_at_restart = {i: j for i, j in found.items() if j["state"] == "completed"}
    await resubmit(client, ledger, rng)
    if at_kill is not None:
        await check_inspect_agrees(client, ledger, at_kill)
    await client.close()
    await drain(server, ledger, completed_at_restart)


def run_both_lives(server: ServerProcess, scenario: Callable[[], Awaitable[None]],
                   timeout_s: float, final: Callable[[Path], dict]) -> dict:
    """Run ``scenario``, stop the server cleanly and return ``final(data_dir)``; on any
    failure print the server's log, and never leave the server running."""
    try:
        asyncio.run(asyncio.wait_for(scenario(), timeout=timeout_s))
        server.stop()
        return final(server.data_dir)
    except BaseException:
        print(server.log()[-4000:])
        raise
    finally:
        if server.process is not None:
            server.kill9()


@pytest.mark.parametrize("phase,seed,extra", ROUNDS, ids=[f"{p}-{s}" for p, s, _ in ROUNDS])
def test_kill9_then_restart_keeps_every_acknowledgement(scratch, phase, seed, extra):
    rng = random.Random(seed)
    server = make_server(scratch, *extra)
    ledger = Ledger()

    async def scenario() -> None:
        server.start()
        moment = await first_life(server, ledger, phase, rng)
        print(f"phase={phase} seed={seed} kill at {moment}: acked={len(ledger.acked)} "
              f"unknown={len(ledger.unknown)} executed={len(ledger.executed)} "
              f"completed={len(ledger.completed)}")
        at_kill = inspect_after_kill(server.data_dir)  # offline, between the kill and the restart
        await second_life(server, ledger, rng, at_kill)

    report = run_both_lives(server, scenario, timeout_s=100, final=inspect_store)
    assert report["ok"] and report["jobs"] == len(ledger.job_ids())
    assert report["job_states"]["completed"] == len(ledger.job_ids()), report
