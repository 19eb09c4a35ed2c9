"""PatchBatch: image count and wire-size accounting."""

from __future__ import annotations

import numpy as np

from kvcompass.ludo import LudoParams, LudoTable, PatchBatch


def test_empty__has_no_images() -> None:
    p = LudoParams.for_capacity(10, rng=np.random.default_rng(0))
    b = PatchBatch.empty(p)
    assert len(b) == 0 and b.wire_bytes() == 0
    assert b.bucket_values.shape == (0, 4) and b.bucket_fps.shape == (0, 4)


def test_wire_bytes__follows_documented_formula() -> None:
    for value_bits, fp_bits in ((32, 0), (32, 8), (64, 16)):
        t = LudoTable(100, value_bits=value_bits, fp_bits=fp_bits, seed=1)
        b = t.full_image()
        per_bucket = 5 + 4 * value_bits // 8 + 4 * fp_bits // 8
        nb, nw = t.params.n_buckets, t.params.n_locator_words
        assert len(b) == nb + nw + 2
        assert b.wire_bytes() == 80 + per_bucket * nb + 12 * nw + 8


def test_update_batch__counts_touched_images_only() -> None:
    t = LudoTable(1000, seed=1)
    b = t.update(np.array([5], np.uint64), np.zeros(1, np.uint64), np.ones(1, np.uint64))
    assert b.bucket_ids.shape[0] == 1
    assert len(b) == 1 + b.word_ids.shape[0]
    assert b.wire_bytes() == 25 + 12 * b.word_ids.shape[0]
