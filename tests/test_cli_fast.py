"""``tay serve`` reads its arguments without argparse when argparse's reading is plain
(``tay.cli_fast``): the same namespace argparse gives, or None and argparse reads them."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from tay.cli import build_parser
from tay.cli_fast import ExactOptions
from tay.server import cli as serve_cli



def serve_flags() -> list[str]:
    options = ExactOptions()
    serve_cli.declare(options)
    return sorted(options.options)


def by_argparse(argv: list[str]) -> dict | None:
    """argparse's namespace for ``tay serve argv`` (as a dict), None when it exits."""
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            return vars(build_parser(("tay.server.cli",)).parse_args(["serve", *argv]))
    except SystemExit:
        return None


def exact(argv: list[str]) -> dict | None:
    args = serve_cli.parse_exact(argv)
    return None if args is None else vars(args)


PLAIN = [
    [],
    ["--data-dir", "/srv/tay", "--socket", "/run/tay.sock", "--durability", "sync",
     "--validated-filesystem", "--queue", "default=4"],
    ["--queue", "a=1", "--queue=b=2", "--log-level", "debug", "--log-format=json"],
    ["--data-dir", "x", "--data-dir", "y", "--init-if-missing", "--compaction", "off",
     "--compact-on-stop=on", "--socket-mode", "0660", "--journal-writer", "c"],
    ["--http-port", "0", "--dashboard", "off", "--group-commit-max-events", "256",
     "--group-commit-linger", "--max-state-bytes", "1 MiB", "--data-dir", " -x"],
    ["--data-dir", ""],
]
REFUSED_OR_ARGPARSE = [
    ["--help"], ["-h"], ["--data", "x"], ["--data-dir"], ["--data-dir", "-x"],
    ["--data-dir="], ["--init-if-missing=1"], ["--durability", "fast"], ["--socket-mode=0777"],
    ["--log-level", "verbose"], ["x"], ["--"], ["--data-dir", "x", "--", "y"],
    ["--no-such-option", "1"], ["--version"], ["--socket", "-1"],
]


def test_plain_arguments_give_argparse_namespace() -> None:
    for argv in PLAIN:
        expected = by_argparse(argv)
        assert expected is not None, argv
        assert exact(argv) == expected, argv


def test_anything_else_is_left_to_argparse() -> None:
    for argv in REFUSED_OR_ARGPARSE:
        assert exact(argv) is None, argv


WORDS = st.sampled_from(serve_flags() + [
    "x", "", "-1", "-x", "on", "off", "sync", "write", "0600", "0660", "debug", "INFO",
    "json", "c", "a=1", "--", "-h", "--help", "--data", "--data-dir=y", "--queue=b=2",
    "--validated-filesystem=1", "--log-level=warning", "--compaction=maybe", "--socket="])


@settings(max_examples=400, deadline=None)
@given(st.lists(WORDS, max_size=8))
def test_any_argv_gives_argparse_namespace_or_none(argv: list[str]) -> None:
    """Whatever the words, the exact reading is argparse's reading or no reading at all."""
    found = exact(argv)
    if found is not None:
        assert found == by_argparse(argv)


def test_a_declaration_it_cannot_read_leaves_the_command_to_argparse() -> None:
    for flags, options in ((("-v",), {}), (("--x",), {"dest": "y"}),
                           (("--x",), {"action": "count"}), (("--x", "-x"), {}),
                           (("--x",), {"nargs": 2})):
        reader = ExactOptions()
        reader.add_argument("--plain")
        reader.add_argument(*flags, **options)
        assert reader.parse([]) is None and reader.parse(["--plain", "1"]) is None
    reader = ExactOptions()
    reader.add_argument("--on", action="store_true")
    reader.add_argument("--many", action="append")
    reader.add_argument("--kept", default=[])
    args = reader.parse([])
    assert (args.on, args.many, args.kept) == (False, None, [])


def test_serve_starts_without_argparse() -> None:
    """A plain ``tay serve`` reaches its handler without importing argparse or gettext;
    ``--help`` still gets argparse's help."""
    probe = ("import sys\n"
             "from tay.server import cli\n"
             "cli.run = lambda args: print(sorted(m for m in ('argparse', 'gettext') "
             "if m in sys.modules), args.group, args.queue) or 0\n"
             "from tay.cli import main\n"
             "sys.exit(main(['serve', '--data-dir', 'x', '--queue', 'a=1']))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "[] serve ['a=1']"
    shown = subprocess.run([sys.executable, "-m", "tay", "serve", "--help"],
                           capture_output=True, text=True)
    assert shown.returncode == 0 and "--data-dir" in shown.stdout
