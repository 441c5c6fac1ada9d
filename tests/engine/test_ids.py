"""Identifiers: the buffered CSPRNG hands out kernel bytes once each, draws stay unbiased,
and random job ids never contain a zero byte."""

from __future__ import annotations

import base64
import os
import string
from collections import Counter

import pytest
from hypothesis import given, strategies as st

from tay.engine.validation import ids
from tay.engine.validation.ids import BufferedSystemRandom, random_job_id, random_token
from tay.failures import RequestRefused


def test_bytes_come_from_the_kernel_in_bulk_and_are_never_reused(monkeypatch) -> None:
    pulls: list[int] = []
    counter = iter(range(1 << 30))

    def fake_urandom(n: int) -> bytes:  # distinct bytes, so any reuse would show
        pulls.append(n)
        return bytes(next(counter) % 251 + 1 for _ in range(n))

    monkeypatch.setattr(ids.os, "urandom", fake_urandom)
    rng = BufferedSystemRandom()
    drawn = b"".join(rng.randbytes(16) for _ in range(600))
    assert pulls == [4096, 4096, 4096]  # 9,600 bytes: three refills, not 600 syscalls
    expected = bytes(i % 251 + 1 for i in range(3 * 4096))
    # 4096 is a multiple of 16, so every pool is used exactly, in order, once
    assert drawn == expected[:9600]


def test_large_draws_bypass_the_pool() -> None:
    rng = BufferedSystemRandom()
    assert len(rng.randbytes(10_000)) == 10_000
    assert len(rng.randbytes(0)) == 0


@pytest.mark.parametrize("k", [0, 1, 7, 8, 9, 63, 64, 65])
def test_getrandbits_stays_within_k_bits(k: int) -> None:
    rng = BufferedSystemRandom()
    values = [rng.getrandbits(k) for _ in range(200)]
    assert all(0 <= v < (1 << k) for v in values)
    if k >= 16:
        assert len(set(values)) > 150


def test_randint_covers_the_range_evenly() -> None:
    rng = BufferedSystemRandom()
    counts = Counter(rng.randint(0, 4) for _ in range(5_000))
    assert set(counts) == {0, 1, 2, 3, 4}
    assert all(800 < c < 1_200 for c in counts.values())
    assert all(0.0 <= rng.random() < 1.0 for _ in range(1_000))


def test_random_job_ids_have_no_zero_byte_even_when_the_source_gives_zeros() -> None:
    class Zeros:
        def __init__(self) -> None:
            self.stream = iter([bytes(16)] + [b"\x00", b"\x07"] * 16)

        def randbytes(self, n: int) -> bytes:
            return next(self.stream)

    job_id = random_job_id(Zeros())
    assert job_id == b"\x07" * 16
    rng = BufferedSystemRandom()
    many = {random_job_id(rng) for _ in range(2_000)}
    assert len(many) == 2_000 and all(0 not in job_id for job_id in many)
    assert len(random_token(rng)) == 24


def test_two_generators_draw_different_bytes() -> None:
    assert BufferedSystemRandom().randbytes(32) != BufferedSystemRandom().randbytes(32)
    assert os.urandom is ids.os.urandom


def test_batched_tokens_are_fresh_base64url_of_18_bytes_each() -> None:
    """The server's source encodes its tokens in batches: each is still 24 base64url
    characters of 18 bytes, and none repeats across batches."""
    rng = BufferedSystemRandom()
    tokens = [random_token(rng) for _ in range(3 * BufferedSystemRandom._TOKENS + 5)]
    assert len(set(tokens)) == len(tokens)
    for token in tokens:
        assert len(token) == 24 and len(base64.urlsafe_b64decode(token)) == 18
        assert set(token) <= set(string.ascii_letters + string.digits + "-_")


def test_buffered_job_ids_are_cut_from_one_draw_each_and_skip_zero_bytes(monkeypatch) -> None:
    """The server's source cuts 256 job ids from each 4 KiB draw, hands each out once and
    drops those holding a zero byte (the rest stay uniform over the ids without one)."""
    pulls: list[int] = []

    def one_id(draw: int, index: int) -> bytes:  # every fifth id holds a zero byte
        return bytes([draw + 1, index // 128 + 1, index % 128 + 1, 0 if index % 5 == 0 else 9]) \
            + b"\x01" * 12

    def fake_urandom(n: int) -> bytes:
        pulls.append(n)
        return b"".join(one_id(len(pulls), index) for index in range(256))

    monkeypatch.setattr(ids.os, "urandom", fake_urandom)
    rng = BufferedSystemRandom()
    drawn = [random_job_id(rng) for _ in range(300)]
    assert pulls == [4096, 4096]  # 204 ids without a zero byte per draw
    assert len(set(drawn)) == 300 and all(0 not in job_id for job_id in drawn)
    assert sorted(drawn[:204]) == sorted(one_id(1, index) for index in range(256) if index % 5)


@given(st.one_of(
    st.text(alphabet="0123456789abcdefABCDEF g\n\u0663", min_size=30, max_size=34),
    st.text(max_size=40),
    st.binary(min_size=16, max_size=16).map(bytes.hex),
    st.integers(),
    st.none()))
def test_a_wire_job_id_is_exactly_what_the_32_hex_digits_pattern_accepts(text: object) -> None:
    """``parse_job_id`` checks the digits by hand (a start compiles no regex for it)."""
    import re

    expected = (type(text) is str and re.fullmatch(r"[0-9a-f]{32}", text) is not None
                and bytes.fromhex(text) != bytes(16))
    try:
        parsed = ids.parse_job_id(text)
    except RequestRefused:
        assert not expected
    else:
        assert expected and parsed == bytes.fromhex(text)  # type: ignore[arg-type]
    assert ids.parse_job_id("0" * 31 + "1") == bytes(15) + b"\x01"
