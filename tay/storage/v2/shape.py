"""How a store's replay divides between its base and its tail, read before recovery.

``tay serve`` recovers on a thread beside its imports only when that pays: the base's
physical pass (SHA-256, ``pread``s, the native scans) releases the GIL, while a tail's
replay is Python throughout and only contends with the imports (docs/benchmarks.md,
ninth session). This is a hint, never a check: it reads CURRENT and the selected MANIFEST
and stats the tail's segments without verifying anything, and any surprise gives None
(recovery proper decides what the store is).
"""

from __future__ import annotations

import os

from tay.storage.formats.segment import parse_segment_file_name
from tay.storage.v2.layout import (CURRENT_NAME, EPOCHS_DIR, MANIFEST_NAME, SEGMENTS_DIR,
                                   epoch_dir_name)
from tay.storage.v2.manifest import decode_manifest
from tay.storage.v2.markers import decode_current


def replay_shape(root: str) -> tuple[int, int] | None:
    """(base bytes, tail bytes) of the epoch CURRENT selects, or None when the store is
    not a readable Store-v2 store (missing, v1, being adopted, damaged)."""
    try:
        with open(os.path.join(root, CURRENT_NAME), "rb") as file:
            current = decode_current(file.read(128))
        epoch = os.path.join(root, EPOCHS_DIR, epoch_dir_name(current.epoch_id))
        with open(os.path.join(epoch, MANIFEST_NAME), "rb") as file:
            manifest = decode_manifest(file.read())
        segments = os.path.join(epoch, SEGMENTS_DIR)
        tail = 0
        for entry in os.scandir(segments):
            segment_id = parse_segment_file_name(entry.name)
            if segment_id is not None and segment_id >= manifest.tail_segment_id:
                tail += entry.stat(follow_symlinks=False).st_size
        return sum(b.bytes for b in manifest.base_segments), tail
    except Exception:  # a hint: recovery reports whatever is wrong
        return None
