"""The small three-region deployment of the process-level tests (test_faults, test_demo_smoke):
us ``us`` workers, eu 1, asia 1, the paper testbed's β and WAN, written as a TOML file."""

from __future__ import annotations

from pathlib import Path

SMALL = """
name = "e2e-small-4x3"
block_size_tokens = 16
n_levels = 6
same_region_min_tokens = 128
in_region_one_way_ms = 0.5
wan_one_way_ms = [[0.0, 160.0, 126.0], [160.0, 0.0, 149.0], [126.0, 149.0, 0.0]]
[[regions]]
name = "us"
n_workers = {us}
prefill_ms_per_token = 0.085
[[regions]]
name = "eu"
n_workers = 1
prefill_ms_per_token = 0.085
[[regions]]
name = "asia"
n_workers = 1
prefill_ms_per_token = 0.085
"""


def small_deployment(tmp_path: Path, us: int) -> str:
    """Write the deployment with ``us`` US workers into ``tmp_path``; returns its path."""
    path = tmp_path / "small.toml"
    path.write_text(SMALL.replace("{us}", str(us)), encoding="utf-8")
    return str(path)
