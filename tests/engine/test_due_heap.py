"""DueHeap: lazy invalidation with sweeps keeps memory bounded and the live order intact."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tay.engine import ready
from tay.engine.ready import COMPACT_FLOOR, DueHeap


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.booleans()), max_size=300),
       st.integers(0, 60), st.integers(0, 8))
def test_live_entries_come_out_in_due_order_whatever_the_sweeps(pushes, now, floor) -> None:
    saved, ready.COMPACT_FLOOR = ready.COMPACT_FLOOR, floor  # sweeps early and often
    try:
        check_live_order(pushes, now)
    finally:
        ready.COMPACT_FLOOR = saved


def check_live_order(pushes, now) -> None:
    live: set[int] = set()
    heap = DueHeap(lambda item: item[2] in live)
    expected = []
    for key, (due, stays) in enumerate(pushes):
        live.add(key)
        heap.push(due, key)
        if not stays:
            live.discard(key)  # settled right away, like most executions
        else:
            expected.append((due, key))
    popped = [(due, key) for due, _, key in heap.pop_due(now)]
    assert popped == sorted(item for item in expected if item[0] <= now)


def test_stale_entries_far_from_the_head_do_not_pile_up() -> None:
    live: set[int] = set()
    heap = DueHeap(lambda item: item[2] in live)
    live.add(-1)
    heap.push(0, -1)  # one live entry at the head: nothing is ever popped past it
    for key in range(20 * COMPACT_FLOOR):
        live.add(key)
        heap.push(1_000_000 + key, key)
        live.discard(key)
    assert len(heap) <= 2 + COMPACT_FLOOR + 1
    assert [key for _, _, key in heap.pop_due(10**9)] == [-1]
