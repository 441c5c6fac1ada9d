"""Recovery time limits (storage.md §7 table): deadline, activation deadline, activation
window and I/O timeout, timed by an injected clock that only the test moves."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.storage.test_recovery import build_store, opaque, refuse
from tay.failures import RecoveryRefused
from tay.storage.formats import segment as segment_module
from tay.storage.fsio import RealIO
from tay.storage.recovery.recover import RecoveryOptions, recover
from tay.storage.recovery.limits import TIME_LIMITS

SMALL = 300  # rotation target: two 68-byte frames per segment


class FakeClock:
    """Monotonic milliseconds that move only when the test (or its I/O) says so."""

    def __init__(self, tick: int = 0) -> None:
        self.now = 0
        self.tick = tick  # added on every read, for a clock that runs on its own

    def __call__(self) -> int:
        self.now += self.tick
        return self.now


class SlowIO(RealIO):
    """Real I/O where opening a segment file or fsyncing a directory costs clock time."""

    def __init__(self, clock: FakeClock, open_segment_ms: int = 0, fsync_dir_ms: int = 0,
                 slow_segment: int | None = None) -> None:
        super().__init__()
        self.clock, self.open_segment_ms, self.fsync_dir_ms = clock, open_segment_ms, fsync_dir_ms
        self.slow_segment = slow_segment  # only this segment is slow, when given

    def open(self, path: str, flags: int, mode: int = 0o644) -> int:
        name = Path(path).name
        if name.endswith(".tay") and self.slow_segment in (None, int(name[:20])):
            self.clock.now += self.open_segment_ms
        return super().open(path, flags, mode)

    def fsync_dir(self, path: str) -> None:
        self.clock.now += self.fsync_dir_ms
        super().fsync_dir(path)


def test_defaults_follow_the_spec_table():
    options = RecoveryOptions()
    assert (options.deadline_ms, options.activation_deadline_ms, options.activation_window_ms,
            options.io_timeout_ms) == (900_000, 900_000, 30_000, 10_000)


@pytest.mark.parametrize("option", TIME_LIMITS)
@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "10", None, 2**63])
def test_time_limits_are_validated_before_touching_disk(data_dir, option, bad):
    with pytest.raises(RecoveryRefused) as refused:  # data_dir does not even exist
        recover(str(data_dir), options=RecoveryOptions(**{option: bad}))
    assert (refused.value.kind, refused.value.reason) == ("argument", f"{option}_out_of_range")
    assert refused.value.stage == "validation" and refused.value.extra["option"] == option


def test_deadline_stops_preflight_at_the_segment_it_reached(data_dir):
    build_store(data_dir, [opaque(1, 5)], target=SMALL, rotate_after=True)  # 4 segments
    clock = FakeClock()
    refused = refuse(data_dir, clock=clock, io=SlowIO(clock, open_segment_ms=400),
                     options=RecoveryOptions(deadline_ms=1_000))
    assert (refused.kind, refused.reason, refused.stage) == ("resource_limit", "deadline_ms",
                                                             "preflight")
    assert (refused.segment_id, refused.offset) == (3, 0)
    assert refused.extra == {"elapsed_ms": 1_200, "limit_ms": 1_000}


def test_deadline_is_checked_between_scan_windows(data_dir, monkeypatch):
    monkeypatch.setattr(segment_module, "SCAN_WINDOW", 256)
    build_store(data_dir, [opaque(1, 100)])
    size = (data_dir / "segments" / f"{1:020d}.tay").stat().st_size
    refused = refuse(data_dir, clock=FakeClock(tick=100),
                     options=RecoveryOptions(deadline_ms=1_000))
    assert (refused.reason, refused.stage, refused.segment_id) == ("deadline_ms", "preflight", 1)
    assert 44 < refused.offset < size  # stopped at a window end inside the file


def test_deadline_stops_replay_between_batches_naming_the_last_sequence(data_dir):
    build_store(data_dir, [opaque(1, 5_000)])
    clock, seen = FakeClock(), []

    def slow_consumer(sequence, *_):
        seen.append(sequence)
        clock.now += 1

    refused = refuse(data_dir, clock=clock, consumer=slow_consumer,
                     options=RecoveryOptions(deadline_ms=4_000))
    assert (refused.reason, refused.stage, refused.sequence) == ("deadline_ms", "replay", 4_096)
    assert seen == list(range(1, 4_097))  # the second batch never started


def test_a_slow_io_step_is_refused_by_the_io_timeout(data_dir):
    build_store(data_dir, [opaque(1, 5)], target=SMALL)
    clock = FakeClock()
    io = SlowIO(clock, open_segment_ms=10_001, slow_segment=2)
    refused = refuse(data_dir, clock=clock, io=io)
    assert (refused.reason, refused.stage, refused.segment_id) == ("io_timeout_ms", "preflight", 2)
    assert refused.extra["elapsed_ms"] == 10_001


def test_the_io_timeout_is_capped_by_the_remaining_deadline(data_dir):
    build_store(data_dir, [opaque(1, 1)])
    clock = FakeClock()
    refused = refuse(data_dir, clock=clock, io=SlowIO(clock, open_segment_ms=6_000),
                     options=RecoveryOptions(deadline_ms=5_000))
    assert (refused.reason, refused.segment_id) == ("deadline_ms", 1)


def test_a_candidate_held_past_the_activation_window_is_refused(data_dir):
    build_store(data_dir, [opaque(1, 5)], target=SMALL, rotate_after=True)  # 4 segments
    clock = FakeClock()
    io = SlowIO(clock, open_segment_ms=9_000)  # revalidation alone takes 36 s
    refused = refuse(data_dir, clock=clock, io=io)
    assert (refused.reason, refused.stage, refused.segment_id) == (
        "activation_window_ms", "revalidation", 4)
    # read-only recovery activates nothing, so it holds no candidate to time out
    recovered = recover(str(data_dir), consumer=lambda *a: None, activate=False, io=io,
                        clock=clock)
    assert recovered.records_replayed == 5


def test_activation_deadline_is_checked_between_barriers(data_dir):
    build_store(data_dir, [opaque(1, 2)])
    clock = FakeClock()
    io = SlowIO(clock, fsync_dir_ms=400)
    refused = refuse(data_dir, clock=clock, io=io,
                     options=RecoveryOptions(activation_deadline_ms=1_000))
    assert (refused.kind, refused.reason, refused.stage) == ("resource_limit",
                                                             "activation_deadline_ms",
                                                             "activation")
    assert refused.extra == {"elapsed_ms": 1_200, "limit_ms": 1_000}
    # the refusal released the lock and left the store as it was: it recovers normally
    journal = recover(str(data_dir), consumer=lambda *a: None, durability="write").journal
    assert journal is not None
    journal.close()


def test_activation_must_finish_inside_the_window(data_dir):
    build_store(data_dir, [opaque(1, 2)])
    clock = FakeClock()
    refused = refuse(data_dir, clock=clock, io=SlowIO(clock, fsync_dir_ms=10_000))
    assert (refused.reason, refused.stage) == ("activation_window_ms", "activation")
    assert refused.extra["limit_ms"] == 30_000


def test_generous_limits_let_a_slow_recovery_through(data_dir):
    build_store(data_dir, [opaque(1, 5)], target=SMALL, rotate_after=True)
    clock = FakeClock(tick=50)
    recovered = recover(str(data_dir), consumer=lambda *a: None, durability="write",
                        clock=clock, io=SlowIO(clock, open_segment_ms=1_000, fsync_dir_ms=500))
    assert recovered.records_replayed == 5 and recovered.journal is not None
    recovered.journal.close()
