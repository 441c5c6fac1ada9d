"""Step 2 of a compaction (storage.md §3.8): space admission.

The free space of the store's filesystem must cover the estimated base, 256 bytes per
source segment plus 1 MiB of metadata, and 64 MiB of headroom; ``max_candidate_bytes``
(optional) caps the estimate. Source bytes are never deleted to make room: a compaction
that does not fit is refused (kind ``resource_limit``) and changes nothing.
"""

from __future__ import annotations

import os
from typing import Iterable, Sequence

from tay.failures import RecoveryRefused
from tay.storage.events.transitions import JobState
from tay.storage.formats import value
from tay.storage.formats.record import FIXED_SIZE
from tay.storage.formats.segment import FOOTER_SIZE, HEADER_SIZE
from tay.storage.fsio import RealIO

HEADROOM = 64 * 1024 * 1024
METADATA = 1024 * 1024
PER_SOURCE_SEGMENT = 256
# a snapshot's fixed part: prefix (33 or 41 bytes) and the eleven body keys with scalars
SNAPSHOT_OVERHEAD = 420
ATTACHMENT_OVERHEAD = 120


def estimate_base_bytes(jobs: Iterable[JobState], checkpoints: Sequence) -> int:
    """An upper estimate of the base's size (frames, plus one header/footer per 64 MiB)."""
    return base_estimate(sum(map(estimate_job_bytes, jobs)), checkpoints)


def estimate_job_bytes(job: JobState) -> int:
    """One kept job's share of ``estimate_base_bytes``: its snapshot and its result."""
    return estimate_bytes(len(job.definition_bytes),
                          len(value.encode(job.result)) if job.result_present else None)


def estimate_bytes(definition_length: int, result_length: int | None) -> int:
    """``estimate_job_bytes`` of a job whose definition's canonical bytes and result's
    canonical Value (None: no result) have these lengths."""
    total = FIXED_SIZE + SNAPSHOT_OVERHEAD + definition_length
    if result_length is not None:
        total += FIXED_SIZE + ATTACHMENT_OVERHEAD + result_length
    return total


def base_estimate(job_bytes: int, checkpoints: Sequence) -> int:
    """``estimate_base_bytes`` from its jobs' summed ``estimate_job_bytes``."""
    total = job_bytes
    for checkpoint in checkpoints:
        total += FIXED_SIZE + 16 + len(value.encode_map(checkpoint.event.payload))
    segments = total // (64 * 1024 * 1024) + 1
    return total + segments * (HEADER_SIZE + FOOTER_SIZE)


def free_bytes(path: str) -> int:
    info = os.statvfs(path)
    return info.f_bavail * info.f_frsize


def admit_space(io: RealIO, root: str, base_estimate: int, source_segments: int,
                max_candidate_bytes: int | None = None) -> None:
    if max_candidate_bytes is not None and base_estimate > max_candidate_bytes:
        raise RecoveryRefused("resource_limit", "max_candidate_bytes", path=root,
                              stage="compaction", required=base_estimate,
                              configured=max_candidate_bytes)
    required = base_estimate + source_segments * PER_SOURCE_SEGMENT + METADATA + HEADROOM
    available = free_bytes(root)
    if available < required:
        raise RecoveryRefused("resource_limit", "insufficient_space", path=root,
                              stage="compaction", required=required, available=available)
