"""What a recovery gives back, v1 or Store v2 (``recover`` / ``epoch_recover``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from tay.storage.journal.writer import Journal

Consumer = Callable[[int, int, int, memoryview], None]


@dataclass
class Recovered:
    """What a successful recovery produced.

    ``view`` is a ``FrozenView`` (v1) or an ``EpochView`` (Store v2, ``store_version`` 2);
    ``reducer`` is the v2 reducer after the epoch (its allocator and entity revisions), if
    the consumer took part in the reduction.
    """

    view: Any
    records_replayed: int
    journal: Journal | None
    consumer: Consumer
    store_version: int = 1
    reducer: Any = None
