"""The tree is the architecture (docs/architecture.md, STYLE.md 1, 4, 16): walk every module with
``ast`` and check, by full module path, who may import whom, where Faust lives, and module sizes.

Rules:
* each package imports only the packages of its row below (a sibling shell never imports
  another: what two shells share lives in ``wire`` or the core);
* nothing imports the ``cli`` package (it is the top of the tree) except its own modules and the
  tests;
* exactly one module imports Faust (``pipeline/agents.py``);
* no module of the project is over 500 lines.

Imports are read anywhere in a module (inside functions too) and by their full dotted path, so
``kvcompass.cli.x`` would not pass as ``kvcompass``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("kvcompass", "wire", "pipeline", "edge", "workers", "sim", "e2e", "cli", "bench")
PROJECT = {*PACKAGES, "tests"}
EVERYTHING_BUT_CLI = {"kvcompass", "wire", "pipeline", "edge", "workers", "sim", "e2e"}
ALLOWED: dict[str, set[str]] = {
    "kvcompass": {"kvcompass"},
    "wire": {"kvcompass", "wire"},
    "pipeline": {"kvcompass", "wire", "pipeline"},
    "edge": {"kvcompass", "wire", "edge"},
    "workers": {"kvcompass", "wire", "workers"},
    "sim": {"kvcompass", "sim"},
    "e2e": EVERYTHING_BUT_CLI | {"e2e"},
    "bench": EVERYTHING_BUT_CLI | {"bench", "tests"},  # a bench may time a slow twin
    "cli": EVERYTHING_BUT_CLI | {"cli"},
}
"""Package -> project packages it may import (full module paths are matched by prefix)."""
MAX_LINES = 500
FAUST_HOME = "pipeline/agents.py"


def imported_modules(path: Path) -> set[str]:
    """Every absolute module ``path`` imports (``from a.b import c`` gives ``a.b``), anywhere."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module)
    return out


def project_imports(path: Path) -> set[str]:
    """The project modules ``path`` imports, by full dotted path."""
    return {m for m in imported_modules(path) if m.split(".")[0] in PROJECT}


def _allowed(importer_pkg: str, module: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in ALLOWED[importer_pkg])


def _modules(package: str) -> list[Path]:
    return sorted(p for p in (ROOT / package).rglob("*.py") if "__pycache__" not in p.parts)


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_what_its_row_allows__every_module(package: str) -> None:
    modules = _modules(package)
    assert modules, f"no modules under {package}/"
    bad = {
        str(p.relative_to(ROOT)): sorted(m for m in project_imports(p) if not _allowed(package, m))
        for p in modules
    }
    bad = {k: v for k, v in bad.items() if v}
    assert not bad, f"{package}/ imports what docs/architecture.md does not allow: {bad}"


def test_nothing_imports_the_cli__every_module_outside_cli_and_tests() -> None:
    bad = {
        str(p.relative_to(ROOT)): sorted(m for m in project_imports(p) if m.split(".")[0] == "cli")
        for pkg in PACKAGES
        if pkg != "cli"
        for p in _modules(pkg)
    }
    bad = {k: v for k, v in bad.items() if v}
    assert not bad, f"the cli package is the top of the tree; imported by {bad}"


def test_one_module_imports_faust__the_pipeline_agents() -> None:
    users = sorted(
        str(p.relative_to(ROOT))
        for pkg in PACKAGES
        for p in _modules(pkg)
        if any(m.split(".")[0] == "faust" for m in imported_modules(p))
    )
    assert users == [FAUST_HOME]


def test_no_module_over_500_lines__every_python_file() -> None:
    files = [p for pkg in (*PACKAGES, "tests") for p in _modules(pkg)]
    long = {
        str(p.relative_to(ROOT)): n
        for p in files
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines (split them by idea): {long}"


def test_layering_check_catches_a_sibling_import__synthetic_module(tmp_path: Path) -> None:
    p = tmp_path / "m.py"
    p.write_text("def f() -> None:\n    from workers.sidecar import run_sidecar\n")
    assert [m for m in project_imports(p) if not _allowed("edge", m)] == ["workers.sidecar"]


def test_layering_check_reads_full_paths__a_cli_module_under_the_core(tmp_path: Path) -> None:
    p = tmp_path / "m.py"
    p.write_text("import cli.main\nfrom kvcompass.cli import demo\n")
    assert project_imports(p) == {"cli.main", "kvcompass.cli"}
    assert not _allowed("wire", "cli.main")
