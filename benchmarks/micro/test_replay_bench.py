"""Replay micro benchmarks: the recovery batch path (native ``events_scan`` + ``consume_event``)
over an in-memory buffer of the reference events, without files.

Run: .venv/bin/python -m pytest benchmarks/micro/test_replay_bench.py --benchmark-only
Each round replays ``REPLAY_JOBS`` completed jobs (insert, start, finish: 3 events each)
laid out back to back, as recovery sees a segment's payloads. ``extra_info`` carries the
event count so events/s = events / mean. ``benchmarks/replay.py`` measures the whole cold
restart (files, fresh process, peak RSS).
"""

from __future__ import annotations

import random

from tay.engine import Engine
from tay.storage import events as ev
from tay.storage.events.definition import build_definition
from tay.storage.formats.value import DecodeLimits

ARGS = {"account_key": "benchmark-account", "payload": "x" * 1024, "version": 1}
NOW = 1_700_000_000_000
REPLAY_JOBS = 10_000
BATCH = 4_096  # what recovery hands the native scan per call


def reference_buffer() -> tuple[bytes, list[tuple[int, int, int, int, int]]]:
    """All payloads back to back, with (sequence, offset, length, type, schema) per event."""
    definition = build_definition(worker_key="benchmark", queue_key="default", args=ARGS)
    chunks, rows, offset = [], [], 0
    for index in range(REPLAY_JOBS):
        ident = (index + 1).to_bytes(16, "big")
        first, at = 3 * index + 1, NOW + 3 * index
        for sequence, event in (
            (first, ev.job_inserted(ident, at, definition)),
            (first + 1, ev.job_started(ident, at + 1, first, 1, first)),
            (first + 2, ev.job_finished(ident, at + 2, first + 1, execution_token=first + 1,
                                        outcome=ev.SUCCESS, diagnostic_code=None,
                                        disposition=ev.COMPLETED)),
        ):
            payload = ev.encode_event(event)
            chunks.append(payload)
            rows.append((sequence, offset, len(payload), event.type, event.schema))
            offset += len(payload)
    return b"".join(chunks), rows


BUFFER, ROWS = reference_buffer()


def replay_into(consumer) -> int:
    limits = DecodeLimits()
    for start in range(0, len(ROWS), BATCH):
        chunk = ROWS[start:start + BATCH]
        decoded = ev.decode_events(BUFFER, [(o, n, t, s) for _, o, n, t, s in chunk], limits)
        for (sequence, *_), event in zip(chunk, decoded):
            consumer(sequence, event)
    return len(ROWS)


def test_batch_decode_events_per_second(benchmark):
    benchmark.extra_info["events_per_round"] = len(ROWS)
    assert benchmark.pedantic(replay_into, args=(lambda sequence, event: None,), rounds=3) == len(ROWS)


def test_engine_consume_event_per_second(benchmark):
    benchmark.extra_info["events_per_round"] = len(ROWS)

    def run(engine: Engine) -> None:
        replay_into(engine.consume_event)
        assert len(engine.jobs) == REPLAY_JOBS and engine.state_counts() == {"completed": REPLAY_JOBS}

    benchmark.pedantic(run, setup=lambda: ((Engine(rng=random.Random(1)),), {}), rounds=3)
