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


def test_a_retired_tag_makes_its_earlier_entries_stale_until_a_sweep_drops_them() -> None:
    """``retire`` marks every entry pushed so far under a key's first item stale (the
    engine's deleted job, whose id a new job may take with the same key); later pushes
    under it are live, and the sweep that drops the stale ones forgets the retirement."""
    heap = DueHeap(lambda item: not heap.retired
                   or item[1] > heap.retired.get(item[2][0], 0))
    heap.push(10, (b"x", 1))
    heap.push(20, (b"y", 1))
    heap.retire([b"x"])
    heap.push(30, (b"x", 1))  # the new job under the retired id
    assert [item[2] for item in heap.pop_due(100)] == [(b"y", 1), (b"x", 1)]
    heap.push(5, (b"x", 2))
    heap.retire([b"x"])
    assert heap.retired == {b"x": 4}
    heap.retire([("t", n) for n in range(COMPACT_FLOOR - 1)])  # up to the floor: kept
    assert len(heap.retired) == COMPACT_FLOOR
    heap.retire([("t", n) for n in range(COMPACT_FLOOR, 2 * COMPACT_FLOOR)])  # one sweep
    assert heap.retired == {} and len(heap) == 0
