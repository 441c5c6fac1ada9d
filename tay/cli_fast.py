"""A command's argv read without argparse, when argparse's reading of it is not in doubt.

argparse, gettext and the ~50 options of ``tay serve`` cost several ms of CPU at every
start (docs/benchmarks.md, thirteenth session). ``ExactOptions`` takes the same
``add_argument`` calls a command makes on its argparse parser and reads only the forms
whose meaning argparse gives plainly: every word an exact long option of the command;
``--flag`` for a ``store_true``; ``--option value`` (a value not starting with ``-``) or
``--option=value`` (a value not empty) for a ``store`` or ``append``; values through their
``type`` and within their ``choices``. Anything else (help, an abbreviation, an unknown
word, a missing or dashed value, a refused choice) gives None, and the caller parses with
argparse, so its messages and exit codes stand unchanged. The namespace has what
argparse's would have: every option's value or default, and the caller adds the rest.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable

_UNSET: Any = object()
_IGNORED = frozenset({"help", "metavar"})  # what only the help text reads
_ACTIONS = (None, "store", "store_true", "append")


class ExactOptions:
    """A recorder of ``add_argument`` calls (long options only) and their exact reader."""

    __slots__ = ("options", "defaults", "plain")

    def __init__(self) -> None:
        self.options: dict[str, tuple[str, Any, Any, Callable[[str], Any] | None]] = {}
        self.defaults: dict[str, Any] = {}
        self.plain = True  # every declaration is one this reader reads as argparse does

    def add_argument(self, *flags: str, action: Any = None, choices: Any = None,
                     type: Callable[[str], Any] | None = None,  # noqa: A002 (argparse's name)
                     default: Any = _UNSET, **rest: Any) -> None:
        if (set(rest) - _IGNORED or action not in _ACTIONS or len(flags) != 1
                or not flags[0].startswith("--") or "=" in flags[0]):
            self.plain = False  # e.g. a short option or a dest: argparse reads this command
            return
        dest = flags[0][2:].replace("-", "_")
        if default is _UNSET:
            default = False if action == "store_true" else None
        self.options[flags[0]] = (dest, action, choices, type)
        self.defaults[dest] = default

    def parse(self, argv: list[str]) -> SimpleNamespace | None:
        """The options' values (argparse's defaults for the absent ones), or None when
        argparse must read ``argv``."""
        if not self.plain:
            return None
        values = {dest: list(default) if isinstance(default, list) else default
                  for dest, default in self.defaults.items()}
        position, count = 0, len(argv)
        while position < count:
            word = argv[position]
            position += 1
            flag, equals, explicit = word.partition("=")
            spec = self.options.get(flag)
            if spec is None:
                return None
            dest, action, choices, kind = spec
            if action == "store_true":
                if equals:
                    return None
                values[dest] = True
                continue
            if equals:
                if not explicit:
                    return None
                value: Any = explicit
            else:
                if position == count or argv[position].startswith("-"):
                    return None
                value = argv[position]
                position += 1
            if kind is not None:
                try:
                    value = kind(value)
                except (TypeError, ValueError):
                    return None
            if choices is not None and value not in choices:
                return None
            if action == "append":
                values[dest] = (values[dest] or []) + [value]
            else:
                values[dest] = value
        return SimpleNamespace(**values)
