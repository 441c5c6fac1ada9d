"""``tay._bundle``: ``tay serve`` imports tay's modules from one checked bytecode file, and a
module whose source changed after the bundle was written comes from its source."""

from __future__ import annotations

import json
import marshal
import os
import subprocess
import sys
from pathlib import Path

from tay import _bundle

PACKAGE = {
    "__init__.py": "NAME = 'pkg'\n",
    "a.py": "VALUE = 1\n",
    "gone.py": "VALUE = 'gone'\n",
    "sub/__init__.py": "",
    "sub/b.py": "def boom():\n    raise ValueError('from b')\n",
}

# Imports the package with the bundle's finder in place and reports, per module, where its
# code came from and the attributes the path finder would have given it.
PROBE = """
import importlib, importlib.util, json, os, sys, traceback
sys.path.insert(0, {root!r})
from tay import _bundle
finder = _bundle.install({package!r})
report = {{"installed": finder is not None}}
for name in {names!r}:
    try:
        module = importlib.import_module(name)
    except ImportError as error:
        report[name] = type(error).__name__
        continue
    spec = module.__spec__
    report[name] = {{
        "bundled": type(spec.loader) is _bundle.BundleLoader,
        "file": module.__file__, "origin": spec.origin,
        "cached_ok": module.__cached__ == importlib.util.cache_from_source(module.__file__),
        "path": getattr(module, "__path__", None), "package": module.__package__,
        "value": getattr(module, "VALUE", None)}}
import pkg.sub.b
try:
    pkg.sub.b.boom()
except ValueError as error:
    frame = traceback.extract_tb(error.__traceback__)[-1]
    report["traceback"] = [frame.filename, frame.lineno, frame.line]
print(json.dumps(report))
"""


def make_package(root: Path) -> Path:
    package = root / "pkg"
    for relative, text in PACKAGE.items():
        path = package / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return package


def probe(root: Path, package: Path, names: list[str]) -> dict:
    code = PROBE.format(root=str(root), package=str(package), names=names)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=str(root)).stdout
    return json.loads(out)


def test_modules_come_from_the_bundle_as_the_path_finder_would_make_them(tmp_path: Path) -> None:
    package = make_package(tmp_path)
    plain = probe(tmp_path, package, ["pkg", "pkg.a", "pkg.sub", "pkg.sub.b"])
    assert plain["installed"] is False  # no bundle written yet: nothing installed
    _bundle.write(str(package))
    bundled = probe(tmp_path, package, ["pkg", "pkg.a", "pkg.sub", "pkg.sub.b"])
    assert bundled["installed"] is True
    for name in ("pkg", "pkg.a", "pkg.sub", "pkg.sub.b"):
        assert bundled[name]["bundled"] is True, name
        assert plain[name]["bundled"] is False, name
        same = {k: v for k, v in bundled[name].items() if k != "bundled"}
        assert same == {k: v for k, v in plain[name].items() if k != "bundled"}, name
        assert bundled[name]["cached_ok"] is True
    assert bundled["pkg.sub"]["path"] == [str(package / "sub")]
    assert bundled["traceback"] == [str(package / "sub" / "b.py"), 2,
                                    "raise ValueError('from b')"]


def test_a_source_changed_added_or_removed_after_the_bundle_goes_by_its_file(
        tmp_path: Path) -> None:
    package = make_package(tmp_path)
    _bundle.write(str(package))
    a = package / "a.py"
    before = a.stat()
    a.write_text("VALUE = 2\n")  # the same size: only the modification time tells
    os.utime(a, ns=(before.st_atime_ns, before.st_mtime_ns + 1))
    assert a.stat().st_size == before.st_size
    (package / "c.py").write_text("VALUE = 3\n")
    (package / "gone.py").unlink()
    report = probe(tmp_path, package, ["pkg.a", "pkg.c", "pkg.gone", "pkg.sub.b"])
    assert report["pkg.a"]["value"] == 2 and report["pkg.a"]["bundled"] is False
    assert report["pkg.c"]["value"] == 3 and report["pkg.c"]["bundled"] is False
    assert report["pkg.gone"] == "ModuleNotFoundError"
    assert report["pkg.sub.b"]["bundled"] is True  # the unchanged ones still from the bundle


def test_a_bundle_of_another_python_or_format_is_not_installed(tmp_path: Path) -> None:
    package = make_package(tmp_path)
    target = Path(_bundle.write(str(package)))
    data = target.read_bytes()
    length = int.from_bytes(data[4:8], "big")
    form, magic, index = marshal.loads(data[8:8 + length])
    for changed in ((form, b"\x00\x00\r\n", index), (form + 1, magic, index)):
        head = marshal.dumps(changed)
        target.write_bytes(b"TAYB" + len(head).to_bytes(4, "big") + head + data[8 + length:])
        assert probe(tmp_path, package, ["pkg.a"])["installed"] is False
    target.write_bytes(b"XXXX" + data[4:])
    assert probe(tmp_path, package, ["pkg.a"])["installed"] is False
    target.write_bytes(b"not marshal")
    assert probe(tmp_path, package, ["pkg.a"])["installed"] is False
    target.write_bytes(data)
    assert probe(tmp_path, package, ["pkg.a"])["pkg.a"]["bundled"] is True


# A real serve start: at listen, which of tay's modules came from the bundle, and whether
# each has the attributes the path finder gives it.
AT_LISTEN = """
import importlib.util, json, os, socket, sys
def listen(self, *args):
    from tay import _bundle
    bundled, wrong, others = [], [], []
    for name, module in list(sys.modules.items()):
        spec = getattr(module, "__spec__", None)
        if spec is None:
            continue
        if type(spec.loader) is _bundle.BundleLoader:
            (bundled if name.startswith("tay") else others).append(name)
            if (module.__file__ != spec.origin or not os.path.isfile(module.__file__)
                    or module.__cached__ != importlib.util.cache_from_source(module.__file__)):
                wrong.append(name)
    finders = [type(f).__name__ for f in sys.meta_path]
    print(json.dumps({"bundled": sorted(bundled), "wrong": wrong, "finders": finders,
                      "others": sorted(others)}))
    sys.stdout.flush()
    os._exit(0)
socket.socket.listen = listen
from tay.cli import main
main(sys.argv[1:])
"""


def test_a_serve_start_imports_tay_from_the_bundle_and_listens() -> None:
    from tests.scratch import scratch_dir

    _bundle.write()  # as `make venv` and the bench do
    root = scratch_dir("bundle-")
    argv = ["serve", "--data-dir", str(root / "data"), "--socket", str(root / "tay.sock"),
            "--init-if-missing", "--durability", "sync", "--validated-filesystem"]
    for start in ("init", "restart"):
        out = subprocess.run([sys.executable, "-c", AT_LISTEN, *argv], capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, (start, out.stderr)
        report = json.loads(out.stdout.strip().splitlines()[-1])
        assert report["wrong"] == []
        assert {"tay.server.app", "tay.engine.core", "tay.storage.recovery.epoch_recover",
                "tay.server.uds.listener"} <= set(report["bundled"]), start
        assert len(report["bundled"]) >= 100, start
        assert {"asyncio.base_events", "uvloop", "logging", "concurrent.futures"} <= set(
            report["others"]), start
        assert report["finders"][0] == "BundleFinder"


def test_main_takes_its_finder_off_when_it_returns() -> None:
    import pytest

    from tay.cli import main

    _bundle.write()
    before = list(sys.meta_path)
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    assert sys.meta_path == before
    assert not any(isinstance(f, _bundle.BundleFinder) for f in sys.meta_path)


# The standard library's modules in the bundle (``OTHERS``): served only where the path
# finder would find the same file first.
SHADOW = """
import sys
sys.path.insert(0, {root!r})
from tay import _bundle
before = set(sys.modules)
finder = _bundle.install()
report = {{"installed": finder is not None}}
for name in {names!r}:
    try:
        module = __import__(name, fromlist=["_"])
    except ImportError as error:
        report[name] = type(error).__name__
        continue
    report[name] = [type(module.__spec__.loader).__name__, module.__file__,
                    getattr(module, "__cached__", None), getattr(module, "__path__", None)]
report["loaded_before"] = sorted(set({names!r}) & before)
print(repr(report))
"""


def shadow_probe(root: Path, names: list[str]) -> dict:
    import ast

    code = SHADOW.format(root=str(root), names=names)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=str(root)).stdout
    return ast.literal_eval(out.strip().splitlines()[-1])


def test_a_standard_module_comes_from_the_bundle_only_where_its_import_finds_it(
        tmp_path: Path) -> None:
    names = ["base64", "bisect", "json", "json.decoder", "asyncio.events", "uuid"]
    _bundle.write()
    (tmp_path / "plain").mkdir()
    bundled = shadow_probe(tmp_path / "plain", names)
    assert bundled["installed"] is True and bundled["loaded_before"] == []
    assert {name for name in names if bundled[name][0] == "BundleLoader"} == set(names)
    # the same attributes as the path finder gives them: a probe with the bundle unusable
    target = Path(_bundle.bundle_path())
    saved = target.read_bytes()
    try:
        target.write_bytes(b"XXXX" + saved[4:])
        plain = shadow_probe(tmp_path / "plain", names)
    finally:
        target.write_bytes(saved)
    assert plain["installed"] is False
    for name in names:
        assert plain[name][0] == "SourceFileLoader" and plain[name][1:] == bundled[name][1:]
    # a directory before the standard library with its own bisect and json package: those,
    # and json's submodules from that package, as without a bundle
    shadow = tmp_path / "shadow"
    (shadow / "json").mkdir(parents=True)
    (shadow / "bisect.py").write_text("MINE = True\n")
    (shadow / "json" / "__init__.py").write_text("MINE = True\n")
    shadowed = shadow_probe(shadow, names)
    assert shadowed["bisect"][:2] == ["SourceFileLoader", str(shadow / "bisect.py")]
    assert shadowed["json"][:2] == ["SourceFileLoader", str(shadow / "json" / "__init__.py")]
    assert shadowed["json.decoder"] == "ModuleNotFoundError"
    for name in ("base64", "asyncio.events", "uuid"):
        assert shadowed[name] == bundled[name]
