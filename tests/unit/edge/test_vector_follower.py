"""``queue-vectors`` at the edge: what edges and sidecars send, and what cannot blind a region.

Issue 26 item 2 (edge half) and issue 25 item 2: the newest ``seq`` is kept per (region,
reporter), a reading time ahead of the edge's clock is refused (and does not move ``seq``), a
record speaks only for its own region's workers, a record meant for another region is skipped,
a sidecar's poll is ignored while the owner's edge speaks, announcements add one forward.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edge.app import EdgeApp, assemble
from edge.config import EdgeConfig
from edge.records import vector_record
from edge.sync import QueueVectorFollower
from kvcompass.decider import QueueVector
from tests.unit.edge.test_handlers import DEP, MODEL
from wire.dead_letter import DeadLetters
from wire.producer import MemoryProducer


def _rig() -> tuple[EdgeApp, QueueVectorFollower, list[float]]:
    cfg = EdgeConfig.from_mapping({"region": "a", "model": MODEL, "loads_poll_period_ms": 0.0})
    edge = assemble(cfg, DEP)
    now = [1_000_000.0]
    edge.service.clock_ms = lambda: now[0]
    dead = DeadLetters(MemoryProducer(), edge.service.codec, "dl", "edge-a")
    return edge, QueueVectorFollower(edge, None, dead), now


def _edge_vec(taken: float, q: float, to: int = -1, flying: tuple[Any, ...] = ()) -> dict[str, Any]:
    vec = QueueVector(1, taken, np.array([1], np.int64), np.array([q]), flying)
    return vector_record(vec, to)


def _sidecar_vec(seq: int, q: float) -> dict[str, Any]:
    return {"region_id": 1, "worker_ids": [1], "queue_ms": [q], "seq": seq, "timestamp_ms": seq}


def _queue(edge: EdgeApp) -> float:
    return float(edge.service.decider.router.queue_view.queue_ms[1])


def test_a_vector_from_the_future__refused_and_does_not_pin_the_region() -> None:
    edge, f, now = _rig()
    enc = edge.service.codec.encode
    assert not f.handle(0, 0, None, enc("QueueVector", _edge_vec(2.0**62, 9_000.0)))
    assert edge.service.metrics.total("dead_letters_total") == 1
    assert f.handle(0, 1, None, enc("QueueVector", _edge_vec(now[0], 7.0)))
    assert _queue(edge) == 7.0


def test_seq_is_kept_per_reporter__and_the_owners_edge_outranks_a_sidecar_poll() -> None:
    edge, f, now = _rig()
    enc = edge.service.codec.encode
    assert f.handle(0, 0, None, enc("QueueVector", _sidecar_vec(int(now[0]), 3.0)))
    assert _queue(edge) == 3.0
    now[0] += 5.0
    # an edge vector taken before the sidecar's: another reporter, so still read
    assert f.handle(0, 1, None, enc("QueueVector", _edge_vec(now[0] - 4.0, 20.0)))
    assert _queue(edge) > 3.0
    # while the owner's edge speaks (within 10 Δ), a sidecar's poll of its workers is ignored
    now[0] += 50.0
    assert not f.handle(0, 2, None, enc("QueueVector", _sidecar_vec(int(now[0]), 0.0)))
    now[0] += 10 * edge.service.decider.config.broadcast_period_ms
    assert f.handle(0, 3, None, enc("QueueVector", _sidecar_vec(int(now[0]), 0.5)))


def test_a_record_speaks_only_for_its_region__and_only_to_its_destination() -> None:
    edge, f, now = _rig()
    enc = edge.service.codec.encode
    foreign = {**_sidecar_vec(int(now[0]), 1.0), "bridged_worker_ids": [0]}  # worker 0 is a's
    assert not f.handle(0, 0, None, enc("QueueVector", foreign))
    assert edge.cache_states.unknown() == []
    assert edge.service.metrics.total("dead_letters_total") == 1
    assert not f.handle(0, 1, None, enc("QueueVector", _edge_vec(now[0], 5.0, to=7)))
    assert edge.service.metrics.total("dead_letters_total") == 1  # not meant for us: skipped


def test_an_announced_forward__counted_until_it_lands() -> None:
    edge, f, now = _rig()
    enc = edge.service.codec.encode
    rec = vector_record(
        QueueVector(1, now[0], np.zeros(0, np.int64), np.zeros(0), ((1, now[0] + 50.0, 30.0),)),
        -1,
        announce=True,
    )
    before = edge.service.decider.router.queue_view.pending_ms[1]
    assert f.handle(0, 0, None, enc("QueueVector", rec))
    assert edge.service.decider.router.queue_view.pending_ms[1] > before


def test_a_forged_seq__dead_lettered_and_real_reports_still_counted() -> None:
    """Issue 35 item 1, the probe's shape: one record with seq 2^62 (its timestamp real), then
    the region's real reports. Before, the forged seq was kept and every later report dropped."""
    edge, f, now = _rig()
    enc = edge.service.codec.encode
    m = edge.service.metrics
    forged_sidecar = {**_sidecar_vec(int(now[0]), 500.0), "seq": 2**62}
    forged_edge = {**_edge_vec(now[0], 600.0), "seq": 2**62}
    assert not f.handle(0, 0, None, enc("QueueVector", forged_sidecar))
    assert not f.handle(0, 1, None, enc("QueueVector", forged_edge))
    assert m.total("dead_letters_total") == 2
    assert f.last_seq == {}  # never adopted
    assert isinstance(f.dead.producer, MemoryProducer)
    (_, value), *_ = f.dead.producer.of("dl")
    _, letter = edge.service.codec.decode(value or b"")
    assert "seq: expected at most this edge's clock" in letter["reason"]
    for i in range(5):  # the region's real load reports, one per Δ: every one counted
        now[0] += 20.0
        assert f.handle(0, 2 + i, None, enc("QueueVector", _sidecar_vec(int(now[0]), 3.0 + i)))
    assert m.get("queue_vectors_total", reporter="sidecar") == 5
    assert _queue(edge) > 3.0
    # within the bound (Δ ahead at most) a seq is kept: it can hold the newest for Δ, no more
    ahead = edge.service.decider.config.max_clock_ahead_ms
    assert f.handle(0, 9, None, enc("QueueVector", {**_sidecar_vec(int(now[0]), 1.0),
                                                  "seq": int(now[0] + ahead)}))  # fmt: skip
    now[0] += ahead + 1.0
    assert f.handle(0, 10, None, enc("QueueVector", _sidecar_vec(int(now[0]), 2.0)))
