"""cffi out-of-line API-mode builder for ``tay._native._tay_native`` (named by setup.py).

The C sources live in ``csrc/``; what Python may call is declared once, in ``csrc/tay_native.h``,
which this file reads as the cdef.
Hardware CRC paths use per-function target attributes, so no global -m flags are passed.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from cffi import FFI

_ROOT = Path(__file__).resolve().parents[2]
_CSRC = _ROOT / "csrc"
_SOURCES = ["crc32c.c", "records.c", "value.c", "frames.c", "fileops.c", "events.c", "snapshots.c", "mutations.c", "base_jobs.c", "tail_jobs.c", "live_rows.c",
            "json_value.c", "value_json.c", "json_keys.c", "writer.c", "writer_io.c"]
_SOURCES += ["frames_check.c"]  # the protocol's per-buffer frame scan

HEADER = _CSRC / "tay_native.h"
_DEFINE = re.compile(r"#define\s+(\w+)\s+\(?\s*(-?\d+)u?\s*\)?")  # an integer constant


def header_cdef(header: str) -> str:
    """The cdef Python is built against, read from the C header itself (one declaration of
    every function, struct and constant): the declarations as written, with array sizes
    computed from the header's constants (cffi's parser takes only numbers there), and each
    ``#define`` as ``#define NAME ...`` (cffi takes its value from the compiled header)."""
    values: dict[str, int] = {}
    lines = []
    header = re.sub(r"/\*.*?\*/", " ", header, flags=re.DOTALL)  # a comment may hold "[i]"
    for line in header.splitlines():
        if not line.startswith("#"):
            lines.append(line)
        elif constant := _DEFINE.match(line):
            values[constant.group(1)] = int(constant.group(2))
            lines.append(f"#define {constant.group(1)} ...")

    def size(match: re.Match[str]) -> str:
        terms = re.sub(r"[A-Z_][A-Z0-9_]*", lambda m: str(values[m.group()]), match.group(1))
        if not re.fullmatch(r"[0-9 +*-]+", terms):
            raise ValueError(f"tay_native.h: array size {match.group(1)!r} is not a constant sum")
        return f"[{eval(terms)}]"  # digits and + - * only (checked above)

    return re.sub(r"\[([^\]]+)\]", size, "\n".join(lines))


CDEF = header_cdef(HEADER.read_text(encoding="utf-8"))


def _build_path(path: Path, absolute: bool) -> str:
    # setuptools prefers paths relative to the project root, which is the cwd under setup.py
    # and pip; the __main__ development build compiles elsewhere and needs absolute paths.
    if not absolute and path.is_relative_to(Path.cwd()):
        return os.path.relpath(path)
    return str(path)


def make_builder(absolute: bool = False) -> FFI:
    """The FFI builder for ``tay._native._tay_native``."""
    builder = FFI()
    builder.cdef(CDEF)
    builder.set_source(
        "tay._native._tay_native",
        '#include "tay_native.h"',
        sources=[_build_path(_CSRC / name, absolute) for name in _SOURCES],
        include_dirs=[_build_path(_CSRC, absolute)],
        extra_compile_args=["-std=c11", "-O2", "-Wall", "-Wextra", "-pthread"],
        extra_link_args=["-pthread"],  # the journal writer thread (writer.c)
    )
    return builder


ffibuilder = make_builder()

if __name__ == "__main__":
    # Development build that bypasses setuptools' project metadata: compile in a scratch
    # directory (cffi chdirs there) and copy the extension next to this file.
    import shutil

    scratch = _ROOT / ".tmp" / "native-build"
    scratch.mkdir(parents=True, exist_ok=True)
    built = make_builder(absolute=True).compile(tmpdir=str(scratch), verbose=True)
    # Remove builds of other flavours (setuptools names it *.abi3.so, cffi's compile the
    # full ABI tag): the import system would pick one by suffix order, maybe the stale one.
    for stale in Path(__file__).parent.glob("_tay_native*.so"):
        stale.unlink()
    target = Path(__file__).with_name(Path(built).name)
    shutil.copy2(built, target)
    print("installed", target)
