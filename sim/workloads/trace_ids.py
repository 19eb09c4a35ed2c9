"""Trace hash ids made into the simulator's block ids: one per block, prefix-closed.

Owns what a trace reader does to the hash ids real traces carry before they become
``Workload.block_ids``, and the counts it reports. Must not read files or draw random numbers.

* **Too few ids** (``len(hash_ids) < ceil(input_length / block)``: the producer hashed only part
  of the prompt): the unhashed blocks get fresh ids that occur nowhere else, so those tokens are
  unique to their request: every scheme recomputes them and no cache can reuse them (the trace
  says nothing about whether they were shared, and claiming sharing it does not show would
  inflate every scheme's reuse alike).
* **Too many ids**: the ids past the prompt's last block name tokens the request does not have;
  they are dropped.
* **Not prefix-closed** (the same id after different predecessors): the simulator's cache model
  needs an id to name its whole prefix. Ids are canonicalised by chaining, in arrival order:
  the canonical id of a block is a function of (canonical id of the block before it, its own
  id); the first predecessor an id is seen after keeps the id unchanged, every other
  predecessor gets a fresh id. A prefix-closed trace (Mooncake's releases) comes out unchanged.

Fresh ids start above every id of the trace, so they never collide with one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray


@dataclass(frozen=True, slots=True)
class IdReport:
    """What ``normalise`` changed (all zero for a well-formed, prefix-closed trace)."""

    padded_requests: int = 0
    padded_blocks: int = 0
    truncated_requests: int = 0
    truncated_ids: int = 0
    remapped_ids: int = 0
    """Distinct (predecessor, id) pairs that got a fresh id (the id had been seen after another
    predecessor)."""

    def notes(self, block_tokens: int) -> tuple[str, ...]:
        out: list[str] = []
        if self.padded_requests:
            out.append(
                f"{self.padded_requests:,} requests had fewer hash_ids than "
                f"ceil(input_length / {block_tokens}): {self.padded_blocks:,} unhashed blocks "
                f"got fresh ids (their tokens are unique to the request, never reused)"
            )
        if self.truncated_requests:
            out.append(
                f"{self.truncated_requests:,} requests had more hash_ids than their prompt "
                f"needs: {self.truncated_ids:,} ids past the last block dropped"
            )
        if self.remapped_ids:
            out.append(
                f"hash_ids not prefix-closed: {self.remapped_ids:,} (predecessor, id) pairs "
                f"remapped to fresh ids by chaining, so every id names one prefix"
            )
        return tuple(out)


def normalise(
    rows: list[list[int]], need: list[int]
) -> tuple[NDArray[np.int64], NDArray[np.int64], IdReport]:
    """(block_ids, offsets) CSR of ``rows`` (arrival order) fitted to ``need`` blocks each."""
    top = max((max(r) for r in rows if r), default=-1)
    fitted, fresh, padded_req, padded, truncated_req, truncated = _fit(rows, need, top + 1)
    ids, remapped = _chain(fitted, fresh)
    offsets = np.zeros(len(fitted) + 1, dtype=np.int64)
    np.cumsum([len(r) for r in fitted], out=offsets[1:])
    report = IdReport(padded_req, padded, truncated_req, truncated, remapped)
    return ids, offsets, report


def _fit(
    rows: list[list[int]], need: list[int], fresh: int
) -> tuple[list[list[int]], int, int, int, int, int]:
    padded_req = padded = truncated_req = truncated = 0
    out: list[list[int]] = []
    for row, k in zip(rows, need, strict=True):
        if len(row) < k:
            add = k - len(row)
            padded_req += 1
            padded += add
            row = [*row, *range(fresh, fresh + add)]
            fresh += add
        elif len(row) > k:
            truncated_req += 1
            truncated += len(row) - k
            row = row[:k]
        out.append(row)
    return out, fresh, padded_req, padded, truncated_req, truncated


def _chain(rows: list[list[int]], fresh: int) -> tuple[NDArray[np.int64], int]:
    canon: dict[tuple[int, int], int] = {}
    taken: set[int] = set()
    flat: list[int] = []
    remapped = 0
    for row in rows:
        parent = -1
        for raw in row:
            key = (parent, raw)
            c = canon.get(key)
            if c is None:
                if raw in taken:
                    c = fresh
                    fresh += 1
                    remapped += 1
                else:
                    c = raw
                    taken.add(raw)
                canon[key] = c
            flat.append(c)
            parent = c
    return np.asarray(flat, dtype=np.int64), remapped
