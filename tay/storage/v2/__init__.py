"""Store-v2 objects (storage.md §3.2-3.5), one import point for the three modules that
define them:

- ``markers``: the STORE-V2, ADOPTION and CURRENT fixed markers;
- ``manifest``: the MANIFEST, its terminal retention and the selection check;
- ``records``: the JOB_SNAPSHOT_V2 (7,1) and JOB_MUTATION_V2 (8,1) payloads.
"""

from __future__ import annotations

from tay.storage.events.definition import PayloadRefused
from tay.storage.v2.manifest import (
    INFINITY, BaseSegment, Manifest, Retention, decode_manifest, decode_retention,
    encode_manifest, manifest_from_body, verify_selection,
)
from tay.storage.v2.markers import (
    CURRENT_SIZE, MARKER_SIZE, Current, decode_adoption, decode_current, decode_store_v2,
    encode_adoption, encode_current, encode_store_v2,
)
from tay.storage.v2.records import (
    MUTATION_PAIR, SNAPSHOT_PAIR, Mutation, Snapshot, decode_mutation, decode_snapshot,
    encode_mutation, encode_snapshot, mutation_from_parts, validate_snapshot,
)

__all__ = [
    "Current", "Manifest", "BaseSegment", "Retention", "INFINITY", "Mutation", "Snapshot",
    "MARKER_SIZE", "CURRENT_SIZE", "SNAPSHOT_PAIR", "MUTATION_PAIR",
    "decode_store_v2", "encode_store_v2", "decode_adoption", "encode_adoption",
    "decode_current", "encode_current", "decode_manifest", "encode_manifest",
    "manifest_from_body", "decode_retention", "verify_selection", "decode_snapshot",
    "encode_snapshot", "validate_snapshot", "decode_mutation", "encode_mutation",
    "mutation_from_parts", "PayloadRefused",
]
