"""``HistoryBudget`` accounts every frame the one way (its size added to ``unplaced``,
``place``d only when the sum passes ``room`` or when read), and the engine's fused commits
do the same inline. Whichever way the frames come (one by one, a success's pair, a batch
through ``account``, an uncapped admission), the layout must be the journal's own: the
rotation rule (``rotation_needed``) applied to each frame in turn, across rotations and
oversized frames."""

from __future__ import annotations

from hypothesis import given, strategies as st

from tay.storage.formats.record import FIXED_SIZE
from tay.storage.formats.segment import FOOTER_SIZE, HEADER_SIZE
from tay.storage.journal.history_budget import HistoryBudget, HistoryCaps
from tay.storage.journal.writer import rotation_needed

OVERHEAD = FIXED_SIZE  # a record's bytes besides its payload


class Journal:
    """What the writer does with frames: the reference the budget must equal."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.history_bytes, self.segments, self.active_size = HEADER_SIZE, 1, HEADER_SIZE

    def write(self, size: int) -> None:
        if rotation_needed(self.active_size, size, self.target):
            self.history_bytes += FOOTER_SIZE + HEADER_SIZE  # seal, open the next
            self.segments += 1
            self.active_size = HEADER_SIZE
        self.active_size += size
        self.history_bytes += size

    def figures(self) -> tuple[int, int, int, int]:
        room = self.target - FOOTER_SIZE - self.active_size
        return (self.history_bytes, self.segments, self.active_size, room)


def budget(target: int) -> HistoryBudget:
    return HistoryBudget(HistoryCaps(), target, history_bytes=HEADER_SIZE, segments=1,
                         active_size=HEADER_SIZE)


def fused(history: HistoryBudget, *payloads: int) -> None:
    """What the engine's fused commits do inline with one frame or a success's two."""
    sizes = [OVERHEAD + payload for payload in payloads]
    history.unplaced = unplaced = history.unplaced + sum(sizes)
    if unplaced > history.room:
        history.place(*sizes)


def accounted(history: HistoryBudget, way: int, *payloads: int) -> None:
    sizes = [OVERHEAD + payload for payload in payloads]
    if way == 0:
        fused(history, *payloads)
    elif way == 1 and len(payloads) == 2:
        history.account_payloads(*payloads)
    elif way == 1:
        history.account_payload(payloads[0])
    elif way == 2:
        history.account(sizes)
    else:
        history.admit(sizes, 3)  # uncapped: accounted, never refused


def figures(history: HistoryBudget) -> tuple[int, int, int, int]:
    history.place()
    return (history.history_bytes, history.segments, history.layout.active_size, history.room)


steps = st.lists(st.one_of(
    st.tuples(st.integers(0, 3), st.integers(0, 900)),                      # one frame
    st.tuples(st.integers(0, 3), st.integers(0, 900), st.integers(0, 900)),  # a pair
    st.just(()),                                                           # a reader
), max_size=80)


@given(target=st.integers(HEADER_SIZE + OVERHEAD + FOOTER_SIZE, 3_000), steps=steps)
def test_every_way_of_accounting_lays_out_as_the_journal_writes(target, steps):
    history, journal = budget(target), Journal(target)
    for step in steps:
        if not step:
            assert (history.history_bytes, history.segments) == journal.figures()[:2]
            continue
        way, *payloads = step
        accounted(history, way, *payloads)
        for payload in payloads:
            journal.write(OVERHEAD + payload)
        assert history.unplaced <= history.room or history.unplaced == 0
    assert figures(history) == journal.figures()


def test_a_frame_past_the_room_rotates_where_the_journal_would():
    history, journal = budget(1_000), Journal(1_000)
    # the third frame rotates, the fourth too; the oversized fifth fills one alone, the sixth
    # rotates past it
    for payload in (300, 300, 300, 600, 2_000, 10):
        fused(history, payload)
        journal.write(OVERHEAD + payload)
    assert journal.segments == 5
    assert figures(history) == journal.figures()


def test_frames_that_fit_wait_unplaced_until_read():
    history = budget(4_000)
    history.account_payload(100)
    history.account((OVERHEAD + 50,))
    assert history.unplaced == 2 * OVERHEAD + 150 and history.layout.history_bytes == HEADER_SIZE
    assert history.history_bytes == HEADER_SIZE + 2 * OVERHEAD + 150
    assert history.unplaced == 0
