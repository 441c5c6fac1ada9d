"""Every command the README and docs/ show still exists and parses as written.

Commands are taken from ``sh`` blocks and from inline code that starts with ``tay``,
``tay-worker``, ``make`` or ``.venv/bin/...``. Placeholders (``D``, ``ID``, ``QUEUE``,
``N``, ``PROFILE``, ``...``, ``[--flag]``) get sample values. Then:

* a command in an ``sh`` block is complete: ``tay ...`` and ``python -m tay.cli ...`` are
  parsed by the real ``tay`` parser (a usage error fails with the page and the command),
  ``python -m tay ...`` is ``tay ...``; ``tay-worker`` / ``python -m tay.worker`` and
  ``python -m benchmarks.peers.run_peers`` are parsed by their own parsers;
* inline code in prose often names a command without its arguments (``tay storage
  inspect``): each of its subcommands and ``--flags`` must exist in the real parser;
* ``make TARGET [VAR=value]``: ``make -n`` (a dry run) must accept it;
* a script run by path must exist; the operating system's own tools (``systemctl``,
  ``cp``, ...) are listed in ``FOREIGN``; anything else fails, so a new kind of command
  cannot slip into the docs untested.

The cheap ones also run for real: ``--help`` of every documented command group, and
``tay storage init / inspect / repair`` on a fresh store.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import re
import shlex
import subprocess
import tempfile
from pathlib import Path

import pytest

from tay.cli import build_parser as tay_parser
from tay.cli import main as tay_main

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SAMPLES = {"D": "var/data", "ID": "0" * 32, "QUEUE": "default", "N": "8080",
           "PROFILE": "reference", "DATA_DIR=...": "DATA_DIR=var/data"}
LOG_LINES = ("tay listening on", "tay serving:")  # inline log output, not commands
SCRIPTS = {
    # building the C module by hand: the same build `make venv` runs (tests use its output)
    "python setup.py build_ext --inplace": "setuptools' build_ext",
    "python tay/_native/_build.py": "the cffi build script make venv runs",
}
FOREIGN = {  # the operating system's own tools, shown around tay (backups, services)
    "systemctl": "systemd", "cp": "coreutils", "sync": "coreutils",
}


def documented() -> list[tuple[str, str, bool]]:
    """(page, command, complete) for every command shown in the README and docs/."""
    found: list[tuple[str, str, bool]] = []
    for page in PAGES:
        text = page.read_text()
        name = str(page.relative_to(REPO))
        for block in re.findall(r"```(?:sh|bash|shell)\n(.*?)```", text, re.S):
            for line in block.replace("\\\n", " ").splitlines():
                line = line.split("  #")[0].split(" # or:")[0].strip()
                if line and not line.startswith("#"):
                    found.append((name, " ".join(line.split()), True))
        for span in re.findall(r"`((?:tay|tay-worker|make|python3?|\.venv/bin/\S+) [^`]*)`", text):
            span = " ".join(span.split())
            if span.startswith(LOG_LINES):
                continue
            if " | " in span:  # "tay status | jobs | job ID | ...": each alternative
                first, *rest = span.split(" | ")
                found.append((name, first, False))
                found += [(name, f"tay {alternative}", False) for alternative in rest]
            else:
                found.append((name, span, False))
    return sorted(set(found))


def argv_of(command: str) -> list[str]:
    words = []
    for word in shlex.split(command):
        if word == "...":
            word = "--help"
        word = SAMPLES.get(word, word)
        if word.startswith("[") and word.endswith("]"):
            word = word[1:-1]  # an optional flag: parse it too
        words.append(word)
    return words


def parses(parser_factory, argv: list[str]) -> None:
    """``argv`` is accepted (``--help`` exits 0); a usage error fails naming it."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            parser_factory().parse_args(argv)
    except SystemExit as exit_:
        assert exit_.code == 0, stderr.getvalue()


def mentions(parser, words: list[str]) -> None:
    """Each subcommand named, then each ``--flag``, exists in ``parser`` (values and
    placeholders are not judged: the prose may leave them out)."""
    path = ["tay"]
    for word in words:
        subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if word.startswith("-"):
            flag = word.split("=")[0]
            assert flag in parser._option_string_actions, f"{' '.join(path)} has no {flag}"
        elif subparsers:
            assert word in subparsers[0].choices, f"{' '.join(path)} has no command {word!r}"
            parser = subparsers[0].choices[word]
            path.append(word)


# Modules a documented ``python -m`` runs that build their parser with ``build_parser()``.
OWN_PARSERS = frozenset({
    "tay.worker", "benchmarks.peers.run_peers", "benchmarks.sdk_compare", "benchmarks.sdk_path",
    "benchmarks.server_path", "benchmarks.engine_path", "benchmarks.engine_calls",
    "benchmarks.restart", "benchmarks.backlog_store", "benchmarks.compaction",
    "benchmarks.soak_online", "benchmarks.tail_restart", "benchmarks.retained_state",
    "benchmarks.soak_daemon", "benchmarks.overload", "benchmarks.backlog_gc",
})


def check(command: str, complete: bool = True) -> None:
    argv = argv_of(command)
    if not complete and argv[0] in ("tay", ".venv/bin/tay"):
        mentions(tay_parser(), argv[1:])
        return
    if argv[0] in (".venv/bin/python", "python", "python3") and argv[1:2] == ["-m"]:
        module, args = argv[2], argv[3:]
    elif argv[0] in ("tay", ".venv/bin/tay"):
        module, args = "tay.cli", argv[1:]
    elif argv[0] == "tay-worker":
        module, args = "tay.worker", argv[1:]
    elif argv[0] == "make":
        done = subprocess.run(["make", "-n", "-C", str(REPO), *argv[1:]], capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return
    elif command in SCRIPTS:
        assert (REPO / argv[1]).exists(), command
        return
    else:
        assert argv[0] in FOREIGN, f"a documented command this test does not know: {command!r}"
        return
    if module in ("tay.cli", "tay"):  # python -m tay is the tay command
        parses(tay_parser, args)
    elif module in OWN_PARSERS:  # a module with its own argparse parser
        parses(importlib.import_module(module).build_parser, args)
    else:
        raise AssertionError(f"documented module {module!r} has no parser check here")


COMMANDS = documented()


def test_the_docs_show_commands():
    pages = {page for page, _, _ in COMMANDS}
    assert {"README.md", "docs/benchmarks.md", "docs/journal.md", "docs/admin.md"} <= pages
    assert len(COMMANDS) > 30


@pytest.mark.parametrize("page, command, complete", COMMANDS,
                         ids=[f"{p}:{c}" for p, c, _ in COMMANDS])
def test_a_documented_command_parses(page: str, command: str, complete: bool):
    check(command, complete)


def test_a_command_that_does_not_exist_is_caught():
    with pytest.raises(AssertionError):
        check("tay storage frobnicate --data-dir D")
    with pytest.raises(AssertionError):
        check("tay serve --no-such-flag")
    with pytest.raises(AssertionError):
        check("make no-such-target")
    with pytest.raises(AssertionError):
        check("curl http://example")
    with pytest.raises(AssertionError):
        check("tay storage inspect --no-such-flag", complete=False)
    with pytest.raises(AssertionError):
        check("tay frobnicate", complete=False)


@pytest.mark.parametrize("group", sorted({tuple(argv_of(c)[1:3]) for _, c, _ in COMMANDS
                                          if argv_of(c)[0] == "tay" and len(argv_of(c)) > 2
                                          and argv_of(c)[1] in ("storage", "bench")}
                                         | {("serve",), ("status",), ("jobs",)}))
def test_help_of_every_documented_group_runs(group, capsys):
    with pytest.raises(SystemExit) as exit_:
        tay_main([*group, "--help"])
    assert exit_.value.code == 0
    assert "usage: tay" in capsys.readouterr().out


def test_the_offline_store_commands_run_for_real(capsys):
    """``tay storage init``, ``inspect --json`` and ``repair`` (README, journal.md) on a
    fresh store: exit 0, an empty store, nothing to repair."""
    from tests.scratch import scratch_root

    with tempfile.TemporaryDirectory(dir=scratch_root()) as root:
        data = f"{root}/data"
        assert tay_main(["storage", "init", "--data-dir", data, "--validated-filesystem"]) == 0
        capsys.readouterr()
        assert tay_main(["storage", "inspect", "--data-dir", data, "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["ok"] and report["jobs"] == 0
        assert tay_main(["storage", "repair", "--data-dir", data]) == 0
        assert "nothing to repair" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        tay_main(["--version"])
    assert exit_.value.code == 0
