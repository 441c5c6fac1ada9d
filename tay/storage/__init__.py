"""Storage: the Tay byte formats, the journal and recovery (synchronous, no event loop).

Importing the package registers every supported event pair, including the schedule and
operations pairs,
so that any reader that decodes events (recovery, inspect, verify-file) knows all of them.
"""

from tay.storage.events import schedules as _schedule_events  # noqa: F401  (registers pairs)
from tay.storage.events import operations as _operations_events  # noqa: F401  (registers pairs)
