"""benchmarks.retained_state runs each shape live, packed and recovered: a recovered success
held in columns or packed leaves the cycle collector nothing to walk, a live one four
objects."""

from __future__ import annotations

import pytest

from benchmarks import retained_state


def test_each_shape_reports_live_packed_and_recovered(capsys) -> None:
    assert retained_state.main(["--jobs", "300", "--runs", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {(cells[0], cells[1]): cells[3:] for cells in (
        [cell.strip() for cell in line.strip("|").split("|")] for line in lines[3:])}
    assert list(rows) == [(shape, way) for shape in retained_state.SHAPES
                          for way in ("live", "packed", "recovered")]
    tracked = {key: float(row[0]) for key, row in rows.items()}
    # a live job: its entry, state, definition and (done) its completed row; a recovered
    # success is columns (arrays, bytes), a recovered backlog job its entry and row
    assert tracked[("success", "live")] >= 3.5 and tracked[("success", "recovered")] < 0.5
    assert tracked[("success", "packed")] < 0.5
    # a backlog waits: nothing of it is finished, nothing packed
    assert abs(tracked[("backlog", "packed")] - tracked[("backlog", "live")]) < 0.2
    assert 1.5 <= tracked[("backlog", "recovered")] <= tracked[("backlog", "live")]
    memory = {key: int(row[3].replace(",", "")) for key, row in rows.items()}
    assert memory[("success", "recovered")] < memory[("success", "packed")] \
        < memory[("success", "live")]


def test_bad_flags_are_refused(capsys) -> None:
    with pytest.raises(SystemExit):
        retained_state.main(["--shapes", "success,bogus"])
    assert "unknown: bogus" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        retained_state.main(["--jobs", "0"])
