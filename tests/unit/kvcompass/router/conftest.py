"""A small three-region world for router tests.

Region 0 is the edge's (workers 0-3), region 1 is 80 ms round trip away (workers 4-7), region 2
is 200 ms away (workers 8-9). β = 0.1 ms/token everywhere, so n1 = RTT/β: 800 and 2000 tokens;
same-region matching starts at 128 tokens.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from numpy.typing import NDArray

from kvcompass.router import Router, RouterConfig

WORKER_REGION = np.array([0, 0, 0, 0, 1, 1, 1, 1, 2, 2], dtype=np.int64)
W = WORKER_REGION.shape[0]
BETA = 0.1
RTT = np.array([[0.0, 80.0, 200.0], [80.0, 0.0, 150.0], [200.0, 150.0, 0.0]])
N1 = np.array([[128, 800, 2000], [800, 128, 1500], [2000, 1500, 128]], dtype=np.int64)
PROMPT = 4096

MakeRouter = Callable[..., Router]


def build_router(**overrides: object) -> Router:
    """The test world's router at origin 0, with RouterConfig overrides."""
    return Router(0, WORKER_REGION, np.full(W, BETA), RTT, N1, RouterConfig(**overrides))  # type: ignore[arg-type]


def request(
    matches: dict[int, int] | None = None, dram: tuple[int, ...] = ()
) -> tuple[NDArray[np.int64], NDArray[np.uint8]]:
    """(matched_tokens, tiers) with the given worker→match, VRAM unless listed in ``dram``."""
    matched = np.zeros(W, np.int64)
    tiers = np.zeros(W, np.uint8)
    for w, m in (matches or {}).items():
        matched[w] = m
        tiers[w] = 2 if w in dram else 1
    return matched, tiers


@pytest.fixture
def make_router() -> MakeRouter:
    return build_router
