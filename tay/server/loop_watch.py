"""The event loop's health: how late it runs what is due (its lag), and where it was when it
ran very late (a stall).

Every request and reply of both transports waits for the one loop thread, so its lag is a
floor under every latency, and no per-request figure shows it on its own. A beat every
``BEAT_S`` asks the loop for a callback and observes how late it ran
(``tay_event_loop_lag_seconds``). A beat later than the stall threshold (``--loop-stall-ms``)
is a stall: counted, and logged once it ends with its length and where the loop thread was.

A sampler thread finds out where: when the beat is overdue by the threshold (and again at
2, 4 and 8 times it) it reads the loop thread's Python stack with ``sys._current_frames``,
which takes the GIL as any Python code does. (faulthandler's timer dumps from a C thread
without it, and crashed a server with running threads when tried.) The loop thread is seen
between bytecodes, so a stall inside one long C call that keeps the GIL shows in the frame
that made the call, once it returns; the stall's length is right either way.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("tay.server")

BEAT_S = 0.1
STALL_MS = 500  # --loop-stall-ms default: well above a full collection or a packing slice
LOG_EVERY_S = 10.0  # at most one stall line per this; the ones between are counted in it
SAMPLES = 4  # stacks per stall: at 1, 2, 4 and 8 times the threshold
STACK_FRAMES = 8  # innermost frames kept of a sample


class LoopWatch:
    """``lag``: the histogram each beat's lateness goes into (``ServerMetrics.loop_lag``);
    ``stall_s``: the threshold, 0 for no stall counting and no sampler thread."""

    def __init__(self, loop: Any, lag: Any, stall_s: float, beat_s: float = BEAT_S,
                 collections: Any = None, log_every_s: float = LOG_EVERY_S,
                 wall_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self.loop = loop
        self.lag = lag
        self.stall_s = stall_s
        self.beat_s = beat_s
        self.log_every_s = log_every_s
        self._wall_ms = wall_ms
        self.stalls = 0
        self.longest_s = 0.0
        self.last_stall: dict[str, Any] | None = None
        self._due = 0.0  # monotonic time the armed beat is due
        self._armed_cpu = 0.0  # the loop thread's CPU time when it armed the beat
        # the full collections' histogram (ServerMetrics.full_collections): a collection
        # holds the GIL throughout, whichever thread runs it, so the loop waits it out
        self._collections = collections
        self._armed_collections = 0.0  # their total seconds when the beat was armed
        self._handle: Any = None
        # (due, overdue_s, loop stack, other threads' stacks) the sampler took while the beat
        # due then waited; the loop thread takes them when that beat runs (a list's append
        # and swap are atomic)
        self._samples: list[tuple[float, float, list[str], list[str]]] = []
        self._loop_thread = 0
        self._outside: tuple[Any, ...] = ()  # held so that their ids stay theirs
        self._outside_ids: frozenset[int] = frozenset()
        self._sampler: threading.Thread | None = None
        self._stopping = threading.Event()
        self._logged_mono = float("-inf")
        self._unlogged = 0  # stalls since the last logged one

    def start(self) -> None:
        """On the loop thread, from a coroutine it runs (``serve``)."""
        self._loop_thread = threading.get_ident()
        self._outside = frames_around_loop(sys._getframe(1))
        self._outside_ids = frozenset(map(id, self._outside))
        self._arm()
        if self.stall_s > 0:
            self._sampler = threading.Thread(target=self._sample_overdue, daemon=True,
                                             name="tay-loop-watch")
            self._sampler.start()

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._stopping.set()
        if self._sampler is not None:
            self._sampler.join(timeout=5.0)
            self._sampler = None
        self._outside, self._outside_ids = (), frozenset()

    def facts(self) -> dict[str, Any]:
        """``status``'s ``loop``."""
        return {"beat_s": self.beat_s, "stall_threshold_s": self.stall_s,
                "stalls": self.stalls, "longest_stall_s": round(self.longest_s, 6),
                "last_stall": self.last_stall}

    # -- loop thread ---------------------------------------------------------------------
    def _arm(self) -> None:
        self._armed_cpu = time.thread_time()
        if self._collections is not None:
            self._armed_collections = self._collections.total
        self._due = time.monotonic() + self.beat_s
        self._handle = self.loop.call_later(self.beat_s, self._beat)

    def _beat(self) -> None:
        late = max(0.0, time.monotonic() - self._due)
        self.lag.observe(late)
        if self.stall_s > 0 and late >= self.stall_s:
            self._stalled(late)
        elif self._samples:
            self._samples = []  # a sample of a beat that came just under the threshold
        self._arm()

    def _stalled(self, late: float) -> None:
        due = self._due
        # CPU the loop thread used since it armed the beat: near the stall's length when the
        # loop itself was busy, far under it when it waited (for the GIL, or in a call that
        # blocks)
        cpu = time.thread_time() - self._armed_cpu
        collected = (0.0 if self._collections is None
                     else self._collections.total - self._armed_collections)
        samples, self._samples = self._samples, []
        taken = [sample[1:] for sample in samples if sample[0] == due]
        self.stalls += 1
        self.longest_s = max(self.longest_s, late)
        where = taken[0][1][0] if taken and taken[0][1] else None
        self.last_stall = {"at": self._wall_ms(), "seconds": round(late, 6),
                           "loop_cpu_s": round(cpu, 6), "collections_s": round(collected, 6),
                           "where": where}
        now = time.monotonic()
        if now - self._logged_mono < self.log_every_s:
            self._unlogged += 1
            return
        self._logged_mono = now
        more, self._unlogged = self._unlogged, 0
        lines = []
        for overdue, stack, others in taken:
            lines.append(f"  {overdue:.3f} s in: " + " <- ".join(stack))
            lines.extend(f"    beside it, {other}" for other in others)
        log.warning("event loop stalled %.3f s (threshold %.3f s), of which the loop thread ran "
                    "%.3f s and full collections took %.3f s%s; the loop thread was %s",
                    late, self.stall_s, cpu, collected,
                    f", {more} more stall(s) since the last line" if more else "",
                    "\n" + "\n".join(lines) if lines else "not sampled")

    # -- sampler thread ------------------------------------------------------------------
    def _sample_overdue(self) -> None:
        check_s = min(max(self.stall_s / 4, 0.005), 0.25)
        sampled_due, taken = 0.0, 0
        while not self._stopping.wait(check_s):
            due = self._due
            overdue = time.monotonic() - due
            if due != sampled_due:
                sampled_due, taken = due, 0
            if taken >= SAMPLES or overdue < self.stall_s * (1 << taken):
                continue
            frames = sys._current_frames()
            frame = frames.pop(self._loop_thread, None)
            if frame is None or self._due != due:  # gone, or the beat ran meanwhile
                continue
            taken += 1
            self._samples.append((due, overdue, stack_of(frame, self._outside_ids),
                                  busy_threads(frames)))
            del frame, frames


_IDLE = ("threading.py", "queue.py", "selectors.py", "thread.py")  # where idle threads wait


def busy_threads(frames: dict[int, Any]) -> list[str]:
    """``name: stack`` of the other threads that are not waiting for work (a thread running
    Python, or in a call from it, holds the GIL or waits for it too)."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    own = threading.get_ident()
    busy = []
    for ident, frame in frames.items():
        if ident == own or os.path.basename(frame.f_code.co_filename) in _IDLE:
            continue
        busy.append(f"{names.get(ident, ident)}: " + " <- ".join(stack_of(frame)[:4]))
    return busy


def stack_of(frame: Any, outside: frozenset[int] = frozenset()) -> list[str]:
    """The innermost ``STACK_FRAMES`` frames of what the loop runs, innermost first, as
    ``path:line function`` with the path from its package down (``tay/engine/core.py``).
    The frames that run the loop itself are the same in every sample and left out:
    ``outside`` (ids of the frames around the loop, ``frames_around_loop``) and asyncio's
    ``Handle._run`` with what calls it."""
    lines: list[str] = []
    while frame is not None and id(frame) not in outside and len(lines) < STACK_FRAMES:
        code = frame.f_code
        path = short_path(code.co_filename)
        if path == "asyncio/events.py" and code.co_name == "_run":
            break
        lines.append(f"{path}:{frame.f_lineno} {code.co_name}")
        frame = frame.f_back
    return lines


_CO_COROUTINE = 0x80  # inspect.CO_COROUTINE, without importing inspect


def frames_around_loop(frame: Any) -> tuple[Any, ...]:
    """From ``frame`` on a coroutine the loop runs: the frames outside its outermost
    coroutine (what called ``run_until_complete`` and, with asyncio's own loop, the loop's
    Python frames). They stay alive while the loop runs, so their ids stay theirs."""
    chain = []
    while frame is not None:
        chain.append(frame)
        frame = frame.f_back
    coroutines = [i for i, f in enumerate(chain) if f.f_code.co_flags & _CO_COROUTINE]
    return tuple(chain[coroutines[-1] + 1:]) if coroutines else ()


def short_path(path: str) -> str:
    parts = path.split(os.sep)
    for anchor in ("site-packages", "dist-packages"):
        if anchor in parts:
            return "/".join(parts[len(parts) - parts[::-1].index(anchor):])
    if "tay" in parts:
        return "/".join(parts[len(parts) - 1 - parts[::-1].index("tay"):])
    return "/".join(parts[-2:])
