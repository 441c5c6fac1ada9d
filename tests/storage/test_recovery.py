"""Recovery refusals on real directories: every class, and never a changed byte on disk.

Each test builds a real store with the journal, damages it the way the refusal describes,
hashes the whole tree (names, modes, contents), recovers, and checks both the refusal
(kind, reason, location) and that the tree hash is unchanged.
"""

from __future__ import annotations

import hashlib
import os
import stat
import struct
from pathlib import Path

import pytest

from tests.storage.conftest import event_fixture
from tay.failures import RecoveryRefused
from tay.storage import layout
from tay.storage.fsio import RealIO
from tay.storage.journal.writer import init_store
from tay.storage.formats.record import decode_record
from tay.storage.recovery.recover import RecoveryOptions, TableConsumer, recover
from tay.storage.formats.store_marker import encode_store_marker

REPLAY_ORDER = ("E1", "E2", "E3", "E4", "E6", "E5")  # the fixtures' sequence order 1..6


def tree_hash(root: Path) -> str:
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in sorted(os.walk(root)):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            path = Path(dirpath, name)
            info = path.lstat()
            digest.update(f"{path.relative_to(root)}|{info.st_mode:o}|{info.st_nlink}\n".encode())
            if stat.S_ISLNK(info.st_mode):
                digest.update(os.readlink(path).encode())
            elif stat.S_ISREG(info.st_mode):
                digest.update(path.read_bytes())
    return digest.hexdigest()


def fixture_events() -> list[tuple[int, int, int, bytes]]:
    frames = [decode_record(event_fixture(name)) for name in REPLAY_ORDER]
    return [(f.sequence, f.type, f.schema, f.payload) for f in frames]


def build_store(root: Path, batches: list[list[tuple[int, int, int, bytes]]], *,
                target: int = 16_777_352, rotate_after: bool = False) -> None:
    init_store(str(root), durability="write")
    recovered = recover(str(root), consumer=lambda *a: None, durability="write",
                        rotation_target=target, allow_small_rotation_target_for_tests=True)
    journal = recovered.journal
    for batch in batches:
        journal.append_batch(batch)
    if rotate_after:
        journal._rotate()
    journal.close()


def opaque(first: int, count: int) -> list[tuple[int, int, int, bytes]]:
    return [(seq, 1, 1, b"x" * 40) for seq in range(first, first + count)]


def segment(root: Path, segment_id: int) -> Path:
    return root / "segments" / f"{segment_id:020d}.tay"


def refuse(root: Path, **kwargs) -> RecoveryRefused:
    """Recover and return the refusal, asserting the tree did not change."""
    before = tree_hash(root)
    kwargs.setdefault("consumer", lambda *a: None)
    with pytest.raises(RecoveryRefused) as refused:
        recover(str(root), durability="write", **kwargs)
    assert tree_hash(root) == before
    return refused.value


def test_fixture_events_recover_into_a_job_table(data_dir):
    build_store(data_dir, [fixture_events()])
    consumer = TableConsumer()
    recovered = recover(str(data_dir), consumer=consumer, activate=False)
    assert recovered.records_replayed == 6 and recovered.view.next_sequence == 7
    assert sum(consumer.table.counts().values()) == 1


@pytest.mark.parametrize("tail", [b"T", b"TA", b"TAY"])
def test_torn_magic_tail_is_refused_as_incomplete(data_dir, tail):
    build_store(data_dir, [opaque(1, 3)])
    with segment(data_dir, 1).open("ab") as handle:
        handle.write(tail)
    refused = refuse(data_dir)
    assert (refused.kind, refused.reason) == ("incomplete_tail", "ambiguous_short_tail")
    assert refused.path == str(segment(data_dir, 1)) and refused.segment_id == 1
    assert refused.offset == 44 + 3 * 68


@pytest.mark.parametrize("keep", [4, 23, 30, 67])
def test_partial_record_is_refused_never_truncated(data_dir, keep):
    build_store(data_dir, [opaque(1, 2)])
    size = segment(data_dir, 1).stat().st_size
    with segment(data_dir, 1).open("ab") as handle:
        handle.write(bytes(_frame_bytes(data_dir, 1))[:keep])
    refused = refuse(data_dir)
    assert refused.kind == "incomplete_tail" and refused.offset == size


def _frame_bytes(root: Path, index: int) -> bytes:
    data = segment(root, 1).read_bytes()
    start = 44 + (index - 1) * 68
    return data[start:start + 68]


def test_corrupt_record_crc(data_dir):
    build_store(data_dir, [opaque(1, 3)])
    path = segment(data_dir, 1)
    data = bytearray(path.read_bytes())
    data[44 + 68 + 67] ^= 1  # last byte of the second record
    path.write_bytes(bytes(data))
    refused = refuse(data_dir)
    assert (refused.kind, refused.reason) == ("physical_corruption", "record_checksum")
    assert refused.offset == 44 + 68 and refused.segment_id == 1


def test_gap_in_segment_ids(data_dir):
    build_store(data_dir, [opaque(1, 6)], target=300)
    assert segment(data_dir, 3).exists()
    os.rename(segment(data_dir, 3), segment(data_dir, 4))
    refused = refuse(data_dir)
    assert (refused.kind, refused.reason) == ("continuity", "segment_id_gap")


def test_earlier_segment_without_footer_is_sealed_history_error(data_dir):
    build_store(data_dir, [opaque(1, 4)], target=300)
    path = segment(data_dir, 1)
    data = path.read_bytes()
    path.write_bytes(data[:-64])
    refused = refuse(data_dir)
    assert refused.kind in ("continuity", "physical_corruption")
    assert refused.reason == "sealed_history_error" and refused.segment_id == 1


def test_foreign_store_id(data_dir):
    build_store(data_dir, [opaque(1, 2)])
    store = data_dir / "STORE"
    store.chmod(0o644)
    store.write_bytes(encode_store_marker(bytes(range(1, 17))))
    refused = refuse(data_dir)
    assert refused.kind == "physical_corruption" and "store_id" in refused.reason
    assert refused.segment_id == 1


def test_missing_store_after_history(data_dir):
    build_store(data_dir, [opaque(1, 2)])
    (data_dir / "STORE").unlink()
    refused = refuse(data_dir)
    assert (refused.kind, refused.reason) == ("discovery", "missing_store_marker")


def test_bare_genesis_requires_initialization(data_dir):
    build_store(data_dir, [])
    (data_dir / "STORE").unlink()  # a bootstrap that crashed before STORE (and the ledger)
    (data_dir / "SEGMENT-LEDGER").unlink()
    refused = refuse(data_dir)
    assert (refused.kind, refused.reason) == ("initialization_required", "genesis")


def test_a_ledger_without_store_is_a_missing_store_not_a_genesis(data_dir):
    build_store(data_dir, [])
    (data_dir / "STORE").unlink()  # the ledger is written after STORE: STORE was lost
    refused = refuse(data_dir)
    assert (refused.kind, refused.reason) == ("discovery", "missing_store_marker")


def test_uninitialized_root(data_dir):
    data_dir.mkdir()
    (data_dir / ".tay-owner.lock").touch(mode=0o600)
    refused = refuse(data_dir)
    assert (refused.kind, refused.reason) == ("initialization_required", "uninitialized")


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda r: os.symlink(segment(r, 1), r / "segments" / "00000000000000000002.tay"), "symlink"),
        (lambda r: os.link(segment(r, 1), r / "backup"), "hard_link"),
        (lambda r: (r / "segments" / "00000000000000000002.tay").touch(), "zero_byte_canonical"),
        (lambda r: (r / "segments" / "old.tay").write_bytes(b"x"), "malformed_segment_name"),
        (lambda r: (r / "notes.TAY.bak").write_bytes(b"x"), "malformed_segment_name"),
        (lambda r: (r / "segments" / "00000000000000000001.tay.tmp").write_bytes(b"x"),
         "malformed_segment_name"),
        (lambda r: (r / "subdir").mkdir(), "unexpected_directory"),
        (lambda r: (r / "segments" / f".tay-new-{2:020d}-{'ab' * 16}.tmp").write_bytes(b"x" * 45),
         "oversized_staging"),
    ],
)
def test_directory_classification_refusals(data_dir, make, reason):
    build_store(data_dir, [opaque(1, 2)])
    make(data_dir)
    refused = refuse(data_dir)
    assert (refused.kind, refused.reason) == ("discovery", reason)
    assert refused.path.startswith(str(data_dir))


def test_unrelated_regular_files_are_ignored_in_an_initialized_store(data_dir):
    build_store(data_dir, [opaque(1, 2)])
    (data_dir / "README").write_text("hello")
    recovered = recover(str(data_dir), consumer=lambda *a: None, activate=False)
    assert recovered.view.inventory.unrelated == ["README"]


def test_store_v2_root_is_not_opened_as_v1(data_dir):
    build_store(data_dir, [opaque(1, 1)])
    (data_dir / "CURRENT").write_bytes(b"x" * 76)
    refused = refuse(data_dir)  # read as Store v2, whose root may not hold segments/
    assert (refused.kind, refused.reason) == ("discovery", "v2_root_has_v1_segments")


def test_lock_busy(data_dir):
    build_store(data_dir, [opaque(1, 1)])
    held = layout.acquire_lock(RealIO(), str(data_dir), create=False, fsync_ancestors=False)
    try:
        refused = refuse(data_dir)
    finally:
        held.release()
    assert (refused.kind, refused.stage) == ("ownership_busy", "ownership")


def test_missing_lock_or_root_is_ownership_unavailable(data_dir):
    refused = refuse_missing = None
    with pytest.raises(RecoveryRefused) as refuse_missing:
        recover(str(data_dir), activate=False)
    assert refuse_missing.value.kind == "ownership_unavailable"
    build_store(data_dir, [opaque(1, 1)])
    (data_dir / ".tay-owner.lock").unlink()
    refused = refuse(data_dir)
    assert (refused.kind, refused.reason) == ("ownership_unavailable", "missing_lock")


def test_invalid_event_payload_is_refused_with_its_sequence(data_dir):
    events = fixture_events()
    bad = (3, 3, 1, b"\x09\x00\x00\x00\x00")  # an empty map where "started" needs keys
    build_store(data_dir, [events[:2] + [bad]])
    refused = refuse(data_dir, consumer=TableConsumer())
    assert refused.kind == "invalid_payload" and refused.sequence == 3
    assert refused.stage == "replay" and refused.segment_id == 1


def test_unknown_event_pair_is_unsupported_semantics(data_dir):
    build_store(data_dir, [[(1, 200, 1, b"\x00")]])
    refused = refuse(data_dir, consumer=TableConsumer())
    assert refused.kind == "unsupported_semantics" and refused.sequence == 1


def test_invalid_transition_is_consumer_rejected(data_dir):
    events = fixture_events()
    build_store(data_dir, [[events[0], (2, *events[2][1:])]])  # "started" before "available"
    refused = refuse(data_dir, consumer=TableConsumer())
    assert refused.kind == "consumer_rejected" and refused.sequence == 2


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        (RecoveryOptions(max_replay_records=2), "max_replay_records"),
        (RecoveryOptions(max_total_segment_bytes=100), "max_total_segment_bytes"),
        (RecoveryOptions(max_directory_entries=3), "max_directory_entries"),
    ],
)
def test_budgets_are_resource_limits(data_dir, options, reason):
    build_store(data_dir, [opaque(1, 3)])
    refused = refuse(data_dir, options=options)
    assert (refused.kind, refused.reason) == ("resource_limit", reason)


def test_decode_budget_is_a_resource_limit(data_dir):
    build_store(data_dir, [opaque(1, 1)])
    refused = refuse(data_dir, options=RecoveryOptions(max_decode_payload_bytes=39))
    assert refused.kind == "resource_limit" and refused.offset == 44


def test_sequence_gap_inside_a_segment(data_dir):
    build_store(data_dir, [opaque(1, 2)])
    path = segment(data_dir, 1)
    data = bytearray(path.read_bytes())
    import tay._native as native
    data += native.encode_records([(1, 1, 5, b"x" * 40)])  # sequence 5 after 2
    path.write_bytes(bytes(data))
    refused = refuse(data_dir)
    assert refused.kind == "continuity" and refused.offset == 44 + 2 * 68


def test_recovery_leaves_the_tree_unchanged_when_it_succeeds_read_only(data_dir):
    build_store(data_dir, [opaque(1, 5)], target=300, rotate_after=True)
    before = tree_hash(data_dir)
    recover(str(data_dir), consumer=lambda *a: None, activate=False)
    assert tree_hash(data_dir) == before


def test_footer_fields_struct(data_dir):
    build_store(data_dir, [opaque(1, 4)], target=300)
    footer = segment(data_dir, 1).read_bytes()[-64:]
    assert footer[:4] == b"TAYF" and struct.unpack(">QQ", footer[8:24])[0] == 1
