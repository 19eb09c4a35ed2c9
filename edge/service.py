"""The edge's routing state between HTTP and the core: one decider, fed; explain; publish.

Owns this edge's ``kvcompass.decider.Decider`` (the object the simulator drives too: lookup,
pending-holder overlay, joint score, booking of this region's workers, forward ledger, feedback,
vectors) and turns HTTP and Kafka events into its calls (architecture §6): a request in
(``decide``), its send (``dispatch`` / ``undispatch``), a relay at the owning region
(``on_relay``), a refusal back at the origin (``on_refused``), the worker's first byte
(``on_first_token``), the usage at the end (``on_usage``), local load polls, peers' vectors and
announcements, and the Δ broadcast. It also owns the clock it passes as ``now_ms`` (the wall
clock in ms: vectors carry it across processes, so it must be one domain everywhere), the recent
decisions kept for ``/debug/explain``, false-hit counting, and turning the core's outputs into
Avro records (sampled ``RoutingDecision``s, ``MigrationRequest``s, ``QueueVector`` v3 through
``edge.vectors``). Must not know HTTP (``edge.handlers``) nor open network connections: records
go to a ``wire.producer.ProducerPort`` (Kafka, memory or null); nor reach into the decider's
parts (a test walks this module with ``ast``).
"""

from __future__ import annotations

import itertools
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from edge.metrics import Metrics
from edge.records import EdgeRecords
from edge.scheme_names import is_kvcompass
from edge.schemes import EDGE_SCHEMES, Schemes
from edge.tenants import Scope
from edge.visibility import ReuseCounter
from kvcompass.decider import Decider, Plan, QueueVector, Shortlist
from kvcompass.deployment import Deployment
from kvcompass.discovery import EdgeDiscovery, Lookup
from kvcompass.errors import ConfigError
from kvcompass.keys import KeyNamespace
from kvcompass.router import Decision
from kvcompass.router import score as sc
from wire.codec import AvroCodec
from wire.config import TopicNames
from wire.producer import NullProducer, ProducerPort


@dataclass(slots=True)
class Explained:
    """One recent decision and what became of it."""

    plan: Plan
    decider: Decider
    """The decider that made ``plan``: every later call about it goes there."""
    winner: int = -1
    """The decider's choice before any retry or refusal (``plan`` follows the sends)."""
    served_by: int = -1
    reused_tokens: int | None = None
    attempts: list[dict[str, Any]] = field(default_factory=list)
    scheme: str = "kvcompass"
    order: list[int] = field(default_factory=list)
    """The active scheme's candidates, preferred first (``edge.schemes``)."""
    claimed: int = 0
    """Tokens the scheme counts on at ``order[0]``."""
    discovery: EdgeDiscovery | None = None
    """The request's namespace (``edge.tenants.Scope``); None: the service's default."""
    model: str | None = None
    allowed: frozenset[int] | None = None
    """Workers the request's scope allows (None: all); migrations elsewhere are dropped."""
    relayed_for: int = -1
    """At the owning region: the origin region of an accepted relay (else -1)."""
    refused_by: int = -1
    """At the origin: the region whose owner refused the first plan (else -1)."""
    answered: bool = False
    """The worker's first byte came back (the decider heard ``on_first_token``)."""
    open: bool = False
    """Dispatched and not yet ended in the decider (first token, usage or ``forget``)."""
    reuse: dict[str, int] = field(default_factory=dict)
    """Where its reusable prefix went (``kvcompass.reuse_split``), for /debug/explain."""

    @property
    def decision(self) -> Decision:
        return self.plan.decision

    @property
    def lookup(self) -> Lookup:
        return self.plan.lookup

    @property
    def fid(self) -> int:
        return self.plan.fid


def wall_ms() -> float:
    """The edge's clock: UTC epoch ms (vectors and announcements carry it to other edges)."""
    return time.time() * 1000.0


class EdgeService:
    """Routing state of one edge process (region ``origin``)."""

    def __init__(
        self,
        deployment: Deployment,
        decider: Decider,
        *,
        model: str,
        codec: AvroCodec,
        sink: ProducerPort,
        topics: TopicNames,
        decision_sample_rate: float = 1.0,
        explain_capacity: int = 4096,
        seed: int = 0,
        clock_ms: Callable[[], float] = wall_ms,
        schemes: Schemes | None = None,
        scheme: str = "kvcompass",
        variants: Mapping[str, Decider] | None = None,
    ) -> None:
        self.deployment = deployment
        self.booker = decider
        """The ``kvcompass`` decider: it books this region's workers for relays (if its config
        books) and records the baselines' forwards."""
        self.deciders: dict[str, Decider] = {"kvcompass": decider, **(variants or {})}
        """One decider per KVCompass scheme (``variants``: e.g. ``kvcompass_no_booking``), each
        told every fact (loads, vectors, announcements); requests go to the active one."""
        self.decider = decider
        self.discovery = decider.discovery
        self.origin = decider.origin
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
        """Clock ms of the last patch applied to the view (set by ``edge.sync``)."""
        self.schemes = schemes
        self.scheme = "kvcompass"
        self.set_scheme(scheme)
        self.records = EdgeRecords(self.origin, self.worker_region, model, codec, sink, topics,
                                   self.metrics)  # fmt: skip
        self._scoped: dict[KeyNamespace, EdgeDiscovery] = {
            self.discovery.hasher.namespace: self.discovery
        }
        self.reuse = ReuseCounter(deployment, self.metrics)
        self._fids = itertools.count(1)
        self._unroutable: frozenset[int] = frozenset()
        """Workers without a route (``restrict_to``)."""
        self._masked: frozenset[int] = frozenset()
        """What the decider was last told is unroutable (routes plus a scope's worker set)."""

    def set_scheme(self, scheme: str) -> None:
        """Switch the routing scheme (``edge.schemes.EDGE_SCHEMES``); baselines need ``schemes``."""
        if scheme not in EDGE_SCHEMES:
            raise ConfigError(f"edge.scheme: expected one of {list(EDGE_SCHEMES)}, got {scheme!r}")
        if not is_kvcompass(scheme) and self.schemes is None:
            raise ConfigError(f"edge.scheme {scheme!r} needs the baselines' state (Schemes)")
        if is_kvcompass(scheme) and scheme not in self.deciders:
            raise ConfigError(f"edge.scheme {scheme!r} needs its decider (edge.app.assemble)")
        self.scheme = scheme
        self.decider = self.deciders.get(scheme, self.booker)

    @property
    def books(self) -> bool:
        """This edge books its region's workers for relays with a shortlist."""
        return self.booker.books

    # -- per request ------------------------------------------------------------------------
    def scoped(self, scope: Scope) -> EdgeDiscovery:
        """The discovery of ``scope``'s namespace (same view and decider, its own hasher)."""
        d = self._scoped.get(scope.namespace)
        if d is None:
            from kvcompass.keys import PrefixHasher

            d = self.discovery.with_hasher(PrefixHasher(scope.namespace))
            self._scoped[scope.namespace] = d
        return d

    def _mask(self, scope: Scope | None) -> None:
        """Tell the decider which workers may win this request: those with a route, and of
        those only ``scope``'s (a model's or tenant's pool). Synchronous with the score that
        follows, so concurrent requests of other scopes never see it."""
        masked = self._unroutable
        if scope is not None and scope.workers is not None:
            masked = masked | frozenset(
                w for w in range(self.deployment.n_workers) if w not in scope.workers
            )
        if masked != self._masked:
            for d in self.deciders.values():
                d.set_unroutable(masked)
            self._masked = masked

    def _remember(self, request_id: str, ex: Explained) -> None:
        self.recent[request_id] = ex
        if len(self.recent) > self.explain_capacity:
            self.recent.popitem(last=False)

    def decide(
        self,
        request_id: str,
        tokens: NDArray[np.int32],
        scope: Scope | None = None,
        lookup: Lookup | None = None,
    ) -> Explained:
        """Look up (in ``scope``'s namespace; ``lookup``: already done) and score (over
        ``scope``'s workers); remember the decision for /debug/explain. Nothing is committed
        until ``dispatch``."""
        arr = np.asarray(tokens, dtype=np.int32)
        discovery = self.discovery if scope is None else self.scoped(scope)
        self._mask(scope)
        if lookup is None:
            lookup = self.decider.lookup(arr, discovery.hasher)
        plan = self.decider.decide(next(self._fids), lookup, len(arr), self.clock_ms())
        decision = plan.decision
        if is_kvcompass(self.scheme) or self.schemes is None:
            order = [plan.worker, *decision.top_workers.tolist()]
            claimed = decision.claimed_tokens
        else:
            # baselines hash too (consistent_hash's rings): in this request's namespace
            default, self.schemes.discovery = self.schemes.discovery, discovery
            try:
                order, claimed = self.schemes.order(self.scheme, arr, lookup, decision)
            finally:
                self.schemes.discovery = default
        model = scope.namespace.model_id if scope is not None else None
        ex = Explained(plan, self.decider, plan.worker, scheme=self.scheme, order=order,
                       claimed=claimed,
                       discovery=discovery, model=model,
                       allowed=scope.workers if scope is not None else None)  # fmt: skip
        self._remember(request_id, ex)
        m = self.metrics
        m.inc("decisions_total")
        m.inc("matched_tokens_total", decision.claimed_tokens)
        return ex

    def on_relay(
        self, request_id: str, tokens: NDArray[np.int32], shortlist: Shortlist,
        scope: Scope | None = None, lookup: Lookup | None = None,
    ) -> tuple[Explained | None, QueueVector | None]:  # fmt: skip
        """A peer edge relayed a request with its shortlist for this region's workers: pick
        one with this edge's booking (an ``Explained`` to dispatch), or refuse (the vector to
        answer with)."""
        arr = np.asarray(tokens, dtype=np.int32)
        discovery = self.discovery if scope is None else self.scoped(scope)
        self._mask(scope)
        if lookup is None:
            lookup = self.booker.lookup(arr, discovery.hasher)
        verdict = self.booker.on_relay(next(self._fids), shortlist, lookup, self.clock_ms())
        if verdict.plan is None:
            self.metrics.inc("relays_total", result="refused")
            return None, verdict.vector
        self.metrics.inc("relays_total", result="accepted")
        plan = verdict.plan
        ex = Explained(plan, self.booker, plan.worker, order=[plan.worker],
                       claimed=plan.decision.claimed_tokens,
                       discovery=discovery, relayed_for=shortlist.origin,
                       model=scope.namespace.model_id if scope is not None else None,
                       allowed=scope.workers if scope is not None else None)  # fmt: skip
        self._remember(request_id, ex)
        return ex, None

    def on_refused(self, ex: Explained, vector: QueueVector | None) -> list[int]:
        """The owner of the plan's region refused it with ``vector``: decide once more,
        finally; the new candidates (best first)."""
        empty = QueueVector(self.worker_region_of(ex.plan.worker), 0.0,
                            np.zeros(0, np.int64), np.zeros(0, np.float64))  # fmt: skip
        ex.refused_by = int(self.worker_region[ex.plan.worker])
        ex.open = False
        if self.schemes is not None:
            self.schemes.end(ex.plan.worker)  # the refused send is over
        now = self.clock_ms()
        plan = ex.decider.on_refused(ex.fid, vector or empty, ex.decision.prompt_tokens, now)
        self._tell_others(ex.decider, vector, now)
        ex.plan = plan
        ex.winner = plan.worker
        ex.order = [plan.worker, *plan.decision.top_workers.tolist()]
        ex.claimed = plan.decision.claimed_tokens
        self.metrics.inc("refusals_total")
        return ex.order

    def _tell_others(self, told: Decider, vector: QueueVector | None, now_ms: float) -> None:
        """A vector ``told`` has just folded in (a piggyback or a refusal): the other deciders
        get it as a plain vector."""
        for d in self.deciders.values():
            if vector is not None and d is not told:
                d.on_vector(vector, now_ms)

    def worker_region_of(self, worker: int) -> int:
        return int(self.worker_region[worker])

    def restrict_to(self, routable: Iterable[int]) -> None:
        """Score only the workers this edge has a route to (a partial ``[workers]`` map): the
        others never win, so a 503 means that no worker can be reached at all."""
        keep = set(routable)
        self._unroutable = frozenset(w for w in range(self.deployment.n_workers) if w not in keep)
        for d in self.deciders.values():
            d.set_unroutable(self._unroutable)
        self._masked = self._unroutable

    def candidates(self, ex: Explained, reachable: Callable[[int], bool]) -> list[int]:
        """The scheme's choice, then its next candidates, that can be reached; then KVCompass's
        own ranking (routable first, ``restrict_to``) when a baseline named none reachable."""
        d = ex.decision
        for order in (ex.order, [d.worker, *d.top_workers.tolist()]):
            seen = list(dict.fromkeys(w for w in order if reachable(w)))
            if seen:
                return seen
        return []

    def claimed_at(self, ex: Explained, worker: int) -> int:
        """The match the edge counts on at ``worker`` (the scheme's own for its choice)."""
        d = ex.decision
        if ex.order and worker == ex.order[0]:
            return ex.claimed
        if worker == d.worker:
            return d.claimed_tokens
        rows = d.top_terms[:, sc.TERM_WORKER].astype(np.int64)
        hit = np.flatnonzero(rows == worker)
        return int(d.top_terms[hit[0], sc.TERM_MATCHED]) if hit.size else 0

    def shortlist_for(self, ex: Explained, worker: int) -> Shortlist | None:
        """The shortlist to relay with a send to ``worker`` (None: a plain relay or direct)."""
        p = ex.plan
        if not is_kvcompass(ex.scheme) or p.shortlist is None or ex.relayed_for >= 0:
            return None
        return p.shortlist if self.worker_region_of(worker) == p.relay_region else None

    def dispatch(
        self, ex: Explained, worker: int, tokens: NDArray[np.int32], relayed: bool = False
    ) -> None:
        """About to send to ``worker`` (``relayed``: through its region's edge): the decider
        books it / counts its work *now*, so the requests decided while this one waits for its
        first byte — a whole prefill — see it; announce it; ask for replicas it triggers."""
        plan = ex.plan
        ours = is_kvcompass(ex.scheme)
        if worker != plan.worker or not ours:
            plan = ex.decider.retarget(plan, worker)
            if not ours and self.schemes is not None:
                claimed = self.claimed_at(ex, worker)  # the scheme's own claim at its choice
                service = self.schemes.predicted_ms(worker, plan.decision.prompt_tokens, claimed)
                d = plan.decision._replace(claimed_tokens=claimed, predicted_service_ms=service)
                plan = plan._replace(decision=d)
        if ex.relayed_for < 0 and (not relayed or self.shortlist_for(ex, worker) is None):
            plan = plan._replace(relay_region=-1, shortlist=None)  # sent straight to the worker
        ex.plan = plan
        sent = ex.decider.dispatch(plan, self.clock_ms())
        ex.open = True
        if sent.announce is not None:
            self.records.announce(*sent.announce, self.clock_ms())
        for mig in sent.migrations if ours else ():
            if ex.allowed is not None and mig.target_worker not in ex.allowed:
                # another model's or tenant's pool: it would cache this prompt for them
                self.metrics.inc("migrations_out_of_scope_total")
                continue
            self.records.migration(mig, tokens, ex, (ex.discovery or self.discovery).hasher)
        if self.schemes is not None:
            self.schemes.begin(worker)

    def undispatch(self, ex: Explained, worker: int) -> None:
        """The send to ``worker`` failed: release what the decider booked or held for it."""
        ex.decider.undispatch(ex.fid, self.clock_ms())
        ex.open = False
        if self.schemes is not None:
            self.schemes.end(worker)

    def on_accepted(self, request_id: str, ex: Explained, worker: int) -> None:
        """``worker`` accepted the request (after ``dispatch``): count it, sample a record."""
        ex.served_by = worker
        split = self.reuse.decided(ex, worker, self.claimed_at(ex, worker))
        ex.reuse = {"reusable": split.reusable, "captured": split.captured,
                    "forgone_wan": split.forgone_wan}  # fmt: skip
        self.metrics.inc(
            "chosen_total", region=self.deployment.regions[self.worker_region[worker]].name,
            worker=worker,
        )  # fmt: skip
        rate = self.sample_rate
        if rate >= 1.0 or (rate > 0.0 and self._rng.random() < rate):
            self.records.decision(request_id, ex, worker)

    def on_first_token(
        self, ex: Explained, worker: int, reused: int | None, vector: QueueVector | None = None
    ) -> None:
        """The worker's first byte reached this edge (``worker``: who served, which a relaying
        owner may have picked): retire the work, confirm the prefix as held, fold in the
        piggybacked vector; ``reused`` if the first bytes carried it."""
        if ex.answered:
            return
        ex.answered = True
        ex.served_by = worker
        now = self.clock_ms()
        ex.decider.on_first_token(ex.fid, worker, now, reused, vector)
        self._tell_others(ex.decider, vector, now)
        if reused is not None:
            ex.open = False
            self._count_reuse(ex, worker, reused)

    def on_usage(self, ex: Explained, reused: int | None) -> None:
        """The end of the response: the reuse count if it came only now, and the forward ends
        in the decider either way."""
        if ex.open and reused is not None and ex.answered:
            ex.decider.on_usage(ex.fid, reused, self.clock_ms())
            self._count_reuse(ex, ex.served_by, reused)
        elif ex.open:
            ex.decider.forget(ex.fid, self.clock_ms())
        ex.open = False

    def _count_reuse(self, ex: Explained, worker: int, reused: int) -> None:
        claimed = self.claimed_at(ex, worker)
        ex.reused_tokens = reused
        ex.reuse["delivered"] = reused
        ex.reuse["lost_stale"] = self.reuse.answered(ex, worker, claimed, reused)
        m = self.metrics
        m.inc("claimed_tokens_total", claimed)
        m.inc("reused_tokens_total", reused)
        if claimed > reused:
            m.inc("false_hits_total")

    def on_done(self, ex: Explained) -> None:
        """The forward to ``ex.served_by`` finished (answered, streamed or failed)."""
        if ex.open:
            self.on_usage(ex, None)
        if self.schemes is not None and ex.served_by >= 0:
            self.schemes.end(ex.served_by)

    # -- queue state ------------------------------------------------------------------------
    def piggyback(self, dest_region: int) -> QueueVector | None:
        """The vector to attach to a response (or refusal) leaving for ``dest_region``."""
        return self.decider.piggyback(dest_region, self.clock_ms())

    def on_local_loads(
        self, workers: NDArray[np.int64], queue_ms: NDArray[np.float64], taken_ms: float
    ) -> None:
        """This edge's poll of its own workers answered (``load_report.worker_queue_ms``)."""
        now = self.clock_ms()
        for d in self.deciders.values():
            d.on_local_loads(workers, queue_ms, taken_ms, now)

    def on_vector(self, vector: QueueVector) -> None:
        """A peer edge's vector (from ``queue-vectors``, a response or a refusal)."""
        now = self.clock_ms()
        for d in self.deciders.values():
            d.on_vector(vector, now)

    def on_peer_forward(self, region: int, worker: int, arrive_ms: float, work_ms: float) -> None:
        """A peer edge announced one forward as it made it."""
        now = self.clock_ms()
        for d in self.deciders.values():
            d.on_peer_forward(region, worker, arrive_ms, work_ms, now)

    def broadcast(self) -> int:
        """The Δ broadcast: this edge's vector to the regions due one; the number sent."""
        sent = self.decider.broadcast(self.clock_ms())
        for dest, vec in sent:
            self.records.vector(dest, vec)
        return len(sent)
