"""The uncapped fast path of ``HistoryBudget`` (frames added to ``unplaced``, ``place``d
only when their sum passes ``room`` or when read) lays out the journal exactly as
accounting each frame at once does: the same bytes, segments and active size after any
sequence of frames, pairs and reads, across rotations and oversized frames."""

from __future__ import annotations

from hypothesis import given, strategies as st

from tay.storage.formats.record import FIXED_SIZE
from tay.storage.formats.segment import FOOTER_SIZE, HEADER_SIZE
from tay.storage.journal.history_budget import HistoryBudget, HistoryCaps

OVERHEAD = FIXED_SIZE  # a record's bytes besides its payload


def budget(target: int) -> HistoryBudget:
    return HistoryBudget(HistoryCaps(), target, history_bytes=HEADER_SIZE, segments=1,
                         active_size=HEADER_SIZE)


def fast(history: HistoryBudget, *payloads: int) -> None:
    """What the engine's fused commits do with one frame or a success's two."""
    sizes = [OVERHEAD + payload for payload in payloads]
    history.unplaced = unplaced = history.unplaced + sum(sizes)
    if unplaced > history.room:
        history.place(*sizes)


def accounted(history: HistoryBudget, *payloads: int) -> None:
    if len(payloads) == 2:
        history.account_payloads(*payloads)
    else:
        history.account_payload(payloads[0])


def figures(history: HistoryBudget) -> tuple[int, int, int, int]:
    history.place()
    return (history.history_bytes, history.segments, history.layout.active_size, history.room)


steps = st.lists(st.one_of(
    st.tuples(st.booleans(), st.integers(0, 900)),                      # one frame
    st.tuples(st.booleans(), st.integers(0, 900), st.integers(0, 900)),  # a success's two
    st.just(()),                                                        # a reader
), max_size=80)


@given(target=st.integers(HEADER_SIZE + OVERHEAD + FOOTER_SIZE, 3_000), steps=steps)
def test_placing_later_lays_out_as_accounting_at_once(target, steps):
    """``lazy`` takes each frame the fast way or the accounted way (the engine's fused and
    general commits interleave), ``eager`` always the accounted way."""
    lazy, eager = budget(target), budget(target)
    for step in steps:
        if not step:
            assert (lazy.history_bytes, lazy.segments) == (eager.history_bytes, eager.segments)
            continue
        quick, *payloads = step
        (fast if quick else accounted)(lazy, *payloads)
        accounted(eager, *payloads)
    assert figures(lazy) == figures(eager)


def test_a_frame_past_the_room_rotates_where_accounting_would():
    lazy, eager = budget(1_000), budget(1_000)
    # the third frame rotates, the fourth too; the oversized fifth fills one alone, the sixth
    # rotates past it
    for payload in (300, 300, 300, 600, 2_000, 10):
        fast(lazy, payload)
        accounted(eager, payload)
    assert eager.segments == 5
    assert figures(lazy) == figures(eager)


def test_every_other_account_places_the_unplaced_frames_first():
    lazy, eager = budget(4_000), budget(4_000)
    fast(lazy, 100)
    accounted(eager, 100)
    assert lazy.unplaced == OVERHEAD + 100 and lazy.layout.history_bytes == HEADER_SIZE
    lazy.account((OVERHEAD + 50,))
    eager.account((OVERHEAD + 50,))
    assert lazy.unplaced == 0
    assert figures(lazy) == figures(eager)
