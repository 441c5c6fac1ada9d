"""tay.sdk has no import cycles, counting imports made only for type checking and imports
inside functions: each module can be read, and changed, without the ones above it."""

from __future__ import annotations

import ast
from pathlib import Path

SDK = Path(__file__).resolve().parents[2] / "tay" / "sdk"


def module_name(path: Path) -> str:
    return "tay.sdk" if path.name == "__init__.py" else f"tay.sdk.{path.stem}"


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The tay.sdk modules ``path`` imports; ``from tay.sdk import x`` counts as the package."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom) and node.module in modules:
            found.add(node.module)
    found.discard(module_name(path))
    return found


def sdk_graph() -> dict[str, set[str]]:
    paths = sorted(SDK.glob("*.py"))
    modules = {module_name(path) for path in paths}
    return {module_name(path): imports_of(path, modules) for path in paths}


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


def test_the_checker_sees_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_tay_sdk_has_no_import_cycle():
    graph = sdk_graph()
    assert "tay.sdk.client" in graph["tay.sdk"]  # the package re-exports its modules
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])
