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
    parser = build_parser((own,) if own is not None else GROUPS)
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.error(f"{args.group}: a command is required")
    return int(handler(args))


if __name__ == "__main__":
    sys.exit(main())
