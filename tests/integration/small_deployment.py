"""The small three-region deployment of the process-level tests (test_faults, test_demo_smoke,
test_stop): ``e2e.spec.small_testbed`` (us ``us`` workers, eu 1, asia 1, the paper testbed's β and
WAN), written into the test's directory."""

from __future__ import annotations

from pathlib import Path

from e2e.spec import small_testbed


def small_deployment(tmp_path: Path, us: int) -> str:
    """Write the deployment with ``us`` US workers into ``tmp_path``; returns its path."""
    return str(small_testbed(tmp_path, us))
