"""Full forwarding-decision latency at one edge (paper Table 2 "Forwarding", §5.5).

One decision = hash a prompt at every length the edge queries (one pass), read every
(table, shard) view at those lengths with the monotonicity rule, and score every worker with the
joint score — ``kvcompass.discovery.EdgeDiscovery.decide``, the code the edge runs. The index is
populated with at least ``--entries`` entries (default 10^6): real prompt families registered at
their workers' registration lengths, plus random keys to reach the size.

    python bench/forwarding.py --workers 14 --regions 3 --prompt-tokens 4096 [--json]
    python bench/forwarding.py --workers 4096 --regions 64 --prompt-tokens 4096 [--json]

A (workers, regions) pair without a built-in deployment gets one from real geography
(``kvcompass.geography.cloud_deployment``: the first ``regions`` public cloud region sites,
great-circle WAN latency with a fibre factor, workers split evenly, β = 0.086 ms/token);
4,096 workers in 64 regions is the built-in ``cloud-4096x64``, its output.

Paper (C++, 14 workers, 5 levels, 4096 tokens): 20.6 µs P50, 21.5 µs P99, 48K decisions/s.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from kvcompass.deployment import Deployment
from kvcompass.discovery import EdgeDiscovery
from kvcompass.errors import ConfigError
from kvcompass.geography import cloud_deployment
from kvcompass.index import DiscoveryIndex
from kvcompass.index_view import IndexView
from kvcompass.keys import KeyNamespace, PrefixHasher
from kvcompass.layout import TableLayout
from kvcompass.levels import Levels
from kvcompass.router import Router, shortlist
from wire.deployments import load_deployment

DEPLOYMENTS = {
    (14, 3): "paper-testbed-14x3",
    (11, 4): "paper-na-11x4",
    (64, 8): "paper-64x8",
    (128, 16): "paper-128x16",
    (4096, 64): "cloud-4096x64",
}
VOCAB = 128_256


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
    else:
        try:
            dep = cloud_deployment(args.workers, args.regions)
        except ConfigError as exc:
            ap.error(str(exc))
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
    parts = _breakdown(edge, prompts[: min(5000, args.decisions)], dep)
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


def _breakdown(edge: EdgeDiscovery, prompts: np.ndarray, dep: Deployment) -> dict[str, float]:
    """Median µs of each stage, timed separately (their sum exceeds the whole by call overhead),
    and the score through the per-region shortlist (``kvcompass.router.shortlist``, not wired
    into the Router): its P50/P99 µs, hash + lookup + shortlist per prompt (a wired decision
    without the Decision object), the workers and regions it scored, and how often its winner
    differs from the full score's (0 by construction)."""
    all_lengths = edge.view.query_lengths(edge.origin)
    lengths = all_lengths[all_lengths <= prompts.shape[1]]
    router = edge.router
    state, params = router._state, router._params
    offsets = dep.worker_offsets
    agg = np.empty((shortlist.N_AGG, dep.n_regions))
    shortlist.region_aggregates(state, params, offsets, agg)
    top_r = np.empty(router._top_k, np.int64)
    top_s = np.empty(router._top_k)
    h, m, s, short, n_scored, n_regions, path = [], [], [], [], [], [], []
    differ = 0
    clock = time.perf_counter_ns
    for p in prompts:
        a = clock()
        keys = edge.hasher.keys_at(p, lengths)
        b = clock()
        match = edge.view.match_keys(edge.origin, lengths, keys)
        c = clock()
        d = router.choose(len(p), match.matched_tokens, match.tiers, 0.0)
        e = clock()
        _, scored, regions = shortlist.shortlist_top(
            len(p), match.matched_tokens, match.tiers, state, params, offsets, agg, top_r, top_s
        )
        f = clock()
        h.append(b - a)
        m.append(c - b)
        s.append(e - c)
        short.append(f - e)
        path.append((c - a) + (f - e))  # hash + lookup + shortlist, the same prompt
        n_scored.append(scored)
        n_regions.append(regions)
        differ += int(top_r[0]) != d.worker
    return {
        "hash_p50_us": round(float(np.median(h)) / 1e3, 2),
        "lookup_p50_us": round(float(np.median(m)) / 1e3, 2),
        "score_p50_us": round(float(np.median(s)) / 1e3, 2),
        "score_p99_us": round(float(np.percentile(s, 99)) / 1e3, 2),
        "shortlist_score_p50_us": round(float(np.median(short)) / 1e3, 2),
        "shortlist_score_p99_us": round(float(np.percentile(short, 99)) / 1e3, 2),
        "hash_lookup_shortlist_p50_us": round(float(np.median(path)) / 1e3, 2),
        "hash_lookup_shortlist_p99_us": round(float(np.percentile(path, 99)) / 1e3, 2),
        "shortlist_workers_scored_mean": round(float(np.mean(n_scored)), 1),
        "shortlist_regions_scored_mean": round(float(np.mean(n_regions)), 2),
        "shortlist_winner_differs": differ,
    }


if __name__ == "__main__":
    main()
