"""Schedule event payloads: our literal fixtures, exact key sets, field domains, (12,2)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from tay.engine.schedules.timing import occurrence_job_id
from tay.engine.schedules.table import ScheduleTable
from tay.storage.events import schedules as se
from tay.storage.formats import value
from tay.storage.events.definition import PayloadRefused
from tay.storage.events import decode_event, encode_event
from tay.storage.formats.record import decode_stream

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "tay" / "events" / "schedules"
T0 = 1_767_225_600_000
HOUR, DAY = 3_600_000, 86_400_000


def literal(name: str) -> bytes:
    return bytes.fromhex("".join((FIXTURES / name).read_text().split()))


def replay(name: str) -> ScheduleTable:
    table = ScheduleTable()
    for record in decode_stream(literal(name)):
        table.apply(record.sequence, decode_event(record.type, record.schema, record.payload))
    return table


def test_sha256sums_match_the_decoded_bytes():
    lines = (FIXTURES / "SHA256SUMS").read_text().splitlines()
    assert len(lines) == 4
    for line in lines:
        digest, name = line.split("  ")
        assert hashlib.sha256(literal(name)).hexdigest() == digest, name


def test_modern_lifecycle_replays():
    job = bytes.fromhex("066857b112c4743e807d3dc343868e3a")
    assert occurrence_job_id("nightly", T0 + 7 * HOUR) == job
    state = replay("modern_lifecycle.hex").get("nightly")
    assert state.revision == 1 and state.record_revision == 4
    assert state.last_at == T0 + 7 * HOUR
    assert state.next_at == T0 + 5 * DAY + 7 * HOUR
    assert state.cancelled_at == T0 + 4 * DAY + 8 * HOUR
    assert state.active == (job,) and state.membership_complete
    assert state.definition["options"] == {"retries": 2}
    assert state.definition["timezone"] == "+02"


def test_modern_lifecycle_pairs_and_payload_bytes_round_trip():
    records = decode_stream(literal("modern_lifecycle.hex"))
    assert [(r.type, r.schema) for r in records] == [(13, 2), (11, 2), (13, 2), (13, 2)]
    for record in records:
        event = decode_event(record.type, record.schema, record.payload)
        assert value.encode(dict(event.payload)) == record.payload
    actions = [decode_event(13, 2, r.payload)["action"] for r in records if r.type == 13]
    assert actions == ["registered", "advanced", "cancelled"]


def test_legacy_lifecycle_replays_with_partial_membership():
    state = replay("legacy_lifecycle.hex").get("legacy-allow")
    assert [(r.type, r.schema) for r in decode_stream(literal("legacy_lifecycle.hex"))] == \
        [(7, 2), (8, 2), (9, 2)]
    assert state.active == (bytes.fromhex("c910118e0f4530bd37ddc3702ac3f76f"),)
    assert not state.membership_complete
    assert (state.last_at, state.next_at, state.cancelled_at) == (1000, 61_000, 2000)
    assert state.definition["expression"] == 60_000


def test_delivered_without_its_job_in_membership_is_invalid_payload():
    (record,) = decode_stream(literal("delivered_job_not_active.hex"))
    with pytest.raises(PayloadRefused) as info:
        decode_event(record.type, record.schema, record.payload)
    assert info.value.kind == "invalid_payload"
    assert info.value.field == "schedule_delivered.active"


def test_pair_12_2_is_refused_never_guessed():
    (record,) = decode_stream(literal("checkpoint_12_2.hex"))
    with pytest.raises(PayloadRefused) as info:
        decode_event(record.type, record.schema, record.payload)
    assert (info.value.kind, info.value.reason) == (
        "unsupported_semantics", "undocumented_payload_layout")


# ---- validators, one refusal each ------------------------------------------------------

DEFINITION = {"args": {}, "catch_up": "latest", "expression": "* * * * *", "kind": "cron",
              "options": {}, "overlap": "skip", "task": "t", "timezone": "+00"}
JOB = occurrence_job_id("s", T0)


def state_payload(**changes: Any) -> dict:
    payload = {"action": "registered", "active": [], "at": T0, "cancelled_at": None,
               "definition": dict(DEFINITION), "expected_revision": 0, "last_at": None,
               "membership": "complete", "next_at": T0, "revision": 1, "schedule_id": "s"}
    payload.update(changes)
    return payload


def delivered_payload(**changes: Any) -> dict:
    payload = {"active": [JOB], "at": T0, "due_at": T0, "expected_revision": 1, "job_id": JOB,
               "next_at": T0 + 60_000, "revision": 1, "schedule_id": "s"}
    payload.update(changes)
    return payload


def refusal(pair: tuple[int, int], payload: dict) -> PayloadRefused:
    with pytest.raises(PayloadRefused) as info:
        decode_event(*pair, value.encode(payload))
    assert info.value.kind == "invalid_payload"
    return info.value


def test_valid_payloads_decode():
    assert decode_event(13, 2, value.encode(state_payload())).name == "schedule_state"
    assert decode_event(11, 2, value.encode(delivered_payload())).name == "schedule_delivered"


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"extra": 1}, "schedule_state"),
        ({"action": "paused"}, "schedule_state.action"),
        ({"schedule_id": ""}, "schedule_state.schedule_id"),
        ({"schedule_id": "x" * 129}, "schedule_state.schedule_id"),
        ({"schedule_id": "a\x00b"}, "schedule_state.schedule_id"),
        ({"revision": 0}, "schedule_state.revision"),
        ({"membership": "unknown"}, "schedule_state.membership"),
        ({"active": [b"\x00" * 16]}, "schedule_state.active[0]"),
        ({"active": [JOB, JOB]}, "schedule_state.active"),
        ({"next_at": -1}, "schedule_state.next_at"),
        ({"action": "cancelled", "expected_revision": 1}, "schedule_state.cancelled_at"),
        ({"action": "advanced"}, "schedule_state.expected_revision"),
        ({"cancelled_at": T0}, "schedule_state.cancelled_at"),
        ({"definition": {**DEFINITION, "kind": "daily"}}, "schedule_state.definition.kind"),
        ({"definition": {**DEFINITION, "overlap": "never"}}, "schedule_state.definition.overlap"),
        ({"definition": {**DEFINITION, "expression": "x" * 129}},
         "schedule_state.definition.expression"),
        ({"definition": {**DEFINITION, "kind": "every", "expression": 0}},
         "schedule_state.definition.expression"),
        ({"definition": {**DEFINITION, "args": {"b": b"\x01"}}}, "schedule_state.definition.args.b"),
        ({"definition": {k: v for k, v in DEFINITION.items() if k != "options"}},
         "schedule_state.definition"),
    ],
)
def test_state_payload_refusals(changes, field):
    assert refusal((13, 2), state_payload(**changes)).field == field


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"due_at": T0 + 1}, "schedule_delivered.due_at"),
        ({"next_at": T0}, "schedule_delivered.next_at"),
        ({"expected_revision": 0}, "schedule_delivered.expected_revision"),
        ({"job_id": b"short"}, "schedule_delivered.job_id"),
        ({"active": "x"}, "schedule_delivered.active"),
    ],
)
def test_delivered_payload_refusals(changes, field):
    assert refusal((11, 2), delivered_payload(**changes)).field == field


def test_delivered_without_a_next_occurrence_is_allowed():
    assert decode_event(11, 2, value.encode(delivered_payload(next_at=None)))["next_at"] is None


LEGACY = {**DEFINITION, "timezone": None}


@pytest.mark.parametrize(
    "pair, payload, field",
    [
        ((7, 2), {"at": 1, "definition": LEGACY, "expected_revision": 0, "next_at": None,
                  "schedule_id": "s"}, "schedule_registered.next_at"),
        ((8, 2), {"at": 1, "due_at": 2, "expected_revision": 1, "next_at": 3,
                  "schedule_id": "s"}, "schedule_advanced.due_at"),
        ((8, 2), {"at": 5, "due_at": 2, "expected_revision": 1, "next_at": 2,
                  "schedule_id": "s"}, "schedule_advanced.next_at"),
        ((8, 2), {"at": 5, "due_at": 2, "expected_revision": 0, "next_at": 3,
                  "schedule_id": "s"}, "schedule_advanced.expected_revision"),
        ((9, 2), {"at": 5, "expected_revision": 1, "schedule_id": "s", "job_id": JOB},
         "schedule_cancelled"),
    ],
)
def test_legacy_payload_refusals(pair, payload, field):
    assert refusal(pair, payload).field == field


def test_builders_and_decoder_agree():
    event = se.schedule_delivered(schedule_id="s", at=T0, due_at=T0, job_id=JOB, next_at=None,
                                  revision=1, expected_revision=1, active=[JOB])
    assert decode_event(11, 2, encode_event(event)).payload == event.payload
