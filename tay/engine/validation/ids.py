"""Identifiers: job ids (random or derived from a submission id) and execution ids.

Randomness comes from an injected ``rng`` (anything with ``randbytes(n)``, such as
``random.Random(seed)`` in tests or ``random.SystemRandom()`` in the server), so runs are
reproducible where tests need them to be.
"""

from __future__ import annotations

from binascii import b2a_base64
import hashlib
import os
import random
import struct
from typing import Any, Protocol

from tay.failures import RequestRefused

SUBMISSION_PREFIX = b"tay-submission-v1:"
_HEX_DIGITS = "0123456789abcdef"  # a wire job id is 32 of these: len and strip check it
ZERO_ID = bytes(16)


class RandomSource(Protocol):
    def randbytes(self, n: int) -> bytes: ...

    def randint(self, a: int, b: int) -> int: ...


# a 4 KiB draw cut into 256 job ids in one call (BufferedSystemRandom.job_id)
_CUT_IDS = struct.Struct("16s" * 256)


class BufferedSystemRandom(random.SystemRandom):
    """``SystemRandom`` that reads the kernel CSPRNG 4 KiB at a time.

    Same unpredictable bytes as ``os.urandom`` (each byte is handed out once), but one
    ``getrandom`` syscall per ~100 ids instead of one per id. Not fork-safe: the server
    never forks after creating it.
    """

    _REFILL = 4096

    _TOKENS = 227  # random tokens encoded per draw (18 bytes each, ~4 KiB)

    def __init__(self) -> None:
        super().__init__()
        self._pool = b""
        self._used = 0
        self._tokens: list[str] = []
        self._ids: list[bytes] = []

    def job_id(self) -> bytes:
        """``random_job_id``: 16 fresh random bytes without a zero byte. The ids of one
        4 KiB draw are cut at once and the ones holding a zero byte (~6 %) dropped: those
        left are uniform over the ids without one, as ``random_job_id``'s redraws make
        them. One call per job instead of ``randbytes``' slicing and attribute writes."""
        ids = self._ids
        if not ids:
            ids = self._ids = [drawn for drawn in _CUT_IDS.unpack(os.urandom(_CUT_IDS.size))
                               if 0 not in drawn]
        return ids.pop()

    def token(self) -> str:
        """``random_token``: 18 fresh random bytes as 24 base64url characters. The bytes of
        ``_TOKENS`` tokens are drawn and encoded at once (base64 of 18-byte groups is the
        concatenation of each group's): one encode per 227 tokens instead of one each."""
        tokens = self._tokens
        if not tokens:
            text = b2a_base64(os.urandom(18 * self._TOKENS), newline=False) \
                .translate(_URLSAFE).decode("ascii")
            tokens = self._tokens = [text[start:start + 24]
                                     for start in range(len(text) - 24, -1, -24)]
        return tokens.pop()

    def randbytes(self, n: int) -> bytes:
        start = self._used
        if start + n > len(self._pool):
            if n > self._REFILL:
                return os.urandom(n)
            self._pool, start = os.urandom(self._REFILL), 0
        self._used = start + n
        return self._pool[start:start + n]

    def getrandbits(self, k: int) -> int:
        """``randint``/``randrange`` draw through here (rejection sampling stays unbiased)."""
        if k < 0:
            raise ValueError("number of bits must be non-negative")
        size = (k + 7) // 8
        value = int.from_bytes(self.randbytes(size), "big")
        return value >> (size * 8 - k)

    def random(self) -> float:
        return (int.from_bytes(self.randbytes(7), "big") >> 3) * (2.0 ** -53)


def job_id_from_submission(submission_id: str) -> bytes:
    """protocol.md §2.4: first 16 bytes of SHA-256(prefix + id); all-zero maps to 0...01."""
    digest = hashlib.sha256(SUBMISSION_PREFIX + submission_id.encode("utf-8")).digest()[:16]
    return digest if digest != ZERO_ID else bytes(15) + b"\x01"


def random_job_id(rng: RandomSource) -> bytes:
    """16 random bytes with no zero byte (so the id can never be the all-zero id)."""
    if type(rng) is BufferedSystemRandom:
        return rng.job_id()
    drawn = rng.randbytes(16)
    if 0 not in drawn:  # about 94 % of draws hold no zero byte
        return drawn
    raw = bytearray(drawn)
    for index, byte in enumerate(raw):
        while byte == 0:
            byte = rng.randbytes(1)[0]
        raw[index] = byte
    return bytes(raw)


_URLSAFE = bytes.maketrans(b"+/", b"-_")


def random_token(rng: RandomSource) -> str:
    """Reservation, execution and cancel-request ids: 18 random bytes, base64url (24 chars)."""
    if type(rng) is BufferedSystemRandom:  # the server's source: tokens come in batches
        return rng.token()
    # base64.urlsafe_b64encode, without its two wrapper calls (two tokens per dispatch)
    return b2a_base64(rng.randbytes(18), newline=False).translate(_URLSAFE).decode("ascii")


def parse_job_id(text: Any, field: str = "job_id", code: str = "invalid_job_id") -> bytes:
    """A wire job id: exactly 32 lowercase hex digits, not all zero."""
    if type(text) is not str or len(text) != 32 or text.strip(_HEX_DIGITS):
        raise RequestRefused(f"{field} must be 32 lowercase hex digits", code=code, field=field)
    raw = bytes.fromhex(text)
    if raw == ZERO_ID:
        raise RequestRefused(f"{field} must not be all zero", code=code, field=field)
    return raw


def is_identifier(text: Any) -> bool:
    """Wire identifier: a string of 1..128 UTF-8 bytes without NUL."""
    if type(text) is not str or "\x00" in text:
        return False
    if text.isascii():  # the common case: one byte per character
        return 1 <= len(text) <= 128
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return False
    return 1 <= size <= 128
