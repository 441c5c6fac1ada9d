"""The ``tay`` command: a small dispatcher over subcommand groups.

Each group lives in its own module, which exposes ``register(subparsers)``: it adds one
sub-parser and sets ``handler`` (a callable taking the parsed namespace and returning the
exit code) on every leaf command. To add a group, append its module path to ``GROUPS``.

Exit codes: 0 success, 1 the command ran and refused (for example a store refusal),
2 usage error (argparse's own convention; the message names the flag).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys
import textwrap
from collections.abc import Sequence

# group modules, imported lazily so `tay storage ...` never loads the server stack.
GROUPS: tuple[str, ...] = (
    "tay.admin.storage_cli",
    "tay.server.cli",
    "tay.bench.cli",
    "tay.admin.cli",
)
# The command each single-command module registers: `tay serve ...` imports only its own
# module (start-up time); any other first word (the admin commands, --help, a typo) gets
# the parser with every group, so help and errors list them all.
OWN_MODULE: dict[str, str] = {
    "storage": "tay.admin.storage_cli",
    "serve": "tay.server.cli",
    "bench": "tay.bench.cli",
}


def terminal_columns() -> int:
    """``shutil.get_terminal_size().columns`` by its documented rule (a positive integer in
    ``COLUMNS``, else the width of the terminal on ``sys.__stdout__``, else 80), without
    importing ``shutil`` (and zlib, bz2 and lzma with it) at every ``tay serve`` start."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns > 0:
        return columns
    try:
        columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
    except (AttributeError, ValueError, OSError):
        columns = 0
    return columns or 80


class WholeWordsHelpFormatter(argparse.HelpFormatter):
    """Wraps help between words only: a narrow terminal must not split ``TAY_*`` names or
    flags in two, or the help can no longer be copied or searched."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        if width is None:  # argparse's default width, which it would take from shutil
            width = terminal_columns() - 2
        super().__init__(prog, indent_increment, max_help_position, width)

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width,
                             break_long_words=False, break_on_hyphens=False)


class TayArgumentParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose help (and every sub-parser's) wraps between words."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", WholeWordsHelpFormatter)
        super().__init__(*args, **kwargs)


def build_parser(modules: Sequence[str] = GROUPS) -> argparse.ArgumentParser:
    """The top parser with the groups of ``modules`` (default: every registered group)."""
    from tay import __version__

    parser = TayArgumentParser(prog="tay", description="tay: durable background jobs")
    parser.add_argument("--version", action="version", version=f"tay {__version__}")
    groups = parser.add_subparsers(dest="group", metavar="GROUP")
    groups.required = True
    for module_name in modules:
        importlib.import_module(module_name).register(groups)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``), run the chosen command, return its exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    own = OWN_MODULE.get(argv[0]) if argv else None
    # `tay serve` starts with the cycle collector off: its imports and recovery make only
    # long-lived objects, and the ~24 young collections over them cost 5-10 ms before the
    # socket listens. serve() freezes what start-up made and turns it on (run_serve).
    collecting = gc.isenabled()
    if own == "tay.server.cli":
        gc.disable()
    try:
        parser = build_parser((own,) if own is not None else GROUPS)
        args = parser.parse_args(argv)
        handler = getattr(args, "handler", None)
        if handler is None:
            parser.error(f"{args.group}: a command is required")
        return int(handler(args))
    finally:
        if collecting:
            gc.enable()


if __name__ == "__main__":
    sys.exit(main())
