"""Measuring JSON-like values against the insert and result limits, without encoding them.

One walk gives the canonical Value encoded size (storage.md §5), the depth (root 1, each
key and value parent + 1) and the node count (every value and every key counts 1), and
refuses what the Value codec cannot hold (bytes, non-text keys, integers outside
-2^63..2^64-1, NaN/infinite floats).
"""

from __future__ import annotations

import math
from typing import Any

from tay._frozen import Fields

_new_tuple = tuple.__new__  # a named tuple built without its Python-level __new__
INT_MIN = -(2**63)
INT_MAX = 2**64 - 1


class UnsupportedValue(ValueError):
    """The value cannot be stored; ``where`` is a path like ``args.items[3]``."""

    def __init__(self, problem: str, where: str) -> None:
        super().__init__(f"{where}: {problem}")
        self.problem = problem
        self.where = where


class Measure(Fields):
    encoded_bytes: int
    depth: int
    nodes: int


def _text_size(text: str, where: str) -> int:
    try:
        return 5 + len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise UnsupportedValue("text is not valid UTF-8 (lone surrogate)", where) from None


class _Unsupported(Exception):
    """Internal: the fast walk met something it cannot size; the located walk names it."""


def measure(obj: Any, where: str) -> Measure:
    """Size, depth and nodes of ``obj`` as a canonical Value; raises ``UnsupportedValue``.

    The common case (a valid value) walks without building paths; only a refusal walks
    again with paths, to name where the problem is.
    """
    if obj is None:  # what most tasks return
        return _NIL
    try:
        return _measure_fast(obj)
    except _Unsupported:
        return _measure_located(obj, where)


_NIL = Measure(1, 1, 1)


def _measure_flat(obj: dict) -> Measure | None:
    """``_measure_fast`` of a map holding only scalars (most args), in one loop without the
    stack; None when the map nests a container (the general walk measures it)."""
    total = 5
    for key, item in obj.items():
        if type(key) is not str:
            raise _Unsupported
        total += 5 + len(key) if key.isascii() else _fast_text(key)
        kind = type(item)
        if kind is str:
            total += 5 + len(item) if item.isascii() else _fast_text(item)
        elif kind is int:
            if not INT_MIN <= item <= INT_MAX:
                raise _Unsupported
            total += 9
        elif item is None or kind is bool:
            total += 1
        elif kind is float:
            if not math.isfinite(item):
                raise _Unsupported
            total += 9
        elif kind is dict or kind is list:
            return None
        else:
            raise _Unsupported
    count = len(obj)
    # root 1, every key and value one below it
    return _new_tuple(Measure, (total, 2 if count else 1, 1 + 2 * count))


def _measure_fast(obj: Any) -> Measure:
    if type(obj) is dict:
        flat = _measure_flat(obj)
        if flat is not None:
            return flat
    total = 0
    deepest = 0
    nodes = 0
    stack: list[tuple[Any, int]] = [(obj, 1)]
    pop, push = stack.pop, stack.append
    while stack:
        item, depth = pop()
        nodes += 1
        if depth > deepest:
            deepest = depth
        kind = type(item)
        if kind is str:
            total += 5 + len(item) if item.isascii() else _fast_text(item)
        elif kind is dict:
            total += 5
            child_depth = depth + 1
            for key, child in item.items():
                if type(key) is not str:
                    raise _Unsupported
                nodes += 1
                total += 5 + len(key) if key.isascii() else _fast_text(key)
                push((child, child_depth))
            if item and child_depth > deepest:
                deepest = child_depth
        elif kind is int:
            if not INT_MIN <= item <= INT_MAX:
                raise _Unsupported
            total += 9
        elif item is None or kind is bool:
            total += 1
        elif kind is float:
            if not math.isfinite(item):
                raise _Unsupported
            total += 9
        elif kind is list:
            total += 5
            child_depth = depth + 1
            stack.extend([(child, child_depth) for child in item])
        else:
            raise _Unsupported
    return _new_tuple(Measure, (total, deepest, nodes))


def _fast_text(text: str) -> int:
    try:
        return 5 + len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise _Unsupported from None


def _measure_located(obj: Any, where: str) -> Measure:
    """The same walk with a path per item, so a refusal names where it is."""
    total = 0
    deepest = 0
    nodes = 0
    stack: list[tuple[Any, int, str]] = [(obj, 1, where)]
    while stack:
        item, depth, path = stack.pop()
        nodes += 1
        if depth > deepest:
            deepest = depth
        kind = type(item)
        if item is None or kind is bool:
            total += 1
        elif kind is int:
            if not INT_MIN <= item <= INT_MAX:
                raise UnsupportedValue("integer outside -2^63..2^64-1", path)
            total += 9
        elif kind is float:
            if not math.isfinite(item):
                raise UnsupportedValue("float must be finite", path)
            total += 9
        elif kind is str:
            total += _text_size(item, path)
        elif kind is list:
            total += 5
            stack.extend((child, depth + 1, f"{path}[{index}]") for index, child in enumerate(item))
        elif kind is dict:
            total += 5
            for key, child in item.items():
                if type(key) is not str:
                    raise UnsupportedValue("object keys must be strings", path)
                nodes += 1
                total += _text_size(key, path)
                stack.append((child, depth + 1, f"{path}.{key}"))
            if item and depth + 1 > deepest:
                deepest = depth + 1
        else:
            raise UnsupportedValue(f"{kind.__name__} is not a JSON value", path)
    return Measure(total, deepest, nodes)
