"""Store-v2 objects: markers, CURRENT, MANIFEST retention, snapshot and mutation payloads."""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

import pytest

from tay import _native
from tay._frozen import replace
from tay._frozen import replace as frozen_replace
from tay.failures import RecoveryRefused
from tay.storage.formats import record, value
from tay.storage import v2 as store_v2
from tay.storage.events.definition import PayloadRefused
from tay.storage.events.transitions import apply

V2 = Path(__file__).resolve().parents[2] / "fixtures" / "upstream" / "storage" / "v2"
ONE = bytes(15) + b"\x01"
TWO = bytes(15) + b"\x02"


def labelled(path: Path, separator: str) -> dict[str, bytes]:
    lines = path.read_text(encoding="ascii").splitlines()
    return {label: bytes.fromhex(hexed) for label, hexed in
            (line.split(separator, 1) for line in lines)}


RECORDS = labelled(V2 / "records.hex", ":")
MANIFESTS = labelled(V2 / "phase_c" / "manifests.hex", " ")


def refused(call, *args) -> RecoveryRefused:
    with pytest.raises(RecoveryRefused) as caught:
        call(*args)
    return caught.value


# ---- STORE-V2 / ADOPTION / CURRENT -------------------------------------------------------

def test_store_v2_marker_matches_the_documented_example() -> None:
    expected = bytes.fromhex("5441593201000000" + "00" * 15 + "01" + "11755075")
    assert store_v2.encode_store_v2(ONE) == expected
    assert store_v2.decode_store_v2(expected) == ONE


def reseal(raw: bytes) -> bytes:
    return raw[:-4] + _native.crc32c(raw[:-4]).to_bytes(4, "big")


@pytest.mark.parametrize("damage, reason", [
    (lambda b: b[:-1], "length"),
    (lambda b: b + b"\x00", "length"),
    (lambda b: b[:10] + b"\xff" + b[11:], "checksum"),
    (lambda b: reseal(b"TAYX" + b[4:]), "magic"),
    (lambda b: reseal(b[:4] + b"\x02" + b[5:]), "version"),
    (lambda b: reseal(b[:6] + b"\x01" + b[7:]), "reserved"),
    (lambda b: reseal(b[:8] + bytes(16) + b[24:]), "zero_store_id"),
    # checks run in order: a wrong magic under a bad CRC reports the CRC
    (lambda b: b"TAYX" + b[4:], "checksum"),
])
def test_store_v2_marker_damage_is_refused_in_decode_order(damage, reason) -> None:
    failure = refused(store_v2.decode_store_v2, damage(store_v2.encode_store_v2(ONE)))
    assert (failure.kind, failure.reason) == ("physical_corruption", reason)


def test_adoption_round_trip_and_zero_nonce() -> None:
    raw = store_v2.encode_adoption(TWO)
    assert raw[:4] == b"TAYA" and store_v2.decode_adoption(raw) == TWO
    assert refused(store_v2.decode_adoption, reseal(raw[:8] + bytes(16) + raw[24:])).reason == \
        "zero_nonce"
    with pytest.raises(ValueError):
        store_v2.encode_adoption(bytes(16))


def test_current_round_trip_and_field_order() -> None:
    current = store_v2.Current(ONE, TWO, bytes(range(32)))
    raw = store_v2.encode_current(current)
    assert len(raw) == 76 and raw[8:24] == ONE and raw[24:40] == TWO
    assert store_v2.decode_current(raw) == current
    assert refused(store_v2.decode_current, raw[:-1]).reason == "length"


# ---- MANIFEST ----------------------------------------------------------------------

ACCEPTED = {"infinity": ("infinity", None), "bounded": ("hours", 24),
            "maximum": ("hours", 2_562_047_788_015), "zero": ("hours", 0)}
REFUSED = ["over_maximum", "empty", "negative", "float", "extra", "alternate", "string",
           "integer", "nil"]


def test_fixture_has_all_thirteen_manifests() -> None:
    assert sorted(MANIFESTS) == sorted([*ACCEPTED, *REFUSED])


@pytest.mark.parametrize("label", sorted(ACCEPTED))
def test_manifest_with_accepted_retention_decodes_and_reencodes(label: str) -> None:
    manifest = store_v2.decode_manifest(MANIFESTS[label])
    retention = manifest.terminal_retention
    assert (retention.unit, retention.count) == ACCEPTED[label]
    assert (manifest.store_id, manifest.epoch_id, manifest.captured_at) == (ONE, TWO, 3_600_000)
    assert manifest.base_segments == () and manifest.source_segments == ()
    assert (manifest.source_epoch_id, manifest.source_frontier) == (None, 0)
    assert (manifest.tail_first_sequence, manifest.tail_segment_id) == (1, 1)
    assert store_v2.encode_manifest(manifest) == MANIFESTS[label]


@pytest.mark.parametrize("label", REFUSED)
def test_manifest_with_refused_retention_names_terminal_retention(label: str) -> None:
    failure = refused(store_v2.decode_manifest, MANIFESTS[label])
    assert (failure.kind, failure.reason) == ("invalid_payload", "terminal_retention")


def test_zero_retention_is_a_full_purge_marker_run_as_one_hour() -> None:
    zero = store_v2.decode_manifest(MANIFESTS["zero"]).terminal_retention
    assert zero.duration_ms == 0 and zero.runtime_ms == 3_600_000
    assert zero.expires(terminal_at=3_600_000, captured_at=3_600_000)


@pytest.mark.parametrize("obj, accepted", [
    ({"minutes": 0}, True), ({"minutes": 153_722_867_280_912}, True),
    ({"minutes": 153_722_867_280_913}, False), ({"hours": 2_562_047_788_016}, False),
    ({"seconds": 1}, False), ({"minutes": True}, False), ("Infinity", False),
])
def test_retention_domains(obj, accepted: bool) -> None:
    if accepted:
        assert store_v2.decode_retention(obj).to_value() == obj
    else:
        with pytest.raises(PayloadRefused):
            store_v2.decode_retention(obj)


def test_retention_expiry_includes_equality_and_needs_a_full_window() -> None:
    day = store_v2.Retention("hours", 24)
    d = 24 * 3_600_000
    assert day.expires(terminal_at=1000, captured_at=1000 + d)
    assert not day.expires(terminal_at=1001, captured_at=1000 + d)
    assert not day.expires(terminal_at=0, captured_at=d - 1)
    assert not store_v2.INFINITY.expires(terminal_at=0, captured_at=2**62)


def test_manifest_crc_is_checked_before_the_body() -> None:
    raw = bytearray(MANIFESTS["bounded"])
    raw[20] ^= 1
    assert refused(store_v2.decode_manifest, bytes(raw)).reason == "checksum"


def test_manifest_declared_length_must_match() -> None:
    raw = MANIFESTS["bounded"]
    bad = reseal(raw[:8] + struct.pack(">I", len(raw) - 15) + raw[12:])
    assert refused(store_v2.decode_manifest, bad).reason == "body_length"


def manifest_with(**changes) -> store_v2.Manifest:
    return frozen_replace(store_v2.decode_manifest(MANIFESTS["bounded"]), **changes)


def test_manifest_with_base_segments_round_trips() -> None:
    base = (store_v2.BaseSegment(1, 1, 5, 400, bytes(32)),
            store_v2.BaseSegment(2, 6, 6, 64, b"\x01" * 32))
    manifest = manifest_with(base_segments=base, tail_first_sequence=7, tail_segment_id=3,
                             source_segments=((1, b"\x02" * 32),), source_epoch_id=ONE)
    assert store_v2.decode_manifest(store_v2.encode_manifest(manifest)) == manifest


@pytest.mark.parametrize("changes, reason", [
    (dict(base_segments=(store_v2.BaseSegment(1, 2, 5, 400, bytes(32)),),
          tail_first_sequence=6, tail_segment_id=2), "base_segments"),
    (dict(base_segments=(store_v2.BaseSegment(1, 1, 5, 63, bytes(32)),),
          tail_first_sequence=6, tail_segment_id=2), "base_segments"),
    (dict(base_segments=(store_v2.BaseSegment(1, 1, 5, 400, bytes(32)),),
          tail_first_sequence=5, tail_segment_id=2), "tail_first_sequence"),
    (dict(tail_segment_id=2), "tail_segment_id"),
    (dict(source_segments=((2, bytes(32)),)), "source_segments"),
    (dict(epoch_id=bytes(16)), "epoch_id"),
    (dict(captured_at=2**63), "captured_at"),
])
def test_manifest_field_rule_violation_names_the_key(changes, reason) -> None:
    body = manifest_with(**changes).body()
    assert refused(store_v2.manifest_from_body, value.decode(value.encode(body))).reason == reason


def test_verify_selection_binds_store_epoch_and_digest() -> None:
    manifest_file = MANIFESTS["bounded"]
    marker = store_v2.encode_store_v2(ONE)
    digest = hashlib.sha256(manifest_file).digest()
    current = store_v2.encode_current(store_v2.Current(ONE, TWO, digest))
    assert store_v2.verify_selection(ONE, marker, current, manifest_file).epoch_id == TWO
    other = store_v2.encode_current(store_v2.Current(ONE, TWO, bytes(32)))
    assert refused(store_v2.verify_selection, ONE, marker, other, manifest_file).reason == \
        "manifest_digest_mismatch"
    assert refused(store_v2.verify_selection, TWO, marker, current, manifest_file).reason == \
        "store_id_mismatch"
    wrong_epoch = store_v2.encode_current(store_v2.Current(ONE, ONE, digest))
    assert refused(store_v2.verify_selection, ONE, marker, wrong_epoch, manifest_file).reason \
        == "epoch_id_mismatch"


# ---- snapshot and mutation payloads ------------------------------------------------------

def payload(label: str) -> tuple[tuple[int, int], bytes]:
    rec = record.decode_record(RECORDS[label])
    assert rec.sequence == 1
    return (rec.type, rec.schema), rec.payload


def test_snapshot_fixture_is_a_valid_available_job() -> None:
    pair, raw = payload("snapshot")
    snapshot = store_v2.decode_snapshot(raw)
    assert pair == (7, 1)
    assert (snapshot.job_id, snapshot.revision, snapshot.cycle, snapshot.execution) == (
        ONE, 1, 1, None)
    assert (snapshot.state, snapshot.availability_order, snapshot.eligible_at,
            snapshot.inserted_at) == ("available", 1, 100, 100)
    assert snapshot.definition["queue_key"] == "default"
    assert snapshot.definition["worker_key"] == "worker"
    assert (snapshot.definition["max_attempts"], snapshot.definition["timeout_ms"]) == (3, 1000)
    assert store_v2.encode_snapshot(snapshot) == raw
    # the definition's bytes are cut from the payload (replay does not encode them again)
    assert snapshot.definition_bytes == value.encode(snapshot.definition)
    assert raw.find(snapshot.definition_bytes) > 0


def test_a_snapshot_whose_definition_cannot_be_cut_out_still_gets_its_bytes() -> None:
    from tay.storage.v2.jobs import job_of

    snapshot = store_v2.decode_snapshot(payload("snapshot")[1])
    plain = replace(snapshot, definition_bytes=None)
    assert job_of(plain).definition_bytes == job_of(snapshot).definition_bytes == \
        value.encode(snapshot.definition)


MUTATIONS = {
    "inserted": (1, 0, 1, 1), "available": (2, 1, 2, 1), "started": (3, 1, 2, None),
    "finished": (4, 2, 3, None), "cancelled": (5, 1, 2, None), "retried": (6, 1, 2, 1),
}


@pytest.mark.parametrize("label", sorted(MUTATIONS))
def test_mutation_fixture_is_valid_and_reencodes(label: str) -> None:
    pair, raw = payload(label)
    mutation = store_v2.decode_mutation(raw)
    assert pair == (8, 1) and mutation.at == 100 and mutation.job_id == ONE
    assert (mutation.kind, mutation.expected_revision, mutation.new_revision,
            mutation.availability_order) == MUTATIONS[label]
    assert mutation.event.pair == (mutation.kind, 1)
    assert store_v2.encode_mutation(mutation) == raw


def test_finished_fixture_is_a_success_with_execution_token_two() -> None:
    event = store_v2.decode_mutation(payload("finished")[1]).event
    assert (event["outcome"], event["disposition"], event["execution_token"]) == (0, 0, 2)


def test_inserted_then_started_then_finished_replays_with_logical_revisions() -> None:
    job = None
    for label in ("inserted", "started", "finished"):
        mutation = store_v2.decode_mutation(payload(label)[1])
        if label == "finished":  # the fixtures are standalone; chain started 1->2, finished 2->3
            assert job.revision == 2 and job.execution == 2
        job = apply(job, mutation.new_revision, mutation.event)
    assert (job.state, job.revision) == ("completed", 3)


def mutation_raw(kind: int, expected: int, new: int, at: int, body: dict) -> bytes:
    return struct.pack(">16sBQQQ", ONE, kind, expected, new, at) + value.encode(body)


@pytest.mark.parametrize("kind, expected, new, at, body, field", [
    (2, 1, 3, 100, {"availability_order": 1, "due_at": 100}, "mutation.new_revision"),
    (2, 0, 1, 100, {"availability_order": 1, "due_at": 100}, "mutation.expected_revision"),
    (1, 1, 2, 100, {}, "mutation.expected_revision"),
    (7, 1, 2, 100, {}, "mutation.kind"),
    (2, 1, 2, 2**63, {"availability_order": 1, "due_at": 100}, "mutation.at"),
    (2, 1, 2, 100, {"availability_order": None, "due_at": 100}, "mutation.availability_order"),
    (2, 1, 2, 100, {"due_at": 100}, "mutation"),
    (2, 1, 2, 100, {"availability_order": 1, "due_at": 101}, "job_available.due_at"),
    (6, 1, 2, 100, {"availability_order": 1, "mode": 0, "new_due_at": 99},
     "job_retried.new_due_at"),
    (5, 2**64 - 1, 0, 100, {"execution_token": None}, "mutation.new_revision"),
])
def test_mutation_local_rule_violation_is_invalid_payload(kind, expected, new, at, body,
                                                          field) -> None:
    failure = refused(store_v2.decode_mutation, mutation_raw(kind, expected, new, at, body))
    assert failure.kind == "invalid_payload" and failure.field == field


def test_inserted_order_must_match_eligibility() -> None:
    inserted = store_v2.decode_mutation(payload("inserted")[1])
    body = {"availability_order": None, "definition": dict(inserted.event["definition"]),
            "eligible_at": 100}
    failure = refused(store_v2.decode_mutation, mutation_raw(1, 0, 1, 100, body))
    assert failure.field == "mutation.availability_order"


def test_truncated_prefix_is_invalid_payload() -> None:
    raw = payload("started")[1]
    assert refused(store_v2.decode_mutation, raw[:40]).reason == "truncated"
    assert refused(store_v2.decode_snapshot, payload("snapshot")[1][:32]).reason == "truncated"


def snapshot_with(revision=1, cycle=1, execution=None, **body) -> store_v2.Snapshot:
    base = store_v2.decode_snapshot(payload("snapshot")[1])
    return store_v2.Snapshot(ONE, revision, cycle, execution, {**base.body, **body})


EXECUTING = dict(state="executing", attempt=1, next_attempt=1, attempted_at=101,
                 eligible_at=None, availability_order=None)
COMPLETED = dict(state="completed", attempt=1, next_attempt=None, attempted_at=101,
                 eligible_at=None, availability_order=None, completed_at=102, terminal_at=102)


@pytest.mark.parametrize("snapshot", [
    snapshot_with(revision=2, execution=2, **EXECUTING),
    snapshot_with(revision=3, **COMPLETED),
    snapshot_with(revision=3, state="scheduled", availability_order=None, eligible_at=500),
    snapshot_with(revision=4, **{**COMPLETED, "state": "discarded", "completed_at": None,
                                 "diagnostic": {"code": 5, "version": 1}}),
])
def test_credible_snapshots_round_trip(snapshot) -> None:
    if snapshot.body["state"] == "scheduled":
        snapshot = replace(snapshot, revision=1)
    raw = store_v2.encode_snapshot(snapshot)
    assert store_v2.decode_snapshot(raw) == snapshot


@pytest.mark.parametrize("snapshot, rule", [
    (snapshot_with(revision=1, cycle=2), "cycle in 1..revision"),
    (snapshot_with(revision=2, execution=3, **EXECUTING), "execution in 1..revision"),
    (snapshot_with(revision=3, execution=2, **EXECUTING), "executing is not credible"),
    (snapshot_with(revision=2, **EXECUTING), "executing needs execution set"),
    (snapshot_with(availability_order=None), "available needs availability_order set"),
    (snapshot_with(attempt=1), "available is not credible"),
    (snapshot_with(terminal_at=5), "available needs terminal_at nil"),
    (snapshot_with(revision=3, **{**COMPLETED, "terminal_at": 103}),
     "completed needs terminal_at = completed_at"),
    (snapshot_with(revision=3, **{**COMPLETED, "attempted_at": None}),
     "completed is not credible"),
    (snapshot_with(revision=2, state="scheduled", availability_order=None),
     "scheduled is not credible"),
    (snapshot_with(revision=4, **{**COMPLETED, "state": "retryable", "next_attempt": 2,
                                  "eligible_at": 2000, "completed_at": None,
                                  "terminal_at": None}), "retryable is not credible"),
    (snapshot_with(revision=4, state="cancelled", availability_order=None,
                   next_attempt=None, eligible_at=None), "cancelled needs terminal_at"),
])
def test_incredible_snapshot_is_refused_with_its_rule(snapshot, rule: str) -> None:
    failure = refused(store_v2.encode_snapshot, snapshot)
    assert (failure.kind, failure.reason) == ("invalid_payload", rule)


def test_snapshot_field_domains_are_checked() -> None:
    failure = refused(store_v2.encode_snapshot, snapshot_with(attempt=4))  # max_attempts 3
    assert failure.field == "snapshot.attempt"
    failure = refused(store_v2.encode_snapshot, snapshot_with(state="paused"))
    assert failure.field == "snapshot.state"
    raw = bytearray(payload("snapshot")[1])
    raw[32] = 2  # exec_present
    assert refused(store_v2.decode_snapshot, bytes(raw)).field == "snapshot.exec_present"
