"""Cells of a simulation plan — (workload, rate, seed, knob value, scheme) — run on every core.

Owns the plan's unit of work (``Cell``: everything one run needs, picklable), its execution in
one process or a pool of ``jobs`` processes (``run_cells``), and the per-process cache of
request tables (keys are hashed once per workload and process, not once per cell). A cell's
result depends only on the cell: each run draws from ``SeedSequence(config.seed)`` and the
workload from ``SeedSequence([seed, 1])`` (``sim.runner``, ``sim.experiment``), so ``jobs=1`` and
``jobs=N`` give the same records (tests/unit/cli/test_sim.py compares their digests). Must not
print or render: completion goes through a callback.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvcompass.deployment import Deployment
from kvcompass.levels import Levels
from sim.config import SimConfig
from sim.engine.requests import Requests
from sim.runner import RunResult, run_scheme


@dataclass(frozen=True, slots=True)
class Source:
    """How to build a cell's workload: a generated one (``workload``) or a trace file."""

    workload: str
    n_requests: int
    rate: float | None
    seed: int
    origins: str = "workers"
    tenants: int | None = None
    trace: Path | None = None
    trace_format: str = "mooncake"
    trace_block_size: int = 512


@dataclass(frozen=True, slots=True)
class Cell:
    """One run: a scheme over a source's requests under one configuration."""

    source: Source
    deployment: Deployment
    scheme: str
    config: SimConfig
    knob: str | None = None
    value: float | None = None
    router_config: Any = None


@dataclass(slots=True)
class Outcome:
    """A cell's result, the rate it ran at (a trace's own rate if none was asked) and the
    workload's notes (what a trace loader did to it)."""

    cell: Cell
    rate: float
    notes: tuple[str, ...]
    result: RunResult


_CACHE: dict[tuple[Source, int, Deployment], tuple[Requests, float]] = {}
_CACHE_SIZE = 2


def _requests(source: Source, dep: Deployment, chunk_of: SimConfig) -> tuple[Requests, float]:
    from sim import experiment

    key = (source, chunk_of.cache_chunk_tokens, dep)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    if source.trace is not None:
        wl = experiment.load_trace_workload(
            source.trace,
            source.trace_format,
            source.trace_block_size,
            dep,
            source.n_requests,
            source.seed,
            source.rate,
            source.origins,
        )
        rate = source.rate or experiment.trace_rate_per_s(wl)
    else:
        rate = source.rate or 3000.0
        wl = experiment.make_workload(
            source.workload, source.n_requests, rate, dep, source.seed, source.origins,
            source.tenants,
        )  # fmt: skip
    req = Requests(wl, Levels.from_deployment(dep), chunk_of.chunk_tokens_for(wl.block_tokens))
    while len(_CACHE) >= _CACHE_SIZE:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[key] = (req, rate)
    return req, rate


def run_cell(cell: Cell) -> Outcome:
    """Run one cell in this process (the pool's task; ``jobs=1`` calls it directly)."""
    dep = cell.deployment
    req, rate = _requests(cell.source, dep, cell.config)
    result = run_scheme(
        cell.scheme,
        req,
        dep,
        Levels.from_deployment(dep),
        cell.config,
        router_config=cell.router_config,
    )
    return Outcome(cell, rate, req.workload.notes, result)


def default_jobs() -> int:
    """All cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def run_cells(
    cells: Sequence[Cell],
    jobs: int,
    on_done: Callable[[int, Outcome], None] | None = None,
) -> list[Outcome]:
    """Run every cell, ``jobs`` at a time in separate processes (1: in this process, in order);
    the outcomes come back in the cells' order. ``on_done(index, outcome)`` as each finishes."""
    if jobs < 1:
        raise ValueError(f"jobs: expected >= 1, got {jobs}")
    out: list[Outcome | None] = [None] * len(cells)
    if jobs == 1 or len(cells) <= 1:
        for i, cell in enumerate(cells):
            out[i] = run_cell(cell)
            if on_done is not None:
                on_done(i, out[i])  # type: ignore[arg-type]
        return [o for o in out if o is not None]
    # spawn, not fork: the parent may hold threads (rich's refresher, numba's pool).
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(jobs, len(cells)), mp_context=ctx) as pool:
        pending: dict[Future[Outcome], int] = {
            pool.submit(run_cell, cell): i for i, cell in enumerate(cells)
        }
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                i = pending.pop(fut)
                out[i] = fut.result()
                if on_done is not None:
                    on_done(i, out[i])  # type: ignore[arg-type]
    return [o for o in out if o is not None]
