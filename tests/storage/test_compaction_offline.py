"""Offline compaction (§3.8) at the storage layer: adoption, retention, renormalized
orders, reclaim, and what the new store replays to."""

from __future__ import annotations

import os
from pathlib import Path

from tay.storage import events as ev
from tay.storage.compaction.offline import compact_offline
from tay.storage.events.definition import build_definition
from tay.storage.recovery.recover import TableConsumer, recover
from tay.storage.v2 import Retention

DEFINITION = build_definition(worker_key="w", queue_key="q", args={"n": 1}, max_attempts=1)
OTHER_QUEUE = build_definition(worker_key="w", queue_key="a", args={}, max_attempts=1)


def job(n: int) -> bytes:
    return n.to_bytes(16, "big")


def write_history(root: Path) -> None:
    """Jobs 1-3 complete at 100..102 with results; 4 is cancelled at 150; 5-6 stay
    available (6 in queue "a", inserted later but sorted first by queue)."""
    from tay.storage.journal.writer import init_store

    init_store(str(root), durability="write")
    journal = recover(str(root), durability="write").journal
    events, seq = [], 1

    def add(event):
        nonlocal seq
        events.append((seq, event))
        seq += 1
        return seq - 1

    for n in (1, 2, 3):
        s1 = add(ev.job_inserted(job(n), 99, DEFINITION))
        s2 = add(ev.job_started(job(n), 100, s1, 1, s1))
        s3 = add(ev.job_finished(job(n), 99 + n, s2, execution_token=s2, outcome=ev.SUCCESS,
                                 diagnostic_code=None, disposition=ev.COMPLETED))
        add(ev.result_recorded(job(n), 99 + n, s3, {"n": n}))
    s = add(ev.job_inserted(job(4), 99, DEFINITION))
    add(ev.job_cancelled(job(4), 150, s, None))
    add(ev.job_inserted(job(5), 160, DEFINITION))
    add(ev.job_inserted(job(6), 170, OTHER_QUEUE))
    journal.append_batch(ev.journal_records(events))
    journal.sync()
    journal.close()


def replayed(root: Path) -> dict[bytes, object]:
    table = TableConsumer()
    recovered = recover(str(root), consumer=table, activate=False)
    assert recovered.store_version == 2
    return {state.id: state for state in table.table}


def test_first_adoption_translates_revisions_and_renormalizes_orders(data_dir):
    write_history(data_dir)
    result = compact_offline(str(data_dir), consumer=TableConsumer(), durability="write",
                             retention=Retention("infinity"), now_ms=lambda: 1_000)
    assert (result.source_version, result.adopted, result.reclaimed) == (1, True, True)
    assert (result.retained_jobs, result.expired_jobs) == (6, 0)
    assert sorted(os.listdir(data_dir)) == [".tay-owner.lock", "CURRENT", "SEGMENT-LEDGER",
                                            "STORE", "STORE-V2", "epochs"]
    jobs = replayed(data_dir)
    # logical: insert 1, start 2, finish 3, result 4; cycle 1; execution cleared
    assert [(j.revision, j.cycle, j.execution) for j in map(jobs.get, map(job, (1, 2, 3)))] == \
        [(4, 1, None)] * 3
    assert jobs[job(1)].result == {"n": 1}
    assert (jobs[job(4)].state, jobs[job(4)].revision) == ("cancelled", 2)
    assert (jobs[job(6)].ready_order, jobs[job(5)].ready_order) == (1, 2)  # queue "a" first


def test_retention_expires_terminal_jobs_and_a_zero_is_stored_as_one_hour(data_dir):
    write_history(data_dir)
    compact_offline(str(data_dir), consumer=TableConsumer(), durability="write",
                    retention=Retention("infinity"), now_ms=lambda: 1_000)
    # D = 0 (full purge) at captured_at 200: everything terminal at or before 200 expires
    result = compact_offline(str(data_dir), consumer=TableConsumer(), durability="write",
                             retention=Retention("hours", 0), now_ms=lambda: 200)
    assert (result.retained_jobs, result.expired_jobs) == (2, 4)
    assert result.retention == Retention("hours", 1)
    assert set(replayed(data_dir)) == {job(5), job(6)}
    # without a retention the durable one (1 h) applies from now on
    again = compact_offline(str(data_dir), consumer=TableConsumer(), durability="write")
    assert again.retention == Retention("hours", 1) and again.source_version == 2
    assert os.listdir(data_dir / "epochs") == [f"e-{again.epoch_id.hex()}"]


def test_expiry_boundary_is_inclusive(data_dir):
    write_history(data_dir)
    hour = 3_600_000
    result = compact_offline(str(data_dir), consumer=TableConsumer(), durability="write",
                             retention=Retention("hours", 1), now_ms=lambda: 101 + hour)
    # terminal_at 100 and 101 are <= captured_at - D; 102 and 150 are not
    assert result.expired_jobs == 2
    assert job(1) not in replayed(data_dir) and job(3) in replayed(data_dir)


def test_a_leaked_candidate_is_removed_by_the_next_compaction(data_dir):
    write_history(data_dir)
    compact_offline(str(data_dir), consumer=TableConsumer(), durability="write")
    leaked = data_dir / "epochs" / f".tay-candidate-{'ab' * 16}.tmp"
    (leaked / "segments").mkdir(parents=True)
    (leaked / "segments" / f"{1:020d}.tay").write_bytes(b"x" * 44)
    assert recover(str(data_dir), activate=False).store_version == 2  # ignored by readers
    compact_offline(str(data_dir), consumer=TableConsumer(), durability="write")
    assert not leaked.exists()
