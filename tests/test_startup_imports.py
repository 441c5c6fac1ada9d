"""What ``tay serve`` imports before it serves (start-up time): ``tay`` loads only the
module of the command it runs (the full parser whenever the first word is not one of
those commands), and the compaction machinery loads with the first compaction."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tay.cli import GROUPS, OWN_MODULE, build_parser

# What ``tay serve`` has imported by the time it listens (with ``tay.engine.core``, which
# run_serve imports beside recovery): the probes below import exactly these.
SERVING_MODULES = ("tay.server.cli", "tay.server.app", "tay.server.admin", "tay.server.driver",
                   "tay.server.uds.listener", "tay.server.lifecycle",
                   "tay.server.compaction.compactor", "tay.server.uds.connection",
                   "tay.storage.recovery.epoch_recover", "tay.engine.core")
IMPORT_SERVING = "import " + ", ".join(SERVING_MODULES) + "\n"

PROBE = """
import sys
from tay.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(sorted(m for m in {groups!r} if m in sys.modules))
"""


def loaded_groups(*argv: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", PROBE.format(groups=GROUPS), *argv],
                         capture_output=True, text=True, check=True).stdout
    return eval(out.strip().splitlines()[-1])  # a list literal the probe printed


def test_serve_loads_only_its_own_group_module() -> None:
    assert loaded_groups("serve", "--help") == ["tay.server.cli"]


@pytest.mark.parametrize("command", sorted(OWN_MODULE))
def test_a_single_command_does_not_load_the_admin_commands(command: str) -> None:
    loaded = loaded_groups(command, "--help")
    assert OWN_MODULE[command] in loaded and "tay.admin.cli" not in loaded


def test_other_first_words_get_every_group() -> None:
    assert loaded_groups("--help") == sorted(GROUPS)
    assert loaded_groups("no-such-command") == sorted(GROUPS)


def test_each_own_module_registers_exactly_its_command() -> None:
    for command, module in OWN_MODULE.items():
        parser = build_parser((module,))
        (groups,) = [a for a in parser._actions if a.dest == "group"]
        assert list(groups.choices) == [command]


def test_the_serving_stack_does_not_load_the_compaction_machinery() -> None:
    probe = ("import sys\n" + IMPORT_SERVING + "print(sorted(m for m in sys.modules "
             "if m.startswith('tay.storage.compaction.')))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout
    assert eval(out) == ["tay.storage.compaction.trigger"]


# What a default ``tay serve`` (no schedules, no HTTP, no compaction yet) never runs before
# it listens: each is reached through a named ``tay._frozen.LazyModule`` seam, or (the HTTP
# configuration) imported by ``tay.server.cli.run`` only when an HTTP port is given.
LAZY_MODULES = ("tay.engine.schedules.cron", "tay.engine.schedules.declaration",
                "tay.engine.schedules.timing", "tay.storage.compaction.plan",
                "tay.storage.recovery.inspect", "tay.server.http.config")

# At listen: the lazy modules loaded, and tay's ``LazyPattern``s compiled (none: the names and
# values a start reads are read without a pattern).
AT_LISTEN = """
import os, socket, sys
def listen(self, *args):
    from tay._frozen import LazyPattern
    print(sorted(m for m in sys.modules if m in {lazy!r}), flush=True)
    print(sorted(name + "." + key for name, module in list(sys.modules.items())
                 if name.startswith("tay") for key, found in vars(module).items()
                 if type(found) is LazyPattern and found._compiled is not None), flush=True)
    os._exit(0)
socket.socket.listen = listen
from tay.cli import main
main(sys.argv[1:])
"""


def test_a_default_serve_start_loads_no_lazy_module_before_it_listens() -> None:
    from tests.scratch import scratch_dir

    root = scratch_dir("lazy-")
    argv = ["serve", "--data-dir", str(root / "data"), "--socket", str(root / "tay.sock"),
            "--init-if-missing", "--durability", "sync", "--validated-filesystem"]
    for start in ("init", "restart"):  # the first start adopts its new store (a compaction)
        out = subprocess.run([sys.executable, "-c", AT_LISTEN.format(lazy=LAZY_MODULES), *argv],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, (start, out.stderr)
    assert out.stdout.strip().splitlines()[-2:] == ["[]", "[]"]  # the restart's
    for module in LAZY_MODULES:  # every seam names a module that exists
        probe = f"import {module}"
        subprocess.run([sys.executable, "-c", probe], check=True)


@pytest.mark.parametrize("columns", [None, "", "abc", "0", "-3", "45", "132"])
@pytest.mark.parametrize("terminal", [None, (0, 0), (97, 30)])
def test_help_width_is_the_one_shutil_gives(monkeypatch: pytest.MonkeyPatch,
                                            columns: str | None,
                                            terminal: tuple[int, int] | None) -> None:
    import os
    import shutil

    from tay.cli_help import terminal_columns

    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    monkeypatch.delenv("LINES", raising=False)

    def size(fd: int = 1) -> os.terminal_size:
        if terminal is None:
            raise OSError("not a terminal")
        return os.terminal_size(terminal)

    monkeypatch.setattr(os, "get_terminal_size", size)
    assert terminal_columns() == shutil.get_terminal_size().columns


def test_serve_starts_without_shutil() -> None:
    """argparse imports shutil (with zlib, bz2 and lzma) for its default help width, and the
    admin status imported it for disk usage: neither happens before ``tay serve`` listens."""
    probe = ("import sys\n"
             "from tay.cli import build_parser\n"
             "build_parser(('tay.server.cli',)).parse_args(['serve', '--data-dir', 'x'])\n"
             + IMPORT_SERVING +
             "print('shutil' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "False"


def test_serve_help_is_the_help_argparse_would_format(monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    from tay.cli_help import WholeWordsHelpFormatter

    monkeypatch.setenv("COLUMNS", "60")
    parser = build_parser(("tay.server.cli",))
    (groups,) = [a for a in parser._actions if a.dest == "group"]
    serve = groups.choices["serve"]
    ours = serve.format_help()
    serve.formatter_class = lambda prog: WholeWordsHelpFormatter(
        prog, width=shutil.get_terminal_size().columns - 2)  # argparse's own default
    assert serve.format_help() == ours
    assert "TAY_DATA_DIR" in ours and "--data-dir" in ours


def test_a_socket_only_serve_loads_no_url_or_ip_parsing() -> None:
    """``urllib.parse`` and ``ipaddress`` serve only the HTTP listener (admin query strings,
    ``--http-ip``). Run without ``site``: an environment's ``.pth`` files may import them
    (setuptools' editable import hook did, before pyproject named the package dir)."""
    import os

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = [root] + [p for p in sys.path if p.endswith("site-packages")]
    probe = ("import sys\n"
             f"sys.path[:0] = {paths!r}\n"
             "from tay.cli import build_parser\n"
             "build_parser(('tay.server.cli',)).parse_args(['serve', '--data-dir', 'x'])\n"
             + IMPORT_SERVING +
             "print(sorted(m for m in ('urllib.parse', 'ipaddress', 'shutil') "
             "if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-S", "-c", probe], capture_output=True, text=True,
                         check=True).stdout
    assert eval(out) == []


def test_the_engine_package_loads_its_facade_on_first_use() -> None:
    """``tay serve`` builds its configuration with ``tay.engine.config`` alone: the engine
    itself loads later (on the main thread while recovery reads the store); every name of
    the facade is still the one its module defines."""
    probe = ("import sys, tay.engine.config, tay.server.app; print('tay.engine.core' in "
             "sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "False"
    import importlib

    import tay.engine

    for name in tay.engine.__all__:
        home = importlib.import_module(tay.engine._HOME[name])
        assert getattr(tay.engine, name) is getattr(home, name)
    assert set(tay.engine.__all__) <= set(dir(tay.engine))
    with pytest.raises(AttributeError):
        tay.engine.NoSuchName  # noqa: B018
    from tay.engine import Engine, commands  # a name and a submodule

    assert Engine is importlib.import_module("tay.engine.core").Engine
    assert commands is importlib.import_module("tay.engine.commands")


@pytest.mark.parametrize("collecting", [True, False])
def test_serve_leaves_the_cycle_collector_as_it_found_it(collecting: bool) -> None:
    """``tay serve`` turns the cycle collector off for its start-up (run_serve turns it on
    once serve() froze the recovered state); ``main`` gives it back as it was, here after
    ``--help`` and after a refused option."""
    import gc

    from tay.cli import main

    was = gc.isenabled()
    try:
        for argv in (["serve", "--help"], ["serve", "--no-such-option"]):
            if collecting:
                gc.enable()
            else:
                gc.disable()
            with pytest.raises(SystemExit):
                main(argv)
            assert gc.isenabled() is collecting
    finally:
        if was:
            gc.enable()
