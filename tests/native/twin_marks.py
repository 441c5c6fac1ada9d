"""The first step of every mark test (test_frames_enqueue, test_frames_report,
test_json_enqueued): both twins mark a text alike, spans included, and a text left unmarked
has no spans."""

from __future__ import annotations

from types import ModuleType
from typing import Any


def agreed_mark(twins: tuple[ModuleType, ModuleType], name: str, text: bytes) -> tuple[int, Any]:
    """``(mark, spans)`` of ``text`` read by the function ``name`` of both twins."""
    marks = {getattr(twin, name)(text) for twin in twins}
    assert len(marks) == 1  # the twins agree, spans too
    mark, spans = marks.pop()
    if not mark:
        assert spans == ()
    return mark, spans
