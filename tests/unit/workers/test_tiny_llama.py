"""Tiny Llama (torch, CPU): a prefill that reuses a prefix's KV, whole or page by page, gives the
same logits and KV as a prefill from scratch; the same seed gives the same weights; pages and
tier copies own their storage; the wire bytes round-trip; a bad config is refused."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from kvcompass.errors import ConfigError
from workers.emulated.tiny_llama import TinyLlama, TinyLlamaConfig

CFG = TinyLlamaConfig(dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=64, seed=3)


def test_reused_prefix_gives_scratch_logits__split_anywhere() -> None:
    m = TinyLlama(CFG)
    toks = np.random.default_rng(0).integers(0, 256, 40)
    full, kv = m.forward(toks)
    assert full.shape == (40, 256) and kv.shape == (2, 2, 40, 2, 8)
    for cut in (1, 16, 39):
        _, head = m.forward(toks[:cut])
        tail, tail_kv = m.forward(toks[cut:], head)
        torch.testing.assert_close(tail, full[cut:], rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(tail_kv, kv[:, :, cut:], rtol=1e-4, atol=1e-5)
    assert m.forwarded_tokens == 40 * 4  # scratch, then each split computes each token once


def test_pages_concatenate_to_prefix_kv__page_size_8() -> None:
    m = TinyLlama(CFG)
    toks = np.arange(32) * 7 % 256
    _, kv = m.forward(toks)
    pages = m.pages(kv, 8, 3)
    assert [p.shape[2] for p in pages] == [8, 8, 8] and all(p.is_contiguous() for p in pages)
    assert pages[0].untyped_storage().nbytes() == pages[0].numel() * 4  # not a view of kv
    logits, _ = m.forward([5], m.concat(pages))
    ref, _ = m.forward([*toks[:24].tolist(), 5])
    torch.testing.assert_close(logits[-1], ref[-1], rtol=1e-4, atol=1e-4)
    assert torch.equal(TinyLlama(CFG).embed, m.embed)
    assert not torch.equal(TinyLlama(dataclasses.replace(CFG, seed=4)).embed, m.embed)


def test_host_copy_and_wire_bytes__own_storage_and_round_trip() -> None:
    m = TinyLlama(CFG)
    _, kv = m.forward([1, 2, 3, 4])
    host = m.host_copy(kv)
    assert torch.equal(host, kv) and host.data_ptr() != kv.data_ptr()
    blob = m.to_bytes(kv)
    assert len(blob) == kv.numel() * 4
    assert np.array_equal(np.frombuffer(blob, "<f4"), kv.numpy().ravel())  # C order, <f4
    assert torch.equal(m.from_bytes(blob, kv.shape), kv)
    assert m.greedy(torch.tensor([0.1, 3.0, -1.0])) == 1


@pytest.mark.parametrize("bad", [{"dim": 30}, {"n_kv_heads": 3}, {"dim": 12, "n_heads": 4}])
def test_inconsistent_config__refused(bad: dict[str, int]) -> None:
    with pytest.raises(ConfigError, match="tiny-llama"):
        dataclasses.replace(CFG, **bad)
