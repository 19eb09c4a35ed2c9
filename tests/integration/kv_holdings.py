"""The index a consumer of ``kv-events`` would build from decoded records: key -> tier.

Shared by the bridge tests and the engines' conformance tests, which both check what reached
``kv-events`` this way.
"""

from __future__ import annotations

from typing import Any


def holdings(records: list[dict[str, Any]]) -> dict[int, str]:
    """Replay ``records`` in order: CLEARED empties, REMOVED drops its keys, others set the tier."""
    held: dict[int, str] = {}
    for r in records:
        if r["op"] == "CLEARED":
            held.clear()
        for k in r["registration_keys"] or []:
            if r["op"] == "REMOVED":
                held.pop(k, None)
            else:
                held[k] = r["tier"]
    return held
