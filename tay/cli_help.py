"""The argparse side of the ``tay`` command: help that wraps between words, at the width
``shutil`` would give. Kept out of ``tay.cli`` so that a ``tay serve`` whose arguments need
no argparse (``tay.cli_fast``) never imports it (with gettext) at start-up."""

from __future__ import annotations

import argparse
import os
import sys
import textwrap


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
