"""The one error type shared by both Value codec twins (C-backed and pure Python).

Both twins raise ``ValueCodecError`` with the same ``reason`` for the same input, so callers
(the storage layer) map reasons to their own error classes without caring which twin ran.
"""

from __future__ import annotations

# Decode reasons. The last three are resource errors (operational limits, not validity).
DECODE_REASONS = (
    "unknown_tag",
    "truncated",
    "trailing_bytes",
    "map_order",
    "map_key_not_text",
    "negative_not_negative",
    "non_finite_float",
    "invalid_utf8",
    "depth_limit",
    "node_limit",
    "binary_limit",
)
RESOURCE_REASONS = frozenset({"depth_limit", "node_limit", "binary_limit"})
ENCODE_REASONS = ("unsupported_type", "integer_out_of_range", "invalid_utf8", "non_finite_float")
# json_to_value adds these (plus invalid_utf8, non_finite_float, depth_limit, at input
# offsets); value_to_json adds unsupported_type (bytes) to the decode reasons.
JSON_REASONS = ("malformed_json", "duplicate_key", "integer_out_of_range", "unsupported_type")


class ValueCodecError(ValueError):
    """A Value could not be encoded or decoded.

    ``reason`` is one of ``DECODE_REASONS`` / ``ENCODE_REASONS``; ``offset`` is the byte
    offset (in the input for decode, in the output for encode) of the value at fault.
    """

    def __init__(self, reason: str, offset: int, detail: str = "") -> None:
        message = f"value {reason} at offset {offset}"
        if detail:
            message += f": {detail}"
        super().__init__(message)
        self.reason = reason
        self.offset = offset

    @property
    def is_resource_error(self) -> bool:
        """True for depth/node/binary limits: the bytes may be valid, the budget was not."""
        return self.reason in RESOURCE_REASONS
