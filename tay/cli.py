"""The ``tay`` command: a small dispatcher over subcommand groups.

Each group lives in its own module, which exposes ``register(subparsers)``: it adds one
sub-parser and sets ``handler`` (a callable taking the parsed namespace and returning the
exit code) on every leaf command. To add a group, append its module path to ``GROUPS``.

Exit codes: 0 success, 1 the command ran and refused (for example a store refusal),
2 usage error (argparse's own convention; the message names the flag).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import textwrap
from collections.abc import Sequence

# group modules, imported lazily so `tay storage ...` never loads the server stack.
GROUPS: tuple[str, ...] = (
    "tay.storage.cli",
    "tay.server.cli",
    "tay.bench.cli",
    "tay.admin.cli",
)


class WholeWordsHelpFormatter(argparse.HelpFormatter):
    """Wraps help between words only: a narrow terminal must not split ``TAY_*`` names or
    flags in two, or the help can no longer be copied or searched."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width,
                             break_long_words=False, break_on_hyphens=False)


class TayArgumentParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose help (and every sub-parser's) wraps between words."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", WholeWordsHelpFormatter)
        super().__init__(*args, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    """The top parser with every registered group."""
    from tay import __version__

    parser = TayArgumentParser(prog="tay", description="tay: durable background jobs")
    parser.add_argument("--version", action="version", version=f"tay {__version__}")
    groups = parser.add_subparsers(dest="group", metavar="GROUP")
    groups.required = True
    for module_name in GROUPS:
        importlib.import_module(module_name).register(groups)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``), run the chosen command, return its exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.error(f"{args.group}: a command is required")
    return int(handler(args))


if __name__ == "__main__":
    sys.exit(main())
