"""The edge's routing state between HTTP and the core: decide, feed back, explain, publish.

Owns one ``EdgeDiscovery`` (view + router of this region), the clock it passes as ``now_ms``
(monotonic ms), the recent decisions kept for ``/debug/explain``, false-hit counting, and turning
the core's decisions into Avro records: sampled ``RoutingDecision``s to ``routing-decisions`` and
``MigrationRequest``s to ``migrations``. Must not know HTTP (``edge.handlers``) nor open network
connections: records go to a ``pipeline.producer.ProducerPort`` (Kafka, memory or null).
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from edge.metrics import Metrics
from edge.policies import POLICIES, Policies
from edge.tenants import Scope
from kvcompass.deployment import Deployment
from kvcompass.discovery import EdgeDiscovery, Lookup
from kvcompass.errors import ConfigError
from kvcompass.keys import KeyNamespace, PrefixHasher
from kvcompass.router import Decision, MigrationRequest, QueueVector
from kvcompass.router import score as sc
from kvcompass.types import Tier
from pipeline.codec import AvroCodec, int64_key
from pipeline.config import TopicNames
from pipeline.producer import NullProducer, ProducerPort


@dataclass(slots=True)
class Explained:
    """One recent decision and what became of it."""

    decision: Decision
    lookup: Lookup
    served_by: int = -1
    reused_tokens: int | None = None
    attempts: list[dict[str, Any]] = field(default_factory=list)
    policy: str = "kvcompass"
    order: list[int] = field(default_factory=list)
    """The active policy's candidates, preferred first (``edge.policies``)."""
    claimed: int = 0
    """Tokens the policy counts on at ``order[0]``."""
    discovery: EdgeDiscovery | None = None
    """The request's namespace (``edge.tenants.Scope``); None: the service's default."""
    model: str | None = None
    allowed: frozenset[int] | None = None
    """Workers the request's scope allows (None: all); migrations elsewhere are dropped."""


_TIER_NAMES = tuple(t.name for t in sorted(Tier))


def _monotonic_ms() -> float:
    return time.monotonic() * 1000.0


class EdgeService:
    """Routing state of one edge process (region ``origin``)."""

    def __init__(
        self,
        deployment: Deployment,
        discovery: EdgeDiscovery,
        *,
        model: str,
        codec: AvroCodec,
        sink: ProducerPort,
        topics: TopicNames,
        decision_sample_rate: float = 1.0,
        explain_capacity: int = 4096,
        seed: int = 0,
        clock_ms: Callable[[], float] = _monotonic_ms,
        policies: Policies | None = None,
        policy: str = "kvcompass",
    ) -> None:
        self.deployment = deployment
        self.discovery = discovery
        self.router = discovery.router
        self.origin = discovery.origin
        self.worker_region = np.asarray(deployment.worker_region, dtype=np.int64)
        self.model = model
        self.codec = codec
        self.sink = sink
        self.topics = topics
        # Without a broker (NullProducer) nothing would read the records: skip building them.
        self.sample_rate = 0.0 if isinstance(sink, NullProducer) else decision_sample_rate
        self.explain_capacity = explain_capacity
        self.metrics = Metrics()
        self.clock_ms = clock_ms
        self.recent: OrderedDict[str, Explained] = OrderedDict()
        self._rng = np.random.default_rng(seed)
        self.view_applied_ms = -float("inf")
        """Monotonic ms of the last patch applied to the view (set by ``edge.sync``)."""
        self.policies = policies
        self.policy = "kvcompass"
        self.set_policy(policy)
        self._scoped: dict[KeyNamespace, EdgeDiscovery] = {discovery.hasher.namespace: discovery}
        self._unroutable: frozenset[int] = frozenset()
        """Workers without a route (``restrict_to``)."""
        self._masked: frozenset[int] = frozenset()
        """What the router was last told is unroutable (routes plus a scope's worker set)."""

    def set_policy(self, policy: str) -> None:
        """Switch the routing policy (``edge.policies.POLICIES``); baselines need ``policies``."""
        if policy not in POLICIES:
            raise ConfigError(f"edge.policy: expected one of {list(POLICIES)}, got {policy!r}")
        if policy != "kvcompass" and self.policies is None:
            raise ConfigError(f"edge.policy {policy!r} needs the baselines' state (Policies)")
        self.policy = policy

    # -- per request ------------------------------------------------------------------------
    def scoped(self, scope: Scope) -> EdgeDiscovery:
        """The discovery of ``scope``'s namespace (same view and router, its own hasher)."""
        d = self._scoped.get(scope.namespace)
        if d is None:
            d = EdgeDiscovery(self.origin, PrefixHasher(scope.namespace), self.discovery.view,
                              self.router)  # fmt: skip
            self._scoped[scope.namespace] = d
        return d

    def _mask(self, scope: Scope | None) -> None:
        """Tell the router which workers may win this request: those with a route, and of
        those only ``scope``'s (a model's or tenant's pool). Synchronous with the score that
        follows, so concurrent requests of other scopes never see it."""
        masked = self._unroutable
        if scope is not None and scope.workers is not None:
            masked = masked | frozenset(
                w for w in range(self.deployment.n_workers) if w not in scope.workers
            )
        if masked != self._masked:
            self.router.set_unroutable(masked)
            self._masked = masked

    def decide(
        self, request_id: str, tokens: NDArray[np.int32], scope: Scope | None = None
    ) -> Explained:
        """Look up (in ``scope``'s namespace) and score (over ``scope``'s workers); remember
        the decision for /debug/explain."""
        arr = np.asarray(tokens, dtype=np.int32)
        discovery = self.discovery if scope is None else self.scoped(scope)
        self._mask(scope)
        decision, lookup = discovery.decide(arr, self.clock_ms())
        if self.policy == "kvcompass" or self.policies is None:
            order = [decision.worker, *decision.top_workers.tolist()]
            claimed = decision.claimed_tokens
        else:
            # baselines hash too (consistent_hash's rings): in this request's namespace
            default, self.policies.discovery = self.policies.discovery, discovery
            try:
                order, claimed = self.policies.order(self.policy, arr, lookup, decision)
            finally:
                self.policies.discovery = default
        model = scope.namespace.model_id if scope is not None else None
        ex = Explained(decision, lookup, policy=self.policy, order=order, claimed=claimed,
                       discovery=discovery, model=model,
                       allowed=scope.workers if scope is not None else None)  # fmt: skip
        self.recent[request_id] = ex
        if len(self.recent) > self.explain_capacity:
            self.recent.popitem(last=False)
        m = self.metrics
        m.inc("decisions_total")
        m.inc("matched_tokens_total", decision.claimed_tokens)
        return ex

    def restrict_to(self, routable: Iterable[int]) -> None:
        """Score only the workers this edge has a route to (a partial ``[workers]`` map): the
        others never win, so a 503 means that no worker can be reached at all."""
        keep = set(routable)
        self._unroutable = frozenset(w for w in range(self.deployment.n_workers) if w not in keep)
        self.router.set_unroutable(self._unroutable)
        self._masked = self._unroutable

    def candidates(self, ex: Explained, reachable: Callable[[int], bool]) -> list[int]:
        """The policy's choice, then its next candidates, that can be reached; then KVCompass's
        own ranking (routable first, ``restrict_to``) when a baseline named none reachable."""
        d = ex.decision
        for order in (ex.order, [d.worker, *d.top_workers.tolist()]):
            seen = list(dict.fromkeys(w for w in order if reachable(w)))
            if seen:
                return seen
        return []

    def claimed_at(self, ex: Explained, worker: int) -> int:
        """The match the edge counts on at ``worker`` (the policy's own for its choice)."""
        d = ex.decision
        if ex.order and worker == ex.order[0]:
            return ex.claimed
        if worker == d.worker:
            return d.claimed_tokens
        rows = d.top_terms[:, sc.TERM_WORKER].astype(np.int64)
        hit = np.flatnonzero(rows == worker)
        return int(d.top_terms[hit[0], sc.TERM_MATCHED]) if hit.size else 0

    def _as_sent(self, ex: Explained, worker: int) -> Decision:
        """``ex``'s decision as if ``worker`` had won (the policy's claim and predicted work)."""
        d = ex.decision
        claimed = self.claimed_at(ex, worker)
        if ex.policy != "kvcompass" and self.policies is not None:
            service = self.policies.predicted_ms(worker, d.prompt_tokens, claimed)
            return d._replace(worker=worker, claimed_tokens=claimed, predicted_service_ms=service)
        if worker != d.worker:
            return d._replace(worker=worker, claimed_tokens=claimed)
        return d

    def dispatch(self, ex: Explained, worker: int) -> None:
        """About to send to ``worker``: count its work *now* (herding guard, in-flight), so the
        requests decided while this one waits for its first byte — a whole prefill — see it."""
        self.router.on_forward(self._as_sent(ex, worker), self.clock_ms())
        if self.policies is not None:
            self.policies.begin(worker)

    def undispatch(self, worker: int) -> None:
        """The send to ``worker`` failed (its predicted work ages out at the next refresh)."""
        if self.policies is not None:
            self.policies.end(worker)

    def on_forward(
        self, request_id: str, ex: Explained, worker: int, tokens: NDArray[np.int32]
    ) -> None:
        """``worker`` accepted the request (after ``dispatch``): hot prefixes, records."""
        now = self.clock_ms()
        ex.served_by = worker
        self.metrics.inc(
            "chosen_total", region=self.deployment.regions[self.worker_region[worker]].name,
            worker=worker,
        )  # fmt: skip
        if ex.policy == "kvcompass":  # baselines never ask for replicas
            d = self._as_sent(ex, worker)
            for mig in self.router.observe(
                ex.lookup.family_key, ex.lookup.match.matched_tokens, d, now
            ):
                if ex.allowed is not None and mig.target_worker not in ex.allowed:
                    # another model's or tenant's pool: it would cache this prompt for them
                    self.metrics.inc("migrations_out_of_scope_total")
                    continue
                self._publish_migration(mig, tokens, ex)
        rate = self.sample_rate
        if rate >= 1.0 or (rate > 0.0 and self._rng.random() < rate):
            self._publish_decision(request_id, ex, worker)

    def on_done(self, ex: Explained) -> None:
        """The forward to ``ex.served_by`` finished (answered, streamed or failed)."""
        if self.policies is not None and ex.served_by >= 0:
            self.policies.end(ex.served_by)

    def on_response(
        self,
        ex: Explained,
        worker: int,
        reused: int | None,
        queue_vector: QueueVector | None = None,
    ) -> None:
        """A response came back from ``worker``: belief, false hits, piggybacked queues."""
        claimed = self.claimed_at(ex, worker)
        ex.reused_tokens = reused
        m = self.metrics
        if reused is not None:
            m.inc("claimed_tokens_total", claimed)
            m.inc("reused_tokens_total", reused)
            if claimed > reused:
                m.inc("false_hits_total")
        if reused is None and queue_vector is None:
            return
        self.router.on_response(
            worker, claimed if reused is not None else 0, reused or 0, self.clock_ms(),
            queue_vector=queue_vector,
        )  # fmt: skip

    # -- explain ----------------------------------------------------------------------------
    def explain(self, request_id: str) -> dict[str, Any] | None:
        ex = self.recent.get(request_id)
        if ex is None:
            return None
        d = ex.decision
        cands = []
        for t in d.explain():
            row = t.as_dict()
            row["region"] = self.deployment.regions[self.worker_region[t.worker]].name
            cands.append(row)
        return {
            "request_id": request_id,
            "edge_region": self.deployment.regions[self.origin].name,
            "prompt_tokens": d.prompt_tokens,
            "policy": ex.policy,
            "winner": d.worker,
            "policy_order": ex.order,
            "policy_claimed_tokens": ex.claimed,
            "served_by": ex.served_by,
            "claimed_tokens": d.claimed_tokens,
            "reused_tokens": ex.reused_tokens,
            "lambda_price": d.lambda_price,
            "min_queue_ms": d.min_queue_ms,
            "predicted_service_ms": d.predicted_service_ms,
            "winner_is_local_holder": d.winner_is_local_holder,
            "local_holder": d.local_holder,
            "local_holder_lost_to_load": d.local_holder_lost_to_load,
            "remote_holder": d.remote_holder,
            "remote_holder_tokens": d.remote_holder_tokens,
            "family_key": ex.lookup.family_key,
            "attempts": ex.attempts,
            "candidates": cands,
        }

    def holders(self, tokens: NDArray[np.int32], scope: Scope | None = None) -> dict[str, Any]:
        """/debug/lookup: every worker with a match for this prompt (in ``scope``'s namespace),
        longest first."""
        discovery = self.discovery if scope is None else self.scoped(scope)
        lk = discovery.lookup(np.asarray(tokens, dtype=np.int32))
        m = lk.match
        rows = [
            {
                "worker": int(w),
                "region": self.deployment.regions[self.worker_region[w]].name,
                "matched_tokens": int(m.matched_tokens[w]),
                "tier": Tier(int(m.tiers[w])).name,
            }
            for w in np.flatnonzero(m.matched_tokens > 0).tolist()
        ]
        rows.sort(key=lambda r: (-r["matched_tokens"], r["worker"]))
        return {
            "prompt_tokens": len(tokens),
            "queried_lengths": lk.lengths.tolist(),
            "family_key": lk.family_key,
            "holders": rows,
        }

    # -- records ----------------------------------------------------------------------------
    def _publish_decision(self, request_id: str, ex: Explained, worker: int) -> None:
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

    def _publish_migration(
        self, mig: MigrationRequest, tokens: NDArray[np.int32], ex: Explained
    ) -> None:
        n = min(mig.prefix_tokens, len(tokens))
        prefix = np.asarray(tokens[:n], dtype="<i4")
        hasher = (ex.discovery or self.discovery).hasher
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

    def _send(self, topic: str, key: bytes, schema: str, rec: dict[str, Any]) -> None:
        try:
            self.sink.produce(topic, self.codec.encode(schema, rec), key)
        except Exception as exc:  # a producer failure must not fail the user's request
            self.metrics.inc("errors_total", type=f"publish-{schema}-{type(exc).__name__}")
