"""The envelope check's one-line path for well-formed requests agrees with the rule-by-rule
check on every envelope: the same ``(type, request_id)``, or the same connection-fatal
error."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, strategies as st

from tay.failures import ConnectionFatal
from tay.protocol.envelope import _check_envelope_exactly, check_envelope, is_identifier

VERSIONS = st.sampled_from([1, 2, 0, True, 1.0, "1", None])
TYPES = st.one_of(st.sampled_from(["enqueue", "started", "succeeded", "hello", "nope", ""]),
                  st.integers(), st.none())
REQUEST_IDS = st.one_of(st.text(max_size=140), st.text(alphabet="aé\x00\U0001f600", max_size=70),
                        st.integers(), st.none())


def outcome(check: Any, message: dict[str, Any]) -> Any:
    try:
        return check(message)
    except ConnectionFatal as fatal:
        return ("fatal", fatal.code, str(fatal))


@given(st.fixed_dictionaries({}, optional={"version": VERSIONS, "v": VERSIONS, "type": TYPES,
                                           "request_id": REQUEST_IDS}))
def test_the_fast_path_agrees_with_the_exact_check(message: dict[str, Any]) -> None:
    assert outcome(check_envelope, message) == outcome(_check_envelope_exactly, message)


@pytest.mark.parametrize("value, expected", [
    ("a" * 128, True), ("a" * 129, False), ("é" * 64, True), ("é" * 65, False),
    ("\U0001f600" * 32, True), ("\U0001f600" * 33, False), ("", False), ("a\x00", False),
    (7, False),
])
def test_an_identifier_is_1_to_128_utf8_bytes_without_nul(value: Any, expected: bool) -> None:
    assert is_identifier(value) is expected
