"""What orjson's reading of a JSON text can get wrong, found cheaply in the text itself.

orjson keeps the last of repeated object keys, and turns an integer literal outside 64 bits
into a float, both without a word. The engine's decoder refuses such a payload; the SDK's
takes the exact stdlib parse for it. Both ask the same two questions here:

* ``repeats_a_key``: every object member has one colon in the text, so more colons than
  decoded members means a repeated key, unless some colons are inside strings, which the
  native scanner tells apart (only asked then).
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
