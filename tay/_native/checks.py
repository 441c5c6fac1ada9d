"""Argument checks both twins share (the C twin imports these without the pure twin)."""

from __future__ import annotations

from typing import Any

MAX_PAYLOAD = 16_777_216
MAX_SEQUENCE = 0xFFFFFFFFFFFFFFFF


def check_record_fields(index: int, rtype: Any, schema: Any, sequence: Any, length: int) -> None:
    """The encoder's domain checks (storage.md §1.3); ValueError names the index and field."""
    if not isinstance(rtype, int) or not 1 <= rtype <= 254:
        raise ValueError(f"record {index}: type must be 1..254, got {rtype!r}")
    if not isinstance(schema, int) or not 1 <= schema <= 255:
        raise ValueError(f"record {index}: schema must be 1..255, got {schema!r}")
    if not isinstance(sequence, int) or not 1 <= sequence <= MAX_SEQUENCE:
        raise ValueError(f"record {index}: sequence must be 1..2^64-1, got {sequence!r}")
    if length > MAX_PAYLOAD:
        raise ValueError(f"record {index}: payload length {length} exceeds {MAX_PAYLOAD}")


def check_scan_bounds(size: int, start: int, end: int, budget: int, first_sequence: int) -> None:
    """Refuse impossible scan arguments with a ValueError naming the argument."""
    if not 0 <= start <= end <= size:
        raise ValueError(f"scan range [{start}:{end}) outside a buffer of {size} bytes")
    if not 0 <= budget <= MAX_PAYLOAD:
        raise ValueError(f"budget must be 0..{MAX_PAYLOAD}, got {budget}")
    if not 1 <= first_sequence <= MAX_SEQUENCE:
        raise ValueError(f"first_sequence must be 1..2^64-1, got {first_sequence}")


MUTATION_ROW = 26  # tay_mutations_scan's row (TAY_MUTATION_ROW)


def check_apply_input(size: int, offsets: Any, rows: Any) -> None:
    """A live table's apply: ValueError unless ``rows`` holds one mutation row per offset and
    every 16-byte job id lies inside the buffer."""
    if len(rows) != len(offsets) * MUTATION_ROW:
        raise ValueError(f"{len(rows)} row integers for {len(offsets)} mutations "
                         f"({MUTATION_ROW} each)")
    for offset in offsets:
        if not 0 <= offset <= size - 16:
            raise ValueError(f"job id at {offset} outside the buffer")
