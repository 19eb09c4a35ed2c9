"""The simulator's KVCompass is its deciders' event streams: record, replay, same decisions.

Every call the simulator's wiring makes on each region's ``Decider`` (requests, relays, refusals,
first tokens, readings, vectors, announcements, with their clocks) is recorded during a run and
replayed into fresh deciders built the same way; every plan and verdict must come out identical.
This is the simulator half of issue 25's differential test: the edge's wiring, fed the same
recording through its HTTP/Kafka handlers, must produce the same plans too.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kvcompass.decider import Decider
from kvcompass.levels import Levels
from sim.config import SimConfig
from sim.engine.requests import Requests
from sim.runner import Run
from sim.schemes.kvcompass import KVCompass
from tests.sim._tiny import path, workload
from tests.sim.baseline_fakes import three_regions

CALLS = (
    "lookup_keys", "decide", "dispatch", "on_relay", "on_refused", "on_first_token",
    "on_local_loads", "on_vector", "on_peer_forward", "broadcast", "piggyback",
    "on_migration_done",
)  # fmt: skip


def _plan_key(out: Any) -> Any:
    """What must be identical between the run and the replay (decisions are data)."""
    if out is None:
        return None
    name = type(out).__name__
    if name == "Plan":
        d = out.decision
        return (name, out.fid, out.worker, out.relay_region, d.worker, round(d.score_ms, 9))
    if name == "Verdict":
        return (name, None if out.plan is None else out.plan.worker, out.vector is None)
    if name == "Sent":
        return (name, out.announce, len(out.migrations))
    if isinstance(out, list):
        return [(dest, v.region, v.worker_ids.tolist(), v.queue_ms.round(9).tolist())
                for dest, v in out]  # fmt: skip
    if name == "QueueVector":
        return (out.region, out.worker_ids.tolist(), out.queue_ms.round(9).tolist())
    return name


def _record(run: Run) -> list[tuple[int, str, tuple[Any, ...], Any]]:
    scheme = run.scheme
    assert isinstance(scheme, KVCompass)
    log: list[tuple[int, str, tuple[Any, ...], Any]] = []
    for r, dec in enumerate(scheme.deciders):
        for name in CALLS:
            real = getattr(dec, name)

            def spy(*args: Any, _r: int = r, _n: str = name, _f: Any = real) -> Any:
                out = _f(*args)
                log.append((_r, _n, args, _plan_key(out)))
                return out

            setattr(dec, name, spy)
    run.run()
    return log


def _run(scheme: str = "kvcompass") -> Run:
    dep = three_regions(wan=100.0, workers=(2, 2, 2))
    n = 60  # a burst from regions c and b overflows to the others, through their edges
    prompts = [path(1 + i % 3 if i % 4 else 100 + i, 40, i, 4) for i in range(n)]
    wl = workload(prompts, [4.0 * i for i in range(n)], [2 - (i % 5 == 0) for i in range(n)])
    levels = Levels.from_deployment(dep)
    cfg = SimConfig(seed=3)
    return Run(scheme, Requests(wl, levels, cfg.chunk_tokens_for(16)), dep, levels, cfg)


def test_replaying_the_recorded_events__gives_the_same_decisions() -> None:
    run = _run()
    log = _record(run)
    names = {n for _, n, _, _ in log}
    assert {"decide", "on_relay", "on_first_token", "on_local_loads", "on_vector"} <= names
    fresh = _run()  # same construction, untouched deciders
    scheme = fresh.scheme
    assert isinstance(scheme, KVCompass)
    deciders: list[Decider] = scheme.deciders
    replayed = 0
    for r, name, args, want in log:
        out = getattr(deciders[r], name)(*args)
        assert _plan_key(out) == want, (r, name)
        replayed += name in ("decide", "on_relay", "on_refused")
    assert replayed >= 50
    assert np.isfinite(run.rec.ttft_ms).all()
