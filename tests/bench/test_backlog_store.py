"""benchmarks.backlog_store: a real server, a backlog enqueued with no worker, kill -9; the
store it leaves restarts with every acknowledged job waiting, held at its insert."""

from __future__ import annotations

import shutil

import pytest

from benchmarks import backlog_store
from tay.engine.retained.jobs import LazyJobEntry
from tests.engine.test_lazy_rows import recovered
from tests.storage.conftest import scratch_path


def test_a_backlog_store_restarts_with_every_job_waiting_held_as_a_row() -> None:
    root = scratch_path("backlog")
    try:
        assert backlog_store.main(["--store", str(root), "--jobs", "120",
                                   "--payload-bytes", "64"]) == 0
        engine = recovered(root)
        entries = list(engine.jobs.values())
        assert len(entries) == 120 and not engine.finished
        assert all(type(entry) is LazyJobEntry for entry in entries)  # none built yet
        assert {entry.state.state for entry in entries} == {"available"}
        assert {entry.state.definition["args"]["payload"] for entry in entries} == {"x" * 64}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_an_existing_store_is_refused(capsys) -> None:
    root = scratch_path("backlog")
    root.mkdir(parents=True)
    try:
        with pytest.raises(SystemExit) as exited:
            backlog_store.main(["--store", str(root)])
        assert exited.value.code == 2
        assert "exists already" in capsys.readouterr().err
    finally:
        shutil.rmtree(root, ignore_errors=True)
