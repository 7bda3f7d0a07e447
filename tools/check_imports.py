"""The import contract: symnet's modules import only downward, and no module imports itself back.

Every `import` in the package counts, inside functions too; only imports under
`if TYPE_CHECKING:` (never executed) are left out. The layers, lowest first:

    base (errors, atomic, safe_read, bounded, host_memory, paths, moved, text, exports, levenshtein)
        ->  kaldi_io  ->  core  ->  engine  ->  network
        ->  components, layers | chain  ->  kaldi | train | datasets | features
        ->  decode | corpora | display | saving | exporting | compute_table  ->  loading
        ->  app (cli, demo), the public modules (the package itself, symnet.kaldi, symnet.train, ...)

(each a module or package of `symnet._src`, the implementation; `kaldi_io` is Kaldi's and OpenFst's file
formats, bytes to arrays, which every layer above may read; the public
modules re-export its names and nothing in `symnet._src` imports them).

A module may import modules of its own layer or lower ones, never higher;
`kaldi`, `train` and `datasets` share a layer but do not import each other,
nor do `decode`, `corpora`, `display`, `saving`, `exporting` and `compute_table` (nnet3-compute over Kaldi
tables, which joins `kaldi` and `train`'s table readers), nor `components` and `chain` (the LF-MMI objective,
which `train` and `kaldi` may use). `loading` (any network file: Kaldi's and symnet's) joins `kaldi`
and `saving`.
There is no cycle at all, counting every import (modules of one layer
included). Run `python tools/check_imports.py`; it prints each violation
and exits 1 if there is one.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "symnet"

#: Module-name prefix -> (layer rank, group). Longest prefix wins.
LAYERS: dict[str, tuple[int, str]] = {
    "symnet._src.base": (0, "base"),
    "symnet._src.kaldi_io": (1, "kaldi_io"),
    "symnet._src.core": (2, "core"),
    "symnet._src.engine": (3, "engine"),
    "symnet._src.network": (4, "network"),
    "symnet._src.components": (5, "components"),
    "symnet._src.layers": (5, "components"),
    "symnet._src.chain": (5, "chain"),
    "symnet._src.kaldi": (6, "kaldi"),
    "symnet._src.train": (6, "train"),
    "symnet._src.datasets": (6, "datasets"),
    "symnet._src.features": (6, "features"),
    "symnet._src.decode": (7, "decode"),
    "symnet._src.corpora": (7, "corpora"),
    "symnet._src.display": (7, "display"),
    "symnet._src.saving": (7, "saving"),
    "symnet._src.exporting": (7, "exporting"),
    "symnet._src.compute_table": (7, "compute_table"),
    "symnet._src.loading": (8, "loading"),
    "symnet._src.app": (9, "app"),
    "symnet.__main__": (9, "app"),
    "symnet": (9, "app"),
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def layer_of(module: str) -> tuple[int, str]:
    best = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return LAYERS[best]


def _type_checking_block(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(path: Path, modules: set[str]) -> set[tuple[str, int]]:
    """(imported symnet module, line) for every executed import in the file."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text(), str(path))
    found: set[tuple[str, int]] = set()
    skip: set[int] = set()
    for node in ast.walk(tree):
        if _type_checking_block(node):
            skip.update(id(n) for n in ast.walk(node))
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            targets = [
                f"{prefix}.{alias.name}" if f"{prefix}.{alias.name}" in modules else prefix for alias in node.names
            ]
        else:
            continue
        for target in targets:
            if target == "symnet" or target.startswith("symnet."):
                while target not in modules and "." in target:
                    target = target.rsplit(".", 1)[0]
                if target != name:
                    found.add((target, node.lineno))
    return found


def main() -> int:
    files = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(f) for f in files}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    problems: list[str] = []
    for f in files:
        source = module_name(f)
        rank, group = layer_of(source)
        for target, line in sorted(imports_of(f, modules)):
            graph[source].add(target)
            # a package's __init__ is imported by Python before its modules: only count real imports
            t_rank, t_group = layer_of(target)
            where = f"{f.relative_to(ROOT)}:{line}"
            if t_rank > rank:
                problems.append(f"{where}: {source} (layer {group}) imports {target} (higher layer {t_group})")
            elif t_rank == rank and t_group != group:
                problems.append(f"{where}: {source} ({group}) imports {target} ({t_group}), a sibling layer")
    problems += [f"import cycle: {' -> '.join(c + c[:1])}" for c in cycles(graph)]
    for p in problems:
        print(p)
    if not problems:
        print(f"import contract holds: {len(modules)} modules, no upward import, no cycle")
    return 1 if problems else 0


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        m = stack.pop()
                        on.discard(m)
                        group.append(m)
                        if m == node:
                            break
                    if len(group) > 1:
                        out.append(sorted(group))
            elif nxt not in index:
                index[nxt] = low[nxt] = len(index)
                stack.append(nxt)
                on.add(nxt)
                work.append((nxt, iter(sorted(graph[nxt]))))
            elif nxt in on:
                low[node] = min(low[node], index[nxt])
    return out


if __name__ == "__main__":
    sys.exit(main())
