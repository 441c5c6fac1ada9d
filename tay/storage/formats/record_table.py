"""The records of one scanned segment, kept as columns.

A recovery scan holds every record descriptor of a store while it replays (and the
revalidation scan builds them all again); as a list of ``(offset, type, schema, sequence,
length)`` tuples that is ~160 bytes per record, as columns ~14 (``array('Q')`` offsets,
``array('I')`` lengths, one byte each for type and schema; the sequence of record ``i``
is ``first_sequence + i``, which the scan has already checked). Reads still give the
tuple shape (``RecordRef``), one batch at a time.
"""

from __future__ import annotations

from array import array
from typing import Any, Iterator

RecordRef = tuple[int, int, int, int, int]  # (offset, type, schema, sequence, payload_length)


class RecordTable:
    """Record descriptors of one segment in file order; reads like a list of ``RecordRef``."""

    __slots__ = ("first_sequence", "offsets", "types", "schemas", "lengths")

    def __init__(self, first_sequence: int) -> None:
        self.first_sequence = first_sequence
        self.offsets = array("Q")
        self.types = bytearray()
        self.schemas = bytearray()
        self.lengths = array("I")

    def extend(self, offsets: array, types: bytes, schemas: bytes, lengths: array) -> None:
        """Append the next records (the columns ``_native.scan_record_columns`` returns)."""
        self.offsets.extend(offsets)
        self.types += types
        self.schemas += schemas
        self.lengths.extend(lengths)

    def __len__(self) -> int:
        return len(self.offsets)

    def batch(self, start: int, stop: int) -> Iterator[RecordRef]:
        """The records ``start <= i < stop`` as tuples (columns sliced once per batch)."""
        stop = min(stop, len(self.offsets))
        first = self.first_sequence + start
        return zip(self.offsets[start:stop], self.types[start:stop], self.schemas[start:stop],
                   range(first, first + max(0, stop - start)), self.lengths[start:stop])

    def __iter__(self) -> Iterator[RecordRef]:
        return self.batch(0, len(self.offsets))

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self.offsets))
            return list(self.batch(start, stop))[::step]
        if index < 0:
            index += len(self.offsets)
        if not 0 <= index < len(self.offsets):
            raise IndexError("record index out of range")
        return (self.offsets[index], self.types[index], self.schemas[index],
                self.first_sequence + index, self.lengths[index])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (RecordTable, list)):
            return list(self) == list(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"RecordTable(first_sequence={self.first_sequence}, count={len(self)})"
