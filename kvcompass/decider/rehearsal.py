"""One pass through every entry point of a ``Decider``: compiles every kernel a request reaches.

Owns ``rehearse``: on a scratch decider (built for the purpose; its state is left dirty, so never
the one that serves), a request decided, booked, answered and used; one retargeted and undone;
one forgotten; the local poll, a peer's vector and announcement, the piggyback and the Δ
broadcast; at the owning region a relay accepted and, at the origin, one refused. An edge runs it
at start-up (``edge.main.warm_up``): with a cold numba cache the kernels behind a dispatch, a
relay or a first token otherwise compile inside the first requests that reach them, seconds
each. Must not touch anything but the decider it is given.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from kvcompass.decider.decider import Decider
from kvcompass.decider.vector import QueueVector, Shortlist
from kvcompass.types import Tier


def rehearse(d: Decider, tokens: NDArray[np.int32], now_ms: float) -> int:
    """Drive the scratch decider ``d`` once through every entry point; the calls made."""
    calls = 0
    n = len(tokens)
    t = now_ms
    local = d.local
    o = d.origin
    others = [r for r in range(int(d.worker_region.max()) + 1) if r != o]
    lk = d.lookup(tokens)
    d.set_index_marks(np.full(4, -np.inf), 50.0)  # pending holders wait for the view's marks
    d.on_local_loads(local, np.full(local.size, 5.0), t, t)
    p = d.decide(1, lk, n, t)  # decided, booked, answered, used
    d.dispatch(p, t)
    d.on_first_token(1, p.worker, t + 1.0, n // 2, None)
    d.on_usage(1, n // 2, t + 2.0)
    p = d.retarget(d.decide(2, lk, n, t + 3.0), int(local[0]))  # retargeted, then undone
    d.dispatch(p, t + 3.0)
    d.undispatch(2, t + 4.0)
    d.dispatch(d.decide(3, lk, n, t + 5.0), t + 5.0)  # forgotten (no count came back)
    d.forget(3, t + 6.0)
    calls += 13
    d.vector(t + 7.0)
    d.broadcast(t + 10_000.0)
    calls += 2
    if not others:
        return calls
    r = others[0]
    remote = np.flatnonzero(d.worker_region == r).astype(np.int64)
    vec = QueueVector(r, t + 7.0, remote, np.full(remote.size, 3.0))
    d.on_vector(vec, t + 8.0)
    d.on_peer_forward(r, int(remote[0]), t + 100.0, 20.0, t + 9.0)
    d.piggyback(r, t + 10.0)
    calls += 3
    if not d.books:
        return calls
    k = min(2, local.size)  # a relay from region r, at this (owning) region
    sl = Shortlist(r, o, n, tuple(int(w) for w in local[:k]), (n // 2,) * k,
                   (int(Tier.VRAM),) * k, 0.0, math.inf)  # fmt: skip
    verdict = d.on_relay(4, sl, lk, t + 11.0)
    calls += 1
    if verdict.plan is not None:
        d.dispatch(verdict.plan, t + 11.0)
        d.on_first_token(4, verdict.plan.worker, t + 12.0, 0, None)
        calls += 2
    d.on_local_loads(local, np.full(local.size, 1e7), t + 13.0, t + 13.0)  # local full: relay
    p = d.decide(5, lk, n, t + 13.0)
    calls += 2
    if p.relay_region >= 0:
        d.dispatch(p, t + 13.0)
        d.on_refused(5, vec, n, t + 14.0)  # the owner refused: decide once more, finally
        calls += 2
    return calls
