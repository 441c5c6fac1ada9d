"""The segment ledger: its literal fixtures, and a missing or replaced segment refused by
recovery (``inspect`` and ``serve`` alike) with nothing changed."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.crash.cluster import tree_digest
from tests.storage.conftest import event_fixture
from tay.failures import RecoveryRefused
from tay.storage.formats.record import decode_record
from tay.storage.formats.segment_ledger import (
    ENTRY_SIZE,
    LedgerEntry,
    decode_ledger,
    encode_entry,
)
from tay.storage.journal.writer import init_store
from tay.storage.recovery.recover import recover

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "fixtures" / "tay" / "storage" / "ledger"
STORE_ID = bytes.fromhex("00112233445566778899aabbccddeeff")
EPOCH = bytes.fromhex("0f0e0d0c0b0a09080706050403020100")
V1 = bytes(16)
LIFECYCLE = ("E1", "E2", "E3", "E4", "E6", "E5")  # one job, sequences 1..6


def fixture(name: str) -> bytes:
    return bytes.fromhex("".join((FIXTURES / name).read_text(encoding="ascii").split()))


def test_fixture_checksums():
    for line in (FIXTURES / "SHA256SUMS").read_text(encoding="ascii").splitlines():
        digest, name = line.split()
        assert hashlib.sha256(fixture(name)).hexdigest() == digest, name


def test_two_v1_entries_and_our_encoder_writes_the_same_bytes():
    ledger = decode_ledger(fixture("l01_v1_two.hex"))
    assert ledger.entries == (LedgerEntry(STORE_ID, V1, 1, 1), LedgerEntry(STORE_ID, V1, 2, 5))
    assert ledger.torn_bytes == 0 and ledger.highest().segment_id == 2
    assert b"".join(encode_entry(e) for e in ledger.entries) == fixture("l01_v1_two.hex")


def test_a_torn_final_append_is_tolerated():
    ledger = decode_ledger(fixture("l02_torn_append.hex"))
    assert [e.segment_id for e in ledger.entries] == [1, 2]
    assert ledger.torn_bytes == 10 and ledger.valid_size == 2 * ENTRY_SIZE


def test_entries_of_several_directories():
    ledger = decode_ledger(fixture("l03_epochs.hex"))
    assert ledger.highest(V1) == LedgerEntry(STORE_ID, V1, 2, 7)
    assert ledger.highest(EPOCH) == LedgerEntry(STORE_ID, EPOCH, 3, 4)
    assert ledger.highest(bytes([9]) * 16) is None


@pytest.mark.parametrize(("name", "reason"), [
    ("l04_checksum.hex", "checksum"),
    ("l05_order.hex", "ledger_order"),
    ("l06_torn_garbage.hex", "invalid_magic"),
])
def test_damaged_ledgers_are_refused(name, reason):
    with pytest.raises(RecoveryRefused) as refused:
        decode_ledger(fixture(name), "SEGMENT-LEDGER")
    assert (refused.value.kind, refused.value.reason) == ("physical_corruption", reason)
    assert refused.value.offset == 64 and refused.value.path == "SEGMENT-LEDGER"


# -- the store ---------------------------------------------------------------------------

def lifecycle_store(root: Path) -> list[Path]:
    """One job's six events over three segments (1 and 2 sealed, 3 active with the last two)."""
    init_store(str(root), durability="write")
    journal = recover(str(root), durability="write", rotation_target=700,
                      allow_small_rotation_target_for_tests=True).journal
    frames = [decode_record(event_fixture(name)) for name in LIFECYCLE]
    for frame in frames:
        journal.append_batch([(frame.sequence, frame.type, frame.schema, frame.payload)])
        journal.sync()
    journal.close()
    segments = sorted((root / "segments").iterdir())
    assert len(segments) == 3, segments
    return segments


def tay(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tay.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


def test_a_deleted_active_segment_is_refused_by_inspect_and_serve(data_dir):
    active = lifecycle_store(data_dir)[-1]
    active.unlink()  # the sealed segment 2 is now the highest: on its own, a valid store
    before = tree_digest(data_dir)

    done = tay("storage", "inspect", "--data-dir", str(data_dir), "--json")
    assert done.returncode == 1, done.stdout
    report = json.loads(done.stdout)
    assert (report["class"], report["reason"]) == ("continuity", "missing_segment")
    assert report["path"] == str(active) and report["segment_id"] == 3
    assert report["highest_on_disk"] == 2

    socket_path = os.path.join(tempfile.mkdtemp(prefix="tay-ledger-"), "s.sock")
    done = tay("serve", "--data-dir", str(data_dir), "--socket", socket_path,
               "--durability", "write")
    assert done.returncode == 1
    assert "missing_segment" in done.stderr and str(active) in done.stderr, done.stderr
    assert tree_digest(data_dir) == before
    assert not os.path.exists(socket_path)
    os.rmdir(os.path.dirname(socket_path))


def test_a_deleted_empty_successor_is_refused_too(data_dir):
    lifecycle_store(data_dir)
    journal = recover(str(data_dir), durability="write").journal
    journal._rotate()  # seal segment 3 and publish the empty segment 4
    journal.close()
    (data_dir / "segments" / f"{4:020d}.tay").unlink()
    with pytest.raises(RecoveryRefused) as refused:
        recover(str(data_dir), activate=False)
    assert (refused.value.reason, refused.value.segment_id) == ("missing_segment", 4)


def test_a_segment_other_than_the_recorded_one_is_refused(data_dir):
    lifecycle_store(data_dir)
    ledger = data_dir / "SEGMENT-LEDGER"
    entries = decode_ledger(ledger.read_bytes()).entries
    assert [(e.segment_id, e.first_sequence) for e in entries] == [(1, 1), (2, 3), (3, 5)]
    forged = LedgerEntry(entries[1].store_id, V1, 2, 4)  # as if segment 2 began at 4
    ledger.write_bytes(encode_entry(entries[0]) + encode_entry(forged))
    with pytest.raises(RecoveryRefused) as refused:
        recover(str(data_dir), activate=False)
    assert (refused.value.kind, refused.value.reason) == ("continuity", "segment_replaced")
    assert refused.value.extra["expected_first_sequence"] == 4


def test_a_ledger_of_another_store_is_refused(data_dir):
    lifecycle_store(data_dir)
    (data_dir / "SEGMENT-LEDGER").write_bytes(fixture("l01_v1_two.hex"))
    with pytest.raises(RecoveryRefused) as refused:
        recover(str(data_dir), activate=False)
    assert (refused.value.kind, refused.value.reason) == ("discovery", "ledger_store_mismatch")


def test_a_damaged_ledger_is_refused_unchanged(data_dir):
    lifecycle_store(data_dir)
    ledger = data_dir / "SEGMENT-LEDGER"
    data = bytearray(ledger.read_bytes())
    data[70] ^= 0x01
    ledger.write_bytes(bytes(data))
    before = tree_digest(data_dir)
    with pytest.raises(RecoveryRefused) as refused:
        recover(str(data_dir), durability="write")
    assert (refused.value.reason, refused.value.path) == ("checksum", str(ledger))
    assert tree_digest(data_dir) == before


def test_a_store_without_a_ledger_gets_one_at_activation(data_dir):
    """A store written by upstream Tay or an older tay: recovery accepts it, the writer
    records its highest segment, and from then on a deleted segment is noticed."""
    segments = lifecycle_store(data_dir)
    (data_dir / "SEGMENT-LEDGER").unlink()
    recover(str(data_dir), activate=False)
    recover(str(data_dir), durability="write").journal.close()
    [entry] = decode_ledger((data_dir / "SEGMENT-LEDGER").read_bytes()).entries
    assert (entry.segment_id, entry.first_sequence) == (3, 5)
    assert (data_dir / "SEGMENT-LEDGER").stat().st_mode & 0o777 == 0o600
    segments[-1].unlink()
    with pytest.raises(RecoveryRefused) as refused:
        recover(str(data_dir), activate=False)
    assert refused.value.reason == "missing_segment"


def test_a_torn_ledger_append_is_dropped_at_activation(data_dir):
    lifecycle_store(data_dir)
    ledger = data_dir / "SEGMENT-LEDGER"
    sound = ledger.read_bytes()
    ledger.write_bytes(sound + encode_entry(LedgerEntry(STORE_ID, V1, 9, 9))[:20])
    recover(str(data_dir), activate=False)  # tolerated: the ledger only lags
    journal = recover(str(data_dir), durability="write").journal
    assert ledger.read_bytes() == sound
    journal._rotate()
    journal.close()
    assert [e.segment_id for e in decode_ledger(ledger.read_bytes()).entries] == [1, 2, 3, 4]


# -- Store v2: the epoch tail's segments --------------------------------------------------

def v2_store_with_tail_segments(root: Path) -> tuple[bytes, list[Path]]:
    """A compacted (Store-v2) store whose epoch tail grew to three segments; returns the
    epoch id and the tail segment paths."""
    from tay.storage.compaction.offline import compact_offline
    from tay.storage.recovery.recover import TableConsumer
    from tay.storage.v2 import Retention

    lifecycle_store(root)
    compact_offline(str(root), consumer=TableConsumer(), durability="write",
                    retention=Retention("infinity"), now_ms=lambda: 1_000)
    recovered = recover(str(root), durability="write", rotation_target=300,
                        allow_small_rotation_target_for_tests=True)
    journal = recovered.journal
    epoch_id = recovered.view.epoch_id
    assert journal.epoch_id == epoch_id != V1
    first = journal.next_sequence
    # framed records only: the ledger is checked in pass 1, before the record profile
    journal.append_batch([(seq, 8, 1, b"m" * 100) for seq in range(first, first + 4)])
    journal.sync()
    journal.close()
    segments = sorted(Path(journal.segments_dir).iterdir())
    base = recovered.view.base_count
    assert len(segments) >= base + 3, segments
    return epoch_id, segments[base:]


def test_a_deleted_epoch_tail_segment_is_refused(data_dir):
    epoch_id, tail = v2_store_with_tail_segments(data_dir)
    entries = decode_ledger((data_dir / "SEGMENT-LEDGER").read_bytes()).entries
    recorded = [e.segment_id for e in entries if e.epoch_id == epoch_id]
    assert recorded[-1] == int(tail[-1].name[:20])  # the newest tail segment is recorded
    tail[-1].unlink()
    before = tree_digest(data_dir)
    with pytest.raises(RecoveryRefused) as refused:
        recover(str(data_dir), activate=False)
    assert (refused.value.reason, refused.value.path) == ("missing_segment", str(tail[-1]))
    assert tree_digest(data_dir) == before

