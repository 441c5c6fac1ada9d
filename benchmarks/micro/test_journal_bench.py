"""Journal micro benchmarks: append + fdatasync throughput and replay speed.

Run: .venv/bin/python -m pytest benchmarks/micro/test_journal_bench.py --benchmark-only
Data directories live under the bench scratch (``tay.bench.paths``; strict sync mode) and
are removed afterwards.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest

from tay.bench.paths import bench_scratch
from tay.storage.journal.writer import init_store
from tay.storage.recovery.recover import recover

SCRATCH = bench_scratch()  # strict sync accepts it wherever the checkout is
RECORD_BYTES = 650  # whole frame: 28 bytes of framing + 622 bytes of payload
PAYLOAD = b"p" * (RECORD_BYTES - 28)


@pytest.fixture
def store():
    SCRATCH.mkdir(parents=True, exist_ok=True)
    path = SCRATCH / f"bench-{uuid.uuid4().hex}"
    init_store(str(path), durability="sync", validated_filesystem=True)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("batch_size", [1, 16, 256])
def test_append_fdatasync_records_per_second(benchmark, store, batch_size):
    journal = recover(str(store), consumer=lambda *a: None, durability="sync",
                      validated_filesystem=True).journal

    def one_batch():
        first = journal.next_sequence
        journal.append_batch([(first + i, 1, 1, PAYLOAD) for i in range(batch_size)])
        journal.sync()

    benchmark.pedantic(one_batch, rounds=max(20, 2000 // batch_size), iterations=1, warmup_rounds=2)
    benchmark.extra_info["records_per_second"] = batch_size / benchmark.stats.stats.mean
    journal.close()


def test_replay_megabytes_per_second(benchmark, store):
    journal = recover(str(store), consumer=lambda *a: None, durability="write").journal
    count = 20 * 1024 * 1024 // RECORD_BYTES  # ~20 MB in one segment
    for start in range(1, count + 1, 4096):
        journal.append_batch([(seq, 1, 1, PAYLOAD) for seq in range(start, min(start + 4096, count + 1))])
    journal.close()
    total = count * RECORD_BYTES

    def replay():
        seen = [0]

        def consume(sequence, rtype, schema, payload):
            seen[0] += 1

        recover(str(store), consumer=consume, activate=False)
        assert seen[0] == count

    benchmark.pedantic(replay, rounds=3, iterations=1)
    benchmark.extra_info["replay_mb_per_second"] = total / 1e6 / benchmark.stats.stats.mean


def _finished_event():
    from tay.storage import events as ev

    return ev.job_finished(b"\x01" * 16, 1_700_000_000_000, 5, execution_token=4,
                           outcome=ev.SUCCESS, diagnostic_code=None, disposition=ev.COMPLETED)


@pytest.mark.parametrize("encoder", ["encode_map", "generic"])
def test_encode_finished_event(benchmark, encoder):
    """The live path encodes each event once: the flat-map encoder against the generic walk."""
    from tay.storage.formats import value

    payload = _finished_event().payload
    encode = value.encode_map if encoder == "encode_map" else (lambda p: value.encode(dict(p)))
    assert benchmark(encode, payload) == value.encode(dict(payload))
