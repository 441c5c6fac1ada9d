"""Store-v2 recovery (§3.7): our literal fixture store, the record profile, the root and
epoch rules, adoption rollback, and refusals that change no byte."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from tests.storage.test_recovery import tree_hash
from tay import _native
from tay.failures import RecoveryRefused
from tay.storage.formats import record
from tay.storage.formats.segment import encode_footer, encode_header, SegmentHeader
from tay.storage.formats.store_marker import encode_store_marker
from tay.storage.journal.writer import init_store
from tay.storage.recovery.inspect import inspect_store
from tay.storage.recovery.recover import TableConsumer, recover
from tay.storage.v2 import (
    BaseSegment, Current, Manifest, Retention, encode_current, encode_manifest, encode_store_v2,
)
from tay.storage.v2.markers import encode_adoption

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
OURS = FIXTURES / "tay" / "storage" / "v2"
UPSTREAM_V2 = FIXTURES / "upstream" / "storage" / "v2"
ONE, TWO, THREE = (bytes(15) + bytes([n]) for n in (1, 2, 3))
EPOCH = TWO


def labelled(path: Path, separator: str) -> dict[str, bytes]:
    return {label: bytes.fromhex(hexed) for label, hexed in
            (line.split(separator, 1) for line in path.read_text("ascii").splitlines())}


def materialize(target: Path) -> Path:
    """Write the literal fixture store (fixtures/tay/storage/v2/store.hex) to ``target``."""
    for name, data in labelled(OURS / "store.hex", " ").items():
        path = target / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    (target / ".tay-owner.lock").touch()
    return target


def refused(root: Path, **kwargs) -> RecoveryRefused:
    before = tree_hash(root)
    with pytest.raises(RecoveryRefused) as caught:
        recover(str(root), durability="write", **kwargs)
    assert tree_hash(root) == before, "a refusal must change no byte"
    return caught.value


def epoch_dir(root: Path) -> Path:
    return root / "epochs" / f"e-{EPOCH.hex()}"


def test_fixture_sums() -> None:
    for line in (OURS / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split("  ")
        assert hashlib.sha256((OURS / name).read_bytes()).hexdigest() == digest


def test_fixture_store_replays_to_its_documented_state(data_dir):
    root = materialize(data_dir)
    table = TableConsumer()
    recovered = recover(str(root), consumer=table, activate=False)
    assert recovered.store_version == 2 and recovered.records_replayed == 9
    assert recovered.view.next_sequence == 10
    jobs = {job.id: job for job in table.table}
    assert (jobs[ONE].state, jobs[ONE].revision, jobs[ONE].result) == ("completed", 4, {"ok": True})
    assert (jobs[TWO].state, jobs[TWO].revision, jobs[TWO].result) == (
        "completed", 4, [1, "two", None])
    assert (jobs[TWO].execution, jobs[TWO].cycle, jobs[TWO].terminal_at) == (None, 1, 201)
    assert (jobs[THREE].state, jobs[THREE].revision, jobs[THREE].ready_order) == ("available", 1, 2)
    assert table.other_events == {"schedule_state": 2}
    assert recovered.reducer.next_order == 3
    assert recovered.reducer.entities == {("schedule", "s"): 4}


def test_fixture_store_opens_for_writing_in_its_epoch(data_dir):
    root = materialize(data_dir)
    recovered = recover(str(root), durability="write")
    journal = recovered.journal
    try:
        assert journal.segments_dir == str(epoch_dir(root) / "segments")
        assert (journal.segment_id, journal.next_sequence) == (2, 10)
    finally:
        journal.close()


def test_inspect_reports_the_epoch(data_dir):
    summary = inspect_store(str(materialize(data_dir)))
    assert summary["store_version"] == 2 and summary["epoch_id"] == EPOCH.hex()
    assert summary["terminal_retention"] == {"hours": 24}
    assert summary["base_segments"] == 1 and summary["tail_segments"] == 1
    assert summary["base_bytes"] == 1820 and summary["tail_bytes"] == 1369
    assert summary["job_states"]["completed"] == 2 and summary["job_states"]["available"] == 1


def test_epoch_record_fixture_prefixes_by_hand():
    records = labelled(OURS / "records.hex", ":")
    frame = record.decode_record(records["epoch_event_result"])
    assert (frame.type, frame.schema) == (30, 2)
    payload = bytes(frame.payload)
    # inner type 10, schema 2, revision 4, then the (10,2) payload map of 4 keys
    assert payload[:10] == bytes([10, 2]) + (4).to_bytes(8, "big")
    assert payload[10:15] == b"\x09\x00\x00\x00\x04"
    attachment = bytes(record.decode_record(records["job_attachment_result"]).payload)
    assert attachment[:2] == bytes([10, 2]) and attachment[2:7] == b"\x09\x00\x00\x00\x04"


@pytest.mark.parametrize(("label", "ok", "klass", "reason"), [
    ("epoch_event_result", True, None, None),
    ("epoch_event_checkpoint", True, None, None),
    ("job_attachment_result", True, None, None),
    ("epoch_event_lifecycle_inner", False, "unsupported_semantics", "not_carried_in_epochs"),
    ("epoch_event_unknown_inner", False, "unsupported_semantics", "unknown_event_type"),
    ("epoch_event_zero_revision", False, "invalid_payload", "revision must be 1..2^64-1"),
    ("epoch_event_revision_not_above", False, "invalid_payload",
     "revision must be above the inner expected_revision"),
    ("job_attachment_not_attachment", False, "unsupported_semantics", "not_a_job_attachment"),
    ("epoch_event_truncated", False, "invalid_payload", "truncated"),
])
def test_epoch_record_fixture_outcomes(label, ok, klass, reason):
    from tay.storage.recovery.verify import verify_bytes

    report = verify_bytes("v2-record", labelled(OURS / "records.hex", ":")[label])
    assert report["ok"] is ok
    if not ok:
        assert (report["class"], report["reason"]) == (klass, reason)


UPSTREAM_RECORDS = {"snapshot": ("job_snapshot", "available"), "inserted": ("job_mutation", 1),
                    "available": ("job_mutation", 2), "started": ("job_mutation", 3),
                    "finished": ("job_mutation", 4), "cancelled": ("job_mutation", 5),
                    "retried": ("job_mutation", 6)}
ACCEPTED_MANIFESTS = {"infinity", "bounded", "maximum", "zero"}


@pytest.mark.parametrize("label", sorted(UPSTREAM_RECORDS))
def test_verify_file_every_upstream_v2_record(label):
    from tay.storage.recovery.verify import read_input, verify_bytes

    path = str(UPSTREAM_V2 / "records.hex")
    report = verify_bytes("v2-record", read_input(path, label), path)
    kind, detail = UPSTREAM_RECORDS[label]
    assert report["ok"] is True and report["record_kind"] == kind
    assert detail == (report["state"] if kind == "job_snapshot" else report["mutation_kind"])


@pytest.mark.parametrize("label", sorted(labelled(UPSTREAM_V2 / "phase_c" / "manifests.hex", " ")))
def test_verify_file_every_upstream_manifest(label):
    from tay.storage.recovery.verify import read_input, verify_bytes

    path = str(UPSTREAM_V2 / "phase_c" / "manifests.hex")
    report = verify_bytes("manifest", read_input(path, label), path)
    assert report["ok"] is (label in ACCEPTED_MANIFESTS)
    if label in ACCEPTED_MANIFESTS:
        assert (report["store_id"], report["epoch_id"]) == (ONE.hex(), TWO.hex())
        assert report["captured_at"] == 3_600_000
    else:
        assert (report["class"], report["reason"]) == ("invalid_payload", "terminal_retention")
    if label == "zero":  # the full-purge marker runs as the one-hour minimum
        assert report["runtime_retention_ms"] == 3_600_000


def test_verify_file_markers_and_current(tmp_path):
    from tay.storage.recovery.verify import verify_bytes

    store = labelled(OURS / "store.hex", " ")
    assert verify_bytes("store-v2", store["STORE-V2"])["store_id"] == ONE.hex()
    current = verify_bytes("current", store["CURRENT"])
    manifest = store[f"epochs/e-{EPOCH.hex()}/MANIFEST"]
    assert current["manifest_sha256"] == hashlib.sha256(manifest).hexdigest()
    assert verify_bytes("adoption", encode_adoption(THREE))["nonce"] == THREE.hex()
    assert verify_bytes("current", store["CURRENT"][:-1])["reason"] == "length"
    assert verify_bytes("adoption", store["STORE-V2"])["reason"] == "magic"


# ---- refusals: root, selection, epoch, base, profile ------------------------------------

def _rewrite_tail(root: Path, frames: list[tuple[int, int, bytes]], first: int = 5) -> None:
    """Replace the tail segment with these (type, schema, payload) frames from ``first``."""
    body = _native.encode_records([(t, s, first + i, p) for i, (t, s, p) in enumerate(frames)])
    (epoch_dir(root) / "segments" / f"{2:020d}.tay").write_bytes(
        encode_header(2, first, ONE) + body)


def _base_frame(root: Path, index: int) -> tuple[int, int, bytes]:
    data = (epoch_dir(root) / "segments" / f"{1:020d}.tay").read_bytes()
    offset = 44
    for _ in range(index):
        offset = record.decode_record(data, offset).end
    frame = record.decode_record(data, offset)
    return frame.type, frame.schema, bytes(frame.payload)


def flip_last_byte(path) -> None:
    """Damage for sure (overwriting with 0x00 changed nothing when the byte was 0 already)."""
    content = path.read_bytes()
    path.write_bytes(content[:-1] + bytes([content[-1] ^ 0xFF]))


@pytest.mark.parametrize(("damage", "kind", "reason"), [
    (lambda r: (r / "segments").mkdir(), "discovery", "v2_root_has_v1_segments"),
    (lambda r: (r / "other").mkdir(), "discovery", "unexpected_directory"),
    (lambda r: os.symlink("STORE", r / "link"), "discovery", "symlink"),
    (lambda r: flip_last_byte(r / "CURRENT"), "physical_corruption", "checksum"),
    (lambda r: (r / "STORE-V2").unlink(), "discovery", "missing_store_v2"),
    (lambda r: shutil.rmtree(epoch_dir(r)), "discovery", "current_epoch_missing"),
    (lambda r: (epoch_dir(r) / "notes").write_text("x"), "discovery", "epoch_entries"),
    (lambda r: (epoch_dir(r) / "segments" / "README").write_text("x"), "discovery",
     "unrelated_file_in_epoch"),
    (lambda r: (epoch_dir(r) / "segments" / f"{2:020d}.tay").unlink(), "discovery",
     "missing_tail"),
    (lambda r: (r / "STORE").write_bytes(encode_store_marker(THREE)), "discovery",
     "store_id_mismatch"),
])
def test_root_and_selection_refusals(data_dir, damage, kind, reason):
    root = materialize(data_dir)
    damage(root)
    failure = refused(root)
    assert (failure.kind, failure.reason) == (kind, reason)


def test_manifest_digest_binds_current(data_dir):
    root = materialize(data_dir)
    manifest = epoch_dir(root) / "MANIFEST"
    raw = bytearray(manifest.read_bytes())
    raw[-5] ^= 0  # same bytes: still fine
    current = Current(ONE, EPOCH, hashlib.sha256(b"other").digest())
    (root / "CURRENT").write_bytes(encode_current(current))
    failure = refused(root)
    assert (failure.kind, failure.reason) == ("discovery", "manifest_digest_mismatch")


def test_base_file_is_checked_against_the_manifest_before_it_is_scanned(data_dir):
    root = materialize(data_dir)
    base = epoch_dir(root) / "segments" / f"{1:020d}.tay"
    data = bytearray(base.read_bytes())
    data[100] ^= 1  # a flipped byte: the digest catches it before any CRC is read
    base.write_bytes(bytes(data))
    failure = refused(root)
    assert (failure.kind, failure.reason) == ("physical_corruption", "base_segment_digest")
    assert failure.path == str(base)


@pytest.mark.parametrize("at", [0, 40, 64, 100, -30, -1])  # header, first frame, footer
def test_a_flipped_base_byte_anywhere_is_refused_by_its_digest(data_dir, at):
    """The digest is taken from the scan's own mapping; a file the scan refuses is still
    named by its digest, as when the digest was read before the scan."""
    root = materialize(data_dir)
    base = epoch_dir(root) / "segments" / f"{1:020d}.tay"
    data = bytearray(base.read_bytes())
    data[at] ^= 0x40
    base.write_bytes(bytes(data))
    failure = refused(root)
    assert (failure.kind, failure.reason) == ("physical_corruption", "base_segment_digest")


@pytest.mark.parametrize("window", [None, 64, 100, 4096])
def test_a_base_file_is_hashed_whole_from_the_scans_mapping(data_dir, monkeypatch, window):
    """Every byte, header to footer, in windows that end anywhere (each hashed before its
    pages are dropped), and nothing twice."""
    from tay.storage.formats import segment
    from tay.storage.fsio import RealIO
    from tay.storage.recovery.limits import RecoveryOptions, RecoveryTimer
    from tay.storage.recovery.physical import ScanPass, scan_one

    if window is not None:
        monkeypatch.setattr(segment, "SCAN_WINDOW", window)
    root = materialize(data_dir)
    base = epoch_dir(root) / "segments" / f"{1:020d}.tay"
    options = RecoveryOptions()
    for keep in (True, False):
        digest = hashlib.sha256()
        view = scan_one(RealIO(), str(base), 1, ONE, False,
                        ScanPass(options, RecoveryTimer(options), "preflight", keep),
                        digest=digest)
        assert digest.digest() == hashlib.sha256(base.read_bytes()).digest()
        assert view.scan.count > 0 and (view.mapping is not None) == keep
        if view.mapping is not None:
            view.mapping.close()  # no view of it is left open


def test_a_base_file_that_scans_but_differs_from_its_manifest_is_refused(data_dir):
    """A file whose records are all sound is still refused when its digest is not the
    MANIFEST's (its mapping is closed: nothing it holds is used)."""
    from types import SimpleNamespace

    from tay.storage.fsio import RealIO
    from tay.storage.recovery.limits import RecoveryOptions, RecoveryTimer
    from tay.storage.recovery.physical import ScanPass
    from tay.storage.recovery.store_v2 import _scan_base_file

    root = materialize(data_dir)
    base = epoch_dir(root) / "segments" / f"{1:020d}.tay"
    size = base.stat().st_size
    epoch = SimpleNamespace(segment_sizes={1: size})
    options = RecoveryOptions()
    run = ScanPass(options, RecoveryTimer(options), "preflight", True)
    right = hashlib.sha256(base.read_bytes()).digest()
    view = _scan_base_file(RealIO(), str(base), 1, SimpleNamespace(id=1, bytes=size,
                                                                   digest=right),
                           epoch, ONE, False, run)
    view.mapping.close()
    with pytest.raises(RecoveryRefused) as caught:
        _scan_base_file(RealIO(), str(base), 1, SimpleNamespace(id=1, bytes=size,
                                                                digest=bytes(32)),
                        epoch, ONE, False, run)
    assert (caught.value.kind, caught.value.reason) == ("physical_corruption",
                                                        "base_segment_digest")


@pytest.mark.parametrize(("frames", "kind", "reason"), [
    ([(7, 1, None)], "unsupported_semantics", "record_profile"),      # a snapshot in the tail
    ([(1, 1, b"")], "unsupported_semantics", "payload_schema"),       # an Event-v1 pair
    ([(31, 2, None)], "unsupported_semantics", "record_profile"),     # an attachment in the tail
])
def test_tail_record_profile(data_dir, frames, kind, reason):
    root = materialize(data_dir)
    snapshot = _base_frame(root, 0)[2]
    attachment = _base_frame(root, 1)[2]
    filled = [(t, s, p if p is not None else (snapshot if t == 7 else attachment))
              for t, s, p in frames]
    _rewrite_tail(root, filled)
    failure = refused(root)
    assert (failure.kind, failure.reason) == (kind, reason)
    assert failure.sequence == 5 and failure.offset == 44


def test_tail_availability_order_must_continue_the_allocator(data_dir):
    from tay.storage.events.definition import build_definition
    from tay.storage.v2.records import encode_mutation, mutation_from_parts

    root = materialize(data_dir)
    definition = build_definition(worker_key="w", queue_key="q", args={}, max_attempts=1)
    inserted = encode_mutation(mutation_from_parts(THREE, 1, 0, 1, 300, {
        "availability_order": 7, "definition": definition, "eligible_at": 300}))
    _rewrite_tail(root, [(8, 1, inserted)])
    failure = refused(root)
    assert (failure.kind, failure.reason) == ("consumer_rejected", "availability_order_mismatch")
    assert failure.extra["expected"] == 2


def test_epoch_event_must_continue_its_entity_chain(data_dir):
    root = materialize(data_dir)
    tail = (epoch_dir(root) / "segments" / f"{2:020d}.tay").read_bytes()
    frames, offset = [], 44
    while offset < len(tail):
        frame = record.decode_record(tail, offset)
        frames.append((frame.type, frame.schema, bytes(frame.payload)))
        offset = frame.end
    _rewrite_tail(root, frames + frames[-1:])  # the schedule's cancel again: a stale revision
    failure = refused(root)
    assert (failure.kind, failure.reason) == ("consumer_rejected", "entity_revision_mismatch")
    assert failure.sequence == 10


# ---- adoption rollback (§3.7 step 2) -------------------------------------------------

def _adoption_pending(root: Path, *, moved: bool, marker: bool) -> bytes:
    init_store(str(root), durability="write")
    nonce = THREE
    (root / "ADOPTION").write_bytes(encode_adoption(nonce))
    (root / "epochs").mkdir()
    if moved:
        os.rename(root / "segments", root / "epochs" / f"legacy-{nonce.hex()}")
    if marker:
        store_id = (root / "STORE").read_bytes()[8:24]
        (root / "STORE-V2").write_bytes(encode_store_v2(store_id))
    return nonce


@pytest.mark.parametrize(("moved", "marker"), [(True, True), (True, False), (False, False)])
def test_interrupted_adoption_is_rolled_back(data_dir, moved, marker):
    _adoption_pending(data_dir, moved=moved, marker=marker)
    before = tree_hash(data_dir)
    readonly = recover(str(data_dir), activate=False)  # read-only: nothing moves
    assert readonly.store_version == 1 and tree_hash(data_dir) == before
    recovered = recover(str(data_dir), durability="write")
    recovered.journal.close()
    names = set(os.listdir(data_dir))
    assert "segments" in names and not names & {"ADOPTION", "STORE-V2", "CURRENT"}
    assert os.listdir(data_dir / "epochs") == []


def test_store_v2_marker_without_intent_is_refused(data_dir):
    init_store(str(data_dir), durability="write")
    store_id = (data_dir / "STORE").read_bytes()[8:24]
    (data_dir / "STORE-V2").write_bytes(encode_store_v2(store_id))
    failure = refused(data_dir)
    assert (failure.kind, failure.reason) == ("discovery", "incomplete_adoption_without_intent")


def test_upstream_shaped_epoch_with_only_snapshot_and_mutation_opens(data_dir):
    """A store an upstream writer could produce: base (7,1) only, tail (8,1) only, built
    around the literal upstream ``snapshot`` payload (job 0…01 available, order 1)."""
    upstream = labelled(UPSTREAM_V2 / "records.hex", ":")
    snapshot = bytes(record.decode_record(upstream["snapshot"]).payload)
    started = bytes(record.decode_record(upstream["started"]).payload)
    body = _native.encode_records([(7, 1, 1, snapshot)])
    header = encode_header(1, 1, ONE)
    crc = _native.crc32c(header + body)
    base = header + body + encode_footer(SegmentHeader(1, 1, ONE), 1, crc)
    manifest = encode_manifest(Manifest(
        ONE, EPOCH, 3_600_000, (BaseSegment(1, 1, 1, len(base), hashlib.sha256(base).digest()),),
        None, 0, (), 2, 2, Retention("infinity")))
    tail = encode_header(2, 2, ONE) + _native.encode_records([(8, 1, 2, started)])
    root = data_dir
    (epoch_dir(root) / "segments").mkdir(parents=True)
    (epoch_dir(root) / "MANIFEST").write_bytes(manifest)
    (epoch_dir(root) / "segments" / f"{1:020d}.tay").write_bytes(base)
    (epoch_dir(root) / "segments" / f"{2:020d}.tay").write_bytes(tail)
    (root / "STORE").write_bytes(encode_store_marker(ONE))
    (root / "STORE-V2").write_bytes(encode_store_v2(ONE))
    (root / "CURRENT").write_bytes(encode_current(Current(ONE, EPOCH,
                                                          hashlib.sha256(manifest).digest())))
    (root / ".tay-owner.lock").touch()
    table = TableConsumer()
    recover(str(root), consumer=table, activate=False)
    (job,) = list(table.table)
    assert (job.state, job.revision, job.attempt, job.execution) == ("executing", 2, 1, 2)


def test_a_torn_epoch_tail_names_repair_and_repair_cuts_only_it(data_dir):
    from tay.storage.recovery.repair import repair_store

    root = materialize(data_dir)
    tail = epoch_dir(root) / "segments" / f"{2:020d}.tay"
    whole = tail.read_bytes()
    tail.write_bytes(whole + whole[44:44 + 30])  # 30 bytes of a frame: a torn write
    failure = refused(root)
    assert (failure.kind, failure.reason) == ("incomplete_tail", "incomplete_record")
    assert failure.path == str(tail) and failure.offset == len(whole)
    assert "tay storage repair" in failure.extra["remedy"]
    outcome = repair_store(str(root))
    assert outcome.repaired and outcome.offset == len(whole) and outcome.removed_bytes == 30
    assert tail.read_bytes() == whole
    assert recover(str(root), activate=False).records_replayed == 9


@pytest.mark.parametrize("writer", ["c", "python"])
def test_both_journal_writers_append_and_rotate_inside_an_epoch(data_dir, writer):
    """The journal writer only appends to the directory it is given: an epoch's segments,
    three levels under the root, pinned and re-checked like a v1 segments/."""
    from tay.storage.events.definition import build_definition
    from tay.storage.journal.native_commit import make_committer, native_writer_available
    from tay.storage.v2.records import encode_mutation, mutation_from_parts

    if writer == "c" and not native_writer_available():
        pytest.fail("the C writer is not built")
    root = materialize(data_dir)
    journal = recover(str(root), durability="write", rotation_target=2_000,
                      allow_small_rotation_target_for_tests=True).journal
    committer = make_committer(journal, writer=writer)
    definition = build_definition(worker_key="w", queue_key="q", args={"pad": "x" * 300},
                                  max_attempts=1)
    for n in range(8):  # orders continue the allocator at 3
        payload = encode_mutation(mutation_from_parts((10 + n).to_bytes(16, "big"), 1, 0, 1,
                                                      400 + n, {"availability_order": 3 + n,
                                                                "definition": definition,
                                                                "eligible_at": 400 + n}))
        committer.submit([(10 + n, 8, 1, payload)]).result()
    committer.close()
    journal.close()
    table = TableConsumer()
    recovered = recover(str(root), consumer=table, activate=False)
    assert recovered.records_replayed == 17 and len(recovered.view.segments) > 2  # rotated
    assert table.table.counts()["available"] == 9
