"""Flat arrays of one maintenance-side Ludo table (the kernels' whole world).

Owns: ``TableState`` (a NamedTuple of numpy arrays that numba kernels take as one argument) and
its allocation. Must not: contain logic beyond allocation; the kernels in ``cuckoo.py``,
``othello.py`` and ``ops.py`` are the only writers.

Layout, with ``B`` buckets, ``S = 4B`` slots, ``E = S`` entry ids, ``N = ma + mb`` locator cells:

* view part (exactly ``ViewArrays``): ``seeds``, ``values``, ``fps``, ``locator``; ``params`` is
  ``LudoParams.to_array()`` (the kernels rewrite index 7, the locator seed, on a rebuild).
* cuckoo: ``skeys[S]`` the key in each slot (``EMPTY = 2**64 - 1`` marks a free slot: keys are
  < 2**63), ``sentry[S]`` its entry id. A key sits at view slot ``slot_of(key, seeds[b])`` of its
  bucket, so bucket images are direct copies.
* entries (one per live key, ids recycled through ``free_entries``) name Othello edges.
* Othello: edge ``e`` has half-edges ``2e`` (in the list of its A-side cell) and ``2e+1`` (B-side);
  ``half[3h:3h+3] = (next, prev, other endpoint)`` (one cache line per edge), ``head[N]`` the first
  half-edge of each node (-1 = none). Doubly linked, so unlinking is O(1).
* dirty sets (deduplicate images within one call): ``bdirty``/``blist`` buckets,
  ``wdirty``/``wlist`` locator words.
* scratch: BFS queue (``qbucket``/``qparent``/``qslot``/``qdepth``), one level's children
  (``qalt``), visit stamps (``mark``); the two-sided tree walks (``stack``/``via``/``seen``,
  ``2N`` each: side A uses ``[0, N)``, side B ``[N, 2N)``; zero pages until touched).
* ``meta``: int64 scalars at the ``M_*`` indices below; ``rng[0]``: splitmix64 state for new
  locator seeds.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from kvcompass.ludo.params import LudoParams

M_LIVE = 0  # live keys
M_FREE_E = 1  # entries on the free stack
M_SEEN = 2  # nodes listed in ``seen`` by the last two-sided walk (its smaller side)
M_STAMP = 3  # BFS visit stamp
M_NB = 4  # dirty buckets listed
M_NW = 5  # dirty words listed
M_ALLW = 6  # 1 when the locator was rebuilt: every word is an image, params changed
M_MAXLIVE = 7  # an insert beyond this many keys asks for growth
M_REBUILDS = 8  # locator rebuilds (statistics)
M_KICKS = 9  # keys moved by cuckoo paths (statistics)
M_BFS = 10  # inserts that needed a BFS (statistics)
M_BFS_NODES = 11  # buckets queued by those searches (statistics)
M_WALKED = 12  # nodes visited by two-sided locator walks (statistics)
META_LEN = 16
EMPTY = np.uint64(0xFFFFFFFFFFFFFFFF)
QUEUE_LEN = 1024  # BFS of depth 5 from 2 roots visits at most 2+8+32+128+512 = 682 buckets


class TableState(NamedTuple):
    """All arrays of one maintenance table (see module docstring)."""

    params: NDArray[np.uint64]
    seeds: NDArray[np.uint8]
    values: NDArray[np.uint32]
    fps: NDArray[np.uint8]
    locator: NDArray[np.uint64]
    skeys: NDArray[np.uint64]
    sentry: NDArray[np.int32]
    half: NDArray[np.int32]
    head: NDArray[np.int32]
    free_entries: NDArray[np.int32]
    bdirty: NDArray[np.uint8]
    blist: NDArray[np.int32]
    wdirty: NDArray[np.uint8]
    wlist: NDArray[np.int32]
    mark: NDArray[np.int32]
    qbucket: NDArray[np.int32]
    qparent: NDArray[np.int32]
    qslot: NDArray[np.int32]
    qdepth: NDArray[np.int32]
    qalt: NDArray[np.int32]
    stack: NDArray[np.int32]
    via: NDArray[np.int32]
    seen: NDArray[np.int32]
    scratch: NDArray[np.uint64]
    meta: NDArray[np.int64]
    rng: NDArray[np.uint64]


def allocate_state(params: LudoParams, max_live: int, rng_seed: int) -> TableState:
    """An empty table: no keys, zero locator, every node its own tree."""
    n_slots = params.n_slots
    n_nodes = params.locator_a_cells + params.locator_b_cells
    n_words = params.n_locator_words
    meta = np.zeros(16, np.int64)
    meta[M_FREE_E] = n_slots
    meta[M_MAXLIVE] = max_live
    return TableState(
        params=params.to_array(),
        seeds=np.zeros(params.n_buckets, np.uint8),
        values=np.zeros(n_slots * params.value_words, np.uint32),
        fps=np.zeros(n_slots * params.fp_bytes, np.uint8),
        locator=np.zeros(n_words, np.uint64),
        skeys=np.full(n_slots, EMPTY, np.uint64),
        sentry=np.full(n_slots, -1, np.int32),
        half=np.full(6 * n_slots, -1, np.int32),
        head=np.full(n_nodes, -1, np.int32),
        free_entries=np.arange(n_slots - 1, -1, -1, dtype=np.int32),
        bdirty=np.zeros(params.n_buckets, np.uint8),
        blist=np.zeros(params.n_buckets, np.int32),
        wdirty=np.zeros(n_words, np.uint8),
        wlist=np.zeros(n_words, np.int32),
        mark=np.zeros(params.n_buckets, np.int32),
        qbucket=np.zeros(QUEUE_LEN, np.int32),
        qparent=np.zeros(QUEUE_LEN, np.int32),
        qslot=np.zeros(QUEUE_LEN, np.int32),
        qdepth=np.zeros(QUEUE_LEN, np.int32),
        qalt=np.zeros(4 * QUEUE_LEN, np.int32),
        stack=np.zeros(2 * n_nodes, np.int32),
        via=np.zeros(2 * n_nodes, np.int32),
        seen=np.zeros(2 * n_nodes, np.int32),
        scratch=np.zeros(72, np.uint64),
        meta=meta,
        rng=np.array([rng_seed & ((1 << 64) - 1)], dtype=np.uint64),
    )
