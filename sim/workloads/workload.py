"""The ``Workload`` value object: arrival-ordered requests as a struct of arrays.

Owns the request representation every generator and trace reader produces and the simulator
engine consumes, its invariants (checked once, at construction) and cheap views (``slice``,
``tokens_of``, ``tokens_batch``). Must not generate requests, read files, or hold random state.

Prompt representation: request i's prompt is the concatenation of its content blocks
``block_ids[block_offsets[i]:block_offsets[i+1]]``, each ``block_tokens`` pseudo-tokens long
(:mod:`sim.workloads.tokens`), the last block truncated so the prompt has ``prompt_len[i]``
tokens. Every built-in workload also keeps block ids *prefix-closed*, as Mooncake's hash ids are:
a block id names its whole prefix (the same id never follows two different block sequences), so
"block X was seen before" means "the prefix up to and including X was seen before".
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import numpy as np
from numpy.typing import NDArray

from kvcompass.errors import InvalidInputError
from sim.workloads.tokens import expand_blocks


class Kind(IntEnum):
    """Request kind codes stored in ``Workload.kind`` (one code space for all generators)."""

    TOOL = 0
    """Mixed: agent tool-calling (ToolBench-like)."""
    DOC_QA = 1
    """Mixed: long-document question answering (LooGLE-like)."""
    CODE = 2
    """Mixed: programming problem (APPS-like)."""
    CHAT_FIRST = 3
    """WildChat / LMSYS: first turn of a conversation."""
    CHAT_FOLLOWUP = 4
    """WildChat / LMSYS: later turn (prompt = earlier turns + replies + new message)."""
    TRACE_ROOT = 5
    """Trace reader: first request of a session (draws a fresh region)."""
    TRACE_FOLLOWUP = 6
    """Trace reader: request continuing an earlier one (inherits its region)."""
    BURST = 7
    """Burst: one of a burst of requests sharing a new long prefix (``sim.workloads.burst``)."""


@dataclass(frozen=True, slots=True)
class Workload:
    """Arrival-ordered requests as a struct of arrays. Prompts are sequences of content blocks:
    block id X expands to `block_tokens` deterministic pseudo-token ids (sim/workloads/tokens.py),
    so equal block-id prefixes give equal token prefixes and prefix sharing is exact. A request's
    last block is truncated to prompt_len."""

    name: str
    block_tokens: int
    arrival_ms: NDArray[np.float64]
    origin_region: NDArray[np.int64]
    prompt_len: NDArray[np.int64]
    output_len: NDArray[np.int64]
    block_ids: NDArray[np.int64]
    block_offsets: NDArray[np.int64]
    tenant: NDArray[np.int32]
    kind: NDArray[np.int8]
    notes: tuple[str, ...] = ()
    """What the producer did to its input that a reader of the results must know (a trace
    reader's remapped ids, padded prompts, replay rate); printed by ``kvcompass sim``."""

    def __post_init__(self) -> None:
        if not isinstance(self.block_tokens, int) or self.block_tokens <= 0:
            raise InvalidInputError(
                f"block_tokens: expected a positive int, got {self.block_tokens!r}"
            )
        n = self.prompt_len.shape[0] if self.prompt_len.ndim == 1 else -1
        for field, dtype in (
            ("arrival_ms", np.float64),
            ("origin_region", np.int64),
            ("prompt_len", np.int64),
            ("output_len", np.int64),
            ("tenant", np.int32),
            ("kind", np.int8),
        ):
            a = getattr(self, field)
            if not isinstance(a, np.ndarray) or a.dtype != dtype or a.shape != (n,):
                got = (a.dtype, a.shape) if isinstance(a, np.ndarray) else type(a).__name__
                raise InvalidInputError(
                    f"{field}: expected {dtype.__name__} shape ({n},), got {got}"
                )
        for field, size in (("block_offsets", n + 1), ("block_ids", None)):
            a = getattr(self, field)
            if not isinstance(a, np.ndarray) or a.dtype != np.int64 or a.ndim != 1:
                raise InvalidInputError(f"{field}: expected a 1-D int64 array, got {a!r:.80}")
            if size is not None and a.shape[0] != size:
                raise InvalidInputError(f"{field}: expected {size} entries, got {a.shape[0]}")
        self._check_values(n)

    def _check_values(self, n: int) -> None:
        offs = self.block_offsets
        if int(offs[0]) != 0 or int(offs[-1]) != self.block_ids.shape[0]:
            raise InvalidInputError(
                f"block_offsets: expected 0 .. {self.block_ids.shape[0]}, got "
                f"{int(offs[0])} .. {int(offs[-1])}"
            )
        if n == 0:
            return
        if not np.all(np.isfinite(self.arrival_ms)) or np.any(np.diff(self.arrival_ms) < 0):
            raise InvalidInputError("arrival_ms: expected finite, non-decreasing times")
        if int(self.prompt_len.min()) < 1 or int(self.output_len.min()) < 0:
            raise InvalidInputError(
                f"lengths: expected prompt_len >= 1 and output_len >= 0, got min "
                f"{int(self.prompt_len.min())} and {int(self.output_len.min())}"
            )
        if int(self.origin_region.min()) < 0:
            raise InvalidInputError("origin_region: expected region indices >= 0")
        need = -(-self.prompt_len // self.block_tokens)
        counts = np.diff(offs)
        if not np.array_equal(counts, need):
            i = int(np.flatnonzero(counts != need)[0])
            raise InvalidInputError(
                f"block_offsets: request {i} needs ceil({int(self.prompt_len[i])}/"
                f"{self.block_tokens}) = {int(need[i])} blocks, got {int(counts[i])}"
            )
        if self.block_ids.size and int(self.block_ids.min()) < 0:
            raise InvalidInputError("block_ids: expected ids >= 0")

    def __len__(self) -> int:
        return int(self.prompt_len.shape[0])

    @property
    def n_regions_used(self) -> int:
        """1 + the largest origin region index (0 for an empty workload)."""
        return int(self.origin_region.max()) + 1 if len(self) else 0

    def slice(self, start: int, stop: int) -> Workload:
        """Requests ``start..stop`` (Python slice bounds, clipped) as a workload of their own."""
        n = len(self)
        lo, hi, _ = slice(start, stop).indices(n)
        hi = max(hi, lo)
        b0, b1 = int(self.block_offsets[lo]), int(self.block_offsets[hi])
        return Workload(
            name=self.name,
            block_tokens=self.block_tokens,
            arrival_ms=self.arrival_ms[lo:hi],
            origin_region=self.origin_region[lo:hi],
            prompt_len=self.prompt_len[lo:hi],
            output_len=self.output_len[lo:hi],
            block_ids=self.block_ids[b0:b1],
            block_offsets=self.block_offsets[lo : hi + 1] - b0,
            tenant=self.tenant[lo:hi],
            kind=self.kind[lo:hi],
            notes=self.notes,
        )

    def blocks_of(self, i: int) -> NDArray[np.int64]:
        """Request i's block ids (a view)."""
        self._check_index(i)
        return self.block_ids[int(self.block_offsets[i]) : int(self.block_offsets[i + 1])]

    def tokens_of(self, i: int) -> NDArray[np.int32]:
        """Materialise request i's prompt: ``prompt_len[i]`` token ids."""
        self._check_index(i)
        tokens, _ = self.tokens_batch(i, i + 1)
        return tokens

    def tokens_batch(self, start: int, stop: int) -> tuple[NDArray[np.int32], NDArray[np.int64]]:
        """CSR ``(tokens_flat, offsets)`` of requests ``start..stop`` via one numba call.

        ``offsets`` has ``stop - start + 1`` entries starting at 0; this is the CSR that
        ``kvcompass.keys.PrefixHasher.keys_at_batch`` takes. Bounds must lie in ``[0, len]``.
        """
        n = len(self)
        if not (0 <= start <= stop <= n):
            raise InvalidInputError(
                f"tokens_batch: expected 0 <= start <= stop <= {n}, got {start}, {stop}"
            )
        return expand_blocks(
            self.block_ids,
            self.block_offsets[start : stop + 1],
            self.prompt_len[start:stop],
            self.block_tokens,
        )

    def _check_index(self, i: int) -> None:
        if not 0 <= i < len(self):
            raise InvalidInputError(f"request index: expected 0 <= i < {len(self)}, got {i}")
