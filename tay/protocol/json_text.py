"""What orjson's reading of a JSON text can get wrong, found cheaply in the text itself.

orjson keeps the last of repeated object keys, and turns an integer literal outside 64 bits
into a float, both without a word. The engine's decoder refuses such a payload; the SDK's
takes the exact stdlib parse for it. Both ask the same two questions here:

* ``repeats_a_key``: every object member has one colon in the text, so more colons than
  decoded members means a repeated key, unless some colons are inside strings, which the
  native scanner tells apart (only asked then).
* ``surely_exact``: neither can be in the text, for sure, by one C scan (``tay._native``'s
  ``json_domain_clean``), which spares a reader the two questions below and the walk of the
  decoded value that counts its members. With the pure twin it answers False (not sure):
  its scan costs more than what it would spare.
* ``has_long_integer_token``: such a literal is a run of at least 19 digits right after a
  ``:``, ``,`` or ``[`` (whitespace and a minus sign aside). A C-speed scan for 19 digits in a
  row keeps the common path cheap; only then are the runs' left neighbours inspected.
"""

from __future__ import annotations

# translate() + a substring search run at memory speed; a regex scan is ~8x slower.
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_NINETEEN_ZEROS = b"0" * 19
_JSON_SPACE = frozenset(b" \t\r\n")
_VALUE_OPENERS = frozenset(b":,[")


# json_domain_clean's bounds, wide open: only repeated keys and long integers matter here
# (deeper nesting than the scan tracks, or keys past its table, answer "not sure").
_ANY_DEPTH, _ANY_NODES, _ANY_KEY_BYTES = 255, 2**63 - 1, 2**32 - 1


def surely_exact(payload: bytes) -> bool:
    """Whether orjson's reading of valid JSON ``payload`` is exact for sure: no object
    repeats a key and no integer literal has 19 digits or more. False means not sure."""
    return _surely_exact(payload)


def _resolve(payload: bytes) -> bool:
    """The first call picks the scan (importing ``tay._native`` only when a reader asks)."""
    global _surely_exact
    from tay import _native

    if _native.IMPLEMENTATION == "c":
        clean = _native.json_domain_clean
        _surely_exact = lambda text: clean(text, _ANY_DEPTH, _ANY_NODES, _ANY_KEY_BYTES)  # noqa: E731
    else:
        _surely_exact = lambda text: False  # noqa: E731
    return _surely_exact(payload)


_surely_exact = _resolve


def repeats_a_key(payload: bytes, members: int) -> bool:
    """Whether valid JSON ``payload``, decoded into objects of ``members`` members in all,
    repeats a key in one of them."""
    if payload.count(b":") == members:
        return False
    from tay import _native  # only for payloads with more colons than members

    return _native.json_member_count(payload) != members


def has_long_integer_token(payload: bytes) -> bool:
    """Whether a run of 19+ digits starts a JSON value (not a string's or a float's tail)."""
    digits_as_zero = payload.translate(_DIGITS_AS_ZERO)
    start = digits_as_zero.find(_NINETEEN_ZEROS)
    while start >= 0:
        at = start - 1
        if at >= 0 and payload[at] == 0x2D:  # a minus sign
            at -= 1
        while at >= 0 and payload[at] in _JSON_SPACE:
            at -= 1
        if at >= 0 and payload[at] in _VALUE_OPENERS:
            return True
        start = digits_as_zero.find(_NINETEEN_ZEROS, start + 19)
    return False
