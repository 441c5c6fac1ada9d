"""A timed server start runs from bytecode: the bench writes the tay package's ``.pyc``
files first, even where ``PYTHONDONTWRITEBYTECODE`` keeps the server from writing them."""

from __future__ import annotations

import importlib.util
import marshal
import os
from pathlib import Path

import tay
from tay.bench import server


def test_every_tay_module_has_current_bytecode_after_byte_compile() -> None:
    server._compiled.clear()  # run it here, whatever ran before in this process
    assert server.byte_compile_tay() is True
    package = Path(tay.__file__).resolve().parent
    sources = sorted(package.rglob("*.py"))
    assert sources
    for source in sources:
        cached = Path(importlib.util.cache_from_source(str(source)))
        data = cached.read_bytes()
        # a timestamp-checked .pyc: flags 0, then the source's mtime and size it was made from
        assert int.from_bytes(data[4:8], "little") == 0, cached
        stat = os.stat(source)
        assert int.from_bytes(data[8:12], "little") == int(stat.st_mtime) & 0xFFFFFFFF, cached
        assert int.from_bytes(data[12:16], "little") == stat.st_size & 0xFFFFFFFF, cached
        marshal.loads(data[16:])  # a code object the interpreter loads

