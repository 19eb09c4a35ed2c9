"""Tiny Llama (numpy): a prefill that reuses a prefix's KV, whole or page by page, gives the same
logits and KV as a prefill from scratch; the same seed gives the same weights."""

from __future__ import annotations

import numpy as np

from workers.emulated.tiny_llama import TinyLlama, TinyLlamaConfig

CFG = TinyLlamaConfig(dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=64, seed=3)


def test_reused_prefix_gives_scratch_logits__split_anywhere() -> None:
    m = TinyLlama(CFG)
    toks = np.random.default_rng(0).integers(0, 256, 40)
    full, kv = m.forward(toks)
    for cut in (1, 16, 39):
        _, head = m.forward(toks[:cut])
        tail, tail_kv = m.forward(toks[cut:], head)
        np.testing.assert_allclose(tail, full[cut:], rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(tail_kv, kv[:, :, cut:], rtol=1e-4, atol=1e-5)


def test_pages_concatenate_to_prefix_kv__page_size_8() -> None:
    m = TinyLlama(CFG)
    toks = np.arange(32) * 7 % 256
    _, kv = m.forward(toks)
    pages = [kv[:, :, i : i + 8] for i in range(0, 32, 8)]
    logits, _ = m.forward(np.array([5]), np.concatenate(pages[:3], axis=2))
    ref, _ = m.forward(np.concatenate([toks[:24], [5]]))
    np.testing.assert_allclose(logits[-1], ref[-1], rtol=1e-4, atol=1e-4)
    assert np.array_equal(TinyLlama(CFG).embed, m.embed)
