"""One file of the tay package's bytecode for ``tay serve``'s start (issue 15, item 4).

A start imports ~120 of tay's modules; for each, the import system's path finder joins
paths, stats the source, opens, reads and checks its ``.pyc`` (~20M instructions of the
start's ~520M). ``write()`` compiles every module of the package into one file beside the
package's own bytecode (``tay/__pycache__/serve-bundle.<cache tag>.bin``), with each
source's size and modification time (nanoseconds); ``install()`` puts a finder in front of
the path finder that serves a ``tay.*`` module from it, and the module is exactly what the
path finder would make (``SourceFileLoader``, same ``__file__``, ``__path__``, spec), only
the code comes from the bundle.

**Never stale.** A module is served from the bundle only if its source file still has the
size and modification time it was compiled from (one ``stat``, the check ``.pyc`` files
make, with nanoseconds instead of seconds); anything else (an edited, added, removed or
moved file, another Python (magic number), ``-O``) falls through to the path finder,
module by module. A missing or unreadable bundle installs nothing.
"""

from __future__ import annotations

import marshal
import os
import sys
from importlib.machinery import ModuleSpec, SourceFileLoader
from typing import Any

import _imp

FORMAT = 1
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def _magic() -> bytes:
    import _frozen_importlib_external  # importlib.util's MAGIC_NUMBER, without importlib.util

    return _frozen_importlib_external.MAGIC_NUMBER


def bundle_path(package_dir: str = _PACKAGE_DIR) -> str:
    return os.path.join(package_dir, "__pycache__",
                        f"serve-bundle.{sys.implementation.cache_tag}.bin")


def _modules(package_dir: str) -> list[tuple[str, str, bool]]:
    """(module name, source path, is a package) of every module under ``package_dir``."""
    found = []
    for root, dirs, files in os.walk(package_dir):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__"
                         and os.path.isfile(os.path.join(root, d, "__init__.py")))
        relative = os.path.relpath(root, os.path.dirname(package_dir))
        package = relative.replace(os.sep, ".")
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(root, name)
            if name == "__init__.py":
                found.append((package, path, True))
            else:
                found.append((f"{package}.{name[:-3]}", path, False))
    return found


def write(package_dir: str = _PACKAGE_DIR) -> str:
    """Compile every module of the package into its bundle (replaced atomically): a header
    (``TAYB``, the index's length), the index (marshal: format, magic number, and per
    module its source, package flag, source mtime_ns and size, ``.pyc`` path, and where its
    code lies), then each module's marshalled code."""
    from importlib.util import cache_from_source

    index: dict[str, tuple[str, bool, int, int, str, int, int]] = {}
    blobs: list[bytes] = []
    offset = 0
    for name, path, is_package in _modules(package_dir):
        with open(path, "rb") as file:
            stat = os.fstat(file.fileno())
            source = file.read()
        blob = marshal.dumps(compile(source, path, "exec", dont_inherit=True, optimize=0))
        index[name] = (os.path.relpath(path, package_dir), is_package, stat.st_mtime_ns,
                       stat.st_size, os.path.relpath(cache_from_source(path), package_dir),
                       offset, len(blob))
        blobs.append(blob)
        offset += len(blob)
    head = marshal.dumps((FORMAT, _magic(), index))
    target = bundle_path(package_dir)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    staging = f"{target}.{os.getpid()}.tmp"
    with open(staging, "wb") as file:
        file.write(b"TAYB" + len(head).to_bytes(4, "big") + head)
        file.writelines(blobs)
    os.replace(staging, target)
    return target


class BundleLoader(SourceFileLoader):
    """The path finder's loader for the module, with its code read from the bundle."""

    def __init__(self, fullname: str, path: str, finder: BundleFinder, offset: int,
                 length: int) -> None:
        super().__init__(fullname, path)
        self._where: tuple[BundleFinder, int, int] | None = (finder, offset, length)

    def get_code(self, fullname: str) -> Any:
        where, self._where = self._where, None
        data = None
        if where is not None and fullname == self.name:
            finder, offset, length = where
            data = finder.read(offset, length)
        if data is None:  # asked again (runpy, a reload), or the bundle closed: from source
            return super().get_code(fullname)
        code = marshal.loads(data)
        _imp._fix_co_filename(code, self.path)
        return code


class BundleFinder:
    """Finds a ``tay.*`` module in the bundle while its source is unchanged."""

    def __init__(self, package_dir: str, fd: int, base: int,
                 index: dict[str, tuple[str, bool, int, int, str, int, int]]) -> None:
        self.package_dir = package_dir
        self.prefix = os.path.join(package_dir, "")
        self.fd: int | None = fd
        self.base = base
        self.index = index

    def read(self, offset: int, length: int) -> bytes | None:
        """A module's code as written, or None (the bundle closed, or cut short)."""
        if self.fd is None:
            return None
        data = os.pread(self.fd, length, self.base + offset)
        return data if len(data) == length else None

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        entry = self.index.pop(name, None)  # one use: imported again, a module goes by path
        if entry is None:
            return None
        relative, is_package, mtime_ns, size, cached_relative, offset, length = entry
        source = self.prefix + relative
        try:
            stat = os.stat(source)
        except OSError:
            return None
        if stat.st_mtime_ns != mtime_ns or stat.st_size != size:
            return None
        spec = ModuleSpec(name, BundleLoader(name, source, self, offset, length),
                          origin=source, is_package=is_package)
        spec.has_location = True
        spec.cached = self.prefix + cached_relative  # what the path finder computes
        if is_package:
            spec.submodule_search_locations = [os.path.dirname(source)]
        return spec

    def uninstall(self) -> None:
        """Off ``sys.meta_path`` and the file closed; the modules it served stay as they are."""
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        fd, self.fd = self.fd, None
        self.index = {}
        if fd is not None:
            os.close(fd)


def install(package_dir: str = _PACKAGE_DIR) -> BundleFinder | None:
    """Put the bundle's finder first on ``sys.meta_path``; None (nothing installed) if there
    is no usable bundle, the interpreter is not the one it was compiled for, or one is
    installed already. The file stays open (each module's code is read when it is
    imported) until ``uninstall``."""
    if sys.flags.optimize or any(isinstance(f, BundleFinder) for f in sys.meta_path):
        return None
    try:
        fd = os.open(bundle_path(package_dir), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        head = os.pread(fd, 8, 0)
        length = int.from_bytes(head[4:], "big")
        form, magic, index = marshal.loads(os.pread(fd, length, 8))
        if head[:4] != b"TAYB" or form != FORMAT or magic != _magic():
            raise ValueError("another bundle format or Python")
    except (OSError, ValueError, EOFError, TypeError):
        os.close(fd)
        return None
    finder = BundleFinder(package_dir, fd, 8 + length, index)
    sys.meta_path.insert(0, finder)
    return finder


if __name__ == "__main__":
    print(write())
