"""The request table of one run: a workload plus everything derived from it before the replay.

Owns the per-request prefix keys (at every indexed length of the deployment, computed ONCE in
batches of a few thousand prompts through ``PrefixHasher.keys_at_batch``; no per-request hashing
in the replay loop) and the per-request cache-chunk ids a simulated worker caches by. Shared by
every scheme of a run set. Must not know schemes or workers.

Chunk ids. The workload's block ids are prefix-closed (a block id names its whole prefix,
``sim.workloads.workload``), so the id of the last block of a chunk names the whole prefix up to
the chunk's end: chunk j of request i (tokens ``[j*C, (j+1)*C)``, C = chunk tokens, k = C/B
blocks) is ``block_ids[i][(j+1)*k - 1]``. Only full chunks are listed (a prompt's partial tail
is never cached): ``n_chunks = prompt_len // C``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from kvcompass.errors import InvalidInputError
from kvcompass.keys import KeyNamespace, PrefixHasher
from kvcompass.levels import Levels
from sim.workloads.workload import Workload

MODEL_ID = "meta-llama/Llama-3.1-8B-Instruct"
MODEL_CONFIG = "bf16,tp1"


class Requests:
    """Struct of arrays over the requests of a run (implements ``schemes.base.RequestTable``)."""

    def __init__(
        self,
        workload: Workload,
        levels: Levels,
        chunk_tokens: int,
        *,
        batch: int = 4096,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        if chunk_tokens % workload.block_tokens:
            raise InvalidInputError(
                f"chunk_tokens must be a multiple of the workload block size "
                f"{workload.block_tokens}, got {chunk_tokens}"
            )
        self.workload = workload
        self.n = len(workload)
        self.arrival_ms = workload.arrival_ms
        self.origin = workload.origin_region
        self.prompt_len = workload.prompt_len
        self.output_len = workload.output_len
        self.chunk_tokens = chunk_tokens
        self.lengths = np.unique(levels.matrix).astype(np.int64)
        self._build_keys(workload, batch, progress)
        self._build_chunks(workload, chunk_tokens)
        # Per-region boolean mask over ``lengths``: which are that region's registration lengths.
        self.reg_mask = np.stack(
            [np.isin(self.lengths, levels.registration_lengths(r)) for r in range(levels.n_regions)]
        )
        max_depth = int(self.prompt_len.max() // chunk_tokens) + 1 if self.n else 1
        edges = np.arange(max_depth + 1, dtype=np.int64) * chunk_tokens
        bounds = np.searchsorted(self.lengths, edges, side="right").astype(np.int64)
        # Chunk at depth d holds the key lengths lengths[_lo[d]:_hi[d]], i.e. (d*C, (d+1)*C].
        self._lo, self._hi = bounds[:-1], bounds[1:]
        self.query_mask = np.stack(
            [np.isin(self.lengths, levels.query_union(o)) for o in range(levels.n_regions)]
        )

    def _build_keys(
        self, workload: Workload, batch: int, progress: Callable[[int], None] | None
    ) -> None:
        hasher = PrefixHasher(KeyNamespace(model_id=MODEL_ID, model_config=MODEL_CONFIG))
        counts = np.searchsorted(self.lengths, self.prompt_len, side="right").astype(np.int64)
        self.key_offsets = np.zeros(self.n + 1, dtype=np.int64)
        np.cumsum(counts, out=self.key_offsets[1:])
        self.keys = np.empty(int(self.key_offsets[-1]), dtype=np.uint64)
        for start in range(0, self.n, batch):
            stop = min(self.n, start + batch)
            toks, offs = workload.tokens_batch(start, stop)
            keys, _ = hasher.keys_at_batch(toks, offs, self.lengths)
            self.keys[self.key_offsets[start] : self.key_offsets[stop]] = keys
            if progress is not None:
                progress(stop - start)

    def _build_chunks(self, workload: Workload, chunk_tokens: int) -> None:
        k = chunk_tokens // workload.block_tokens
        n_chunks = (self.prompt_len // chunk_tokens).astype(np.int64)
        self.chunk_offsets = np.zeros(self.n + 1, dtype=np.int64)
        np.cumsum(n_chunks, out=self.chunk_offsets[1:])
        # Position of chunk j's last block inside the flat block array.
        req = np.repeat(np.arange(self.n, dtype=np.int64), n_chunks)
        j = np.arange(int(self.chunk_offsets[-1]), dtype=np.int64) - self.chunk_offsets[req]
        pos = workload.block_offsets[req] + (j + 1) * k - 1
        self.chunks = workload.block_ids[pos].astype(np.int64)

    def keys_of(self, i: int) -> tuple[NDArray[np.int64], NDArray[np.uint64]]:
        a, b = int(self.key_offsets[i]), int(self.key_offsets[i + 1])
        return self.lengths[: b - a], self.keys[a:b]

    def query_of(self, i: int, origin: int) -> tuple[NDArray[np.int64], NDArray[np.uint64]]:
        """(lengths, keys) an edge in ``origin`` queries for request ``i`` (its query union)."""
        a, b = int(self.key_offsets[i]), int(self.key_offsets[i + 1])
        mask = self.query_mask[origin, : b - a]
        return self.lengths[: b - a][mask], self.keys[a:b][mask]

    def nodes_of(self, i: int) -> NDArray[np.int64]:
        chunks: NDArray[np.int64] = self.chunks
        return chunks[int(self.chunk_offsets[i]) : int(self.chunk_offsets[i + 1])]

    def reg_keys_many(
        self, owners: NDArray[np.int64], depths: NDArray[np.int64], region: int
    ) -> NDArray[np.uint64]:
        """Keys at ``region``'s registration lengths inside many chunks (owner request, depth)."""
        n_own = self.key_offsets[owners + 1] - self.key_offsets[owners]
        lo = self._lo[depths]
        hi = np.minimum(self._hi[depths], n_own)
        cnt = np.maximum(hi - lo, 0)
        total = int(cnt.sum())
        if total == 0:
            return np.zeros(0, dtype=np.uint64)
        start = np.repeat(lo - np.cumsum(cnt) + cnt, cnt)
        idx = np.arange(total, dtype=np.int64) + start  # index into ``lengths`` per key
        base = np.repeat(self.key_offsets[owners], cnt)
        keep = self.reg_mask[region, idx]
        keys: NDArray[np.uint64] = self.keys[(base + idx)[keep]]
        return keys

    def keys_for_changes(
        self, owners: NDArray[np.int64], depths: NDArray[np.int64], regions: NDArray[np.int64]
    ) -> tuple[NDArray[np.uint64], NDArray[np.int64]]:
        """Keys inside many chunks, each at its own region's registration lengths.

        Returns (keys, item): ``item[j]`` is the index of the change key ``j`` came from.
        """
        n_own = self.key_offsets[owners + 1] - self.key_offsets[owners]
        lo = self._lo[depths]
        hi = np.minimum(self._hi[depths], n_own)
        cnt = np.maximum(hi - lo, 0)
        total = int(cnt.sum())
        if total == 0:
            return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)
        item = np.repeat(np.arange(owners.shape[0], dtype=np.int64), cnt)
        idx = np.arange(total, dtype=np.int64) + np.repeat(lo - np.cumsum(cnt) + cnt, cnt)
        keep = self.reg_mask[regions[item], idx]
        keys: NDArray[np.uint64] = self.keys[(self.key_offsets[owners][item] + idx)[keep]]
        return keys, item[keep]
