"""Event payloads: the upstream Event-v1 fixtures, our (10,2) fixtures, key sets and domains."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tay.failures import RecoveryRefused
from tay.storage import events as ev
from tay.storage.formats import record, value
from tay.storage.events.definition import PayloadRefused, build_definition, canonical_bytes

ROOT = Path(__file__).resolve().parents[2] / "fixtures"
EVENT_V1 = ROOT / "upstream" / "events" / "v1"
OUR_V2 = ROOT / "tay" / "events" / "v2"
JOB = bytes(15) + b"\x01"


def literal(path: Path) -> bytes:
    return bytes.fromhex("".join(path.read_text(encoding="ascii").split()))


def frame(name: str) -> record.Record:
    return record.decode_record(literal(EVENT_V1 / f"{name}.hex"))


def refusal(call, *args) -> PayloadRefused:
    with pytest.raises(PayloadRefused) as caught:
        call(*args)
    assert isinstance(caught.value, RecoveryRefused)
    return caught.value


# ---- upstream literal fixtures ---------------------------------------------------------

@pytest.mark.parametrize("folder", [EVENT_V1, OUR_V2])
def test_sha256sums_match_every_line(folder: Path) -> None:
    lines = (folder / "SHA256SUMS").read_text(encoding="ascii").splitlines()
    assert lines
    for line in lines:
        digest, name = line.split("  ")
        assert hashlib.sha256(literal(folder / name)).hexdigest() == digest, name


@pytest.mark.parametrize(
    "name, pair, payload_size, event_name",
    [("E1", (1, 1), 404, "job_inserted"), ("E2", (2, 1), 104, "job_available"),
     ("E3", (3, 1), 130, "job_started"), ("E4", (4, 1), 269, "job_finished"),
     ("E5", (5, 1), 105, "job_cancelled"), ("E6", (6, 1), 126, "job_retried")],
)
def test_lifecycle_fixture_decodes_and_reencodes_byte_exact(name, pair, payload_size, event_name):
    rec = frame(name)
    assert (rec.type, rec.schema) == pair and len(rec.payload) == payload_size
    event = ev.decode_event(rec.type, rec.schema, rec.payload)
    assert event.name == event_name and event.job_id == JOB
    rebuilt = ev.make_event(event.pair, dict(event.payload))
    assert ev.encode_event(rebuilt) == rec.payload


def test_e1_definition_matches_the_builder_bytes() -> None:
    event = ev.decode_event(1, 1, frame("E1").payload)
    built = build_definition(worker_key="w", queue_key="q", max_attempts=2, scheduled_at=10)
    assert canonical_bytes(built) == canonical_bytes(event["definition"])
    assert ev.encode_event(ev.job_inserted(JOB, 0, built)) == frame("E1").payload


@pytest.mark.parametrize("name, reason", [("N1", "map_order"), ("N2", "map_order"),
                                          ("N3", "trailing_bytes"), ("N4", "unknown_tag")])
def test_malformed_value_fixture_is_invalid_payload(name: str, reason: str) -> None:
    failure = refusal(ev.decode_event, 2, 1, literal(EVENT_V1 / f"{name}.hex"))
    assert (failure.kind, failure.reason) == ("invalid_payload", reason)


def test_n5_cancel_without_execution_token_is_a_key_set_error() -> None:
    failure = refusal(ev.decode_event, 5, 1, literal(EVENT_V1 / "N5.hex"))
    assert (failure.kind, failure.reason) == ("invalid_payload", "key_set")
    assert failure.extra["missing"] == ["execution_token"]


E1_BUDGET = {"depth": 4, "nodes": 35, "binary": 185}


def test_e1_decodes_at_its_exact_budget() -> None:
    """At exactly its depth, node and binary counts E1 decodes, to the same event as with
    the default budgets: the job the fixture README describes."""
    payload = frame("E1").payload
    event = ev.decode_event(1, 1, payload, value.DecodeLimits(**E1_BUDGET))
    assert event == ev.decode_event(1, 1, payload)
    assert (event.name, event.job_id, event["at"], event["expected_revision"]) == (
        "job_inserted", JOB, 0, 0)
    assert event["eligible_at"] == 10  # scheduled at 10
    definition = event["definition"]
    assert (definition["worker_key"], definition["queue_key"], definition["args"]) == ("w", "q", {})
    assert (definition["max_attempts"], definition["scheduled_at"], definition["timeout_ms"]) == (
        2, 10, 30_000)


@pytest.mark.parametrize("budget", sorted(E1_BUDGET))
def test_e1_one_below_any_budget_is_resource_limit(budget: str) -> None:
    limits = value.DecodeLimits(**{**E1_BUDGET, budget: E1_BUDGET[budget] - 1})
    failure = refusal(ev.decode_event, 1, 1, frame("E1").payload, limits)
    assert failure.kind == "resource_limit"


# ---- pair registry -----------------------------------------------------------------

@pytest.mark.parametrize("pair, reason", [
    ((0, 1), "unknown_event_type"), ((99, 1), "unknown_event_type"),
    ((1, 2), "unsupported_payload_schema"), ((10, 1), "unsupported_payload_schema"),
    ((12, 2), "undocumented_payload_layout"),
])
def test_unsupported_pair_is_refused_before_the_payload(pair, reason) -> None:
    failure = refusal(ev.decode_event, *pair, b"\x0a")  # the payload would be invalid too
    assert (failure.kind, failure.reason) == ("unsupported_semantics", reason)


def test_registering_a_pair_twice_is_refused() -> None:
    with pytest.raises(ValueError):
        ev.register_pair((1, 1), "again", lambda payload: None)


# ---- payload-local rules -------------------------------------------------------------

def e4_payload(**changes) -> dict:
    payload = dict(ev.decode_event(4, 1, frame("E4").payload).payload)
    payload.update(changes)
    return payload


@pytest.mark.parametrize("changes", [
    {"outcome": 0},                                         # success with a diagnostic
    {"outcome": 2},                                         # timeout needs code 5
    {"outcome": 4},                                         # unknown outcome
    {"diagnostic": {"code": 5, "version": 1}},              # code 5 is timeout only
    {"diagnostic": {"code": 1, "version": 2}},
    {"diagnostic": {"code": 1}},
    {"diagnostic": None},
    {"disposition": 0},
    {"next_attempt": None},
    {"next_attempt": 0},
    {"next_due_at": 2**63},
    {"execution_token": 0},
    {"execution_token": None},
    {"at": -1},
    {"at": 11.0},
    {"job_id": bytes(16)},
    {"job_id": b"\x01" * 15},
    {"expected_revision": 0},
    {"extra": 1},
])
def test_finished_payload_rule_violation_is_invalid_payload(changes) -> None:
    failure = refusal(ev.make_event, ev.JOB_FINISHED, e4_payload(**changes))
    assert failure.kind == "invalid_payload" and failure.field.startswith("job_finished")


@pytest.mark.parametrize("outcome, code, disposition, valid", [
    (0, None, 0, True), (1, 1, 2, True), (1, 6, 2, True), (2, 5, 2, True), (3, 7, 1, True),
    (3, 7, 2, False), (0, None, 2, False), (1, 7, 2, False), (2, 1, 2, False),
])
def test_outcome_diagnostic_disposition_table(outcome, code, disposition, valid) -> None:
    retry = disposition == ev.RETRYABLE
    build = lambda: ev.job_finished(  # noqa: E731
        JOB, 20, 3, execution_token=3, outcome=outcome, diagnostic_code=code,
        disposition=disposition, next_attempt=1 if retry else None,
        next_due_at=1020 if retry else None)
    if valid:
        assert build().name == "job_finished"
    else:
        refusal(build)


def test_insert_eligible_at_must_follow_the_definition() -> None:
    definition = build_definition(worker_key="w", queue_key="q")
    assert ev.job_inserted(JOB, 5, definition)["eligible_at"] == 5
    payload = dict(ev.job_inserted(JOB, 5, definition).payload, eligible_at=6)
    assert refusal(ev.make_event, ev.JOB_INSERTED, payload).field == "job_inserted.eligible_at"


@pytest.mark.parametrize("field, bad", [
    ("definition_version", 2), ("max_attempts", 0), ("max_attempts", 65_536),
    ("queue_key", ""), ("queue_key", "a\x00b"), ("worker_key", "x" * 256),
    ("retry_policy", {"base_ms": 1000, "cap_ms": 60000, "jitter_divisor": 4, "version": 2}),
    ("scheduled_at", -1), ("timeout_ms", 0), ("timeout_ms", 86_400_001),
    ("args", {"a": b"bytes"}), ("args", []),
])
def test_definition_domain_violation_names_the_field(field, bad) -> None:
    definition = dict(build_definition(worker_key="w", queue_key="q"), **{field: bad})
    failure = refusal(ev.job_inserted, JOB, 0, definition)
    assert failure.field.startswith(f"job_inserted.definition.{field}")


@pytest.mark.parametrize("build", [
    lambda: ev.job_available(JOB, 10, 1, 11),          # due_at after at
    lambda: ev.job_started(JOB, 10, 1, 0, 1),          # attempt 0
    lambda: ev.job_started(JOB, 10, 1, 1, 0),          # cycle_token 0
    lambda: ev.job_cancelled(JOB, 10, 1, 0),           # token 0
    lambda: ev.job_retried(JOB, 10, 1, 2),             # mode 2
    lambda: ev.result_recorded(JOB, 10, 1, b"raw"),    # bytes are not JSON
    lambda: ev.result_recorded(JOB, 10, 0, None),      # revision 0 only for inserts
])
def test_builder_refuses_out_of_domain_values(build) -> None:
    assert refusal(build).kind == "invalid_payload"


def test_retried_new_due_at_must_equal_at() -> None:
    payload = dict(ev.job_retried(JOB, 10, 1, 0).payload, new_due_at=11)
    refusal(ev.make_event, ev.JOB_RETRIED, payload)


# ---- our (10,2) literal fixtures -------------------------------------------------------

def our_frames(name: str) -> list[record.Record]:
    return record.decode_stream(literal(OUR_V2 / name))


def test_result_null_fixture_ends_with_a_null_result() -> None:
    frames = our_frames("result_null.hex")
    last = frames[-1]
    assert (last.type, last.schema) == (10, 2)
    event = ev.decode_event(last.type, last.schema, last.payload)
    assert event.name == "result_recorded" and event["result"] is None
    assert ev.encode_event(ev.result_recorded(event.job_id, event.at,
                                              event.expected_revision, None)) == last.payload


def test_result_nested_fixture_keeps_every_json_type() -> None:
    last = our_frames("result_nested.hex")[-1]
    event = ev.decode_event(last.type, last.schema, last.payload)
    assert event["result"] == {"count": 3, "items": [1.5, "two", None, True, -4],
                               "meta": {"empty": {}, "list": []}}


def test_result_bytes_fixture_is_refused() -> None:
    only = our_frames("result_bytes_refused.hex")[0]
    failure = refusal(ev.decode_event, only.type, only.schema, only.payload)
    assert failure.kind == "invalid_payload" and failure.field.startswith("result_recorded.result")
