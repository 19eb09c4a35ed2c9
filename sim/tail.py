"""Where a scheme's slowest requests lose time against a reference, request by request (issue 34).

Both runs replay the same requests (same seed: same workload and network draws), so request i's
TTFT in each splits the same way (``sim.runner``: ``TTFT = pre + queue + service + back``):

* ``pre`` = arrival at the worker − arrival at the edge: the one-way WAN to the worker's region
  (``wan``, with ``back``, the way back) plus ``routing``: a directory lookup, a relay through
  the owning region's edge (two in-region hops), a refusal's WAN round trip;
* ``queue``: waiting in the worker's FIFO (work the router did not see, or chose to wait for);
* ``service``: prefill of the uncached part plus DRAM reload (a stale holder, or a holder the
  router did not know, shows up here as less reuse than the reference got).

``tail_breakdown`` takes the requests at or above the scheme's own P99 TTFT and gives, per term,
the mean of (scheme − reference) over them: the terms add up to the mean TTFT difference. It
also counts the tail's false hits (the worker reused less than the router claimed: a stale
holder) and requests reusing less than the reference did. ``python -m sim.tail`` runs one cell
of two schemes and prints the breakdown as JSON; for KVCompass it also records the queue each
final dispatch scored at its pick and the reuse it forwent (``decisions``), so the tail's queue
splits into what the decider saw (and accepted) and what it did not see. Must not change a run.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import numpy as np
from numpy.typing import NDArray

from kvcompass.deployment import Deployment, builtin_deployment
from kvcompass.errors import InvalidInputError
from kvcompass.levels import Levels
from sim.config import SimConfig
from sim.metrics import Record

TERMS = ("routing", "wan", "queue", "service")


def split(record: Record, arrival_ms: NDArray[np.float64], origin: NDArray[np.int64],
          deployment: Deployment) -> dict[str, NDArray[np.float64]]:  # fmt: skip
    """Per request, its TTFT in ``TERMS`` (ms); they add up to ``record.ttft_ms``."""
    region = np.asarray(deployment.worker_region, dtype=np.int64)[record.worker]
    one_way = np.array(deployment.wan_matrix_ms, dtype=np.float64)
    np.fill_diagonal(one_way, float(deployment.in_region_one_way_ms))  # the engine's in-region hop
    out = one_way[origin, region]
    pre = record.arrive_worker_ms - arrival_ms
    back = record.ttft_ms - pre - record.queue_ms - record.service_ms
    return {
        "routing": pre - out,
        "wan": out + back,
        "queue": np.asarray(record.queue_ms, dtype=np.float64),
        "service": np.asarray(record.service_ms, dtype=np.float64),
    }


def tail_breakdown(
    ours: Record,
    ref: Record,
    arrival_ms: NDArray[np.float64],
    origin: NDArray[np.int64],
    deployment: Deployment,
    q: float = 99.0,
) -> dict[str, float]:
    """Mean (ours − ref) per term over our requests at or above our ``q``-th percentile TTFT."""
    if ours.ttft_ms.shape != ref.ttft_ms.shape:
        raise InvalidInputError("expected two runs of the same requests")
    cut = float(np.percentile(ours.ttft_ms, q))
    tail = np.flatnonzero(ours.ttft_ms >= cut)
    a = split(ours, arrival_ms, origin, deployment)
    b = split(ref, arrival_ms, origin, deployment)
    res: dict[str, float] = {
        "tail_requests": float(tail.size),
        "ours_p99_ms": cut,
        "ref_p99_ms": float(np.percentile(ref.ttft_ms, q)),
        "ttft_ours_ms": float(ours.ttft_ms[tail].mean()),
        "ttft_ref_ms": float(ref.ttft_ms[tail].mean()),
    }
    for t in TERMS:
        res[f"{t}_ours_ms"] = float(a[t][tail].mean())
        res[f"{t}_ref_ms"] = float(b[t][tail].mean())
        res[f"{t}_delta_ms"] = res[f"{t}_ours_ms"] - res[f"{t}_ref_ms"]
    res["false_hits"] = float((ours.claimed[tail] > ours.reused[tail]).sum())
    res["less_reuse_than_ref"] = float((ours.reused[tail] < ref.reused[tail]).sum())
    res["reused_ours_tokens"] = float(ours.reused[tail].mean())
    res["reused_ref_tokens"] = float(ref.reused[tail].mean())
    res["routing_over_2ms"] = float((a["routing"][tail] > 2.0).sum())
    res["routing_over_50ms"] = float((a["routing"][tail] > 50.0).sum())
    res["queued_over_ref"] = float((a["queue"][tail] > b["queue"][tail]).sum())
    return res


def decisions(run: Any) -> dict[str, NDArray[np.float64]]:
    """Wrap every ``Decider.dispatch`` of a KVCompass ``sim.runner.Run`` (before ``run.run()``)
    and record, per request, at its final dispatch (the owning region's for a relay it
    accepted, the origin's second one after a refusal): ``queue`` the queue term it scored at
    its pick; ``held_pick`` the tokens its pick truly held then and ``held_best`` the most any
    worker truly held (the engine's caches as of the requests that reached their workers);
    ``seen_best`` the match the decider knew for that best holder (its index view's, or the
    pending-holder overlay's when the holder is among its explained candidates). Arrays fill
    as the run goes (NaN: never dispatched)."""
    from kvcompass.router import score as sc

    n = int(run.requests.n)
    out = {k: np.full(n, np.nan) for k in ("queue", "held_pick", "held_best", "seen_best")}
    cluster = run.cluster

    def wrap(dec: Any) -> None:
        dispatch = dec.dispatch

        def spy(plan: Any, now_ms: float) -> Any:
            rows, fid = plan.decision.top_terms, plan.fid
            ids = rows[:, sc.TERM_WORKER]
            hit = np.flatnonzero(ids == plan.worker)
            if hit.size:
                out["queue"][fid] = float(rows[hit[0], sc.TERM_QUEUE])
            held, _ = cluster.match_all(fid)
            best = int(np.argmax(held))
            out["held_pick"][fid] = float(held[plan.worker])
            out["held_best"][fid] = float(held[best])
            # What the decider scored for the best holder: its index view's match, or the
            # overlay's (pending holders) when that holder is among its explained candidates.
            seen = float(plan.lookup.match.matched_tokens[best]) if plan.lookup.keys.size else 0.0
            top = np.flatnonzero(ids == best)
            if top.size:
                seen = max(seen, float(rows[top[0], sc.TERM_MATCHED]))
            out["seen_best"][fid] = seen
            return dispatch(plan, now_ms)

        dec.dispatch = spy

    for dec in run.scheme.deciders:
        wrap(dec)
    return out


def decision_breakdown(record: Record, ref: Record, dec: dict[str, NDArray[np.float64]],
                       forgone_tokens: int = 512) -> dict[str, float]:  # fmt: skip
    """What the decider saw at the picks of its P99 requests, and where reuse was forgone."""
    tail = np.flatnonzero(record.ttft_ms >= float(np.percentile(record.ttft_ms, 99.0)))
    q = dec["queue"]
    forgone = dec["held_best"] - dec["held_pick"] >= forgone_tokens
    unseen = forgone & (dec["seen_best"] < dec["held_best"] - forgone_tokens)
    return {
        "queue_scored_ms": float(np.nanmean(q[tail])),
        "queue_unseen_ms": float(np.nanmean(record.queue_ms[tail] - q[tail])),
        "queue_scored_over_ref_ms": float(np.nanmean(q[tail] - ref.queue_ms[tail])),
        "unseen_over_500ms": float(np.sum(record.queue_ms[tail] - q[tail] > 500.0)),
        "all_queue_unseen_ms": float(np.nanmean(record.queue_ms - q)),
        "gpu_work_over_ref": float(record.service_ms.sum() / ref.service_ms.sum()),
        "forgone_requests": float(forgone.sum()),
        "forgone_tokens": float(np.nansum((dec["held_best"] - dec["held_pick"])[forgone])),
        "forgone_unseen_requests": float(unseen.sum()),
        "forgone_unseen_tokens": float(np.nansum((dec["held_best"] - dec["held_pick"])[unseen])),
        # Of those: it knew nothing of that holder (not indexed yet) / a shorter match (levels).
        "forgone_unseen_nothing": float((unseen & (dec["seen_best"] <= 0)).sum()),
        "forgone_unseen_shorter": float((unseen & (dec["seen_best"] > 0)).sum()),
        "run_reused_tokens": float(record.reused.sum()),
        "run_reused_ref_tokens": float(ref.reused.sum()),
        "run_claimed_below_held": float(np.sum(record.claimed < dec["held_pick"] - forgone_tokens)),
        "tail_forgone_requests": float(forgone[tail].sum()),
    }


def main(argv: list[str] | None = None) -> int:
    from sim.engine.requests import Requests
    from sim.experiment import DEFAULT_EVICTION, make_workload
    from sim.runner import Run, run_scheme

    p = argparse.ArgumentParser(prog="python -m sim.tail", description=__doc__.splitlines()[0])
    p.add_argument("--deployment", default="paper-64x8")
    p.add_argument("--workload", default="mixed")
    p.add_argument("--rate", type=float, default=300.0)
    p.add_argument("--requests", type=int, default=20_000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--scheme", default="kvcompass")
    p.add_argument("--reference", default="joint_ideal")
    a = p.parse_args(argv)
    dep = builtin_deployment(a.deployment)
    cfg = SimConfig(seed=a.seed, eviction=DEFAULT_EVICTION.get(a.workload, "lru"))
    levels = Levels.from_deployment(dep)
    wl = make_workload(a.workload, a.requests, a.rate, dep, a.seed)
    req = Requests(wl, levels, cfg.chunk_tokens_for(wl.block_tokens))
    runs = {a.reference: run_scheme(a.reference, req, dep, levels, cfg)}
    ours = Run(a.scheme, req, dep, levels, cfg)
    seen = decisions(ours) if hasattr(ours.scheme, "deciders") else None
    runs[a.scheme] = ours.run()
    out: dict[str, Any] = {
        "cell": f"{a.workload}-{a.rate:g}",
        "seed": a.seed,
        "scheme": a.scheme,
        "reference": a.reference,
        **tail_breakdown(
            runs[a.scheme].record,
            runs[a.reference].record,
            np.asarray(req.arrival_ms, dtype=np.float64),
            np.asarray(req.origin, dtype=np.int64),
            dep,
        ),
    }
    if seen is not None:
        out.update(decision_breakdown(runs[a.scheme].record, runs[a.reference].record, seen))
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
