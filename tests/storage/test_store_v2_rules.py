"""The §3 rules the other Store-v2 tests do not reach, on a store the engine wrote and tay
compacted: root rules (§3.1), the base checked against the MANIFEST (§3.7 step 6), the base
profile and the reducer's base and tail rules (§3.5, §3.6), and revalidation (§3.7 step 8).

Every refusal goes through recovery as ``tay serve`` runs it (activating), names its class,
reason and path (and the record's offset and sequence when a record is at fault), and
changes no byte of the store.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from tay import _native
from tay._frozen import replace
from tay.engine import Engine
from tay.failures import RecoveryRefused
from tay.storage.compaction.offline import compact_offline
from tay.storage.formats import record
from tay.storage.formats.segment import SegmentHeader, encode_footer, encode_header
from tay.storage.recovery.recover import TableConsumer, recover
from tay.storage.v2 import Retention
from tay.storage.v2 import layout as v2_layout
from tay.storage.v2.epoch_records import decode_epoch_event
from tay.storage.v2.manifest import BaseSegment, decode_manifest, encode_manifest
from tay.storage.v2.markers import Current, decode_current, encode_current
from tay.storage.v2.records import (
    decode_mutation, decode_snapshot, encode_mutation, encode_snapshot, mutation_from_parts,
)
from tests.crash.cluster import tree_digest
from tests.crash.compaction_store import (
    CAPTURE, continue_in_epoch, engine_config, write_v1_history,
)

BIG = 1 << 20  # one base segment, one tail segment


def compacted_store(root: Path) -> Path:
    """Engine-written history, adopted with nothing expired, then a tail: base snapshots,
    attachments and checkpoints; tail mutations and (30,2) events."""
    write_v1_history(root, rotation=BIG)
    compact_offline(str(root), consumer=Engine(engine_config()), retention=Retention("infinity"),
                    now_ms=lambda: CAPTURE, durability="write", rotation_target=BIG,
                    allow_small_rotation_target_for_tests=True)
    continue_in_epoch(root, rotation=BIG)
    return root


@pytest.fixture
def store(data_dir) -> Path:
    return compacted_store(data_dir)


def epoch_dir(root: Path) -> Path:
    epoch = decode_current((root / "CURRENT").read_bytes()).epoch_id
    return root / "epochs" / v2_layout.epoch_dir_name(epoch)


def segment(root: Path, segment_id: int) -> Path:
    return epoch_dir(root) / "segments" / f"{segment_id:020d}.tay"


def frames_of(path: Path) -> list[tuple[int, int, bytes]]:
    data, offset, out = path.read_bytes(), 44, []
    while offset < len(data) - (64 if segment_sealed(data) else 0):
        frame = record.decode_record(data, offset)
        out.append((frame.type, frame.schema, bytes(frame.payload)))
        offset = frame.end
    return out


def segment_sealed(data: bytes) -> bool:
    return data[-64:-60] == b"TAYF" if len(data) >= 108 else False


def frame_offset(path: Path, index: int) -> int:
    data, offset = path.read_bytes(), 44
    for _ in range(index):
        offset = record.decode_record(data, offset).end
    return offset


def store_id(root: Path) -> bytes:
    return (root / "STORE").read_bytes()[8:24]


def rewrite_base(root: Path, frames: list[tuple[int, int, bytes]]) -> Path:
    """Replace base segment 1 (same frame count: the tail keeps its sequences), and bind the
    new bytes in the MANIFEST and CURRENT as a writer would."""
    sid = store_id(root)
    header = encode_header(1, 1, sid)
    body = _native.encode_records([(t, s, n + 1, p) for n, (t, s, p) in enumerate(frames)])
    crc = _native.crc32c(header + body)
    data = header + body + encode_footer(SegmentHeader(1, 1, sid), len(frames), crc)
    base = segment(root, 1)
    base.write_bytes(data)
    manifest_path = epoch_dir(root) / "MANIFEST"
    manifest = decode_manifest(manifest_path.read_bytes())
    (only,) = manifest.base_segments
    assert only.last_sequence == len(frames)
    entry = replace(only, bytes=len(data), digest=hashlib.sha256(data).digest())
    bind_manifest(root, replace(manifest, base_segments=(entry,)))
    return base


def bind_manifest(root: Path, manifest) -> None:
    raw = encode_manifest(manifest)
    (epoch_dir(root) / "MANIFEST").write_bytes(raw)
    current = decode_current((root / "CURRENT").read_bytes())
    (root / "CURRENT").write_bytes(encode_current(Current(
        current.store_id, current.epoch_id, hashlib.sha256(raw).digest())))


def rewrite_tail(root: Path, frames: list[tuple[int, int, bytes]]) -> Path:
    manifest = decode_manifest((epoch_dir(root) / "MANIFEST").read_bytes())
    first, tail_id = manifest.tail_first_sequence, manifest.tail_segment_id
    tail = segment(root, tail_id)
    tail.write_bytes(encode_header(tail_id, first, store_id(root)) + _native.encode_records(
        [(t, s, first + n, p) for n, (t, s, p) in enumerate(frames)]))
    return tail


def refused(root: Path, consumer=None) -> RecoveryRefused:
    """Recovery as serve runs it refuses, and the store is byte-identical afterwards."""
    before = tree_digest(root)
    with pytest.raises(RecoveryRefused) as caught:
        recover(str(root), consumer=consumer or TableConsumer(), durability="write")
    assert tree_digest(root) == before
    return caught.value


def opens(root: Path) -> int:
    recovered = recover(str(root), consumer=TableConsumer(), durability="write")
    recovered.journal.close()
    return recovered.store_version


def groups(frames):
    """The base as (snapshot + its attachments) groups, then the checkpoints."""
    jobs, checkpoints = [], []
    for frame in frames:
        if frame[:2] == (7, 1):
            jobs.append([frame])
        elif frame[:2] == (31, 2):
            jobs[-1].append(frame)
        else:
            checkpoints.append(frame)
    return jobs, checkpoints


def flat(jobs, checkpoints):
    return [frame for group in jobs for frame in group] + checkpoints


# ---- §3.1 root rules -------------------------------------------------------------------

def test_epochs_must_be_a_directory(store):
    os.rename(store / "epochs", store.parent / f"{store.name}-epochs")
    (store / "epochs").write_bytes(b"")
    failure = refused(store)
    assert (failure.kind, failure.reason, failure.path) == (
        "discovery", "epochs_not_directory", str(store / "epochs"))


def test_a_marker_with_a_second_link_is_refused(store):
    os.link(store / "CURRENT", store / "current-copy")
    failure = refused(store)
    assert (failure.kind, failure.reason, failure.path) == (
        "discovery", "hard_link", str(store / "CURRENT"))


def test_a_special_file_in_the_root_is_refused(store):
    os.mkfifo(store / "pipe")
    failure = refused(store)
    assert (failure.kind, failure.reason, failure.path) == (
        "discovery", "unsupported_file_type", str(store / "pipe"))


def test_root_staging_is_tolerated_up_to_the_size_of_what_it_stages(store):
    staging = store / f".tay-current-{'ab' * 16}.tmp"
    staging.write_bytes(b"x" * 77)
    failure = refused(store)
    assert (failure.kind, failure.reason, failure.path) == (
        "discovery", "oversized_staging", str(staging))
    assert failure.extra["cap"] == 76
    staging.write_bytes(b"x" * 76)
    (store / "notes.txt").write_text("an operator's file")  # unrelated regular files too
    assert opens(store) == 2


# ---- §3.7 step 6: the base against the MANIFEST ------------------------------------------

def test_a_base_file_of_another_size_is_refused_before_it_is_hashed(store):
    base = segment(store, 1)
    size = base.stat().st_size
    with open(base, "ab") as handle:
        handle.write(b"\0")
    failure = refused(store)
    assert (failure.kind, failure.reason, failure.path) == (
        "physical_corruption", "base_segment_size", str(base))
    assert (failure.extra["expected"], failure.extra["found"]) == (size, size + 1)


def test_base_summaries_must_match_the_manifest(store):
    """Size and digest agree, but the MANIFEST says the base ends one record earlier (and
    the tail starts there): the scanned summary is refused."""
    manifest = decode_manifest((epoch_dir(store) / "MANIFEST").read_bytes())
    (only,) = manifest.base_segments
    bind_manifest(store, replace(
        manifest, base_segments=(replace(only, last_sequence=only.last_sequence - 1),),
        tail_first_sequence=manifest.tail_first_sequence - 1))
    failure = refused(store)
    assert (failure.kind, failure.reason, failure.path) == (
        "physical_corruption", "base_segment_summary", str(segment(store, 1)))
    assert failure.extra["last"] == only.last_sequence


# ---- §3.5 / §3.6: the base profile and the reducer's base rules -------------------------

def _base_case(store: Path, change) -> tuple[RecoveryRefused, Path, int]:
    frames = frames_of(segment(store, 1))
    jobs, checkpoints = groups(frames)
    new, index = change(jobs, checkpoints)
    base = rewrite_base(store, new)
    return refused(store), base, index


def _swap_first_jobs(jobs, checkpoints):
    jobs[0], jobs[1] = jobs[1], jobs[0]
    return flat(jobs, checkpoints), len(jobs[0])


def _attachment_first(jobs, checkpoints):
    with_attachment = next(g for g in jobs if len(g) > 1)
    frames = flat(jobs, checkpoints)
    frames.remove(with_attachment[1])
    return [with_attachment[1]] + frames, 0


def _snapshot_last(jobs, checkpoints):
    last = jobs.pop()
    assert len(last) == 1
    return flat(jobs, checkpoints) + last, len(flat(jobs, checkpoints))


def _order_reused(jobs, checkpoints):
    available = [i for i, g in enumerate(jobs) if decode_snapshot(g[0][2]).body[
        "availability_order"] is not None]
    first, second = available[:2]
    order = decode_snapshot(jobs[first][0][2]).body["availability_order"]
    twin = decode_snapshot(jobs[second][0][2])
    jobs[second][0] = (7, 1, encode_snapshot(replace(
        twin, body={**twin.body, "availability_order": order})))
    return flat(jobs, checkpoints), sum(len(g) for g in jobs[:second])


def _checkpoint_twice(jobs, checkpoints):
    assert len(checkpoints) >= 2
    checkpoints[1] = checkpoints[0]
    return flat(jobs, checkpoints), len(flat(jobs, checkpoints)) - len(checkpoints) + 1


@pytest.mark.parametrize(("change", "kind", "reason"), [
    (_swap_first_jobs, "consumer_rejected", "base_not_ascending"),
    (_attachment_first, "consumer_rejected", "attachment_without_snapshot"),
    (_snapshot_last, "consumer_rejected", "snapshot_after_checkpoint"),
    (_order_reused, "consumer_rejected", "availability_order_reused"),
    (_checkpoint_twice, "consumer_rejected", "checkpoint_twice"),
])
def test_base_profile_and_reducer_rules(store, change, kind, reason):
    failure, base, index = _base_case(store, change)
    assert (failure.kind, failure.reason, failure.path) == (kind, reason, str(base))
    assert failure.sequence == index + 1
    assert failure.offset == frame_offset(base, index)


def _tail_frame(store: Path, pair: tuple[int, int], test) -> tuple[int, int, bytes]:
    for frame in frames_of(segment(store, 2)):
        if frame[:2] == pair and test(frame[2]):
            return frame
    raise LookupError(pair)


@pytest.mark.parametrize(("pair", "test", "kind", "reason"), [
    ((8, 1), lambda p: True, "unsupported_semantics", "record_profile"),  # a mutation in the base
    ((30, 2), lambda p: decode_epoch_event(p).carry.job_scoped,
     "consumer_rejected", "job_event_in_base"),                          # a result or failure
    ((30, 2), lambda p: decode_epoch_event(p).event.get("expected_revision", 0) > 0
     and not decode_epoch_event(p).carry.job_scoped,
     "consumer_rejected", "checkpoint_not_creating"),                    # a schedule's change
])
def test_tail_records_are_refused_in_the_base(store, pair, test, kind, reason):
    intruder = _tail_frame(store, pair, test)
    frames = frames_of(segment(store, 1))
    frames[-1] = intruder  # in place of the last checkpoint
    base = rewrite_base(store, frames)
    failure = refused(store)
    assert (failure.kind, failure.reason, failure.path) == (kind, reason, str(base))
    assert (failure.sequence, failure.offset) == (len(frames), frame_offset(base, len(frames) - 1))


# ---- §3.6: the tail's logical revisions ------------------------------------------------

def _first_job(store: Path) -> bytes:
    return decode_snapshot(frames_of(segment(store, 1))[0][2]).job_id


def test_a_second_insert_of_a_job_is_refused(store):
    job_id = _first_job(store)
    inserted = next(decode_mutation(p) for t, s, p in frames_of(segment(store, 2))
                    if (t, s) == (8, 1) and decode_mutation(p).kind == 1)
    again = mutation_from_parts(job_id, 1, 0, 1, inserted.at, {
        "availability_order": 1, "definition": inserted.event["definition"],
        "eligible_at": inserted.at})
    tail = rewrite_tail(store, [(8, 1, encode_mutation(again))])
    failure = refused(store)
    assert failure.kind == "consumer_rejected" and failure.path == str(tail)
    assert failure.offset == 44 and failure.extra["job_id"] == job_id.hex()


def test_a_mutation_that_skips_a_revision_is_refused(store):
    """The tail with one of a job's mutations left out: the next one expects a revision
    the job never reached."""
    frames = frames_of(segment(store, 2))
    mutations = [(i, decode_mutation(p)) for i, (t, s, p) in enumerate(frames) if (t, s) == (8, 1)]
    (drop, first), (index, second) = next(
        (a, b) for a, b in zip(mutations, mutations[1:]) if a[1].job_id == b[1].job_id)
    del frames[drop]
    tail = rewrite_tail(store, frames)
    failure = refused(store)
    assert (failure.kind, failure.path) == ("consumer_rejected", str(tail))
    assert failure.offset == frame_offset(tail, index - 1)


def test_a_mutation_of_an_unknown_job_is_refused(store):
    frames = frames_of(segment(store, 2))
    index, mutation = next((i, decode_mutation(p)) for i, (t, s, p) in enumerate(frames)
                           if (t, s) == (8, 1) and decode_mutation(p).kind != 1)
    stranger = mutation._replace(job_id=b"\xff" * 16)
    raw = bytearray(frames[index][2])
    raw[:16] = stranger.job_id
    frames[index] = (8, 1, bytes(raw))
    tail = rewrite_tail(store, frames)
    failure = refused(store)
    assert (failure.kind, failure.path) == ("consumer_rejected", str(tail))
    assert failure.offset == frame_offset(tail, index)


def test_a_job_event_that_does_not_continue_the_revision_is_refused(store):
    frames = frames_of(segment(store, 2))
    index = next(i for i, (t, s, p) in enumerate(frames)
                 if (t, s) == (30, 2) and decode_epoch_event(p).carry.job_scoped)
    raw = bytearray(frames[index][2])
    revision = int.from_bytes(raw[2:10], "big")
    raw[2:10] = (revision + 1).to_bytes(8, "big")
    frames[index] = (30, 2, bytes(raw))
    tail = rewrite_tail(store, frames)
    failure = refused(store)
    assert (failure.kind, failure.reason, failure.path) == (
        "consumer_rejected", "revision_not_consecutive", str(tail))
    assert failure.offset == frame_offset(tail, index)


# ---- §3.7 step 8: revalidation -----------------------------------------------------------

def _replace_with_copy(path: Path, extra: bytes = b"") -> None:
    """The same bytes (plus ``extra``) under a new inode, as another writer would leave it."""
    copy = path.with_name(path.name + ".new")
    copy.write_bytes(path.read_bytes() + extra)
    os.replace(copy, path)


class _Meddler(TableConsumer):
    """Changes the store while replay runs: CURRENT by default (same bytes, new inode)."""

    def __init__(self, root: Path, change=None) -> None:
        super().__init__()
        self.root, self.done = root, False
        self.change = change or (lambda root: _replace_with_copy(root / "CURRENT"))

    def epoch_install(self, state, event=None):
        if not self.done:
            self.done = True
            self.change(self.root)
        return super().epoch_install(state, event)


def _highest_segment(root: Path) -> Path:
    return sorted((epoch_dir(root) / "segments").iterdir())[-1]


@pytest.mark.parametrize("change", [
    lambda root: _replace_with_copy(_highest_segment(root)),  # same bytes, new inode
    lambda root: _replace_with_copy(_highest_segment(root), b"\0"),  # and a byte longer
    lambda root: _replace_with_copy(epoch_dir(root) / "MANIFEST"),
    lambda root: (root / "notes.txt").write_bytes(b"x"),  # a new file in the root
], ids=["tail-inode", "tail-size", "manifest-inode", "root-listing"])
def test_an_epoch_that_changes_during_replay_is_refused_at_revalidation(store, change):
    # revalidation does not rescan the segments: the epoch's listing (names, inodes,
    # sizes) and its MANIFEST bytes are what must be unchanged
    consumer = _Meddler(store, change)
    with pytest.raises(RecoveryRefused) as caught:
        recover(str(store), consumer=consumer, durability="write")
    failure = caught.value
    assert (failure.kind, failure.reason, failure.stage) == (
        "changed_view", "store_changed_during_recovery", "revalidation")
    assert consumer.done


def test_a_root_that_changes_during_replay_is_refused_at_revalidation(store):
    consumer = _Meddler(store)
    with pytest.raises(RecoveryRefused) as caught:
        recover(str(store), consumer=consumer, durability="write")
    failure = caught.value
    assert (failure.kind, failure.reason, failure.stage) == (
        "changed_view", "store_changed_during_recovery", "revalidation")
    assert consumer.done and opens(store) == 2  # the store itself is fine


# ---- §3.3 verify_selection on a real store -------------------------------------------------

def test_the_v2_marker_must_name_the_store(store):
    from tay.storage.v2.markers import encode_store_v2

    (store / "STORE-V2").write_bytes(encode_store_v2(b"\x09" * 16))
    failure = refused(store)
    assert (failure.kind, failure.reason) == ("discovery", "store_id_mismatch")


def test_the_manifest_must_name_the_store(store):
    manifest = decode_manifest((epoch_dir(store) / "MANIFEST").read_bytes())
    bind_manifest(store, replace(manifest, store_id=b"\x09" * 16))
    failure = refused(store)
    assert (failure.kind, failure.reason) == ("discovery", "store_id_mismatch")
    assert failure.path == str(epoch_dir(store) / "MANIFEST")


# ---- §3.7 step 2: a rollback that cannot tell what to restore ------------------------------

def _pending(root: Path, *, legacy: bool, segments: bool) -> None:
    from tay.storage.journal.writer import init_store
    from tay.storage.v2.markers import encode_adoption

    init_store(str(root), durability="write")
    nonce = b"\x03" * 16
    (root / "ADOPTION").write_bytes(encode_adoption(nonce))
    (root / "epochs").mkdir()
    if legacy:
        os.mkdir(root / "epochs" / f"legacy-{nonce.hex()}")
    if not segments:
        for name in os.listdir(root / "segments"):
            os.unlink(root / "segments" / name)
        os.rmdir(root / "segments")


@pytest.mark.parametrize(("legacy", "segments", "reason"), [
    (True, True, "adoption_rollback_ambiguous"),
    (False, False, "adoption_rollback_missing_history"),
])
def test_a_rollback_that_cannot_tell_what_to_restore_is_refused(data_dir, legacy, segments,
                                                               reason):
    _pending(data_dir, legacy=legacy, segments=segments)
    failure = refused(data_dir)
    assert (failure.kind, failure.reason) == ("discovery", reason)
