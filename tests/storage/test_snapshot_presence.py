"""storage.md §3.5's field presence by state, checked one field at a time: a valid
snapshot of each state with one of the five presence fields set or cleared is accepted
exactly when the spec's table leaves that field free in that state."""

from __future__ import annotations

import pytest

from tay.storage.events.definition import PayloadRefused
from tay.storage.v2.jobs import snapshot_of
from tay.storage.v2.records import Snapshot, validate_snapshot
from tests.storage.test_v2_fast_path import one_job_in_each_state

# the spec's table: state -> {field: must be set}; a field not named is free
SPEC = {
    "scheduled": {"next_attempt": True, "eligible_at": True, "availability_order": False,
                  "execution": False, "completed_at": False},
    "available": {"next_attempt": True, "eligible_at": True, "availability_order": True},
    "retryable": {"next_attempt": True, "eligible_at": True, "availability_order": False},
    "executing": {"next_attempt": True, "execution": True, "eligible_at": False,
                  "availability_order": False},
    "completed": {"completed_at": True, "next_attempt": False, "eligible_at": False,
                  "availability_order": False, "execution": False},
    "cancelled": {"next_attempt": False, "eligible_at": False, "availability_order": False,
                  "execution": False, "completed_at": False},
    "discarded": {"next_attempt": False, "eligible_at": False, "availability_order": False,
                  "execution": False, "completed_at": False},
}
FIELDS = ("next_attempt", "eligible_at", "availability_order", "execution", "completed_at")


@pytest.fixture(scope="module")
def snapshots() -> list[Snapshot]:
    return [snapshot_of(job) for job in one_job_in_each_state()]


def toggled(snapshot: Snapshot, field: str) -> Snapshot:
    """The snapshot with ``field`` cleared if set, else set to 1 (valid in its domain)."""
    if field == "execution":
        return Snapshot(snapshot.job_id, snapshot.revision, snapshot.cycle,
                        None if snapshot.execution is not None else 1, snapshot.body,
                        snapshot.definition_bytes)
    body = dict(snapshot.body)
    body[field] = None if body[field] is not None else 1
    if field == "completed_at" and snapshot.body["state"] == "completed":
        body["terminal_at"] = body[field]  # keep completed's terminal_at rule apart
    return Snapshot(snapshot.job_id, snapshot.revision, snapshot.cycle, snapshot.execution,
                    body, snapshot.definition_bytes)


def test_each_state_has_a_valid_snapshot(snapshots) -> None:
    assert {s.body["state"] for s in snapshots} == set(SPEC)
    for snapshot in snapshots:
        validate_snapshot(snapshot)


@pytest.mark.parametrize("field", FIELDS)
def test_a_presence_field_changed_alone_is_refused_where_the_spec_fixes_it(snapshots,
                                                                           field) -> None:
    for snapshot in snapshots:
        state = snapshot.body["state"]
        changed = toggled(snapshot, field)
        if field in SPEC[state]:
            with pytest.raises(PayloadRefused) as refused:
                validate_snapshot(changed)
            rule = f"{state} needs {field} {'set' if SPEC[state][field] else 'nil'}"
            assert rule in str(refused.value)
        else:
            try:
                validate_snapshot(changed)
            except PayloadRefused as refused:  # a free field may still break credibility
                assert "needs" not in str(refused), (state, field, refused)
