"""``tay storage inspect`` refuses what ``tay serve`` refuses: it replays into the engine
(the same consumer) and checks the same budgets, taken from the same flags and variables."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.crash.cluster import tree_digest
from tay.storage import events as ev
from tay.storage.events.definition import build_definition
from tay.storage.events.schedules import legacy_cancelled
from tay.storage.journal.writer import init_store
from tay.storage.recovery.recover import recover

REPO = Path(__file__).resolve().parents[2]
DEFINITION = build_definition(worker_key="w", queue_key="q", args={"pad": "x" * 200},
                              max_attempts=1)


def tay(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tay.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


def write_events(root: Path, events: list[ev.Event]) -> None:
    init_store(str(root), durability="write")
    journal = recover(str(root), durability="write").journal
    journal.append_batch(ev.journal_records(list(enumerate(events, start=1))))
    journal.sync()
    journal.close()


def serve(root: Path, *flags: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``tay serve`` on ``root``; these stores are refused before it ever listens."""
    socket_dir = tempfile.mkdtemp(prefix="tay-insp-")
    try:
        return tay("serve", "--data-dir", str(root), "--durability", "write", "--socket",
                   os.path.join(socket_dir, "s.sock"), *flags, env=env)
    finally:
        os.rmdir(socket_dir)


def inspect(root: Path, *flags: str, env: dict[str, str] | None = None) -> tuple[int, dict]:
    done = tay("storage", "inspect", "--data-dir", str(root), "--json", *flags, env=env)
    return done.returncode, json.loads(done.stdout) if done.stdout else {"stderr": done.stderr}


def test_a_cancellation_of_a_schedule_never_registered_is_refused_by_both(data_dir):
    write_events(data_dir, [legacy_cancelled(schedule_id="nightly", at=1_000,
                                             expected_revision=1)])
    before = tree_digest(data_dir)
    code, report = inspect(data_dir)
    assert code == 1, report
    assert (report["class"], report["sequence"]) == ("consumer_rejected", 1)
    refused = serve(data_dir)
    assert refused.returncode == 1
    assert report["reason"] in refused.stderr and "consumer_rejected" in refused.stderr
    assert tree_digest(data_dir) == before


def test_a_store_over_the_state_budget_is_refused_by_both_with_the_same_flag(data_dir):
    write_events(data_dir, [ev.job_inserted(n.to_bytes(16, "big"), 100 + n, DEFINITION)
                            for n in range(1, 6)])
    code, report = inspect(data_dir)
    assert code == 0, report
    used = report["state_bytes"]["used"]
    assert report["jobs"] == 5 and report["state_bytes"]["limit"] == 268_435_456 and used > 0

    tight = str(used - 1)
    for flags, env in ((("--max-state-bytes", tight), None),
                       ((), {"TAY_MAX_STATE_BYTES": tight})):
        code, report = inspect(data_dir, *flags, env=env)
        assert code == 1, report
        assert (report["class"], report["reason"]) == ("resource_limit", "max_state_bytes")
        assert (report["required"], report["configured"]) == (used, used - 1)
        refused = serve(data_dir, *flags, env=env)
        assert refused.returncode == 1 and "max_state_bytes" in refused.stderr, refused.stderr

    code, report = inspect(data_dir, "--max-state-bytes", str(used))
    assert code == 0 and report["state_bytes"] == {"used": used, "limit": used}


@pytest.mark.parametrize(("flag", "value"), [("--max-state-bytes", "lots"),
                                              ("--max-history-bytes", "0"),
                                              ("--max-segments", "-1")])
def test_bad_budget_flags_are_usage_errors_naming_the_flag(data_dir, flag, value):
    done = tay("storage", "inspect", "--data-dir", str(data_dir), flag, value)
    assert done.returncode == 2 and flag in done.stderr, done.stderr


def test_inspect_counts_jobs_as_on_disk_and_the_executions_a_start_would_settle(data_dir):
    job = (1).to_bytes(16, "big")
    write_events(data_dir, [ev.job_inserted(job, 100, DEFINITION),
                            ev.job_started(job, 101, 1, 1, 1)])
    code, report = inspect(data_dir)
    assert code == 0, report
    assert report["job_states"]["executing"] == 1 and report["interrupted_executions"] == 1
    text = tay("storage", "inspect", "--data-dir", str(data_dir))
    assert text.returncode == 0 and "executing" in text.stdout
