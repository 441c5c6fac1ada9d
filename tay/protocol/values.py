"""JSON payloads: decoding with orjson, then the protocol's value-domain bounds.

orjson already refuses non-UTF-8, lone surrogates, NaN/Infinity and overflowing floats.
What it cannot know are the protocol bounds: nesting depth (the envelope is level 1), total
node count of the whole message, and object key size. Violations are connection-fatal
(``invalid_frame``); unparsable bytes are ``malformed_json``. orjson also keeps the last
of repeated object keys; a repeated key is refused too (``invalid_frame``), found by
comparing the payload's colons with the decoded objects' members (``json_text``).

orjson also turns integer literals outside 64 bits into floats without a word, which would
silently change a client's value. Only a payload with a token that may be one
(``json_text.has_long_integer_token``) is parsed a second time (stdlib ``json``, whose
``parse_int`` sees every integer literal and nothing inside strings) to check the range.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from tay.failures import ConnectionFatal

from .json_text import has_long_integer_token, repeats_a_key
from .limits import ProtocolLimits

# A key of at most this many characters cannot exceed max_key_bytes (4 bytes per char),
# so the UTF-8 length is only computed for long keys.
_SAFE_KEY_CHARS_DIVISOR = 4

INT_MIN = -(2**63)
INT_MAX = 2**64 - 1


def decode_message(payload: bytes, limits: ProtocolLimits) -> dict[str, Any]:
    """Decode one frame payload into a JSON object within the protocol value domain."""
    if not payload:
        raise ConnectionFatal("empty frame payload", code="invalid_frame")
    try:
        message = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise ConnectionFatal(f"payload is not valid JSON: {exc}", code="malformed_json") from None
    if type(message) is not dict:
        raise ConnectionFatal(
            f"payload is a JSON {type(message).__name__}, not an object", code="invalid_frame"
        )
    if has_long_integer_token(payload):
        check_integer_range(payload)
    members = check_value_domain(message, limits)
    if repeats_a_key(payload, members):
        raise ConnectionFatal(f"duplicate object key {_first_duplicate(payload)!r}",
                              code="invalid_frame")
    return message


def _first_duplicate(payload: bytes) -> str:
    """The first repeated key (the error path only: stdlib json sees every pair)."""
    found: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: set[str] = set()
        for key, _ in items:
            if key in seen and not found:
                found.append(key)
            seen.add(key)
        return {}

    json.loads(payload, object_pairs_hook=pairs)
    return found[0][:64] if found else "?"


def check_integer_range(payload: bytes) -> None:
    """Raise ``invalid_frame`` if an integer literal lies outside -2^63..2^64-1."""
    json.loads(payload, parse_int=_bounded_int)


def _bounded_int(literal: str) -> int:
    value = int(literal)
    if not INT_MIN <= value <= INT_MAX:
        shown = literal if len(literal) <= 40 else literal[:20] + "..." + literal[-8:]
        raise ConnectionFatal(
            f"integer {shown} is outside the 64-bit range -2^63..2^64-1", code="invalid_frame")
    return value


def check_value_domain(value: Any, limits: ProtocolLimits) -> int:
    """Raise ``invalid_frame`` if ``value`` breaks the depth, node or key bounds; return the
    number of object members (for the duplicate-key check)."""
    max_depth = limits.max_depth
    max_key_bytes = limits.max_key_bytes
    safe_key_chars = max_key_bytes // _SAFE_KEY_CHARS_DIVISOR
    budget = limits.max_nodes - 1
    members = 0
    # Iterative walk over containers only; scalars are counted through len(container).
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        container, depth = stack.pop()
        if depth > max_depth:
            raise ConnectionFatal(f"JSON nesting exceeds {max_depth} levels", code="invalid_frame")
        budget -= len(container)
        if budget < 0:
            raise ConnectionFatal(
                f"message has more than {limits.max_nodes} JSON nodes", code="invalid_frame"
            )
        if type(container) is dict:
            members += len(container)
            for key in container:
                if len(key) > safe_key_chars and len(key.encode("utf-8")) > max_key_bytes:
                    raise ConnectionFatal(
                        f"object key of {len(key.encode('utf-8'))} bytes exceeds {max_key_bytes}",
                        code="invalid_frame",
                    )
            children = container.values()
        else:
            children = container
        for item in children:
            if type(item) is dict or type(item) is list:
                stack.append((item, depth + 1))
    return members


def encode_json(value: Any) -> bytes:
    """Compact JSON with real ``null``; refuses non-finite floats."""
    return orjson.dumps(value)
