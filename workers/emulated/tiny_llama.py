"""A tiny Llama-style decoder in numpy with random weights: real KV tensors for the emulator.

Owns the model (RMSNorm, RoPE, grouped-query attention, SwiGLU MLP, tied embeddings) built from a
config and a seed (no download), and ``forward(tokens, past, start)`` returning the logits and
the K/V of the new tokens, so a cached prefix's pages can be reused instead of recomputed.
Must not: cache, schedule or serve (``engine``, ``cache``, ``server``).

KV layout of ``n`` tokens: one float32 array ``(2, n_layers, n, n_kv_heads, head_dim)`` — index 0
holds K (after RoPE), 1 holds V. Pages are slices along axis 2; concatenating the pages of a
prefix along axis 2 gives exactly the KV a from-scratch prefill of that prefix computes.

Deviation from issue 6 item 7: the issue asks for torch; no CPU torch build is on this machine and
the PyPI wheel pulls gigabytes of CUDA libraries, so the same model is written in numpy (float32).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

F32 = NDArray[np.float32]


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

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads


def _rms(x: F32, w: F32, eps: float) -> F32:
    out: F32 = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w
    return out


class TinyLlama:
    def __init__(self, cfg: TinyLlamaConfig) -> None:
        self.cfg = cfg
        rng = np.random.default_rng(cfg.seed)
        d, hd = cfg.dim, cfg.head_dim

        def w(*shape: int) -> F32:
            out: F32 = (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)
            return out

        self.embed = (rng.standard_normal((cfg.vocab_size, d)) * 0.5).astype(np.float32)
        self.layers = [
            {
                "attn_norm": np.ones(d, np.float32),
                "wq": w(d, cfg.n_heads * hd),
                "wk": w(d, cfg.n_kv_heads * hd),
                "wv": w(d, cfg.n_kv_heads * hd),
                "wo": w(cfg.n_heads * hd, d),
                "mlp_norm": np.ones(d, np.float32),
                "w1": w(d, cfg.ffn_dim),
                "w3": w(d, cfg.ffn_dim),
                "w2": w(cfg.ffn_dim, d),
            }
            for _ in range(cfg.n_layers)
        ]
        self.final_norm = np.ones(d, np.float32)
        self.inv_freq = (1.0 / cfg.rope_theta ** (np.arange(0, hd, 2) / hd)).astype(np.float32)

    def empty_kv(self) -> F32:
        c = self.cfg
        return np.zeros((2, c.n_layers, 0, c.n_kv_heads, c.head_dim), np.float32)

    def _rope(self, x: F32, pos: NDArray[np.int64]) -> F32:
        ang = pos[:, None].astype(np.float32) * self.inv_freq[None, :]  # (T, hd/2)
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        x1, x2 = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = x1 * cos - x2 * sin
        out[..., 1::2] = x1 * sin + x2 * cos
        return out

    def forward(self, tokens: NDArray[np.int64], past: F32 | None = None) -> tuple[F32, F32]:
        """Logits ``(T, vocab)`` of ``tokens`` placed after ``past`` (its KV, or None), and the
        KV of ``tokens`` alone (the layout in the module docstring)."""
        c = self.cfg
        past = self.empty_kv() if past is None else past
        start, t = past.shape[2], len(tokens)
        pos = np.arange(start, start + t, dtype=np.int64)
        group = c.n_heads // c.n_kv_heads
        scale = np.float32(1.0 / np.sqrt(c.head_dim))
        # query i (absolute start + i) may see keys 0..start + i
        mask = np.arange(start + t)[None, :] > (start + np.arange(t))[:, None]
        x = self.embed[np.asarray(tokens) % c.vocab_size]
        new_kv = np.empty((2, c.n_layers, t, c.n_kv_heads, c.head_dim), np.float32)
        for i, lw in enumerate(self.layers):
            h = _rms(x, lw["attn_norm"], c.norm_eps)
            q = self._rope((h @ lw["wq"]).reshape(t, c.n_heads, c.head_dim), pos)
            k = self._rope((h @ lw["wk"]).reshape(t, c.n_kv_heads, c.head_dim), pos)
            v = (h @ lw["wv"]).reshape(t, c.n_kv_heads, c.head_dim)
            new_kv[0, i], new_kv[1, i] = k, v
            keys = np.concatenate([past[0, i], k], axis=0)  # (S, kvh, hd)
            vals = np.concatenate([past[1, i], v], axis=0)
            kh = np.repeat(keys, group, axis=1).transpose(1, 0, 2)  # (H, S, hd)
            vh = np.repeat(vals, group, axis=1).transpose(1, 0, 2)
            scores = q.transpose(1, 0, 2) @ kh.transpose(0, 2, 1) * scale  # (H, T, S)
            scores = np.where(mask[None], np.float32(-1e30), scores)
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            probs = scores / scores.sum(axis=-1, keepdims=True)
            attn = (probs @ vh).transpose(1, 0, 2).reshape(t, c.n_heads * c.head_dim)
            x = x + attn @ lw["wo"]
            h = _rms(x, lw["mlp_norm"], c.norm_eps)
            gate = h @ lw["w1"]
            x = x + ((gate / (1.0 + np.exp(-gate))) * (h @ lw["w3"])) @ lw["w2"]
        logits: F32 = _rms(x, self.final_norm, c.norm_eps) @ self.embed.T
        return logits.astype(np.float32), new_kv
