"""``tay storage repair``: an incomplete final record of the highest segment is removed (its
bytes kept in a side file); everything else is refused with nothing changed."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.crash.cluster import tree_digest
from tay.failures import RecoveryRefused
from tay.storage.formats.segment import FOOTER_SIZE, HEADER_SIZE, encode_header
from tay.storage.fsio import RealIO
from tay.storage.journal.writer import init_store
from tay.storage.recovery.recover import RecoveryOptions, preflight, recover
from tay.storage.recovery.repair import repair_store

REPO = Path(__file__).resolve().parents[2]
TARGET = 400  # test-only rotation target: a few frames per segment


def tay(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tay.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


def build_store(root: Path, records: int, size: int = 40) -> list[Path]:
    """A store with ``records`` frames (sequence-tagged payloads); its segment paths."""
    init_store(str(root), durability="write")
    journal = recover(str(root), consumer=lambda *a: None, durability="write",
                      rotation_target=TARGET, allow_small_rotation_target_for_tests=True).journal
    journal.append_batch([(seq, 1, 1, bytes([seq % 251]) * size)
                          for seq in range(1, records + 1)])
    journal.sync()
    journal.close()
    return sorted((root / "segments").iterdir())


def physical_next_sequence(root: Path) -> int:
    return preflight(RealIO(), str(root), RecoveryOptions(), keep_mappings=False).next_sequence


def side_files(root: Path) -> list[Path]:
    return sorted(root.glob("torn-tail-*.bin"))


TORN_TAILS = {
    # name: bytes appended to a sound active segment, and the finding's reason
    "record_header": (lambda frame: frame[:20], "incomplete_record"),
    "record_payload": (lambda frame: frame[:40], "incomplete_record"),
    "record_checksum": (lambda frame: frame[:-1], "incomplete_record"),
    "magic_T": (lambda frame: frame[:1], "ambiguous_short_tail"),
    "magic_TAY": (lambda frame: frame[:3], "ambiguous_short_tail"),
}


@pytest.mark.parametrize("case", sorted(TORN_TAILS))
def test_a_torn_final_record_is_removed_and_kept_in_a_side_file(data_dir, case):
    segments = build_store(data_dir, 4)
    active = segments[-1]
    sound = active.read_bytes()
    frame = sound[HEADER_SIZE:HEADER_SIZE + 68]  # any complete frame: only its prefix matters
    cut, reason = TORN_TAILS[case]
    torn = cut(frame)
    active.write_bytes(sound + torn)
    with pytest.raises(RecoveryRefused) as refused:
        recover(str(data_dir), activate=False, consumer=lambda *a: None)
    assert (refused.value.kind, refused.value.reason) == ("incomplete_tail", reason)
    assert "tay storage repair --data-dir" in refused.value.message

    outcome = repair_store(str(data_dir))
    assert outcome.repaired and outcome.offset == len(sound)
    assert outcome.removed_bytes == len(torn) and outcome.finding["reason"] == reason
    assert active.read_bytes() == sound
    [side] = side_files(data_dir)
    assert str(side) == outcome.side_file and side.read_bytes() == torn
    assert stat.S_IMODE(side.stat().st_mode) == 0o600
    assert physical_next_sequence(data_dir) == 5
    again = repair_store(str(data_dir))  # idempotent: nothing left to do
    assert not again.repaired and side_files(data_dir) == [side]


def test_a_torn_footer_is_removed_and_the_segment_is_active_again(data_dir):
    """A seal cut short (the footer is one pwrite at EOF): no record is removed."""
    segments = build_store(data_dir, 8)
    assert len(segments) >= 2
    footer = segments[0].read_bytes()[-FOOTER_SIZE:]  # a real footer's first bytes
    active = segments[-1]
    body = active.read_bytes()
    active.write_bytes(body + footer[:30])
    outcome = repair_store(str(data_dir))
    assert outcome.finding["reason"] == "incomplete_footer" and outcome.removed_bytes == 30
    assert active.read_bytes() == body
    assert physical_next_sequence(data_dir) == 9


def assert_refused_unchanged(root: Path, why: str) -> dict:
    before = tree_digest(root)
    with pytest.raises(RecoveryRefused) as refused:
        repair_store(str(root))
    assert (refused.value.kind, refused.value.reason) == ("repair_refused", why), \
        refused.value.report()
    assert refused.value.extra["changed"] == "nothing"
    assert tree_digest(root) == before and not side_files(root)
    return refused.value.extra["finding"]


def test_a_checksum_mismatch_of_a_complete_final_record_is_refused(data_dir):
    active = build_store(data_dir, 4)[-1]
    data = bytearray(active.read_bytes())
    data[-6] ^= 0x01  # a payload byte of the last, complete frame
    active.write_bytes(bytes(data))
    finding = assert_refused_unchanged(data_dir, "not_a_torn_tail")
    assert finding["reason"] == "record_checksum"


def test_damage_before_a_torn_tail_is_refused(data_dir):
    active = build_store(data_dir, 4)[-1]
    data = bytearray(active.read_bytes())
    data[HEADER_SIZE + 30] ^= 0x01  # the first frame of the active segment
    active.write_bytes(bytes(data) + b"TAY")
    finding = assert_refused_unchanged(data_dir, "not_a_torn_tail")
    assert finding["class"] == "physical_corruption" and finding["offset"] == HEADER_SIZE


def test_damage_in_an_earlier_segment_is_refused(data_dir):
    segments = build_store(data_dir, 8)
    first = bytearray(segments[0].read_bytes())
    first[HEADER_SIZE + 30] ^= 0x01
    segments[0].write_bytes(bytes(first))
    with open(segments[-1], "ab") as handle:
        handle.write(b"TA")
    assert_refused_unchanged(data_dir, "not_a_torn_tail")


def test_a_torn_tail_in_a_sealed_segment_is_refused(data_dir):
    segments = build_store(data_dir, 8)
    assert len(segments) >= 2
    os.truncate(segments[0], segments[0].stat().st_size - 3)
    finding = assert_refused_unchanged(data_dir, "sealed_segment")
    assert finding["reason"] == "sealed_history_error"


def test_a_torn_tail_whose_removal_leaves_a_bad_store_is_refused(data_dir):
    """The cut store is checked whole before anything changes: here the highest segment's
    FIRST_SEQUENCE does not follow its predecessor (found only by the topology check)."""
    segments = build_store(data_dir, 8)
    active = segments[-1]
    store_id = (data_dir / "STORE").read_bytes()[8:24]
    wrong = encode_header(len(segments), 999, store_id)
    active.write_bytes(wrong + b"TAY")
    finding = assert_refused_unchanged(data_dir, "damage_beyond_the_tail")
    assert finding["reason"] == "first_sequence"


def test_a_short_segment_header_is_refused(data_dir):
    active = build_store(data_dir, 1)[-1]
    active.write_bytes(active.read_bytes()[:30])
    assert_refused_unchanged(data_dir, "not_a_torn_tail")


def test_a_store_in_use_is_refused(data_dir):
    active = build_store(data_dir, 2)[-1]
    journal = recover(str(data_dir), consumer=lambda *a: None, durability="write").journal
    try:
        with open(active, "ab") as handle:
            handle.write(b"T")
        with pytest.raises(RecoveryRefused) as refused:
            repair_store(str(data_dir))
        assert refused.value.kind == "ownership_busy"
    finally:
        journal.close()


def test_cli_repairs_with_json_and_refuses_with_exit_1(data_dir):
    active = build_store(data_dir, 3)[-1]
    sound = active.read_bytes()
    active.write_bytes(sound + sound[HEADER_SIZE:HEADER_SIZE + 50])
    inspect = tay("storage", "inspect", "--data-dir", str(data_dir))
    assert inspect.returncode == 1
    assert f"tay storage repair --data-dir {data_dir}" in inspect.stdout

    done = tay("storage", "repair", "--data-dir", str(data_dir), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] and report["repaired"] and report["removed_bytes"] == 50
    assert report["offset"] == len(sound) and report["path"] == str(active)
    assert Path(report["side_file"]).read_bytes() == sound[HEADER_SIZE:HEADER_SIZE + 50]
    assert report["finding"]["class"] == "incomplete_tail"

    done = tay("storage", "repair", "--data-dir", str(data_dir))
    assert done.returncode == 0 and done.stdout.startswith("nothing to repair"), done.stdout

    data = bytearray(active.read_bytes())
    data[-2] ^= 0x10
    active.write_bytes(bytes(data))
    done = tay("storage", "repair", "--data-dir", str(data_dir), "--json")
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert (report["ok"], report["repaired"], report["reason"]) == (False, False,
                                                                     "not_a_torn_tail")
    assert report["finding"]["reason"] == "record_checksum"
    text = tay("storage", "repair", "--data-dir", str(data_dir))
    assert text.returncode == 1
    assert text.stdout.startswith("refused: not_a_torn_tail; nothing was changed")
    assert "record_checksum" in text.stdout


def test_cli_usage_errors_exit_2():
    done = tay("storage", "repair")
    assert done.returncode == 2 and "--data-dir" in done.stderr
    done = tay("storage", "repair", "--data-dir", "x", "--force")
    assert done.returncode == 2 and "--force" in done.stderr


def test_a_torn_record_in_a_store_v2_epoch_tail_is_removed(data_dir):
    from tests.storage.test_segment_ledger import v2_store_with_tail_segments

    _, tail = v2_store_with_tail_segments(data_dir)
    highest = tail[-1]
    sound = highest.read_bytes()
    highest.write_bytes(sound + sound[HEADER_SIZE:HEADER_SIZE + 57])
    with pytest.raises(RecoveryRefused) as refused:
        recover(str(data_dir), activate=False, consumer=lambda *a: None)
    assert refused.value.reason == "incomplete_record" and refused.value.path == str(highest)
    assert "tay storage repair --data-dir" in refused.value.message

    outcome = repair_store(str(data_dir))
    assert (outcome.repaired, outcome.segment_path, outcome.removed_bytes) == (
        True, str(highest), 57)
    assert highest.read_bytes() == sound
    [side] = side_files(data_dir)  # in the root, which tolerates unrelated regular files
    assert side.parent == data_dir and side.read_bytes() == sound[HEADER_SIZE:HEADER_SIZE + 57]
    from tay.storage.recovery.store_v2 import preflight_v2

    assert preflight_v2(RealIO(), str(data_dir), RecoveryOptions(),
                        keep_mappings=False).segments[-1].path == str(highest)
