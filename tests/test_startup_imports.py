"""What ``tay serve`` imports before it serves (start-up time): ``tay`` loads only the
module of the command it runs (the full parser whenever the first word is not one of
those commands), and the compaction machinery loads with the first compaction."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tay.cli import GROUPS, OWN_MODULE, build_parser

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
    probe = ("import sys, tay.server.app, tay.server.compactor, tay.server.driver, "
             "tay.server.listener; print(sorted(m for m in sys.modules "
             "if m.startswith('tay.storage.compaction.')))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout
    assert eval(out) == ["tay.storage.compaction.plan", "tay.storage.compaction.trigger"]
