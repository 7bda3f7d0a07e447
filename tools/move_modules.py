"""Move modules of the package and rewrite every import of them: `python tools/move_modules.py OLD=NEW ...`.

OLD and NEW are dotted module names (`symnet._src.errors=symnet._src.base.errors`; a package moves with
everything under it). The files move with `git mv`; then every relative import in `symnet/` is resolved
against its file's old place and written again, relative, from its new place, and every absolute mention of a
moved module (`symnet._src.errors`, also in strings, docs and notebooks) is renamed. Run `make check` after.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEXT_SUFFIXES = {".py", ".pyi", ".md", ".toml", ".ipynb", ".cfg", ".yml", ".txt", ".sh"}
TEXT_FOLDERS = ("symnet", "tests", "benchmarks", "docs", "notebooks", "tools", "examples")


def module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def path_of(module: str) -> Path:
    base = ROOT.joinpath(*module.split("."))
    return base if base.is_dir() else base.with_suffix(".py")


def renamed(module: str, moves: dict[str, str]) -> str:
    for old, new in moves.items():
        if module == old or module.startswith(old + "."):
            return new + module[len(old) :]
    return module


def relative(target: str, package: str) -> str:
    """`target` written relative to `package` (the package a module's relative imports start from)."""
    t, p = target.split("."), package.split(".")
    common = 0
    while common < min(len(t), len(p)) and t[common] == p[common]:
        common += 1
    dots = "." * (len(p) - common + 1)
    return dots + ".".join(t[common:])


def rewrite_relative_imports(path: Path, old_module: str, new_module: str, moves: dict[str, str]) -> None:
    text = path.read_text(encoding="utf-8")
    is_package = path.name == "__init__.py"
    old_package = old_module if is_package else old_module.rpartition(".")[0]
    new_package = new_module if is_package else new_module.rpartition(".")[0]
    lines = text.split("\n")
    changed = False
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, ast.ImportFrom) or node.level == 0:
            continue
        base = old_package.split(".")
        base = base[: len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
        new_target = renamed(target, moves)
        names = [a.name for a in node.names]
        if node.module is None and any(renamed(f"{target}.{n}", moves) != f"{new_target}.{n}" for n in names):
            raise SystemExit(f"{path}:{node.lineno}: `from . import` of a moved module: rewrite it by hand")
        written = relative(new_target, new_package)
        if node.module is None:
            written = relative(new_target, new_package) if new_target != new_package else "."
        line = lines[node.lineno - 1]
        old_prefix = re.match(r"(\s*from\s+)(\.+[\w.]*)(\s+import\b)", line)
        if old_prefix is None:
            raise SystemExit(f"{path}:{node.lineno}: cannot find the import's `from` in {line!r}")
        if old_prefix.group(2) != written:
            lines[node.lineno - 1] = line[: old_prefix.start(2)] + written + line[old_prefix.end(2) :]
            changed = True
    if changed:
        path.write_text("\n".join(lines), encoding="utf-8")


def main(argv: list[str]) -> int:
    moves = dict(arg.split("=", 1) for arg in argv)
    files = sorted((ROOT / "symnet").rglob("*.py"))
    where = {path: module_of(path) for path in files}
    for old, new in moves.items():
        source = path_of(old)
        destination = ROOT.joinpath(*new.split("."))
        destination = destination if source.is_dir() else destination.with_suffix(".py")
        if destination.exists():
            raise SystemExit(f"{destination} exists")
        destination.parent.mkdir(parents=True, exist_ok=True)
        init = destination.parent / "__init__.py"
        if not init.exists():
            raise SystemExit(f"{init} is missing: write the package's __init__.py (its docstring says what it holds)")
        subprocess.run(["git", "mv", str(source), str(destination)], cwd=ROOT, check=True)
    for path, old_module in where.items():
        new_module = renamed(old_module, moves)
        new_path = path_of(new_module) if not path.name == "__init__.py" else path_of(new_module) / "__init__.py"
        if new_path.is_dir():
            new_path = new_path / "__init__.py"
        rewrite_relative_imports(new_path, old_module, new_module, moves)
    pattern = re.compile("|".join(re.escape(old) + r"(?=[.:\s`'\")\],]|$)" for old in sorted(moves, key=len, reverse=True)))
    slash = {old.replace(".", "/"): new.replace(".", "/") for old, new in moves.items()}
    for folder in TEXT_FOLDERS:
        for path in (ROOT / folder).rglob("*"):
            if not path.is_file() or path.suffix not in TEXT_SUFFIXES or ".venv" in path.parts:
                continue
            text = path.read_text(encoding="utf-8")
            new = pattern.sub(lambda m: moves[m.group(0)], text)
            for old, new_path in slash.items():
                new = re.sub(re.escape(old) + r"(?=(\.py|/)[^\w])", new_path, new)
            if new != text:
                path.write_text(new, encoding="utf-8")
    for extra in (ROOT / "pyproject.toml", ROOT / "Makefile", ROOT / "README.md", ROOT / "mkdocs.yml"):
        text = extra.read_text(encoding="utf-8")
        new = pattern.sub(lambda m: moves[m.group(0)], text)
        if new != text:
            extra.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
