"""A tiny Llama-style decoder in torch (CPU, float32) with random weights: real KV tensors.

Owns the model (RMSNorm, RoPE, grouped-query attention, SwiGLU MLP, tied embeddings) built from a
config and a seed (``torch.Generator``; no download), ``forward(tokens, past)`` returning the
logits and the K/V of the new tokens, so a cached prefix's pages can be reused instead of
recomputed, and the KV tensor operations the engine and the HTTP copy need (page slicing,
concatenation, tier copies, the wire bytes). Must not: cache, schedule or serve (``engine``,
``cache``, ``server``). Imported only in tiny-llama mode: the cost-model worker never loads torch.

KV layout of ``n`` tokens: one contiguous float32 CPU tensor ``(2, n_layers, n, n_kv_heads,
head_dim)`` — index 0 holds K (after RoPE), 1 holds V. Pages are slices along axis 2, each cloned
into its own storage (a view would keep the whole prompt's KV alive); concatenating the pages of
a prefix along axis 2 gives the KV a from-scratch prefill of that prefix computes (equal within
float32 rounding: torch picks kernels by shape).

Tiers: the VRAM tier's pages are these tensors, in process; a move to the DRAM tier (and back)
is a ``clone`` into plain CPU memory, so the tiers never share storage and a transfer costs a
real copy. On a GPU host the VRAM tier would be ``cuda`` tensors and DRAM pinned host tensors;
``pin_memory`` needs an NVIDIA driver, which this emulator does not assume.

Wire bytes (``kv_copy``): C order, little-endian float32 (numpy is the wire format only).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from numpy.typing import NDArray

from kvcompass.errors import ConfigError

Tensor = torch.Tensor


@dataclass(frozen=True, slots=True)
class TinyLlamaConfig:
    vocab_size: int = 256
    dim: int = 128
    n_layers: int = 4
    n_heads: int = 8
    n_kv_heads: int = 2
    ffn_dim: int = 256
    rope_theta: float = 10_000.0
    norm_eps: float = 1e-5
    seed: int = 0

    def __post_init__(self) -> None:
        d, h, kvh = self.dim, self.n_heads, self.n_kv_heads
        if min(d, h, kvh, self.n_layers, self.ffn_dim, self.vocab_size) < 1 or d % h or h % kvh:
            raise ConfigError(
                f"tiny-llama: expected sizes >= 1, dim % n_heads == 0 and "
                f"n_heads % n_kv_heads == 0, got dim={d}, n_heads={h}, n_kv_heads={kvh}"
            )
        if (d // h) % 2:
            raise ConfigError(f"tiny-llama: expected an even head_dim (RoPE pairs), got {d // h}")

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads


def _rms(x: Tensor, w: Tensor, eps: float) -> Tensor:
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * w


class TinyLlama:
    def __init__(self, cfg: TinyLlamaConfig) -> None:
        self.cfg = cfg
        self.forwarded_tokens = 0
        """Tokens run through the model so far (prefill and decode): what reuse saves."""
        g = torch.Generator().manual_seed(cfg.seed)
        d, hd = cfg.dim, cfg.head_dim

        def w(rows: int, cols: int) -> Tensor:
            return torch.randn(rows, cols, generator=g) / math.sqrt(rows)

        self.embed = torch.randn(cfg.vocab_size, d, generator=g) * 0.5
        self.layers = [
            {
                "attn_norm": torch.ones(d),
                "wq": w(d, cfg.n_heads * hd),
                "wk": w(d, cfg.n_kv_heads * hd),
                "wv": w(d, cfg.n_kv_heads * hd),
                "wo": w(cfg.n_heads * hd, d),
                "mlp_norm": torch.ones(d),
                "w1": w(d, cfg.ffn_dim),
                "w3": w(d, cfg.ffn_dim),
                "w2": w(cfg.ffn_dim, d),
            }
            for _ in range(cfg.n_layers)
        ]
        self.final_norm = torch.ones(d)
        self.inv_freq = 1.0 / cfg.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd)

    # -- KV tensors --------------------------------------------------------------------------

    def empty_kv(self) -> Tensor:
        c = self.cfg
        return torch.zeros(2, c.n_layers, 0, c.n_kv_heads, c.head_dim)

    @staticmethod
    def concat(kvs: Sequence[Tensor]) -> Tensor:
        """The KV of consecutive spans (pages, or a prefix and its continuation) as one."""
        return torch.cat(list(kvs), dim=2)

    @staticmethod
    def pages(kv: Tensor, page_size: int, n: int) -> list[Tensor]:
        """The first ``n`` pages of ``kv``, each in its own contiguous storage."""
        return [
            kv[:, :, i * page_size : (i + 1) * page_size].clone(
                memory_format=torch.contiguous_format
            )
            for i in range(n)
        ]

    @staticmethod
    def host_copy(kv: Tensor) -> Tensor:
        """A tier transfer (VRAM <-> DRAM): a copy in separate CPU memory."""
        return kv.clone()

    @staticmethod
    def to_bytes(kv: Tensor) -> bytes:
        return np.ascontiguousarray(kv.numpy(), "<f4").tobytes()

    def from_bytes(self, buf: bytes, shape: Sequence[int]) -> Tensor:
        """KV from the wire (C order, little-endian float32); shape checked by the caller."""
        arr: NDArray[np.float32] = np.frombuffer(buf, "<f4").reshape(tuple(shape))
        return torch.from_numpy(arr.astype(np.float32))  # astype copies: frombuffer is read-only

    @staticmethod
    def greedy(logits: Tensor) -> int:
        return int(torch.argmax(logits).item())

    # -- model ---------------------------------------------------------------------------------

    def _rope(self, x: Tensor, pos: Tensor) -> Tensor:
        ang = pos[:, None].to(torch.float32) * self.inv_freq[None, :]  # (T, hd/2)
        cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)

    @torch.inference_mode()
    def forward(
        self, tokens: Sequence[int] | NDArray[np.integer] | Tensor, past: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Logits ``(T, vocab)`` of ``tokens`` placed after ``past`` (its KV, or None), and the
        KV of ``tokens`` alone (the layout in the module docstring)."""
        c = self.cfg
        past = self.empty_kv() if past is None else past
        ids = torch.as_tensor(np.asarray(tokens, dtype=np.int64)) % c.vocab_size
        start, t = past.shape[2], int(ids.shape[0])
        self.forwarded_tokens += t
        pos = torch.arange(start, start + t)
        group = c.n_heads // c.n_kv_heads
        # query i (absolute start + i) may see keys 0..start + i; True = attend
        mask = torch.arange(start + t)[None, :] <= (start + torch.arange(t))[:, None]
        x = self.embed[ids]
        new_kv = torch.empty(2, c.n_layers, t, c.n_kv_heads, c.head_dim)
        for i, lw in enumerate(self.layers):
            h = _rms(x, lw["attn_norm"], c.norm_eps)
            q = self._rope((h @ lw["wq"]).view(t, c.n_heads, c.head_dim), pos)
            k = self._rope((h @ lw["wk"]).view(t, c.n_kv_heads, c.head_dim), pos)
            v = (h @ lw["wv"]).view(t, c.n_kv_heads, c.head_dim)
            new_kv[0, i], new_kv[1, i] = k, v
            keys = torch.cat((past[0, i], k)).transpose(0, 1)  # (kvh, S, hd)
            vals = torch.cat((past[1, i], v)).transpose(0, 1)
            attn = F.scaled_dot_product_attention(
                q.transpose(0, 1),  # (H, T, hd)
                keys.repeat_interleave(group, dim=0),
                vals.repeat_interleave(group, dim=0),
                attn_mask=mask,
            )
            x = x + attn.transpose(0, 1).reshape(t, c.n_heads * c.head_dim) @ lw["wo"]
            h = _rms(x, lw["mlp_norm"], c.norm_eps)
            x = x + (F.silu(h @ lw["w1"]) * (h @ lw["w3"])) @ lw["w2"]
        logits = _rms(x, self.final_norm, c.norm_eps) @ self.embed.T
        return logits, new_kv
