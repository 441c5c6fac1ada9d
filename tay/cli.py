"""The ``tay`` command: a small dispatcher over subcommand groups.

Each group lives in its own module, which exposes ``register(subparsers)``: it adds one
sub-parser and sets ``handler`` (a callable taking the parsed namespace and returning the
exit code) on every leaf command. To add a group, append its module path to ``GROUPS``.

Exit codes: 0 success, 1 the command ran and refused (for example a store refusal),
2 usage error (argparse's own convention; the message names the flag).
"""

from __future__ import annotations

import gc
import importlib
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse

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


def build_parser(modules: Sequence[str] = GROUPS) -> argparse.ArgumentParser:
    """The top parser with the groups of ``modules`` (default: every registered group)."""
    from tay._version import __version__
    from tay.cli_help import TayArgumentParser

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
    bundle = None
    if own == "tay.server.cli":
        gc.disable()
        from tay import _bundle

        bundle = _bundle.install()  # tay's bytecode from one checked file, if written
    try:
        if own is not None:  # argv the command's module reads alone, if it can (tay.cli_fast)
            parse_exact = getattr(importlib.import_module(own), "parse_exact", None)
            args = parse_exact(argv[1:]) if parse_exact is not None else None
            if args is not None:
                return int(args.handler(args))
        parser = build_parser((own,) if own is not None else GROUPS)
        args = parser.parse_args(argv)
        handler = getattr(args, "handler", None)
        if handler is None:
            parser.error(f"{args.group}: a command is required")
        return int(handler(args))
    finally:
        if bundle is not None:
            bundle.uninstall()
        if collecting:
            gc.enable()


if __name__ == "__main__":
    sys.exit(main())
