"""The args JSON of recently enqueued jobs, kept for their first ``execute`` frame.

An enqueue writes the args as sorted compact JSON on the way to their canonical bytes
(``tay.engine.validation.options``); an ``execute`` frame carries exactly that JSON, which the
transcoder would otherwise write back from the stored bytes at every dispatch. A job that
is dispatched soon after it was enqueued (the common case) takes its JSON from here; one
that waits longer, is retried, or was replayed falls back to the transcoder. Bounded by
bytes (1 MiB by default): when full, the oldest entry goes only if its job no longer waits
for a dispatch (``waiting``), else the new one is not kept, since in a backlog the oldest
entries are the next to be dispatched. Each entry is tied to the definition object it was
written for: a job id that comes back with another definition never gets the old JSON.
"""

from __future__ import annotations

from typing import Any, Callable

DEFAULT_MAX_BYTES = 1 << 20
_ENTRY_OVERHEAD = 160  # a dict slot, the id and the bytes object headers, roughly


class ExecuteArgs:
    """job id -> args JSON, oldest first, at most ``max_bytes`` (entries counted roughly)."""

    __slots__ = ("_items", "_bytes", "max_bytes", "_waiting")

    def __init__(self, waiting: Callable[[bytes], bool],
                 max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self._items: dict[bytes, tuple[Any, bytes]] = {}
        self._bytes = 0
        self.max_bytes = max_bytes
        self._waiting = waiting  # job id -> whether it may still be dispatched

    def __len__(self) -> int:
        return len(self._items)

    @property
    def bytes(self) -> int:
        return self._bytes

    def remember(self, job_id: bytes, definition: Any, args_json: bytes | None,
                 exact: bool = False) -> None:
        """A job was inserted with ``definition`` whose args are ``args_json`` (None: not at
        hand; an older entry for the id goes either way). ``exact``: ``args_json`` is an
        object of exactly its size (a frame's args text), kept as it is, not copied."""
        items = self._items
        old = items.pop(job_id, None)
        if old is not None:
            self._bytes -= len(old[1]) + _ENTRY_OVERHEAD
        if args_json is None:
            return
        size = len(args_json) + _ENTRY_OVERHEAD
        while self._bytes + size > self.max_bytes:
            oldest = next(iter(items), None)
            if oldest is None or self._waiting(oldest):
                return  # full of jobs still to dispatch (or too large): not kept
            self._bytes -= len(items.pop(oldest)[1]) + _ENTRY_OVERHEAD
        self._bytes += size
        # else a copy of exactly its size: orjson's output keeps the whole buffer it wrote
        # into (16 KiB for 1 KiB of JSON), which would multiply what the bound means
        items[job_id] = (definition, args_json if exact else memoryview(args_json).tobytes())

    def take(self, job_id: bytes, definition: Any) -> bytes | None:
        """The args JSON kept for this job and this very definition object, else None; the
        entry is forgotten either way (later dispatches transcode)."""
        item = self._items.pop(job_id, None)
        if item is None:
            return None
        self._bytes -= len(item[1]) + _ENTRY_OVERHEAD
        return item[1] if item[0] is definition else None
