"""benchmarks.tail_restart builds each shape's tail from the engine and recovers it both
ways: the jobs held unbuilt tell which shapes the columnar walk takes whole."""

from __future__ import annotations

import pytest

from benchmarks import tail_restart
from tests.engine.test_tail_columns import tail_frames


def test_each_shape_recovers_all_its_jobs_and_reports_both_ways(capsys) -> None:
    assert tail_restart.main(["--jobs", "40", "--every", "4", "--runs", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {cells[0]: cells[1:] for cells in (
        [cell.strip() for cell in line.strip("|").split("|")] for line in lines[3:])}
    assert list(rows) == list(tail_restart.SHAPES)
    # records: four per job, eight per retried job, five per delayed one (succeeded or
    # failed), three per timed-out one, one per waiting or backlog one, two per cancelled one,
    # and for a minute's (minutely) an occurrence's four, its delivery and the day's totals
    # (the schedule's declaration first); six per operated one (its expedite and deletion)
    assert [rows[shape][0] for shape in rows] == ["160", "160", "160", "200", "170", "170",
                                                  "150", "130", "130", "160", "140", "221",
                                                  "180"]
    # held unbuilt: every job (a retried success as a completed row, a delayed failure as
    # its discarded row, a cancelled one in columns; a minute's records do not stop the
    # walk, and the occurrences' jobs, which their deliveries name, are held in columns too;
    # an operator's steps do not stop it either, and the jobs they deleted are gone)
    assert [rows[shape][1] for shape in rows] == ["40"] * 11 + ["50", "30"]
    for shape, (_, _, columnar, exact, added) in rows.items():
        assert float(columnar) > 0 and float(exact) > 0
        assert (added == "-") == (shape == "success")


def test_from_the_base_each_shape_holds_its_finished_jobs_in_columns(capsys) -> None:
    assert tail_restart.main(["--jobs", "40", "--every", "4", "--runs", "1", "--base"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "from the base" in lines[0]
    rows = {cells[0]: cells[1:] for cells in (
        [cell.strip() for cell in line.strip("|").split("|")] for line in lines[3:])}
    # held in columns: the finished jobs (a discarded job's or a retried success's with its
    # failure's details, a cancelled one); as rows the live ones (scheduled, available, and
    # retryable with their failure's details); a base holds the occurrences' jobs alike
    assert [rows[shape][1] for shape in rows] == ["40"] * 11 + ["50", "30"]


@pytest.mark.parametrize("shape", tail_restart.SHAPES)
def test_every_odd_job_of_a_shape_ends_as_the_shape_says(shape) -> None:
    frames = tail_frames(0, tail_restart.shape_actions(shape, 20, 5))
    kinds = [payload[16] for rtype, _, payload in frames if rtype == 8]  # a mutation's kind
    details = [p for t, _, p in frames if t == 30 and p[:2] == b"\x16\x02"]  # (22,2)
    # every job finished once (but those still waiting), a retried one twice; four failed
    # first attempts; a retry or a delayed job made available by a tick
    assert kinds.count(4) == 20 + {"retried": 4, "waiting": -4, "backlog": -4,
                                   "cancelled": -4, "minutely": 4}.get(shape, 0)
    assert len(details) == (4 if shape in ("failed", "discarded", "retried", "delayed-failed")
                            else 0)
    assert kinds.count(2) == (4 if shape in ("retried", "delayed", "delayed-failed") else 0)
    # a minute after each odd job: a delivery and the day's totals (its counts moved)
    for inner in (b"\x0b\x02", b"\x20\x02"):
        assert sum(t == 30 and p[:2] == inner for t, _, p in frames) == \
            (4 if shape == "minutely" else 0)
    # run now by an operator (an expedite), then deleted by hand
    for inner in (b"\x1b\x02", b"\x1d\x02"):
        assert sum(t == 30 and p[:2] == inner for t, _, p in frames) == \
            (4 if shape == "operated" else 0)


def test_a_base_that_is_all_backlog_holds_every_job_as_its_row(capsys) -> None:
    assert tail_restart.main(["--jobs", "30", "--every", "1", "--runs", "1", "--base",
                              "--shapes", "backlog,waiting"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {cells[0]: cells[1:] for cells in (
        [cell.strip() for cell in line.strip("|").split("|")] for line in lines[3:])}
    assert {shape: row[1] for shape, row in rows.items()} == {"backlog": "30", "waiting": "30"}


def test_bad_flags_are_refused(capsys) -> None:
    with pytest.raises(SystemExit):
        tail_restart.main(["--shapes", "success,bogus"])
    assert "unknown: bogus" in capsys.readouterr().err
