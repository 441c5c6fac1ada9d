"""The package's layers import in one direction and no module takes part in an import
cycle, counting every import: at module level, inside functions (the lazy ones the start-up
path relies on) and those made only for type checking. So each module can be read, and
changed, without the ones above it.

The layers, lowest first: what every layer may use (``_frozen``, the version, the failures,
the socket's discovery rules), the C glue, storage, the engine, the protocol codecs, the
server, and then the fronts: the SDK (and the package root, its public face), the command
lines, the dashboard, the benchmarks. ``tay.server.cli`` is ``tay serve``'s command line:
a front that picks what the server runs with (the dashboard among it), so nothing else in
``tay.server`` may import it."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "tay"

LAYERS = (
    ("foundation", ("tay._frozen", "tay._version", "tay.failures", "tay.socket_discovery")),
    ("native", ("tay._native",)),
    ("storage", ("tay.storage",)),
    ("engine", ("tay.engine",)),
    ("protocol", ("tay.protocol",)),
    ("server", ("tay.server",)),
    ("fronts", ("tay", "tay.__main__", "tay._bundle", "tay.sdk", "tay.errors", "tay.worker",
                "tay.testing", "tay.dashboard", "tay.admin", "tay.bench", "tay.cli",
                "tay.cli_fast", "tay.cli_help", "tay.server.cli")),
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(name: str, path: Path, modules: set[str]) -> set[str]:
    """The package's modules that ``path`` imports anywhere in it; ``from p import x`` counts
    the submodule ``p.x`` when there is one, else the module ``p``; a ``LazyModule("p")``
    (tay._frozen: imported at its first use) counts ``p``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "LazyModule":
            found.update(arg.value for arg in node.args[:1]
                         if isinstance(arg, ast.Constant) and arg.value in modules)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source not in modules:
                continue
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                found.add(submodule if submodule in modules else source)
    found.discard(name)
    return found


@functools.cache  # read once for every test here; none changes it
def package_graph() -> dict[str, set[str]]:
    paths = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}
    modules = set(paths)
    return {name: imports_of(name, path, modules) for name, path in paths.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == "open":
                return stack[stack.index(target):] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def layer_of(module: str) -> int | None:
    """The layer of the longest name in ``LAYERS`` that is ``module`` or a package of it
    (the root ``tay`` only by its own name)."""
    best, best_length = None, -1
    for rank, (_, names) in enumerate(LAYERS):
        for name in names:
            covers = module == name or (name != "tay" and module.startswith(name + "."))
            if covers and len(name) > best_length:
                best, best_length = rank, len(name)
    return best


def upward_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    return sorted((module, target) for module, targets in graph.items() for target in targets
                  if layer_of(target) > layer_of(module))


def test_the_checkers_see_a_cycle_and_an_upward_import():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert upward_imports({"tay.storage.x": {"tay.engine.y"}, "tay.engine.y": set()}) == [
        ("tay.storage.x", "tay.engine.y")]
    assert upward_imports({"tay.server.app": {"tay.server.cli"}, "tay.server.cli": set()})
    assert not upward_imports({"tay.server.cli": {"tay.dashboard"}, "tay.dashboard": set()})


def test_the_graph_counts_lazy_and_type_checking_imports():
    graph = package_graph()
    assert "tay.sdk.client" in graph["tay.sdk"]  # the package re-exports its modules
    # Listener.start imports the connection inside the function; the driver only for types
    assert {"tay.server.uds.connection", "tay.server.driver"} <= graph["tay.server.uds.listener"]
    assert "tay._native" in graph["tay.server.uds.socket_path"]  # from tay import _native


def test_a_lazy_module_counts_as_an_import(tmp_path: Path):
    source = tmp_path / "lazy.py"
    source.write_text('from tay._frozen import LazyModule\n'
                      'core = LazyModule("tay.engine.core")\n')
    assert imports_of("tay.lazy", source, set(package_graph())) == {
        "tay._frozen", "tay.engine.core"}


def test_every_module_has_a_layer():
    assert [module for module in package_graph() if layer_of(module) is None] == []


@pytest.mark.parametrize("layer", [name for name, _ in LAYERS])
def test_no_layer_imports_one_above_it(layer: str):
    graph = package_graph()
    rank = [name for name, _ in LAYERS].index(layer)
    assert [pair for pair in upward_imports(graph) if layer_of(pair[0]) == rank] == []


def test_the_package_has_no_import_cycle():
    cycle = find_cycle(package_graph())
    assert cycle is None, " -> ".join(cycle or [])
