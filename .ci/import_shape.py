"""The import rules that the import contracts (`lint-imports`) do not cover, checked on hostapp/:

1. No import loop: a module that queues a Celery task does it by the task's name
   (`current_app.send_task`), so that the tasks may import it.
2. Imports of the project's own modules sit at the top of a file. The exception: inside
   `AppConfig.ready()` (models load after the app configs).

Prints every breach and exits 1 if there is one. Run from the repository root:
`python .ci/import_shape.py`.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "hostapp"


def loops(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected sets of modules (Tarjan's algorithm), those of two or more."""
    modules = sorted(graph.modules)
    edges = {m: sorted(set(graph.find_modules_directly_imported_by(m)) & set(modules)) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))
    for module in modules:
        if module not in index:
            visit(module)
    return found


def late_imports(path: Path) -> list[str]:
    """Imports of the project's modules inside functions, but the allowed ones."""
    text = path.read_text()
    lines = text.splitlines()
    tree = ast.parse(text)
    breaches = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for inner in ast.walk(node):
            own = (isinstance(inner, ast.ImportFrom) and (inner.level or (inner.module or "").startswith(PACKAGE))) or (
                isinstance(inner, ast.Import) and any(a.name.startswith(PACKAGE) for a in inner.names)
            )
            if not own:
                continue
            line = lines[inner.lineno - 1]
            if node.name == "ready":
                continue
            breaches.append(f"{path.relative_to(ROOT)}:{inner.lineno}: an import inside {node.name}(): {line.strip()}")
    return breaches


def main() -> int:
    sys.path.insert(0, str(ROOT))
    problems = []
    for component in loops(grimp.build_graph(PACKAGE, cache_dir=None)):
        problems.append(f"an import loop of {len(component)} modules: {', '.join(component)}")
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        if "migrations" not in path.parts:
            problems.extend(late_imports(path))
    for problem in problems:
        print(problem)
    print(f"import shape: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
