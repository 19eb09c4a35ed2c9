"""What the edge writes to Kafka: routing decisions, migration requests, its queue vectors.

Owns turning the decider's outputs into Avro records on their topics (schemas/README): sampled
``RoutingDecision``s (``routing-decisions``), ``MigrationRequest``s (``migrations``), and the
edge's ``QueueVector`` v3 records on ``queue-vectors`` — its Δ broadcast (``to_region_id``: the
region it is meant for) and one-forward announcements (``announce``), ``reporter`` "edge", seq
and timestamp the sender's clock (``edge.sync`` reads them at the other edges). A producer
failure is counted, never raised into a request. Must not decide anything.
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from edge.metrics import Metrics
from kvcompass.decider import QueueVector
from kvcompass.keys import PrefixHasher
from kvcompass.router import MigrationRequest
from kvcompass.router import score as sc
from kvcompass.types import Tier
from wire.codec import AvroCodec, int32_key, int64_key
from wire.config import TopicNames
from wire.producer import ProducerPort

if TYPE_CHECKING:
    from edge.service import Explained

_TIER_NAMES = tuple(t.name for t in sorted(Tier))
EDGE_REPORTER = "edge"
"""``QueueVector.reporter`` of an edge's records ("" is a sidecar's load report)."""


def vector_record(vec: QueueVector, to_region: int, announce: bool = False) -> dict[str, Any]:
    """``vec`` as a ``QueueVector`` v3 record (its reading time as seq and timestamp)."""
    taken = round(vec.taken_ms)
    fl = vec.in_flight
    return {
        "region_id": int(vec.region),
        "worker_ids": [int(w) for w in vec.worker_ids.tolist()],
        "queue_ms": [float(q) for q in vec.queue_ms.tolist()],
        "seq": taken,
        "timestamp_ms": taken,
        "bridged_worker_ids": [],
        "cache_unknown_worker_ids": [],
        "reporter": EDGE_REPORTER,
        "to_region_id": int(to_region),
        "announce": announce,
        "in_flight_worker_ids": [int(w) for w, _, _ in fl],
        "in_flight_arrive_ms": [float(a) for _, a, _ in fl],
        "in_flight_work_ms": [float(k) for _, _, k in fl],
    }


class EdgeRecords:
    """The records one edge (region ``origin``) produces."""

    def __init__(
        self,
        origin: int,
        worker_region: NDArray[np.int64],
        model: str,
        codec: AvroCodec,
        sink: ProducerPort,
        topics: TopicNames,
        metrics: Metrics,
    ) -> None:
        self.origin = origin
        self.worker_region = worker_region
        self.model = model
        self.codec, self.sink, self.topics, self.metrics = codec, sink, topics, metrics
        self.vector_bytes = 0
        """Bytes of every vector and announcement this edge produced (architecture §6)."""

    def vector(self, dest: int, vec: QueueVector) -> None:
        """One Δ broadcast vector, meant for region ``dest``'s edge."""
        self._vector(vector_record(vec, dest))

    def announce(self, worker: int, arrive_ms: float, work_ms: float, now_ms: float) -> None:
        """One forward to another region's worker, announced to every edge as it is made."""
        vec = QueueVector(self.origin, now_ms, np.zeros(0, np.int64), np.zeros(0, np.float64),
                          ((worker, arrive_ms, work_ms),))  # fmt: skip
        self._vector(vector_record(vec, -1, announce=True))

    def _vector(self, rec: dict[str, Any]) -> None:
        n = self._send(self.topics.queue_vectors, int32_key(self.origin), "QueueVector", rec)
        self.vector_bytes += n
        self.metrics.inc("vector_bytes_total", n)
        self.metrics.inc("vectors_sent_total", kind="announce" if rec["announce"] else "vector")

    def decision(self, request_id: str, ex: Explained, worker: int) -> None:
        """A ``RoutingDecision`` of request ``request_id`` sent to ``worker``."""
        d = ex.decision
        wr = self.worker_region
        m = ex.lookup.match
        cands = [
            {
                "worker_id": int(row[sc.TERM_WORKER]),
                "region_id": int(wr[int(row[sc.TERM_WORKER])]),
                "matched_tokens": int(row[sc.TERM_MATCHED]),
                "tier": _TIER_NAMES[int(row[sc.TERM_TIER])],
                "belief": row[sc.TERM_BELIEF],
                "wan_ms": row[sc.TERM_WAN],
                "queue_ms": row[sc.TERM_QUEUE],
                "prefill_ms": row[sc.TERM_PREFILL],
                "reload_ms": row[sc.TERM_RELOAD],
                "score_ms": row[sc.TERM_SCORE],
            }
            for row in d.top_terms.tolist()
        ]
        cands.sort(key=lambda c: c["worker_id"] != worker)  # stable: chosen first
        matched = int(m.matched_tokens[worker])
        rec = {
            "request_id": request_id,
            "edge_region_id": self.origin,
            "model": ex.model or self.model,
            "prompt_tokens": d.prompt_tokens,
            "chosen_worker_id": worker,
            "chosen_region_id": int(wr[worker]),
            "matched_tokens": matched,
            "tier": Tier(int(m.tiers[worker])).name if matched else "NONE",
            "load_factor": d.lambda_price,
            "candidates": cands,
            "timestamp_ms": int(time.time() * 1000),
        }
        self._send(self.topics.routing_decisions, request_id.encode(), "RoutingDecision", rec)
        self.metrics.inc("decisions_published_total")

    def migration(
        self, mig: MigrationRequest, tokens: NDArray[np.int32], ex: Explained, hasher: PrefixHasher
    ) -> None:
        """A ``MigrationRequest`` for the replica ``mig`` asks for (its prefix from ``tokens``)."""
        n = min(mig.prefix_tokens, len(tokens))
        prefix = np.asarray(tokens[:n], dtype="<i4")
        rec = {
            "request_id": uuid.uuid4().hex,
            "model": ex.model or self.model,
            "prefix_tokens": prefix.tobytes(),
            "prefix_length_tokens": n,
            "prefix_key": (
                int(hasher.keys_at(prefix.astype(np.int32), np.array([n], np.int64))[0]) if n else 0
            ),
            "first_level_key": mig.family_key,
            "source_worker_id": mig.source_worker if mig.source_worker >= 0 else None,
            "target_worker_id": mig.target_worker,
            "edge_region_id": self.origin,
            "mode": mig.mode.name,
            "tier": mig.tier.name,
            "created_ms": int(time.time() * 1000),
        }
        self._send(self.topics.migrations, int64_key(mig.family_key), "MigrationRequest", rec)
        self.metrics.inc("migrations_total")

    def _send(self, topic: str, key: bytes, schema: str, rec: dict[str, Any]) -> int:
        """Produce one record; its encoded size (0 if it failed, counted)."""
        try:
            value = self.codec.encode(schema, rec)
            self.sink.produce(topic, value, key)
            return len(value)
        except Exception as exc:  # a producer failure must not fail the user's request
            self.metrics.inc("errors_total", type=f"publish-{schema}-{type(exc).__name__}")
            return 0
