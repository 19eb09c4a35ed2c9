"""Full forwarding-decision latency at one edge (paper Table 2 "Forwarding", §5.5).

One decision = hash a prompt at every length the edge queries (one pass), read every
(table, shard) view at those lengths with the monotonicity rule, and score every worker with the
joint score — ``kvcompass.discovery.EdgeDiscovery.decide``, the code the edge runs. The index is
populated with at least ``--entries`` entries (default 10^6): real prompt families registered at
their workers' registration lengths, plus random keys to reach the size.

    python bench/forwarding.py --workers 14 --regions 3 --prompt-tokens 4096 [--json]
    python bench/forwarding.py --workers 4096 --regions 64 --prompt-tokens 4096 [--json]

A (workers, regions) pair without a built-in deployment gets a synthetic one (``synthetic``):
regions at seeded random points on the globe, WAN one-way latency from great-circle distance by
the same fit paper-128x16 uses for its added regions, workers split evenly, β = 0.086 ms/token.

Paper (C++, 14 workers, 5 levels, 4096 tokens): 20.6 µs P50, 21.5 µs P99, 48K decisions/s.
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np

from kvcompass.cli.deployments import load_deployment
from kvcompass.deployment import Deployment, Region
from kvcompass.discovery import EdgeDiscovery
from kvcompass.index import DiscoveryIndex
from kvcompass.index_view import IndexView
from kvcompass.keys import KeyNamespace, PrefixHasher
from kvcompass.layout import TableLayout
from kvcompass.levels import Levels
from kvcompass.router import Router

DEPLOYMENTS = {
    (14, 3): "paper-testbed-14x3",
    (11, 4): "paper-na-11x4",
    (64, 8): "paper-64x8",
    (128, 16): "paper-128x16",
}
VOCAB = 128_256
EARTH_KM = 6371.0


def synthetic(n_workers: int, n_regions: int, seed: int) -> Deployment:
    """A large deployment: seeded random region sites, distance-fitted WAN, even worker split.

    One-way WAN = 9.72 ms + 7.346 ms per 1000 km of great-circle distance (paper-128x16's fit of
    CloudPing pairs); the same block size, levels and in-region latency as the paper's.
    """
    if not 1 <= n_regions <= n_workers:
        raise ValueError(f"expected 1 <= regions <= workers, got {n_regions}, {n_workers}")
    rng = np.random.default_rng(seed)
    lat = np.arcsin(rng.uniform(-0.9, 0.9, n_regions))  # uniform on the sphere's populated band
    lon = rng.uniform(-math.pi, math.pi, n_regions)
    wan = [[0.0] * n_regions for _ in range(n_regions)]
    for i in range(n_regions):
        for j in range(i + 1, n_regions):
            c = math.sin(lat[i]) * math.sin(lat[j]) + math.cos(lat[i]) * math.cos(
                lat[j]
            ) * math.cos(lon[i] - lon[j])
            km = EARTH_KM * math.acos(max(-1.0, min(1.0, c)))
            wan[i][j] = wan[j][i] = round(9.72 + 7.346 * km / 1000.0, 2)
    sizes = [n_workers // n_regions + (r < n_workers % n_regions) for r in range(n_regions)]
    regions = tuple(Region(f"r{r}", sizes[r], 0.086) for r in range(n_regions))
    return Deployment(
        name=f"synthetic-{n_workers}x{n_regions}",
        regions=regions,
        wan_one_way_ms=tuple(tuple(row) for row in wan),
        in_region_one_way_ms=0.5,
        source="bench/forwarding.py synthetic(): seeded sites, distance-fitted WAN",
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--workers", type=int, default=14)
    ap.add_argument("--regions", type=int, default=3)
    ap.add_argument("--prompt-tokens", type=int, default=4096)
    ap.add_argument("--entries", type=int, default=1_000_000)
    ap.add_argument("--decisions", type=int, default=20_000)
    ap.add_argument("--families", type=int, default=2_000)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    name = DEPLOYMENTS.get((args.workers, args.regions))
    if name is not None:
        dep = load_deployment(name)
    elif 1 <= args.regions <= args.workers:
        dep = synthetic(args.workers, args.regions, args.seed)
    else:
        ap.error(f"expected 1 <= regions <= workers, got {args.regions} and {args.workers}")
    res = run(dep, args)
    if args.json:
        print(json.dumps(res))
    else:
        for k, v in res.items():
            print(f"{k:>28}: {v}")


def run(dep: Deployment, args: argparse.Namespace) -> dict[str, object]:
    rng = np.random.default_rng(args.seed)
    levels = Levels.from_deployment(dep)
    layout = TableLayout.for_regions([r.n_workers for r in dep.regions])
    per_view = args.entries // (layout.n_tables * args.shards)
    index = DiscoveryIndex(
        layout, n_shards=args.shards, initial_capacity=int(per_view * 1.1) + 64, seed=args.seed
    )
    hasher = PrefixHasher(KeyNamespace(model_id="meta-llama/Llama-3.1-8B-Instruct"))
    t = args.prompt_tokens
    families = rng.integers(0, VOCAB, size=(args.families, t), dtype=np.int32)
    t0 = time.perf_counter()
    for f in range(args.families):
        holders = rng.choice(dep.n_workers, size=int(rng.integers(1, 4)), replace=False)
        cut = int(rng.integers(t // 4, t + 1))
        for w in holders.tolist():
            reg = levels.registration_lengths(int(dep.worker_region[w]))
            reg = reg[reg <= cut]
            if reg.size:
                index.register(w, hasher.keys_at(families[f], reg))
    while index.entries() < args.entries:
        w = int(rng.integers(0, dep.n_workers))
        n = min(200_000, args.entries - index.entries() + 1000)
        index.register(w, rng.integers(0, 2**63, size=n, dtype=np.uint64))
    build_s = time.perf_counter() - t0
    view = IndexView(layout, levels.matrix, args.shards)
    view.apply_all(index.full_images())
    router = Router.from_deployment(dep, levels, 0)
    router.set_local_queues(rng.uniform(0, 50, size=int((dep.worker_region == 0).sum())), 0.0)
    for r in range(1, dep.n_regions):
        ids = np.flatnonzero(dep.worker_region == r)
        router.on_broadcast(r, ids, rng.uniform(0, 50, size=ids.size), 0.0)
    edge = EdgeDiscovery(0, hasher, view, router)
    prompts = np.empty((args.decisions, t), dtype=np.int32)
    which = rng.integers(0, args.families, size=args.decisions)
    cuts = rng.integers(t // 8, t, size=args.decisions)
    for i in range(args.decisions):
        prompts[i, : cuts[i]] = families[which[i], : cuts[i]]
        prompts[i, cuts[i] :] = rng.integers(0, VOCAB, size=t - cuts[i], dtype=np.int32)
    for i in range(min(200, args.decisions)):  # warm up (numba dispatch, caches)
        edge.decide(prompts[i], 0.0)
    lat = np.empty(args.decisions, dtype=np.float64)
    cpu = np.empty(args.decisions, dtype=np.float64)
    hits = 0
    clock = time.perf_counter_ns
    cpu_clock = time.thread_time_ns
    for i in range(args.decisions):
        c = cpu_clock()
        s = clock()
        d, _ = edge.decide(prompts[i], 0.0)
        e = clock()
        cpu[i] = (cpu_clock() - c) / 1e3
        lat[i] = (e - s) / 1e3
        hits += d.claimed_tokens > 0
    parts = _breakdown(edge, prompts[: min(5000, args.decisions)])
    return {
        "deployment": dep.name,
        "workers": dep.n_workers,
        "regions": dep.n_regions,
        "prompt_tokens": t,
        "query_lengths": int(view.query_lengths(0).size),
        "entries": index.entries(),
        "build_s": round(build_s, 2),
        "decision_p50_us": round(float(np.percentile(lat, 50)), 2),
        "decision_p99_us": round(float(np.percentile(lat, 99)), 2),
        "decision_cpu_p50_us": round(float(np.percentile(cpu, 50)), 2),
        "decision_cpu_p99_us": round(float(np.percentile(cpu, 99)), 2),
        "decisions_per_s": round(1e6 / float(lat.mean()), 0),
        "tables": view.layout.n_tables,
        "winner_claims_a_match": round(hits / args.decisions, 3),
        **parts,
    }


def _breakdown(edge: EdgeDiscovery, prompts: np.ndarray) -> dict[str, float]:
    """Median µs of each stage, timed separately (their sum exceeds the whole by call overhead)."""
    all_lengths = edge.view.query_lengths(edge.origin)
    lengths = all_lengths[all_lengths <= prompts.shape[1]]
    h, m, s = [], [], []
    clock = time.perf_counter_ns
    for p in prompts:
        a = clock()
        keys = edge.hasher.keys_at(p, lengths)
        b = clock()
        match = edge.view.match_keys(edge.origin, lengths, keys)
        c = clock()
        edge.router.choose(len(p), match.matched_tokens, match.tiers, 0.0)
        d = clock()
        h.append(b - a)
        m.append(c - b)
        s.append(d - c)
    return {
        "hash_p50_us": round(float(np.median(h)) / 1e3, 2),
        "lookup_p50_us": round(float(np.median(m)) / 1e3, 2),
        "score_p50_us": round(float(np.median(s)) / 1e3, 2),
    }


if __name__ == "__main__":
    main()
