"""Sibling shells do not import each other (DESIGN.md §2, STYLE.md 16): walk every module with
``ast`` and fail on an import of a package its row of the table does not allow.

What two shells share (the producer port, the toy tokenizer, the load-report estimate) lives below
both, in ``pipeline/`` or the core, so ``edge/`` never reaches into ``workers/`` nor the reverse.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROJECT = {"kvcompass", "pipeline", "edge", "workers", "sim", "e2e", "bench", "tests"}
ALLOWED = {
    "pipeline": {"kvcompass", "pipeline"},
    "edge": {"kvcompass", "pipeline", "edge"},
    "workers": {"kvcompass", "pipeline", "workers"},
    "sim": {"kvcompass", "sim"},
}


def project_imports(path: Path) -> set[str]:
    """The project packages ``path`` imports (absolute imports, anywhere in the module)."""
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            roots.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots & PROJECT


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_what_design_allows__every_module(package: str) -> None:
    modules = sorted((ROOT / package).rglob("*.py"))
    assert modules, f"no modules under {package}/"
    bad = {str(p.relative_to(ROOT)): sorted(project_imports(p) - ALLOWED[package]) for p in modules}
    bad = {k: v for k, v in bad.items() if v}
    assert not bad, f"{package}/ imports packages DESIGN.md §2 does not allow: {bad}"


def test_layering_check_catches_a_sibling_import__synthetic_module(tmp_path: Path) -> None:
    p = tmp_path / "m.py"
    p.write_text("def f() -> None:\n    from workers.sidecar import run_sidecar\n")
    assert project_imports(p) - ALLOWED["edge"] == {"workers"}
