"""Both shells only wire events to the one decider (issue 25): walk them with ``ast``.

A shell that calls the router, the queue view, the overlay or the ledger itself composes its own
decision path, and then the simulator measures something the edge does not run. Each module
here may construct and call a ``kvcompass.decider.Decider`` only.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN_NAMES = {"Router", "QueueView", "PendingHolders", "ForwardLedger", "RegionBooking"}
FORBIDDEN_METHODS = {"choose", "choose_in_region", "on_forward", "on_broadcast"}
FORBIDDEN_ATTRS = {"router", "queue_view", "ledger", "overlay", "booking"}
"""The decider's parts: reaching into them bypasses it."""


def direct_uses(path: Path) -> list[str]:
    """Every place ``path`` calls a decision part directly (``line: what``)."""
    out: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id in FORBIDDEN_NAMES:
                out.append(f"{node.lineno}: {f.id}(")
            elif isinstance(f, ast.Attribute):
                if f.attr in FORBIDDEN_METHODS:
                    out.append(f"{node.lineno}: .{f.attr}(")
                elif isinstance(f.value, ast.Name) and f.value.id in FORBIDDEN_NAMES:
                    out.append(f"{node.lineno}: {f.value.id}.{f.attr}(")
        elif isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_ATTRS:
            out.append(f"{node.lineno}: .{node.attr}")
    return out


def test_simulator_wiring__calls_only_the_decider() -> None:
    assert direct_uses(ROOT / "sim/schemes/kvcompass.py") == []


@pytest.mark.parametrize("module", ["edge/service.py", "edge/loads.py", "edge/sync.py"])
def test_edge_wiring__calls_only_the_decider(module: str) -> None:
    assert direct_uses(ROOT / module) == []


def test_wiring_check__catches_each_kind_of_direct_use(tmp_path: Path) -> None:
    p = tmp_path / "m.py"
    p.write_text(
        "r = Router.from_deployment(d, lv, 0)\n"
        "q = QueueView(a, 0, 1, c)\n"
        "d = r.choose(1, m, t, 0.0)\n"
        "e.router.on_forward(d, 0.0)\n"
        "e.svc.on_broadcast(0, [], [], 0.0)\n"
        "x = dec.queue_view\n"
        "dec.decide(1, lk, 10, 0.0)\n"
    )
    assert sorted(direct_uses(p)) == sorted(
        [
            "1: Router.from_deployment(",
            "2: QueueView(",
            "3: .choose(",
            "4: .on_forward(",
            "4: .router",
            "5: .on_broadcast(",
            "6: .queue_view",
        ]
    )
