"""Flat arrays of one maintenance-side Ludo table (the kernels' whole world).

Owns: ``TableState`` (a NamedTuple of numpy arrays, all views of ONE ``uint64`` buffer ``mem``),
its allocation, and ``unpack(mem)``, which rebuilds the tuple inside a kernel. Must not: contain
logic beyond allocation; the kernels in ``cuckoo.py``, ``othello.py``, ``placement.py`` and
``ops.py`` are the only writers. They pass the unpacked tuple (``st``) to one another: inlined and
without numba's reference counting, that costs nothing (``cuckoo.py``, "Calling convention").

Why one buffer: numba passes every array argument as 7 machine words, and an empty call of the
operation kernel with the 26 arrays cost 180-290 ns (measured on the 2-vCPU dev VM), a Python call
one unboxing per array. Kernels take ``mem`` alone and ``unpack`` it with one unchecked
``view_of`` per field (two loads and an add; fields a kernel never reads cost nothing): an empty
call now costs ~30 ns.

Hazard: the Python-side fields and ``mem`` are one memory. Copying a ``TableState`` (``deepcopy``,
pickling, ``a.copy()`` per field) detaches the copies from each other: kernels would then see
``mem`` and the table's Python code the copied fields. Nothing copies tables today; a checkpoint
must copy ``mem`` alone and rebuild the views.

``mem`` layout (``uint64`` words): word ``2i`` is the byte offset and word ``2i+1`` the element
count of field ``i`` of ``FIELDS`` (TableState order); every field starts on a 64-byte boundary.

Layout, with ``B`` buckets, ``S = 4B`` slots, ``E = S`` entry ids, ``N = ma + mb`` locator cells:

* view part (exactly ``ViewArrays``): ``seeds``, ``values``, ``fps``, ``locator``; ``params`` is
  ``LudoParams.to_array()``, read by the ``params.P_*`` names (the kernels rewrite
  ``P_LOCATOR_SEED`` on a rebuild).
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
* ``bfull``: bit ``b & 63`` of word ``b >> 6`` is 1 iff bucket ``b`` holds 4 keys (32 KB at 10^6
  keys: cache-resident, so the BFS tells a bucket with room without reading its keys).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from kvcompass.ludo.jit import inlined, view_of
from kvcompass.ludo.params import PARAMS_LEN, LudoParams

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
M_LEVELS = 13  # BFS levels whose keys were read (the roots' excluded; statistics)
M_WALKS = 14  # two-sided locator walks (statistics)
META_LEN = 16
EMPTY = np.uint64(0xFFFFFFFFFFFFFFFF)
QUEUE_LEN = 1024  # BFS of depth 5 from 2 roots visits at most 2+8+32+128+512 = 682 buckets


# The kernels' array annotations (numba ignores them; mypy and readers do not).
I32 = NDArray[np.int32]
I64 = NDArray[np.int64]
U8 = NDArray[np.uint8]
U32 = NDArray[np.uint32]
U64 = NDArray[np.uint64]


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
    bfull: NDArray[np.uint64]
    mem: NDArray[np.uint64]


FIELDS = TableState._fields[:-1]
_ALIGN_WORDS = 8  # 64 bytes


def _sizes(params: LudoParams) -> dict[str, tuple[type[np.generic], int]]:
    n_slots = params.n_slots
    n_nodes = params.locator_a_cells + params.locator_b_cells
    n_words = params.n_locator_words
    nb = params.n_buckets
    i32, u8 = np.int32, np.uint8
    return {
        "params": (np.uint64, PARAMS_LEN),
        "seeds": (u8, nb),
        "values": (np.uint32, n_slots * params.value_words),
        "fps": (u8, n_slots * params.fp_bytes),
        "locator": (np.uint64, n_words),
        "skeys": (np.uint64, n_slots),
        "sentry": (i32, n_slots),
        "half": (i32, 6 * n_slots),
        "head": (i32, n_nodes),
        "free_entries": (i32, n_slots),
        "bdirty": (u8, nb),
        "blist": (i32, nb),
        "wdirty": (u8, n_words),
        "wlist": (i32, n_words),
        "mark": (i32, nb),
        "qbucket": (i32, QUEUE_LEN),
        "qparent": (i32, QUEUE_LEN),
        "qslot": (i32, QUEUE_LEN),
        "qdepth": (i32, QUEUE_LEN),
        "qalt": (i32, 4 * QUEUE_LEN),
        "stack": (i32, 2 * n_nodes),
        "via": (i32, 2 * n_nodes),
        "seen": (i32, 2 * n_nodes),
        "scratch": (np.uint64, 72),
        "meta": (np.int64, META_LEN),
        "rng": (np.uint64, 1),
        "bfull": (np.uint64, -(-nb // 64)),
    }


def _round_up(n: int) -> int:
    return -(-n // _ALIGN_WORDS) * _ALIGN_WORDS


def allocate_state(params: LudoParams, max_live: int, rng_seed: int) -> TableState:
    """An empty table: no keys, zero locator, every node its own tree."""
    sizes = _sizes(params)
    words = [_round_up(-(-n * np.dtype(dt).itemsize // 8)) for dt, n in sizes.values()]
    header = _round_up(2 * len(FIELDS))
    raw = np.zeros(header + sum(words) + _ALIGN_WORDS, np.uint64)
    skip = (-raw.ctypes.data // 8) % _ALIGN_WORDS  # start ``mem`` on a cache line
    mem = raw[skip : skip + header + sum(words)]
    arrays: dict[str, NDArray[np.generic]] = {}
    at = header
    for i, (name, (dt, n)) in enumerate(sizes.items()):
        mem[2 * i] = 8 * at
        mem[2 * i + 1] = n
        arrays[name] = mem[at : at + words[i]].view(dt)[:n]
        at += words[i]
    st = TableState._make([*(arrays[name] for name in FIELDS), mem])
    st.params[:] = params.to_array()
    st.skeys[:] = EMPTY
    st.sentry[:] = -1
    st.half[:] = -1
    st.head[:] = -1
    st.free_entries[:] = np.arange(params.n_slots - 1, -1, -1, dtype=np.int32)
    st.meta[M_FREE_E] = params.n_slots
    st.meta[M_MAXLIVE] = max_live
    st.rng[0] = rng_seed & ((1 << 64) - 1)
    return st


@inlined
def _field(mem: NDArray[np.uint64], i: int, dtype: Any) -> Any:
    """Field ``i`` of ``mem`` as an array: no checks, so unused fields compile to nothing."""
    return view_of(mem, np.int64(mem[2 * i]), np.int64(mem[2 * i + 1]), dtype)


@inlined
def unpack(mem: NDArray[np.uint64]) -> TableState:
    """The ``TableState`` whose buffer is ``mem`` (inside kernels; field order of ``FIELDS``)."""
    return TableState(
        _field(mem, 0, np.uint64),
        _field(mem, 1, np.uint8),
        _field(mem, 2, np.uint32),
        _field(mem, 3, np.uint8),
        _field(mem, 4, np.uint64),
        _field(mem, 5, np.uint64),
        _field(mem, 6, np.int32),
        _field(mem, 7, np.int32),
        _field(mem, 8, np.int32),
        _field(mem, 9, np.int32),
        _field(mem, 10, np.uint8),
        _field(mem, 11, np.int32),
        _field(mem, 12, np.uint8),
        _field(mem, 13, np.int32),
        _field(mem, 14, np.int32),
        _field(mem, 15, np.int32),
        _field(mem, 16, np.int32),
        _field(mem, 17, np.int32),
        _field(mem, 18, np.int32),
        _field(mem, 19, np.int32),
        _field(mem, 20, np.int32),
        _field(mem, 21, np.int32),
        _field(mem, 22, np.int32),
        _field(mem, 23, np.uint64),
        _field(mem, 24, np.int64),
        _field(mem, 25, np.uint64),
        _field(mem, 26, np.uint64),
        mem,
    )
