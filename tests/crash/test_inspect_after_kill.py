"""What the kill -9 tests read between the kill and the restart (``inspect_after_kill``,
tests/crash/cluster.py): the torn final record a kill in the middle of the writer's
multi-page ``pwrite`` leaves is repaired as the operator would (``tay storage repair``),
and no other refusal is accepted."""

from __future__ import annotations

from pathlib import Path

import pytest

from tay.storage.formats.segment import HEADER_SIZE
from tests.crash.cluster import inspect_after_kill, inspect_store, tree_digest
from tests.crash.compaction_store import write_v1_history
from tests.scratch import scratch_dir


@pytest.fixture(scope="module")
def template() -> Path:
    root = scratch_dir("after-kill-") / "data"
    write_v1_history(root)
    return root


def copy_of(template: Path) -> tuple[Path, Path]:
    """A copy of the store, and its highest (active) segment."""
    import shutil

    root = scratch_dir("after-kill-case-") / "data"
    shutil.copytree(template, root)
    return root, sorted((root / "segments").iterdir())[-1]


def test_a_final_record_cut_at_a_page_is_repaired_and_the_store_read(template):
    root, active = copy_of(template)
    before = inspect_store(root)
    sound = active.read_bytes()
    # what a short write leaves: the first part of a frame (the first frame's, whose
    # length field says more follows)
    torn = sound[HEADER_SIZE:HEADER_SIZE + 40]
    active.write_bytes(sound + torn)
    after = inspect_after_kill(root)
    assert active.read_bytes() == sound
    [side] = root.glob("torn-tail-*.bin")
    assert side.read_bytes() == torn
    assert (after["jobs"], after["job_states"]) == (before["jobs"], before["job_states"])


def test_any_other_refusal_fails_and_nothing_is_changed(template):
    root, active = copy_of(template)
    sound = bytearray(active.read_bytes())
    sound[-1] ^= 0xFF  # the CRC of a complete final record: damage, not a torn tail
    active.write_bytes(bytes(sound))
    untouched = tree_digest(root)
    with pytest.raises(AssertionError, match="inspect exited 1"):
        inspect_after_kill(root)
    assert tree_digest(root) == untouched
