"""What a recovery gives back, v1 or Store v2 (``recover`` / ``epoch_recover``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tay.storage.journal.writer import Journal

Consumer = Callable[[int, int, int, memoryview], None]


class Recovered:
    """What a successful recovery produced.

    ``view`` is a ``FrozenView`` (v1) or an ``EpochView`` (Store v2, ``store_version`` 2);
    ``reducer`` is the v2 reducer after the epoch (its allocator and entity revisions), if
    the consumer took part in the reduction.
    """

    __slots__ = ("view", "records_replayed", "journal", "consumer", "store_version", "reducer")

    def __init__(self, view: Any, records_replayed: int, journal: Journal | None,
                 consumer: Consumer, store_version: int = 1, reducer: Any = None) -> None:
        self.view = view
        self.records_replayed = records_replayed
        self.journal = journal
        self.consumer = consumer
        self.store_version = store_version
        self.reducer = reducer
