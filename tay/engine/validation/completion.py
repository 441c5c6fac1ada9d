"""Validation of what executors report: execution ids, success results and failure objects.

Failure objects (protocol.md §6.5): only ``type`` (string <= 128 bytes), ``message`` and
``traceback`` (strings <= the error limit) are kept, other keys are ignored; at least one of
the three must be present and the kept object must encode (compact JSON, UTF-8) within the
error limit. The error text is validated but never stored: only the diagnostic class is.
"""

from __future__ import annotations

import json
from typing import Any

from tay.engine.validation.ids import is_identifier
from tay.engine.validation.values import UnsupportedValue, measure
from tay.failures import RequestRefused
from tay.storage.journal.history_budget import MAX_FAILURE_VALUE_BYTES, MAX_RESULT_VALUE_BYTES

ERROR_TYPE_MAX_BYTES = 128
FAILURE_KEYS = ("type", "message", "traceback")


def check_execution_ids(reservation_id: Any, execution_id: Any) -> None:
    if is_identifier(reservation_id) and is_identifier(execution_id):
        return  # every report: the pair is built only to name a refusal
    for name, value in (("reservation_id", reservation_id), ("execution_id", execution_id)):
        if not is_identifier(value):
            raise RequestRefused(f"{name} must be an identifier (1..128 bytes, no NUL)",
                                 code="invalid_execution", field=name)


def _json_size(obj: Any) -> int:
    if obj is None:  # what most tasks return: no encoder for it
        return 4
    if obj is True or obj is False:
        return 4 if obj else 5
    return len(json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


def check_result(result: Any, limit: int) -> int:
    """A success result must be a storable JSON value encoding to <= ``limit`` bytes whose
    stored Value fits one record (up to 4.5 x its JSON: ``[0,0,...]``)."""
    try:
        stored = measure(result, "result").encoded_bytes
        size = _json_size(result)
    except (UnsupportedValue, ValueError, UnicodeEncodeError) as problem:
        raise RequestRefused(f"result cannot be stored: {problem}",
                             code="result_too_large", field="result") from None
    if size > limit:
        raise RequestRefused(f"result encodes to {size} bytes (limit {limit})",
                             code="result_too_large", size=size, limit=limit)
    if stored > MAX_RESULT_VALUE_BYTES:
        raise RequestRefused(
            f"result's stored form (canonical Value) is {stored} bytes, over the "
            f"{MAX_RESULT_VALUE_BYTES} one journal record can hold (its JSON is {size} bytes)",
            code="result_too_large", size=stored, limit=MAX_RESULT_VALUE_BYTES)
    return size


def check_failure(error: Any, limit: int) -> dict[str, str]:
    """Normalise a failure object; refuses with ``invalid_failure`` / ``error_too_large``."""
    if not isinstance(error, dict):
        raise RequestRefused("error must be an object", code="invalid_failure", field="error")
    kept: dict[str, str] = {}
    for key in FAILURE_KEYS:
        if key not in error or error[key] is None:
            continue
        text = error[key]
        if type(text) is not str:
            raise RequestRefused(f"error.{key} must be a string", code="invalid_failure",
                                 field=f"error.{key}")
        size = len(text.encode("utf-8", "surrogatepass"))
        bound = ERROR_TYPE_MAX_BYTES if key == "type" else limit
        if size > bound:
            raise RequestRefused(f"error.{key} is {size} bytes (limit {bound})",
                                 code="invalid_failure", field=f"error.{key}")
        kept[key] = text
    if not kept:
        raise RequestRefused("error needs at least one of type, message, traceback",
                             code="invalid_failure", field="error")
    size = len(json.dumps(kept, separators=(",", ":"), ensure_ascii=False)
               .encode("utf-8", "surrogatepass"))
    if size > limit:
        raise RequestRefused(f"error encodes to {size} bytes (limit {limit})",
                             code="error_too_large", size=size, limit=limit)
    # its Value: a map (5 bytes) of text keys and values (5 + UTF-8 bytes each)
    stored = 5 + sum(10 + len(key) + len(text.encode("utf-8", "surrogatepass"))
                     for key, text in kept.items())
    if stored > MAX_FAILURE_VALUE_BYTES:
        raise RequestRefused(
            f"error's stored form (canonical Value) is {stored} bytes, over the "
            f"{MAX_FAILURE_VALUE_BYTES} one journal record can hold",
            code="error_too_large", size=stored, limit=MAX_FAILURE_VALUE_BYTES)
    return kept
