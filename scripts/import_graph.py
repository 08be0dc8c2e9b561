"""pylmq's package import graph and its cycles: `python3 scripts/import_graph.py [REPO]`.

Stdlib only, so it runs on any checkout without installing anything. Every import counts, also
those inside functions (marked [lazy]) and under `if TYPE_CHECKING:` (marked [typing]): a cycle
through a lazy or typing-only import is still a cycle in the design, and import-linter (make lint)
counts them the same way. An edge is a top-level package of pylmq (core, store, ...; a top-level
module such as errors counts as its own package) importing another.
"""

from __future__ import annotations

import ast
import collections
import pathlib
import sys


def package_of(module: str) -> str:
    """pylmq.core.queue -> core; pylmq.errors -> errors; pylmq -> __init__."""
    return ([*module.split("."), "__init__"])[1]


def is_module(root: pathlib.Path, name: str) -> bool:
    path = root.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def import_kinds(tree: ast.Module) -> dict[ast.AST, str]:
    kinds: dict[ast.AST, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            kinds.update({sub: "typing" for stmt in node.body for sub in ast.walk(stmt)})
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            kinds.update({sub: "lazy" for stmt in node.body for sub in ast.walk(stmt) if sub not in kinds})
    return kinds


def edges(root: pathlib.Path) -> dict[tuple[str, str], set[str]]:
    """(importing package, imported package) -> {"file:line module [kind]"}."""
    found: dict[tuple[str, str], set[str]] = collections.defaultdict(set)
    for path in sorted(root.joinpath("pylmq").rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_init = parts[-1] == "__init__"
        me = ".".join(parts[:-1] if is_init else parts)
        base = me.split(".") if is_init else me.split(".")[:-1]
        tree = ast.parse(path.read_text(), str(path))
        kinds = import_kinds(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    module = ".".join([*base[: len(base) - node.level + 1], node.module or ""]).strip(".")
                else:
                    module = node.module or ""
                targets = [
                    f"{module}.{alias.name}" if is_module(root, f"{module}.{alias.name}") else module
                    for alias in node.names
                ]
            else:
                continue
            for target in targets:
                if target.split(".")[0] == "pylmq" and package_of(target) != package_of(me):
                    kind = kinds.get(node)
                    where = f"{path.relative_to(root)}:{node.lineno} {target}" + (f" [{kind}]" if kind else "")
                    found[package_of(me), package_of(target)].add(where)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every elementary cycle, each reported once, starting from its smallest member."""
    found: list[list[str]] = []

    def walk(start: str, node: str, path: list[str]) -> None:
        for nxt in sorted(graph.get(node, ())):
            if nxt == start:
                found.append([*path, start])
            elif nxt > start and nxt not in path:
                walk(start, nxt, [*path, nxt])

    for start in sorted(graph):
        walk(start, start, [start])
    return found


def main(argv: list[str]) -> int:
    root = pathlib.Path(argv[1] if len(argv) > 1 else ".")
    found = edges(root)
    for (source, target), where in sorted(found.items()):
        print(f"{source} -> {target}: " + "; ".join(sorted(where)))
    graph: dict[str, set[str]] = collections.defaultdict(set)
    for source, target in found:
        graph[source].add(target)
    print("packages:")
    for source in sorted(graph):
        print(f"  {source} -> {', '.join(sorted(graph[source]))}")
    loops = cycles(graph)
    print(f"cycles: {len(loops)}")
    for loop in loops:
        print("  " + " -> ".join(loop))
    return 1 if loops else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
