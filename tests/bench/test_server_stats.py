"""The bench reads the committer's counters from the line ``tay serve`` logs at shutdown, and its
event-loop stall warnings."""

from __future__ import annotations

import json

from tay.bench.server import read_commit_stats
from tay.server.app import COMMIT_STATS_MARKER


def test_reads_the_last_counters_line_after_the_start_offset(tmp_path) -> None:
    log = tmp_path / "server.log"
    first = {"submissions": 1, "events": 1, "batches": 1, "fsyncs": 1, "largest_batch": 1}
    second = {**first, "fsyncs": 7}
    line = "2026-01-01 00:00:00,000 INFO tay.server: " + COMMIT_STATS_MARKER
    log.write_text(line + json.dumps(first) + "\nINFO tay.server: tay stopped cleanly\n")
    start = log.stat().st_size
    with log.open("a") as handle:
        handle.write("INFO tay.server: recovered 3 records\n" + line + json.dumps(second) + "\n")
    assert read_commit_stats(str(log)) == second
    assert read_commit_stats(str(log), start) == second
    assert read_commit_stats(str(log), log.stat().st_size) is None  # nothing logged since


def test_no_counters_line_or_no_log_reads_as_none(tmp_path) -> None:
    log = tmp_path / "server.log"
    log.write_text("INFO tay.server: tay listening\n")
    assert read_commit_stats(str(log)) is None
    assert read_commit_stats(str(tmp_path / "missing.log")) is None


def test_stall_lines_are_the_warnings_with_their_samples():
    from tay.bench.server import stall_lines

    log = ("2026-12-06 INFO tay.server: tay serving\n"
           "2026-12-06 WARNING tay.server: event loop stalled 0.6 s (threshold 0.5 s), of "
           "which ...; the loop thread was \n"
           "  0.5 s in: tay/engine/state.py:1 pack_finished\n"
           "    beside it, uvloop_0: tay/x.py:2 f\n"
           "2026-12-06 INFO tay.server: drained\n"
           "  an indented line of something else\n")
    lines = stall_lines(log)
    assert lines == log.splitlines(keepends=True)[1:4]
    assert stall_lines("no stall here\n") == []
