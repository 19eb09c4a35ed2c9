"""The differential test's edge half (issue 25): the simulator's decider events through the edge.

``test_decider_replay`` records every call the simulator's wiring makes on each region's
``Decider`` during a run. Here the same recording is fed, event by event, through the edge's
wiring instead — one ``edge.service.EdgeService`` per region over an untouched decider built the
same way, its clock set to the event's — using only the service's own entry points (the ones the
HTTP handlers, the loads poller and the Kafka followers call). Every plan, verdict, vector and
announcement must come out identical: the edge runs what the simulator measures.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from edge.service import EdgeService, Explained
from kvcompass.decider import Plan
from sim.schemes.kvcompass import KVCompass
from tests.sim.test_decider_replay import _plan_key, _record, _run
from wire.codec import AvroCodec
from wire.config import PipelineConfig
from wire.producer import MemoryProducer
from wire.registry import InProcessRegistry

NOW_ARG = {
    "decide": 3, "dispatch": 1, "on_relay": 3, "on_refused": 3, "on_first_token": 2,
    "on_local_loads": 3, "on_vector": 1, "on_peer_forward": 4, "broadcast": 0, "piggyback": 1,
}  # fmt: skip
"""Where each recorded call carries its clock (the service reads it from its own clock)."""


def _key(out: Any) -> Any:
    """``_plan_key`` without the forward id (each edge numbers its own requests)."""
    k = _plan_key(out)
    if isinstance(k, tuple) and k and k[0] == "Plan":
        return k[:1] + k[2:]
    return k


def _published(sink: MemoryProducer, since: int, codec: AvroCodec) -> list[Any]:
    """The vectors an edge produced since record ``since``: (dest, region, ids, queues)."""
    out = []
    for rec in sink.records[since:]:
        assert rec.value is not None
        _, v = codec.decode(rec.value)
        out.append((v["to_region_id"], v["region_id"], v["worker_ids"], v["queue_ms"]))
    return out


@pytest.mark.parametrize("name", ["kvcompass", "kvcompass_no_booking"])
def test_the_simulators_recorded_events_through_the_edge_service__same_decisions(
    name: str,
) -> None:
    """``kvcompass_no_booking``: the edge holds it as a variant beside its booking decider
    (``edge.app.assemble``), which is told the same facts and must not change its decisions."""
    log = _record(_run(name))
    seen = {n for _, n, _, _ in log}
    assert {"decide", "dispatch", "on_first_token", "broadcast", "on_local_loads", "on_vector",
            "piggyback"} <= seen  # fmt: skip
    assert ("on_relay" in seen) == (name == "kvcompass")  # relays only with booking
    fresh = _run(name)
    scheme = fresh.scheme
    assert isinstance(scheme, KVCompass)
    booking = _run().scheme
    assert isinstance(booking, KVCompass)
    now = [0.0]
    codec = AvroCodec(InProcessRegistry())
    sinks = [MemoryProducer() for _ in scheme.deciders]
    topics = PipelineConfig().topics
    services = [
        EdgeService(
            fresh.deployment,
            dec if name == "kvcompass" else booking.deciders[r],
            model="m",
            codec=codec,
            sink=sinks[r],
            topics=topics,
            clock_ms=lambda: now[0],
            variants={} if name == "kvcompass" else {name: dec},
            scheme=name,
        )
        for r, dec in enumerate(scheme.deciders)
    ]
    ex_of: dict[tuple[int, int], Explained] = {}
    checked = 0
    for r, call, args, want in log:
        if call not in NOW_ARG:
            continue  # lookups: the service takes them with the request
        svc = services[r]
        now[0] = float(args[NOW_ARG[call]])
        if call == "decide":
            fid, lookup, n = args[0], args[1], args[2]
            ex = ex_of[(r, fid)] = svc.decide(f"r{fid}", np.zeros(n, np.int32), lookup=lookup)
            assert _key(ex.plan) == _key_of(want), (r, call)
            checked += 1
        elif call == "dispatch":
            plan: Plan = args[0]
            ex = ex_of[(r, plan.fid)]
            svc.dispatch(ex, plan.worker, np.zeros(0, np.int32), relayed=plan.relay_region >= 0)
            assert _key(ex.plan) == _key(plan), (r, call)
        elif call == "on_relay":
            fid, sl, lookup = args[0], args[1], args[2]
            got, vec = svc.on_relay(f"r{fid}", np.zeros(0, np.int32), sl, lookup=lookup)
            if got is not None:
                ex_of[(r, fid)] = got
            assert want == ("Verdict", None if got is None else got.plan.worker, vec is None)
            checked += 1
        elif call == "on_refused":
            ex = ex_of[(r, args[0])]
            svc.on_refused(ex, args[1])
            assert _key(ex.plan) == _key_of(want), (r, call)
            checked += 1
        elif call == "on_first_token":
            vec = args[4] if len(args) > 4 else None
            if (r, args[0]) not in ex_of:
                # a plain relay's first byte at the serving edge (no booking): the simulator
                # tells a decider that never saw it (a no-op); the edge has nothing to tell
                assert name != "kvcompass" and vec is None
                continue
            svc.on_first_token(ex_of[(r, args[0])], args[1], args[3], vec)
        elif call == "on_local_loads":
            svc.on_local_loads(args[0], args[1], args[2])
        elif call == "on_vector":
            svc.on_vector(args[0])
        elif call == "on_peer_forward":
            svc.on_peer_forward(args[0], args[1], args[2], args[3])
        elif call == "broadcast":
            since = len(sinks[r].records)
            svc.broadcast()
            got_v = _published(sinks[r], since, codec)
            assert [(d, reg, ids) for d, reg, ids, _ in got_v] == [w[:3] for w in want]
            for (_, _, _, qs), w in zip(got_v, want, strict=True):
                assert np.allclose(qs, w[3], rtol=1e-6, atol=1e-3)  # Avro floats are 32-bit
        elif call == "piggyback":
            assert _plan_key(svc.piggyback(args[0])) == want, (r, call)
    assert checked >= 50


def _key_of(want: Any) -> Any:
    """A recorded plan key without its forward id."""
    return want[:1] + want[2:]
