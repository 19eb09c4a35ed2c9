"""The core stays pure (STYLE §1): walk every module of kvcompass/ with ``ast`` and fail on any
import outside the standard library's pure modules, numpy, numba and mmh3.

No module is exempt (the CLI is the top-level ``cli`` package, view files are ``wire``'s).
``importlib`` and ``tomllib`` serve the built-in deployments, the core's own package data.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[3] / "kvcompass"
ALLOWED_ROOTS = {
    "__future__", "abc", "bisect", "collections", "dataclasses", "enum", "functools", "heapq",
    "importlib", "itertools", "math", "numbers", "operator", "struct", "tomllib", "typing",
    "json", "re", "statistics", "string", "textwrap", "types", "warnings",
    "numpy", "numba", "mmh3", "kvcompass",
}  # fmt: skip


def _core_modules() -> list[Path]:
    return sorted(CORE.rglob("*.py"))


def _imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_core_imports_only_pure_modules__every_core_module() -> None:
    modules = _core_modules()
    assert modules, "no core modules found"
    bad = {str(p.relative_to(CORE)): sorted(_imported_roots(p) - ALLOWED_ROOTS) for p in modules}
    bad = {k: v for k, v in bad.items() if v}
    assert not bad, f"impure imports in the core: {bad}"


@pytest.mark.parametrize(
    "name", ["os", "time", "random", "logging", "asyncio", "socket", "pathlib", "mmap"]
)
def test_purity_check_catches_impure_import__synthetic_module(tmp_path: Path, name: str) -> None:
    p = tmp_path / "m.py"
    p.write_text(f"import {name}\n")
    assert name in _imported_roots(p) - ALLOWED_ROOTS
