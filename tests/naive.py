"""Slow, obviously-correct twins of the numba kernels; one section per module."""

from __future__ import annotations

import mmh3
import numpy as np
from numpy.typing import NDArray

# =============================================================================================
# kvcompass.keys — MurmurHash3 x64-128 prefix keys
# =============================================================================================
from kvcompass.keys import HASH_SEED, KEY_MASK, KeyNamespace


def keys_at_bytes(
    namespace: KeyNamespace, tokens: NDArray[np.int32], lengths: NDArray[np.int64]
) -> list[int]:
    """Reference: re-hash the whole byte string of every prefix with ``mmh3.hash128``."""
    header = namespace.header_bytes()
    raw = np.asarray(tokens, dtype="<i4").tobytes()
    return [
        int(mmh3.hash128(header + raw[: 4 * int(c)], HASH_SEED, signed=False)) & KEY_MASK
        for c in lengths
    ]


def first_negative(a: NDArray[np.int32]) -> int:
    """Twin of ``keys._first_negative``: index of the first negative token id, -1 if none."""
    return next((i for i, v in enumerate(a.tolist()) if v < 0), -1)


def first_bad_length(lens: NDArray[np.int64], max_len: int) -> int:
    """Twin of ``keys._first_bad_length``: first length < 1, > max_len or below its predecessor."""
    prev = 1
    for i, c in enumerate(lens.tolist()):
        if c < prev or c > max_len:
            return i
        prev = c
    return -1


def keys_at_mmh3_hasher(
    namespace: KeyNamespace, tokens: NDArray[np.int32], lengths: NDArray[np.int64]
) -> list[int]:
    """One pass with an ``mmh3.mmh3_x64_128`` hasher object: feed each segment, digest at each cut.

    In mmh3 5.x ``uintdigest()`` finalises a copy of the state (the hasher stays usable), and
    returns ``h1 | h2 << 64``, so the low 63 bits are the key's bits 0..62 of h1.
    """
    hasher = mmh3.mmh3_x64_128(namespace.header_bytes(), HASH_SEED)
    raw = memoryview(np.asarray(tokens, dtype="<i4").tobytes())
    keys: list[int] = []
    fed = 0
    for c in lengths:
        end = 4 * int(c)
        hasher.update(raw[fed:end])
        fed = end
        keys.append(int(hasher.uintdigest()) & KEY_MASK)
    return keys


# =============================================================================================
# kvcompass.ludo — hashes, keyless lookup, a dict-based reference table, table invariants
# =============================================================================================
from kvcompass.ludo import LudoParams, LudoTable, PatchBatch, ViewArrays  # noqa: E402

MASK64 = (1 << 64) - 1


def ludo_mix64(key: int, seed: int) -> int:
    """splitmix64-style finaliser of ``(key ^ seed) * golden``, in plain Python ints."""
    z = ((key ^ seed) * 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def ludo_reduce32(x: int, n: int) -> int:
    return (x * n) >> 32


def ludo_bucket_pair(key: int, bucket_seed: int, n_buckets: int) -> tuple[int, int]:
    h = ludo_mix64(key, bucket_seed)
    return ludo_reduce32(h & 0xFFFFFFFF, n_buckets), ludo_reduce32(h >> 32, n_buckets)


def ludo_locator_cells(key: int, locator_seed: int, ma: int, mb: int) -> tuple[int, int]:
    g = ludo_mix64(key, locator_seed)
    return ludo_reduce32(g & 0xFFFFFFFF, ma), ma + ludo_reduce32(g >> 32, mb)


def ludo_slot_of(key: int, slot_seed: int, seed8: int) -> int:
    s = slot_seed ^ (((seed8 + 1) * 0xD1B54A32D192ED03) & MASK64)
    return ludo_mix64(key, s) >> 62


def ludo_fingerprint(key: int, fp_seed: int, fp_bits: int) -> int:
    return 0 if fp_bits == 0 else ludo_mix64(key, fp_seed) >> (64 - fp_bits)


def ludo_position(params: LudoParams, arrays: ViewArrays, key: int) -> int:
    """Slot position (bucket*4 + slot) a keyless lookup of ``key`` reads."""
    b0, b1 = ludo_bucket_pair(key, params.bucket_seed, params.n_buckets)
    ca, cb = ludo_locator_cells(
        key, params.locator_seed, params.locator_a_cells, params.locator_b_cells
    )
    loc = [int(w) for w in (arrays.locator[ca >> 6], arrays.locator[cb >> 6])]
    bit = ((loc[0] >> (ca & 63)) ^ (loc[1] >> (cb & 63))) & 1
    bucket = b1 if bit else b0
    return bucket * 4 + ludo_slot_of(key, params.slot_seed, int(arrays.seeds[bucket]))


def naive_lookup(params: LudoParams, arrays: ViewArrays, key: int) -> int:
    """Pure-Python keyless lookup over ``ViewArrays`` (0 = no holder)."""
    pos = ludo_position(params, arrays, key)
    fb = params.fp_bytes
    if fb:
        stored = sum(int(arrays.fps[pos * fb + i]) << (8 * i) for i in range(fb))
        if stored != ludo_fingerprint(key, params.fp_seed, params.fp_bits):
            return 0
    vw = params.value_words
    return sum(int(arrays.values[pos * vw + i]) << (32 * i) for i in range(vw))


def naive_apply(params: LudoParams, arrays: ViewArrays, batch: PatchBatch) -> None:
    """Pure-Python patch application: bucket images, then locator words, in place."""
    vw, fb = params.value_words, params.fp_bytes
    for i, b in enumerate(batch.bucket_ids.tolist()):
        arrays.seeds[b] = int(batch.bucket_seeds[i])
        for s in range(4):
            pos = b * 4 + s
            v = int(batch.bucket_values[i, s])
            for h in range(vw):
                arrays.values[pos * vw + h] = (v >> (32 * h)) & 0xFFFFFFFF
            f = int(batch.bucket_fps[i, s])
            for h in range(fb):
                arrays.fps[pos * fb + h] = (f >> (8 * h)) & 0xFF
    for i, w in enumerate(batch.word_ids.tolist()):
        arrays.locator[w] = int(batch.words[i])


class NaiveLudoTable:
    """The semantics of ``LudoTable.update``/``clear_bits``/``get`` with a dict."""

    def __init__(self) -> None:
        self.d: dict[int, int] = {}

    def update(
        self, keys: NDArray[np.uint64], clears: NDArray[np.uint64], sets: NDArray[np.uint64]
    ) -> None:
        for k, c, s in zip(keys.tolist(), clears.tolist(), sets.tolist(), strict=True):
            v = (self.d.get(k, 0) & ~c & MASK64) | s
            if v:
                self.d[k] = v
            else:
                self.d.pop(k, None)

    def clear_bits(self, mask: int) -> None:
        self.d = {k: v & ~mask for k, v in self.d.items() if v & ~mask}

    def get(self, keys: NDArray[np.uint64]) -> list[int]:
        return [self.d.get(k, 0) for k in keys.tolist()]


def ludo_dirty_images(table: LudoTable) -> tuple[PatchBatch, list[int], list[int]]:
    """What ``table._emit`` returns for pending non-header changes, the numpy way (read-only).

    The images of the sorted dirty bucket and word lists, cut by ``batch_from_arrays``; also
    the dirty lists themselves, which the kernel must leave cleared.
    """
    from kvcompass.ludo.patches import batch_from_arrays
    from kvcompass.ludo.state import M_NB, M_NW

    st = table._st
    buckets = np.sort(st.blist[: st.meta[M_NB]]).astype(np.int64)
    words = np.sort(st.wlist[: st.meta[M_NW]]).astype(np.int64)
    batch = batch_from_arrays(
        table.params,
        st.seeds,
        st.values,
        st.fps,
        st.locator,
        buckets,
        words,
        header=False,
        commit=False,
    )
    return batch, buckets.tolist(), words.tolist()


def ludo_table_invariants(table: LudoTable) -> list[str]:
    """Every structural invariant of the maintenance table, checked slowly; returns violations."""
    st = table._st  # test-only access to the kernels' arrays
    p = table.params
    arrays = table.view_arrays()
    bad: list[str] = []
    empty = MASK64
    expect_halves: dict[int, set[int]] = {}
    parent = list(range(p.locator_a_cells + p.locator_b_cells))

    def root(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    n_live = 0
    vw = p.value_words
    for pos in range(p.n_slots):
        key = int(st.skeys[pos])
        value = sum(int(arrays.values[pos * vw + i]) << (32 * i) for i in range(vw))
        if key == empty:
            if value != 0:
                bad.append(f"empty slot {pos} has value {value}")
            continue
        n_live += 1
        e = int(st.sentry[pos])
        b = pos >> 2
        b0, b1 = ludo_bucket_pair(key, p.bucket_seed, p.n_buckets)
        if b not in (b0, b1):
            bad.append(f"key {key} in bucket {b}, candidates {b0},{b1}")
        if ludo_slot_of(key, p.slot_seed, int(arrays.seeds[b])) != pos & 3:
            bad.append(f"key {key} at slot {pos & 3}, seed says otherwise")
        if value == 0:
            bad.append(f"live key {key} has value 0")
        if naive_lookup(p, arrays, key) != value:
            bad.append(f"keyless lookup of live key {key} != {value}")
        a, c = ludo_locator_cells(key, p.locator_seed, p.locator_a_cells, p.locator_b_cells)
        if (int(st.half[3 * (2 * e) + 2]), int(st.half[3 * (2 * e + 1) + 2])) != (c, a):
            bad.append(f"entry {e} half-edge endpoints stale")
        expect_halves.setdefault(a, set()).add(2 * e)
        expect_halves.setdefault(c, set()).add(2 * e + 1)
        ra, rc = root(a), root(c)
        if ra == rc:
            bad.append(f"entry {e} closes a cycle in the locator graph")
        parent[ra] = rc
    if n_live != len(table):
        bad.append(f"{n_live} occupied slots but len {len(table)}")
    for b in range(p.n_buckets):
        full = all(int(st.skeys[4 * b + s]) != empty for s in range(4))
        if bool((int(st.bfull[b >> 6]) >> (b & 63)) & 1) != full:
            bad.append(
                f"bucket {b}: full bit {not full}, but it holds {'4' if full else '< 4'} keys"
            )
    for node in range(len(parent)):
        got: set[int] = set()
        h, prev = int(st.head[node]), -1
        while h != -1 and len(got) <= n_live * 2:
            if int(st.half[3 * h + 1]) != prev:
                bad.append(f"half-edge {h} prev pointer broken")
            got.add(h)
            prev, h = h, int(st.half[3 * h])
        if got != expect_halves.get(node, set()):
            bad.append(
                f"node {node} adjacency {sorted(got)} != {sorted(expect_halves.get(node, set()))}"
            )
    return bad


# =============================================================================================
# kvcompass.router.score — the joint score, one worker at a time
# =============================================================================================
from dataclasses import dataclass as _dataclass  # noqa: E402

from kvcompass.router import score as _rs  # noqa: E402


@_dataclass(frozen=True, slots=True)
class RouterScoreRef:
    """What ``router_joint_score`` computes: the kernel's outputs, the slow way."""

    scores: list[float]
    lam: float
    min_q: float
    winner: int
    local_holder: int
    lost_to_load: bool
    remote_holder: int
    service_ms: float
    claimed: int


def router_joint_score(
    prompt_tokens: int,
    matched_tokens: NDArray[np.int64],
    tiers: NDArray[np.uint8],
    state: NDArray[np.float64],
    params: NDArray[np.float64],
) -> RouterScoreRef:
    """Reference for ``_score_kernel``: the paper's formula written out per worker.

    Ties go to the lower tie-break order (``ROW_ORDER``), then the lower id, as in the kernel.
    """
    n = len(matched_tokens)
    beta = [float(x) for x in state[_rs.ROW_BETA]]
    belief = [float(x) for x in state[_rs.ROW_BELIEF]]
    est = [float(x) for x in state[_rs.ROW_QUEUE]]
    pending = [float(x) for x in state[_rs.ROW_PENDING]]
    wan = [float(x) for x in state[_rs.ROW_WAN]]
    n1 = [float(x) for x in state[_rs.ROW_N1]]
    local = [bool(x) for x in state[_rs.ROW_LOCAL]]
    gamma, tau, lam_max = (float(params[i]) for i in (_rs.P_GAMMA, _rs.P_TAU, _rs.P_LAMBDA_MAX))
    load_aware, xregion, tier_aware, use_belief, herding = (
        bool(params[i]) for i in (_rs.P_LOAD, _rs.P_XREGION, _rs.P_TIER, _rs.P_BELIEF, _rs.P_HERD)
    )

    tq = [(est[r] + (pending[r] if herding else 0.0)) if load_aware else 0.0 for r in range(n)]
    lam = min(lam_max, min(tq) / tau) if load_aware else 0.0
    if params[_rs.P_FIX_LAMBDA]:
        lam = float(params[_rs.P_LAMBDA])
    m = [int(matched_tokens[r]) if (local[r] or xregion) else 0 for r in range(n)]
    b = [belief[r] if use_belief else 1.0 for r in range(n)]
    reload = [
        gamma * b[r] * m[r] if (tier_aware and m[r] > 0 and int(tiers[r]) == 2) else 0.0
        for r in range(n)
    ]
    scores = [
        wan[r] + tq[r] + (1 + lam) * beta[r] * (prompt_tokens - b[r] * m[r]) + reload[r]
        for r in range(n)
    ]
    order = [float(x) for x in state[_rs.ROW_ORDER]]
    winner = min(range(n), key=lambda r: (scores[r], order[r], r))
    holders = [r for r in range(n) if local[r] and m[r] > 0]
    holder = min(holders, key=lambda r: (scores[r], order[r], r)) if holders else -1
    lost = False
    if holder >= 0 and not (local[winner] and m[winner] > 0):
        lost = scores[holder] - tq[holder] <= scores[winner] - tq[winner]
    remotes = [r for r in range(n) if not local[r] and xregion and m[r] > 0 and m[r] >= n1[r]]
    remote = min(remotes, key=lambda r: (-m[r], wan[r], r)) if remotes else -1
    service = beta[winner] * (prompt_tokens - b[winner] * m[winner]) + reload[winner]
    return RouterScoreRef(
        scores=scores,
        lam=lam,
        min_q=min(tq) if load_aware else 0.0,
        winner=winner,
        local_holder=holder,
        lost_to_load=lost,
        remote_holder=remote,
        service_ms=service,
        claimed=m[winner],
    )


# =============================================================================================
# kvcompass.router.queue_view — one refresh of the per-worker queue estimates (numpy)
# =============================================================================================
def queue_view_refresh(
    arrays: tuple[NDArray[np.float64], ...],
    ids: NDArray[np.int64],
    values: NDArray[np.float64],
    now_ms: float,
    *,
    ewma: bool,
    weight: float,
    eps: float,
) -> None:
    """``_refresh_kernel`` with numpy fancy indexing (the pre-kernel code, read-all-then-write).

    ``arrays`` = (queue, pending, refreshed, idle_since), updated in place; inputs are valid.
    """
    queue, pending, refreshed, idle_since = arrays
    if ewma:
        old = queue[ids]
        values = np.where(np.isfinite(refreshed[ids]), (1 - weight) * old + weight * values, values)
    queue[ids] = values
    pending[ids] = 0.0
    refreshed[ids] = now_ms
    idle = values <= eps
    idle_since[ids] = np.where(idle, np.minimum(idle_since[ids], now_ms), np.inf)


# =============================================================================================
# sim.cluster.kernels — two-tier chunk caches (defined in tests/naive_sim.py: size limit)
# =============================================================================================
from tests.naive_sim import ChunkCacheTwin, ChunkChange  # noqa: E402, F401


# =============================================================================================
# sim.schemes._holder_kernels — chunk holders with a flip log (in tests/naive_sim.py)
# =============================================================================================
from tests.naive_sim import HolderHistoryTwin  # noqa: E402, F401


# =============================================================================================
# sim.workloads.tokens — block id -> pseudo-token ids (SplitMix64 stream per block)
# =============================================================================================
_M64 = (1 << 64) - 1


def splitmix64_mix(z: int) -> int:
    """SplitMix64 finaliser on Python ints (wrapping at 64 bits)."""
    z &= _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def block_token(block_id: int, j: int, seed: int, vocab: int = 128256) -> int:
    """Token j of block ``block_id``: output j of a SplitMix64 stream seeded by the block."""
    s = splitmix64_mix(block_id ^ seed)
    return splitmix64_mix(s + (j + 1) * 0x9E3779B97F4A7C15) % vocab


def expand_blocks_naive(
    block_ids: list[int], prompt_len: int, block_tokens: int, seed: int
) -> list[int]:
    """One prompt: token p is token (p mod block_tokens) of block p // block_tokens."""
    return [
        block_token(block_ids[p // block_tokens], p % block_tokens, seed) for p in range(prompt_len)
    ]


def concat_ranges_naive(starts: list[list[int]], counts: list[list[int]]) -> list[list[int]]:
    """Rows as Python lists: row i is the concatenation of range(start, start + count)."""
    return [
        [v for s, c in zip(srow, crow, strict=True) for v in range(s, s + c)]
        for srow, crow in zip(starts, counts, strict=True)
    ]


# =============================================================================================
# kvcompass.ring — consistent-hash rings, by sorting (point, vnode) pairs and bisecting
# =============================================================================================
def ring_owner_naive(n_members: int, vnodes: int, seed: int, key: int) -> int:
    """Owner of ``key``: the first virtual node clockwise of ``mix64(key, seed)``."""
    import bisect

    def mix(x: int) -> int:
        return splitmix64_mix(((x ^ seed) + 0x9E3779B97F4A7C15) & _M64)

    pts = sorted(
        (mix(m * vnodes + k), m * vnodes + k, m) for m in range(n_members) for k in range(vnodes)
    )
    i = bisect.bisect_left([p for p, _, _ in pts], mix(key))
    return pts[i % len(pts)][2]
