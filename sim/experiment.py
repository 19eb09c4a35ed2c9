"""Run sets: one workload (or trace) at one or more rates, under several schemes and knob values.

Owns building the workload and the request table (keys hashed once per workload, shared by every
scheme), running each scheme, and the JSON shape of the results. Must not print or plot: the CLI
renders, ``sim.plots`` draws.

Seeds: the workload is drawn from ``SeedSequence([seed, 1])``; every scheme's run uses
``SeedSequence(seed)`` (``sim.runner``), so all schemes see the same requests and the same
network randomness stream layout.

JSON (``results_json``)::

    {"sim_requests_per_s": <KVCompass's simulated requests per wall-second (else all schemes')>,
     "deployment": ..., "workload": ..., "requests": n, "rate": <first rate>, "seed": s,
     "<scheme>": {ttft_p50_ms, ttft_p99_ms, e2e_p99_ms, throughput_tok_s, peak_load_factor,
                  hit_rate, reused_tokens, recomputed_tokens, ...},   # at the first rate
     "runs": [{"rate": r, "knob": name|null, "value": v|null, "schemes": {"<scheme>": {...}}}]}

Over several seeds (``results_json_seeds``) the document adds ``"seeds": [...]``, the scheme
entries become means over seeds, and each run adds ``per_seed``, ``spread`` and ``ratios``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from kvcompass.deployment import Deployment
from kvcompass.errors import ConfigError
from kvcompass.levels import Levels
from sim import spread
from sim.config import SimConfig
from sim.engine.requests import Requests
from sim.runner import RunResult, run_scheme
from sim.workloads.workload import Workload

# Default eviction per workload (paper §5.1: LFU for Mixed, LRU for WildChat and LMSYS).
DEFAULT_EVICTION = {"mixed": "lfu", "wildchat": "lru", "lmsys": "lru"}

# Table 4's robustness knobs: CLI name -> SimConfig field.
KNOBS = {
    "jitter": "wan_jitter_frac",
    "loss": "index_loss",
    "delay": "index_extra_delay_ms",
}


def with_knob(config: SimConfig, knob: str, value: float) -> SimConfig:
    """``config`` with one Table 4 knob (``KNOBS``) set to ``value``."""
    if knob not in KNOBS:
        raise ConfigError(f"knob: expected one of {sorted(KNOBS)}, got {knob!r}")
    fields: dict[str, Any] = {KNOBS[knob]: float(value)}
    return replace(config, **fields)


@dataclass(slots=True)
class RunSet:
    """Results of one workload at one rate (and knob value) under several schemes."""

    rate: float
    knob: str | None
    value: float | None
    results: dict[str, RunResult]


def _generators() -> dict[str, Callable[..., Workload]]:
    mod = importlib.import_module("sim.workloads")
    table = getattr(mod, "WORKLOADS", None)
    if table is not None:
        return dict(table)
    # Until the package exports its registry, resolve the generator modules directly.
    return {
        "mixed": importlib.import_module("sim.workloads.mixed").make_mixed,
        "wildchat": importlib.import_module("sim.workloads.chat").make_wildchat,
        "lmsys": importlib.import_module("sim.workloads.chat").make_lmsys,
    }


ORIGIN_WEIGHTS = ("workers", "uniform", "population")


def origin_weights(deployment: Deployment, how: str) -> NDArray[np.float64] | None:
    """Share of users per region.

    ``workers`` (default): proportional to each region's worker count — the paper's per-region
    capacity follows a deployment census, i.e. providers put capacity where demand is, so demand
    is taken to follow capacity. ``uniform``: equal. ``population``: internet users of the
    region's country (``sim.workloads.regions``; puts most users in the few-worker Asian regions).
    """
    if how == "uniform":
        return None
    if how == "workers":
        w: NDArray[np.float64] = np.array(
            [r.n_workers for r in deployment.regions], dtype=np.float64
        )
        return w / float(w.sum())
    if how == "population":
        from sim.workloads.regions import population_weights

        return np.asarray(population_weights([r.name for r in deployment.regions]), np.float64)
    raise ConfigError(f"origin weights: expected one of {ORIGIN_WEIGHTS}, got {how!r}")


def make_workload(
    name: str,
    n_requests: int,
    rate_per_s: float,
    deployment: Deployment,
    seed: int,
    origins: str = "workers",
    tenants: int | None = None,
) -> Workload:
    """Draw ``n_requests`` of workload ``name`` at ``rate_per_s`` over the deployment's regions.

    ``tenants``: independent copies of the workload, each with its own private prefix (None: the
    workload's own default, Mixed 50 as in the paper's §5.3 simulation, the chat workloads
    none); ``with_tenants``."""
    gens = _generators()
    if name not in gens:
        raise ConfigError(f"workload: expected one of {sorted(gens)}, got {name!r}")
    rng = np.random.default_rng(np.random.SeedSequence([seed, 1]))
    weights = origin_weights(deployment, origins)
    extra: dict[str, Any] = {}
    if tenants is not None:
        extra["params"] = with_tenants(name, tenants)
    return gens[name](n_requests, rate_per_s, deployment.n_regions, weights, rng, **extra)


def with_tenants(name: str, tenants: int) -> Any:
    """The parameters of workload ``name`` with ``tenants`` independent tenants.

    Why a knob: the paper's §5.3 has 50 tenants replay each dataset to feed 64 simulated workers
    at 200–6000 req/s; its 14-GPU testbed (§5.2) runs at 4–40 req/s, about 1/100 of that, where
    one replay of the datasets (1 tenant) keeps each shared prefix's request rate in the range
    the simulation sees per tenant (the e2e demo's default)."""
    if name == "mixed":
        mixed = importlib.import_module("sim.workloads.mixed")
        if tenants < 1:
            raise ConfigError(f"tenants: Mixed needs at least 1, got {tenants}")
        return replace(mixed.MixedParams(), n_tenants=tenants)
    chat = importlib.import_module("sim.workloads.chat")
    base = {"wildchat": chat.WILDCHAT, "lmsys": chat.LMSYS}.get(name)
    if base is None or tenants < 0:
        raise ConfigError(f"tenants: expected >= 0 for mixed, wildchat or lmsys, got {name!r} "
                          f"{tenants}")  # fmt: skip
    return replace(base, n_tenants=tenants)


def load_trace_workload(
    path: Path,
    fmt: str,
    block_size: int,
    deployment: Deployment,
    n_requests: int,
    seed: int,
    rate_per_s: float | None,
    origins: str = "workers",
) -> Workload:
    """Read a trace (``sim.workloads.load_trace``), assign regions, keep the first n requests.

    With ``rate_per_s`` the trace's arrivals are rescaled to that mean rate (its inter-arrival
    shape is kept); with None it is replayed at its own timing. Either way ``notes`` says which.
    """
    load_trace = importlib.import_module("sim.workloads").load_trace
    rng = np.random.default_rng(np.random.SeedSequence([seed, 1]))
    wl: Workload = load_trace(
        path,
        fmt=fmt,
        block_size=block_size,
        n_regions=deployment.n_regions,
        region_weights=origin_weights(deployment, origins),
        rng=rng,
        limit=n_requests or None,
    )
    if n_requests and n_requests < len(wl):
        wl = wl.slice(0, n_requests)
    own = trace_rate_per_s(wl)
    if rate_per_s and len(wl) > 1 and own > 0:
        scale = own / rate_per_s
        note = (
            f"trace rescaled: its own mean rate {own:,.1f} req/s -> {rate_per_s:,.1f} req/s "
            f"(inter-arrival times x {scale:.4g})"
        )
        arrival = (wl.arrival_ms - wl.arrival_ms[0]) * scale
        return replace(wl, arrival_ms=arrival, notes=(*wl.notes, note))
    span_s = float(wl.arrival_ms[-1] - wl.arrival_ms[0]) / 1e3 if len(wl) else 0.0
    note = (
        f"trace replayed at its own timing: {len(wl):,} requests over {span_s:,.1f} s "
        f"(mean {own:,.1f} req/s)"
    )
    return replace(wl, notes=(*wl.notes, note))


def trace_rate_per_s(wl: Workload) -> float:
    """Mean arrival rate of a workload's own timing ((n - 1) / span; 0 if undefined)."""
    if len(wl) < 2:
        return 0.0
    span = float(wl.arrival_ms[-1] - wl.arrival_ms[0])
    return (len(wl) - 1) / (span / 1e3) if span > 0 else 0.0


def run_all(
    workload: Workload,
    deployment: Deployment,
    schemes: Sequence[str],
    config: SimConfig,
    *,
    router_config: Any = None,
    progress: Callable[[str, int], None] | None = None,
    requests: Requests | None = None,
) -> dict[str, RunResult]:
    """Run every scheme over the same requests (keys hashed once)."""
    levels = Levels.from_deployment(deployment)
    if requests is None:
        chunk = config.chunk_tokens_for(workload.block_tokens)
        requests = Requests(
            workload,
            levels,
            chunk,
            progress=None if progress is None else (lambda k: progress("hash", k)),
        )
    out: dict[str, RunResult] = {}
    for name in schemes:
        cb = None if progress is None else (lambda k, n=name: progress(n, k))
        out[name] = run_scheme(
            name, requests, deployment, levels, config, router_config=router_config, progress=cb
        )
    return out


def results_json(
    sets: Sequence[RunSet],
    *,
    deployment: str,
    workload: str,
    n_requests: int,
    seed: int,
    config: SimConfig,
) -> dict[str, Any]:
    """The results document (shape in the module docstring)."""
    doc: dict[str, Any] = {
        "deployment": deployment,
        "workload": workload,
        "requests": n_requests,
        "seed": seed,
        "config": {f: getattr(config, f) for f in config.__dataclass_fields__},
    }
    runs = []
    for s in sets:
        runs.append(
            {
                "rate": s.rate,
                "knob": s.knob,
                "value": s.value,
                "schemes": {k: r.summary for k, r in s.results.items()},
            }
        )
    doc["runs"] = runs
    if sets:
        first = sets[0]
        doc["rate"] = first.rate
        for name, r in first.results.items():
            doc[name] = r.summary
        src = first.results.get("kvcompass")
        if src is not None:
            doc["sim_requests_per_s"] = src.summary["sim_requests_per_s"]
        else:
            n = sum(r.summary["requests"] for r in first.results.values())
            wall = sum(r.wall_s for r in first.results.values())
            doc["sim_requests_per_s"] = n / max(wall, 1e-9)
    return doc


def results_json_seeds(
    by_seed: Mapping[int, Sequence[RunSet]],
    *,
    deployment: str,
    workload: str,
    n_requests: int,
    config: SimConfig,
    reference: str = "kvcompass",
) -> dict[str, Any]:
    """The results document over several seeds (``results_json``'s shape, plus the spreads).

    Every seed's run sets must be in the same (rate, knob, value) order. Each run's
    ``schemes`` (and the top-level per-scheme entries) hold the mean over seeds, field by
    field; each run adds ``per_seed`` ({seed: {scheme: summary}}), ``spread`` ({scheme: {field:
    {mean, min, max, n}}}) and ``ratios`` ({scheme: {field: {mean, min, max, n, verdict}}}:
    scheme ÷ ``reference`` per seed, ``sim.spread``). One seed: its own figures, spreads of one.
    """
    seeds = list(by_seed)
    if not seeds:
        raise ConfigError("results over seeds: expected at least one seed")
    first = by_seed[seeds[0]]
    doc = results_json(
        first,
        deployment=deployment,
        workload=workload,
        n_requests=n_requests,
        seed=seeds[0],
        config=config,
    )
    doc["seeds"] = seeds
    for k, run in enumerate(doc["runs"]):
        per_seed = {s: {n: r.summary for n, r in by_seed[s][k].results.items()} for s in seeds}
        rows = list(per_seed.values())
        run["schemes"] = spread.mean_summaries(rows)
        run["per_seed"] = {str(s): v for s, v in per_seed.items()}
        run["spread"] = {
            n: {f: sp.to_json() for f, sp in row.items()}
            for n, row in spread.scheme_spread(rows).items()
        }
        ratios: dict[str, dict[str, dict[str, Any]]] = {}
        for name in run["schemes"]:
            if name == reference:
                continue
            ratios[name] = {}
            for field, lower in spread.LOWER_IS_BETTER.items():
                r = spread.ratio_spread(rows, name, field, reference)
                ratios[name][field] = {**r.to_json(), "verdict": spread.verdict(r, lower)}
        run["ratios"] = ratios
    if doc["runs"]:
        for name, mean in doc["runs"][0]["schemes"].items():
            doc[name] = mean
    return doc
