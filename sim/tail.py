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
of two schemes and prints the breakdown as JSON. Must not change a run.
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


def main(argv: list[str] | None = None) -> int:
    from sim.engine.requests import Requests
    from sim.experiment import DEFAULT_EVICTION, make_workload
    from sim.runner import run_scheme

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
    runs = {n: run_scheme(n, req, dep, levels, cfg) for n in (a.scheme, a.reference)}
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
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
