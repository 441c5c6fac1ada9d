"""Every file the README and docs/ name exists: a path with a directory must exist as
written (from the repository root), a bare ``name.py`` somewhere in the repository. Renamed
or moved modules otherwise leave the pages pointing at nothing."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
NOT_FILES = {  # named on purpose, not files of this repository
    "Python.h": "CPython's header, named to say csrc/ never includes it",
    "tay._native.c": "a module name (the C twin), not a path",
    "result.json": "written into each benchmark run directory",
    "tay-backup.json": "the catalog tay storage backup writes into each backup",
}
NAMED = re.compile(r"`((?:[\w.-]+/)*[\w.-]+\.(?:py|c|h|toml|json|md))(?:::\w+)?`")


def tracked() -> list[str]:
    listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True)
    if listed.returncode == 0 and listed.stdout:
        return listed.stdout.splitlines()
    return [str(p.relative_to(REPO)) for p in REPO.rglob("*") if p.is_file()]


FILES = tracked()
BASENAMES = {Path(path).name for path in FILES}
NAMES = sorted({(str(page.relative_to(REPO)), name) for page in PAGES
                for name in NAMED.findall(page.read_text())})


@pytest.mark.parametrize("page, name", NAMES, ids=[f"{p}:{n}" for p, n in NAMES])
def test_a_named_file_exists(page: str, name: str):
    if name in NOT_FILES:
        return
    if "/" in name:
        # repository-relative, or relative to a package the page is about
        assert (REPO / name).exists() or any(f.endswith("/" + name) for f in FILES), name
    else:
        assert name in BASENAMES, f"{page} names {name}, which no file in the repository is"


def test_pages_name_files():
    assert len(NAMES) > 50
