"""One file of bytecode for ``tay serve``'s start (issue 15, item 4).

A start imports ~120 of tay's modules and ~75 pure-Python modules of the standard library
and the loop (asyncio, uvloop, orjson, logging, json, ...); for each, the import system's
path finder joins paths, stats the source, opens, reads and checks its ``.pyc`` (~27M
instructions of the start's ~520M). ``write()`` compiles every module of the package, and
those of ``OTHERS`` this interpreter has as source files, into one file beside the
package's own bytecode (``tay/__pycache__/serve-bundle.<cache tag>.bin``), with each
source's size and modification time (nanoseconds); ``install()`` puts a finder in front of
the path finder that serves those modules from it, and each module is exactly what the
path finder would make (``SourceFileLoader``, same ``__file__``, ``__cached__``,
``__path__``, spec), only its code is read from the bundle (one ``pread``).

**Never stale, never another file.** A module is served from the bundle only if its source
file still has the size and modification time it was compiled from (one ``stat``, the
check ``.pyc`` files make, with nanoseconds instead of seconds); anything else (an edited,
added, removed or moved file, another Python (magic number), ``-O``) falls through to the
path finder, module by module. A module of ``OTHERS`` is served only where the path finder
would import the same file: a submodule when its package's ``__path__`` starts with the
bundled directory, a top-level one when no ``sys.path`` entry before its own has a module
of that name (each entry's finder, as the import system cached it, is asked: a ``json.py``
in the working directory still shadows the standard library's, as it would without the
bundle). A missing or unreadable bundle installs nothing.
"""

from __future__ import annotations

import marshal
import os
import sys
from importlib.machinery import ModuleSpec, SourceFileLoader
from typing import Any

import _imp

FORMAT = 1
# The standard library's and the loop's pure-Python modules a serve start imports after
# ``install`` (asyncio's, uvloop's and orjson's, logging, json, ...): the same per-module
# import cost as tay's own. Each is bundled from the source its import would read and
# checked the same way; a name missing here (another Python) is imported by path.
OTHERS = (
    "__future__", "_weakrefset", "ast", "asyncio", "asyncio.base_events",
    "asyncio.base_futures", "asyncio.base_subprocess", "asyncio.base_tasks",
    "asyncio.constants", "asyncio.coroutines", "asyncio.events", "asyncio.exceptions",
    "asyncio.format_helpers", "asyncio.futures", "asyncio.locks", "asyncio.log",
    "asyncio.mixins", "asyncio.protocols", "asyncio.queues", "asyncio.runners",
    "asyncio.selector_events", "asyncio.sslproto", "asyncio.staggered", "asyncio.streams",
    "asyncio.subprocess", "asyncio.taskgroups", "asyncio.tasks", "asyncio.threads",
    "asyncio.timeouts", "asyncio.transports", "asyncio.trsock", "asyncio.unix_events",
    "base64", "bisect", "collections", "collections.abc", "concurrent",
    "concurrent.futures", "concurrent.futures._base", "concurrent.futures.thread",
    "contextlib", "contextvars", "copy", "copyreg", "dataclasses", "datetime", "dis",
    "enum", "functools", "hashlib", "heapq", "importlib", "inspect", "json", "json.decoder",
    "json.encoder", "json.scanner", "keyword", "linecache", "locale", "logging", "opcode",
    "operator", "orjson", "platform", "queue", "random", "re", "re._casefix",
    "re._compiler", "re._constants", "re._parser", "reprlib", "selectors", "signal",
    "socket", "ssl", "string", "struct", "subprocess", "textwrap", "threading", "token",
    "tokenize", "traceback", "types", "typing", "uuid", "uvloop", "uvloop._noop",
    "uvloop._version", "uvloop.includes", "warnings", "weakref")
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


def _others(package_dir: str, own: set[str]) -> list[tuple[str, str, bool]]:
    """(name, source path, is a package) of each of ``OTHERS`` its import would read from
    a source file (``SourceFileLoader``)."""
    from importlib.util import find_spec

    found = []
    for name in OTHERS:
        try:
            spec = find_spec(name)
        except (ImportError, ValueError):
            continue
        if (spec is not None and type(spec.loader) is SourceFileLoader and spec.origin
                and name not in own and not spec.origin.startswith(os.path.join(package_dir, ""))):
            found.append((name, spec.origin, spec.submodule_search_locations is not None))
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
    own = _modules(package_dir)
    for name, path, is_package in own + _others(package_dir, {name for name, _, _ in own}):
        with open(path, "rb") as file:
            stat = os.fstat(file.fileno())
            source = file.read()
        blob = marshal.dumps(compile(source, path, "exec", dont_inherit=True, optimize=0))
        cached = cache_from_source(path)
        if len(index) < len(own):  # the package's own: relative to where it is found
            path, cached = (os.path.relpath(p, package_dir) for p in (path, cached))
        index[name] = (path, is_package, stat.st_mtime_ns, stat.st_size, cached, offset,
                       len(blob))
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
        _imp._fix_co_filename(code, self.path)  # type: ignore[attr-defined]  # as importlib does
        return code


class BundleFinder:
    """Finds a bundled module (tay's own or one of ``OTHERS``) while its source is unchanged."""

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
        source, is_package, mtime_ns, size, cached, offset, length = entry
        relocated = source.startswith(os.sep)  # not the package's own (``OTHERS``)
        if not relocated:  # the package's own: relative to where it is found
            source, cached = self.prefix + source, self.prefix + cached
        try:
            stat = os.stat(source)
        except OSError:
            return None
        if stat.st_mtime_ns != mtime_ns or stat.st_size != size:
            return None
        if relocated and not self._found_first(name, source, is_package, path):
            return None
        spec = ModuleSpec(name, BundleLoader(name, source, self, offset, length),
                          origin=source, is_package=is_package)
        spec.has_location = True
        spec.cached = cached  # what the path finder computes
        if is_package:
            spec.submodule_search_locations = [os.path.dirname(source)]
        return spec

    @staticmethod
    def _found_first(name: str, source: str, is_package: bool, path: Any) -> bool:
        """Whether the path finder would import ``name`` from ``source``: a submodule if
        its package's ``__path__`` is the bundled source's directory, a top-level module if
        no ``sys.path`` entry before its own has a module of that name (each entry's
        finder, as the import system cached it, is asked; an entry it has not looked at
        yet: no)."""
        home = os.path.dirname(source)  # the directory the path finder looks in
        if is_package:
            home = os.path.dirname(home)
        if "." in name:  # the first entry of its package's __path__ with it: the bundled one
            return path is not None and len(path) > 0 and path[0] == home
        cache = sys.path_importer_cache
        for entry in sys.path:
            if entry == home:
                return True
            key = entry or os.getcwd()
            if key not in cache:  # not looked at yet: the path finder decides
                return False
            finder = cache[key]  # None: nothing importable there
            find = getattr(finder, "find_spec", None)  # a legacy finder has none: by path
            if finder is not None and (find is None or find(name) is not None):
                return False
        return False

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
