"""``benchmarks.backlog_gc`` measures what it says: a parked backlog leaves one object a job
to the cycle collector, and every job of it is dispatched after."""

from __future__ import annotations

from benchmarks import backlog_gc


def test_a_parked_backlog_is_one_tracked_object_a_job(tmp_path):
    rows = {park: backlog_gc.run(300, park, 1, str(tmp_path)) for park in (False, True)}
    assert rows[False]["waiting"] == rows[True]["waiting"] == 300
    assert rows[False]["tracked_per_job"] >= 2.9
    assert rows[True]["tracked_per_job"] <= 1.1
    assert rows[False]["dispatched"] == rows[True]["dispatched"] == 300
    assert rows[True]["park_us_per_job"] > 0 == rows[False]["park_us_per_job"]
