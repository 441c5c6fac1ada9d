"""Jobs picked by what they hold (``jobs``, ``retry_jobs``, ``cancel_jobs`` and
``delete_jobs`` take these filters, docs/admin.md):

* ``args``: the jobs whose args object holds every given top-level key with an equal value,
  so an operator can list, retry, cancel or delete "the jobs of account 42" (Sidekiq's and
  Oban Web's search by args). Values are equal as JSON values: a number equals the same
  number whether written as an integer or a float, but ``true`` is not ``1``, and objects
  and arrays are equal member by member.
* ``error``: the jobs whose last worker failure's type or message contains the text, in
  any letter case (Sidekiq's search of its retry and dead sets).

Reading a job's args or failure costs a decode, so a page with either filter examines at
most ``CONTENT_SCAN_LIMIT`` jobs, then ends with a cursor.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tay.failures import RequestRefused

CONTENT_SCAN_LIMIT = 2_000  # jobs one page with an args or error filter may examine
ARGS_FILTER_KEYS_MAX = 16
ARGS_FILTER_DEPTH_MAX = 8
ERROR_FILTER_CHARS_MAX = 200


def parse_args_filter(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """The request's ``args`` filter (None: none): an object of 1..16 keys."""
    wanted = body.get("args")
    if wanted is not None:
        if type(wanted) is not dict or not 1 <= len(wanted) <= ARGS_FILTER_KEYS_MAX:
            raise _refused("args", f"args must be an object of 1..{ARGS_FILTER_KEYS_MAX} keys "
                           "(the top-level args a job must hold)")
        if _depth(wanted) > ARGS_FILTER_DEPTH_MAX:
            raise _refused("args", f"args nests deeper than {ARGS_FILTER_DEPTH_MAX} levels")
    return wanted


def parse_error_filter(body: Mapping[str, Any]) -> str | None:
    """The request's ``error`` filter, case-folded (None: none): 1..200 characters."""
    wanted = body.get("error")
    if wanted is None:
        return None
    if type(wanted) is not str or not 1 <= len(wanted) <= ERROR_FILTER_CHARS_MAX:
        raise _refused("error", f"error must be a text of 1..{ERROR_FILTER_CHARS_MAX} "
                       "characters (found in a failure's type or message)")
    return wanted.casefold()


def _refused(field: str, message: str) -> RequestRefused:
    return RequestRefused(message, code="invalid_request", field=field)


def error_match(failure: Mapping[str, Any] | None, wanted: str) -> bool:
    """Whether a job's last failure (None: none) has ``wanted`` (case-folded) in its type
    or message."""
    if not failure:
        return False
    return any(wanted in text.casefold() for text in (failure.get("type"),
                                                       failure.get("message"))
               if type(text) is str)


def args_match(args: Any, wanted: dict[str, Any]) -> bool:
    """Whether a job's ``args`` hold every key of ``wanted`` with an equal value."""
    if not isinstance(args, Mapping):
        return False
    for key, value in wanted.items():
        if key not in args or not same_json(args[key], value):
            return False
    return True


def same_json(a: Any, b: Any) -> bool:
    """Equal as JSON values (see the module's note)."""
    kind_a, kind_b = type(a), type(b)
    if kind_a is bool or kind_b is bool:
        return kind_a is kind_b and a == b
    if kind_a in (int, float) and kind_b in (int, float):
        return a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(same_json(a[key], b[key]) for key in a)
    if kind_a in (list, tuple) and kind_b in (list, tuple):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b))
    return kind_a is kind_b and a == b


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(item) for item in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(item) for item in value), default=0)
    return 0
