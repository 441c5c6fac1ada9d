"""The layout of a packed job (tay.engine.retained.packed makes them) and how it reads back.

Kept apart from ``packed`` so that ``tay.engine.retained.jobs`` can read a parked job's
tuple (``ParkedJobEntry``) without importing the module that imports it.
"""

from __future__ import annotations

import orjson
from tay.storage.events.definition import LazyDefinition
from tay.storage.events.transitions import JobState

_new_tuple = tuple.__new__

# A packed job is flat: the collector untracks a tuple only once every tuple inside it is
# untracked, and its pass does not go in the order objects were made, so a nested tuple
# could keep a packed one tracked until a later pass. JobState's 19 fields (a
# LazyDefinition as its canonical bytes, with its args' node count and scalars further
# on), then the entry's, then its attempt timeline, four fields an attempt. A dict or a
# list is tracked whatever it holds, and keeps the tuple that holds it tracked: the
# diagnostic, result and failure details are kept as their JSON text where that reads back
# equal (``ENCODED`` says which).
ID, DEFINITION, STATE, REVISION, READY_ORDER, TERMINAL_AT = 0, 1, 3, 4, 10, 14
_ATTACHMENTS = (15, 17, 18)  # diagnostic, result, failure
QUEUE, TASK, CHARGE, MARGIN, SCHEDULE_ID, ARGS_NODES, SCALARS, ENCODED, ATTEMPTS = \
    range(19, 28)
_STATE_FIELDS = len(JobState._fields)
assert _STATE_FIELDS == 19 and JobState._fields[TERMINAL_AT] == "terminal_at" \
    and JobState._fields[READY_ORDER] == "ready_order"


def job_state(packed: tuple) -> JobState:
    """The JobState ``packed`` was made of, equal field for field."""
    fields = list(packed[:_STATE_FIELDS])
    if packed[ARGS_NODES] is not None:
        fields[DEFINITION] = LazyDefinition.restored(packed[DEFINITION], packed[ARGS_NODES],
                                                     packed[SCALARS])
    encoded = packed[ENCODED]
    if encoded:
        for bit, at in enumerate(_ATTACHMENTS):
            if encoded >> bit & 1:
                fields[at] = orjson.loads(fields[at])
    return _new_tuple(JobState, fields)


def attempts(packed: tuple) -> tuple[tuple[int, int, int | None, str | None], ...] | None:
    """The attempt timeline ``packed`` holds (None: the entry had none)."""
    count = packed[ATTEMPTS]
    if count is None:
        return None
    return tuple([packed[at:at + 4] for at in range(ATTEMPTS + 1, ATTEMPTS + 1 + 4 * count, 4)])
