"""The pending-holder overlay: forwarded prefixes count as held until their deadline."""

from __future__ import annotations

import numpy as np
import pytest

from kvcompass.errors import InvalidInputError
from kvcompass.router import PendingHolders
from kvcompass.types import Tier

LENGTHS = np.array([128, 256, 512], dtype=np.int64)
KEYS = np.array([11, 22, 33], dtype=np.uint64)


def _view(n: int = 4) -> tuple[np.ndarray, np.ndarray]:
    return np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.uint8)


def test_forwarded_prefix__raises_the_targets_match_as_vram_until_the_deadline() -> None:
    ov = PendingHolders(4)
    ov.hold(LENGTHS, KEYS, worker=2, until_ms=100.0)
    m0, t0 = _view()
    m, t, raised = ov.overlay(KEYS[:2], m0, t0, now_ms=50.0)  # a prompt sharing 256 tokens
    assert raised == 1 and m.tolist() == [0, 0, 256, 0] and t[2] == int(Tier.VRAM)
    assert m0.tolist() == [0, 0, 0, 0]  # the view's arrays are not written
    m, _, raised = ov.overlay(KEYS, m0, t0, now_ms=100.0)
    assert raised == 0 and m.tolist() == [0, 0, 0, 0] and len(ov) == 0


def test_a_longer_view_match__is_kept() -> None:
    ov = PendingHolders(4)
    ov.hold(LENGTHS[:1], KEYS[:1], worker=1, until_ms=100.0)
    m0, t0 = _view()
    m0[1], t0[1] = 512, int(Tier.DRAM)
    m, t, raised = ov.overlay(KEYS, m0, t0, now_ms=0.0)
    assert raised == 0 and m[1] == 512 and t[1] == int(Tier.DRAM)


def test_a_later_deadline__extends_and_an_earlier_one_never_shrinks() -> None:
    ov = PendingHolders(4)
    ov.hold(LENGTHS, KEYS, worker=0, until_ms=100.0)
    ov.hold(LENGTHS, KEYS, worker=0, until_ms=300.0)  # the response: real finish + path
    ov.hold(LENGTHS, KEYS, worker=0, until_ms=50.0)
    m0, t0 = _view()
    assert ov.overlay(KEYS, m0, t0, now_ms=299.0)[0][0] == 512
    assert ov.overlay(KEYS, m0, t0, now_ms=300.0)[2] == 0


def test_two_targets__each_gets_its_own_length() -> None:
    ov = PendingHolders(4)
    ov.hold(LENGTHS[:1], KEYS[:1], worker=0, until_ms=100.0)
    ov.hold(LENGTHS, KEYS, worker=3, until_ms=100.0)
    m, _, raised = ov.overlay(KEYS, *_view(), now_ms=0.0)
    assert raised == 2 and m.tolist() == [128, 0, 0, 512]


def test_bad_worker_or_shapes__rejected() -> None:
    ov = PendingHolders(2)
    with pytest.raises(InvalidInputError, match="worker"):
        ov.hold(LENGTHS, KEYS, worker=2, until_ms=1.0)
    with pytest.raises(InvalidInputError, match="shape"):
        ov.hold(LENGTHS[:2], KEYS, worker=0, until_ms=1.0)
