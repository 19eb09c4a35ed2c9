"""The one decider: the whole forwarding decision of one edge, as events in and decisions out.

Owns, for the edge of region o, the composition every shell runs (the simulator's
``sim/schemes/kvcompass.py`` and the edge's service call it the same way): the lookup at the
queried lengths (``kvcompass.discovery``), the pending-holder overlay (``router.pending``), the
joint score (``Router``), the forward ledger and the peers' in-flight lists
(``router.forwards``), the booking of the region's own workers (``decider.booking``),
feedback from responses, queue readings with the time they were taken, the vectors this edge
sends (broadcast targets with suppression after a piggyback) and hot-prefix migrations. Must
not read a clock, send anything or know HTTP/Kafka/the simulator: every method takes ``now_ms``
(this edge's own clock) and returns what should happen (``Plan``, ``Sent``, ``Verdict``,
vectors to send) for the shell to do.

Route-and-reserve (``RouterConfig.booking``). The edge of a region books its own workers: it
sees every request bound for them (local ones start here, remote origins relay theirs here),
so its queue model of them is exact (``RegionBooking``). The origin scores every worker; if
the winner is in its own region it books it; if the winner is in region R it relays the request
to R's edge with a ``Shortlist`` (R's workers, the origin's match for each, its λ and its best
score outside R). R re-scores its workers with its exact booking at the origin's λ and accepts
(its pick is authoritative) unless its best score (WAN aside) exceeds the origin's alternative:
accepting costs RTT(o,R) + score_R, refusing costs the refusal's round trip RTT(o,R) + the
alternative, so the threshold is derived, not tuned. A refusal carries R's current vector; the
origin folds it in and re-decides once, and that decision is final (R' must accept). Several
edges in one region: one of them is the region's booking edge; the others relay every request
to it in-region (one more in-region hop), so there is still one booking per worker. The
simulator and the demo run one edge per region.

How the edge calls it (one call per HTTP/Kafka event; ``fid`` is any int unique per request
at this edge, e.g. a counter)::

    request in:            plan = d.decide(fid, d.lookup(tokens), len(tokens), now)
                           (a tenant's scope: its own hasher's lookup, d.set_unroutable first)
    before sending:        sent = d.dispatch(plan, now)        # worker / relay per plan
                           announce sent.announce to every peer edge; ask for sent.migrations
    send failed:           d.undispatch(fid, now); then d.dispatch(d.retarget(plan, next), now)
                           for the next candidate (plan.decision.top_workers), or 5xx
    relayed request in (X-KVC-Forward-To with a shortlist header, at R):
                           v = d.on_relay(fid, shortlist, d.lookup(tokens), now)
                           Accept -> d.dispatch(v.plan, now) and send to v.plan.worker
                           Refuse -> answer the origin with v.vector (no body)
    refusal back (origin): plan = d.on_refused(fid, vector, now); dispatch(plan) as above
    FIRST byte of the worker's stream (SGLang streams meta_info.cached_tokens with every
    chunk, so /generate has it now; OpenAI shapes carry usage only in the last chunk):
                           d.on_first_token(fid, worker, now, reused_or_None, piggyback)
                           (this retires the booked work and confirms the prefix as held)
    end of stream:         d.on_usage(fid, reused, now) if the count came only at the end
    relaying a response to another region's origin:
                           attach d.piggyback(origin_region, now) to its headers
    local load poll:       d.on_local_loads(workers, queue_ms, taken_ms, now), queue_ms from
                           ``router.load_report.worker_queue_ms`` of each /v1/loads body
    every Δ:               for dest, vec in d.broadcast(now): send vec to dest's edge
    vector from a peer:    d.on_vector(vec, now);   forward announced: d.on_peer_forward(...)
    migration landed:      d.on_migration_done(family_key, now)

Clocks: ``now`` and every time in a message are one edge's clock, and vectors carry the
sender's; across processes that must be the wall clock (epoch ms, chrony-synced), not a
monotonic clock, or a peer's ``taken_ms`` and this edge's landings are in different domains.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from kvcompass.decider.booking import RegionBooking
from kvcompass.decider.paths import HOLD_CAP_FLOOR_MS, REGISTRATION_SLACK_MS
from kvcompass.decider.plans import DeciderPaths, ForwardRecord, Plan, Sent, Verdict
from kvcompass.decider.vector import QueueVector, Shortlist
from kvcompass.discovery import EdgeDiscovery, Lookup
from kvcompass.errors import InvalidInputError
from kvcompass.router import BroadcastSchedule, PendingHolders, Router, RouterConfig
from kvcompass.router import score as sc
from kvcompass.router.hot_prefix import MigrationRequest

if TYPE_CHECKING:  # annotations only
    from kvcompass.deployment import Deployment
    from kvcompass.index_view import IndexView
    from kvcompass.keys import PrefixHasher
    from kvcompass.levels import Levels

_NO_IDS = np.zeros(0, dtype=np.int64)
_NO_QUEUES = np.zeros(0, dtype=np.float64)


class Decider:
    """Everything one edge (region ``router.origin``) decides; see the module docstring."""

    def __init__(self, discovery: EdgeDiscovery, paths: DeciderPaths) -> None:
        router = discovery.router
        n_regions = router.n_regions
        if paths.one_way_ms.shape != (n_regions, n_regions) or paths.confirm_ms.shape != (
            n_regions,
        ):
            raise InvalidInputError(
                f"expected one_way_ms ({n_regions}, {n_regions}) and confirm_ms ({n_regions},), "
                f"got {paths.one_way_ms.shape} and {paths.confirm_ms.shape}"
            )
        self.discovery = discovery
        self.router = router
        self.config = cfg = router.config
        self.origin = o = router.origin
        self.worker_region = router.worker_region
        self._region = router.worker_region.tolist()
        self._one_way = paths.one_way_ms.tolist()
        self._confirm = paths.confirm_ms.tolist()
        self._rtt = (paths.one_way_ms + paths.one_way_ms.T).tolist()
        self.local = router.queue_view.local_workers
        self._local = set(self.local.tolist())
        self._workers_of = [
            np.flatnonzero(router.worker_region == r).astype(np.int64) for r in range(n_regions)
        ]
        self.booking = RegionBooking(self.local, self._one_way[o][o]) if cfg.booking else None
        self.overlay = PendingHolders(router.n_workers) if cfg.pending_holders else None
        self.schedule = BroadcastSchedule(o, n_regions, cfg.broadcast_period_ms)
        self._forwards: dict[int, ForwardRecord] = {}
        self._stale_check_ms = -math.inf
        """When remote estimates were last checked for age (``QueueView.expire_stale``)."""
        self._read_q: dict[int, tuple[float, float]] = {}
        """Local worker -> (queue ms, taken ms) of its latest poll answer (booking off)."""
        self._marks: NDArray[np.float64] | None = None
        """Per shard, the view reflects every event produced up to then (``set_index_marks``)."""
        self._hold_cap_ms = HOLD_CAP_FLOOR_MS

    @classmethod
    def for_deployment(
        cls,
        deployment: Deployment,
        levels: Levels,
        origin: int,
        config: RouterConfig,
        hasher: PrefixHasher,
        view: IndexView,
        paths: DeciderPaths,
    ) -> Decider:
        """The decider of the edge in region ``origin`` (``Router.from_deployment`` inside)."""
        router = Router.from_deployment(deployment, levels, origin, config)
        return cls(EdgeDiscovery(origin, hasher, view, router), paths)

    # -- lookup ----------------------------------------------------------------------------------
    def lookup(self, tokens: NDArray[np.int32], hasher: PrefixHasher | None = None) -> Lookup:
        """The view's answer for a prompt's tokens (hashed at this edge's query lengths, in
        ``hasher``'s namespace: a tenant's or model's; default: the edge's own)."""
        return self.discovery.lookup(tokens, hasher)

    def lookup_keys(self, lengths: NDArray[np.int64], keys: NDArray[np.uint64]) -> Lookup:
        """The view's answer for a prompt already hashed at this edge's query lengths."""
        return self.discovery.lookup_keys(lengths, keys)

    # -- a request at its origin -------------------------------------------------------------------
    def decide(
        self, fid: int, lookup: Lookup, prompt_tokens: int, now_ms: float, final: bool = False
    ) -> Plan:
        """Score every worker for request ``fid``; nothing is committed until ``dispatch``."""
        matched, tiers = self._answer(lookup, now_ms)
        d = self.router.choose(prompt_tokens, matched, tiers, now_ms)
        r = self._region[d.worker]
        if self.booking is None or r == self.origin:
            return Plan(fid, d, lookup, d.worker)
        router = self.router
        ws = self._workers_of[r]
        order = ws[np.argsort(router.scores[ws], kind="stable")].tolist()
        shortlist = Shortlist(
            origin=self.origin,
            region=r,
            prompt_tokens=prompt_tokens,
            workers=tuple(order),
            matched_tokens=tuple(int(matched[w]) for w in order),
            tiers=tuple(int(tiers[w]) for w in order),
            lambda_price=d.lambda_price,
            alternative_ms=router.best_score_outside(r),
            final=final,
        )
        return Plan(fid, d, lookup, d.worker, r, shortlist)

    def dispatch(self, plan: Plan, now_ms: float) -> Sent:
        """The request of ``plan`` leaves now: book it, hold its prefix, count its work."""
        if plan.fid in self._forwards:
            raise InvalidInputError(f"forward {plan.fid} is already dispatched")
        d, w, lk = plan.decision, plan.worker, plan.lookup
        r = self._region[w]
        work = d.predicted_service_ms
        booked = self.booking is not None and r == self.origin
        relayed_for = -1
        self.router.note_sent(w, now_ms)
        if booked:
            assert self.booking is not None
            arrive = self.booking.book(plan.fid, w, now_ms, work)
            wait = float(self.booking.waits(now_ms)[self.booking.slot(w)])
            if plan.relay_region >= 0:  # an accepted relay: the shortlist names its origin
                assert plan.shortlist is not None
                relayed_for = plan.shortlist.origin
        else:
            arrive = now_ms + self._one_way[self.origin][r]
            view = self.router.queue_view
            wait = float(view.queue_ms[w] + view.pending_ms[w])
            self.router.on_forward(d, now_ms, arrive)
        if self.overlay is not None and lk.keys.size:
            self._hold(lk, w, arrive + wait + work)
        claimed = {w: d.claimed_tokens}
        if plan.shortlist is not None:
            sl = plan.shortlist
            claimed = dict(zip(sl.workers, sl.matched_tokens, strict=True))
            if booked:
                claimed[w] = d.claimed_tokens
        record = ForwardRecord(plan, r, arrive, work, booked, claimed, relayed_for)
        self._forwards[plan.fid] = record
        # Announce what peers cannot learn from this region's vector: a forward to another
        # region's worker (a booked one is in this region's next vector, a relay the owner's
        # vector shows only once it arrived there).
        announce = None
        if self.config.forward_ledger and relayed_for < 0 and not booked:
            announce = (w, arrive, work)
        migrations: list[MigrationRequest] = []
        if self.config.migration and lk.keys.size and relayed_for < 0:
            migrations = self.router.observe(lk.family_key, lk.match.matched_tokens, d, now_ms)
        return Sent(announce, migrations)

    def retarget(self, plan: Plan, worker: int) -> Plan:
        """``plan`` sent to ``worker`` instead (the edge's retry on its next candidate): the
        match and predicted work are that worker's explain row (0 match if not in the top k)."""
        d = plan.decision
        if worker == d.worker:
            return plan
        rows = d.top_terms
        hit = np.flatnonzero(rows[:, sc.TERM_WORKER] == worker)
        if hit.size:
            row = rows[hit[0]]
            claimed = int(row[sc.TERM_MATCHED])
            service = row[sc.TERM_PREFILL] / (1.0 + d.lambda_price) + row[sc.TERM_RELOAD]
        else:
            claimed = 0
            service = float(self.router.state_view()[sc.ROW_BETA, worker]) * d.prompt_tokens
        d = d._replace(worker=worker, claimed_tokens=claimed, predicted_service_ms=float(service))
        r = self._region[worker]
        relay = -1 if self.booking is None or r == self.origin else r
        return plan._replace(decision=d, worker=worker, relay_region=relay)

    def gauges(self, now_ms: float) -> tuple[NDArray[np.float64], NDArray[np.float64],
                                             NDArray[np.float64]]:  # fmt: skip
        """(belief, queue estimate ms, estimate age ms) per worker, for an edge's metrics."""
        state = self.router.state_view()
        stale = self.router.queue_view.staleness_ms(now_ms)
        return state[sc.ROW_BELIEF].copy(), state[sc.ROW_QUEUE].copy(), np.asarray(stale)

    def set_unroutable(self, workers: Iterable[int]) -> None:
        """Workers this edge cannot send to (no route, or outside a request's scope): they never
        win while a routable worker exists (``Router.set_unroutable``)."""
        self.router.set_unroutable(workers)

    def undispatch(self, fid: int, now_ms: float) -> None:
        """The send of ``fid`` failed: release its booking and its overlay hold."""
        fwd = self._forwards.pop(fid, None)
        if fwd is None:
            return
        w = fwd.plan.worker
        if fwd.booked and self.booking is not None:
            self.booking.cancel(fid)
        elif self.router.queue_view.ledger is not None:
            self.router.queue_view.retire_own(w, fwd.arrive_ms, fwd.work_ms)
        if self.overlay is not None:
            self.overlay.release(fwd.plan.lookup.keys, w)

    # -- route-and-reserve ------------------------------------------------------------------------
    def on_relay(self, fid: int, shortlist: Shortlist, lookup: Lookup, now_ms: float) -> Verdict:
        """At the owning region: pick among this region's workers with the exact booking, or
        refuse with this region's vector (see the module docstring for the threshold)."""
        if shortlist.region != self.origin or self.booking is None:
            raise InvalidInputError(
                f"relay for region {shortlist.region} reached the edge of {self.origin}"
                + ("" if self.booking is not None else " (booking off)")
            )
        n = self.router.n_workers
        matched = np.zeros(n, np.int64)
        tiers = np.zeros(n, np.uint8)
        for w, m, t in zip(
            shortlist.workers, shortlist.matched_tokens, shortlist.tiers, strict=True
        ):
            if self._region[w] == self.origin:
                matched[w], tiers[w] = m, t
        matched, tiers = self._raise(lookup, matched, tiers, now_ms)
        d = self.router.choose_in_region(
            shortlist.prompt_tokens, matched, tiers, shortlist.lambda_price, now_ms
        )
        if not shortlist.final and d.score_ms > shortlist.alternative_ms:
            return Verdict(None, self.piggyback(shortlist.origin, now_ms))
        return Verdict(Plan(fid, d, lookup, d.worker, self.origin, shortlist))

    def on_refused(self, fid: int, vector: QueueVector, prompt_tokens: int, now_ms: float) -> Plan:
        """The relay of ``fid`` was refused with ``vector``: fold it in and decide once more,
        finally (a relay of the new plan must be accepted)."""
        fwd = self._forwards.pop(fid, None)
        if fwd is None:
            raise InvalidInputError(f"forward {fid} was not relayed from this edge")
        if self.router.queue_view.ledger is not None:
            self.router.queue_view.retire_own(fwd.plan.worker, fwd.arrive_ms, fwd.work_ms)
        if self.overlay is not None:
            self.overlay.release(fwd.plan.lookup.keys, fwd.plan.worker)
        self.on_vector(vector, now_ms)
        lk = fwd.plan.lookup
        fresh = self.lookup_keys(lk.lengths, lk.keys)
        return self.decide(fid, fresh, prompt_tokens, now_ms, final=True)

    # -- feedback --------------------------------------------------------------------------------
    def on_first_token(
        self,
        fid: int,
        worker: int,
        now_ms: float,
        reused_tokens: int | None = None,
        vector: QueueVector | None = None,
    ) -> None:
        """The first byte of ``fid``'s response from ``worker`` reached this edge: retire the work
        it booked, confirm its prefix as held there, fold in a piggybacked vector."""
        fwd = self._forwards.get(fid)
        if vector is not None:
            self.on_vector(vector, now_ms)
        if fwd is None:
            return
        r = self._region[worker]
        if fwd.booked and self.booking is not None:
            self.booking.retire(fid, now_ms)
        elif self.router.queue_view.ledger is not None:
            self.router.queue_view.retire_own(fwd.plan.worker, fwd.arrive_ms, fwd.work_ms)
        lk = fwd.plan.lookup
        if self.overlay is not None and lk.keys.size:
            if worker != fwd.plan.worker:
                self.overlay.release(lk.keys, fwd.plan.worker)
            self._hold(lk, worker, now_ms - self._one_way[r][self.origin])
        if reused_tokens is None:
            fwd.plan = fwd.plan._replace(worker=worker)
            fwd.booked = False
            fwd.arrive_ms = math.inf  # nothing left to retire: only ``on_usage`` may follow
            return
        del self._forwards[fid]
        self._believe(fwd, worker, reused_tokens, now_ms)

    def on_usage(self, fid: int, reused_tokens: int, now_ms: float) -> None:
        """The reused-token count came at the end of the stream (OpenAI usage chunk)."""
        fwd = self._forwards.pop(fid, None)
        if fwd is not None:
            self._believe(fwd, fwd.plan.worker, reused_tokens, now_ms)

    def _believe(self, fwd: ForwardRecord, worker: int, reused: int, now_ms: float) -> None:
        claimed = fwd.claimed.get(worker, 0)
        self.router.on_response(worker, claimed, reused, now_ms)

    def forget(self, fid: int, now_ms: float) -> None:
        """``fid`` ended without the feedback ``on_first_token``/``on_usage`` expect (the
        worker failed mid-response, the client left): retire what it booked, keep its prefix
        hold (the worker did receive the prompt), and drop the record."""
        fwd = self._forwards.pop(fid, None)
        if fwd is None or math.isinf(fwd.arrive_ms):
            return
        if fwd.booked and self.booking is not None:
            self.booking.retire(fid, now_ms)
        elif self.router.queue_view.ledger is not None:
            self.router.queue_view.retire_own(fwd.plan.worker, fwd.arrive_ms, fwd.work_ms)

    @property
    def books(self) -> bool:
        """This decider books its region's workers for relays (route-and-reserve on)."""
        return self.booking is not None

    def open_forwards(self) -> int:
        """Forwards dispatched and not yet answered (a gauge; bounded by the requests open)."""
        return len(self._forwards)

    def on_migration_done(self, family_key: int, now_ms: float) -> None:
        """The replica asked for ``family_key`` landed (or failed)."""
        self.router.complete_migration(family_key, now_ms)

    # -- queue state -----------------------------------------------------------------------------
    def on_local_loads(
        self,
        workers: NDArray[np.int64],
        queue_ms: NDArray[np.float64],
        taken_ms: float,
        now_ms: float,
    ) -> None:
        """This edge's poll of its own workers answered (``queue_ms`` from
        ``load_report.worker_queue_ms``; ``taken_ms`` in this edge's clock)."""
        ids = np.asarray(workers, dtype=np.int64)
        qs = np.asarray(queue_ms, dtype=np.float64)
        for w, q in zip(ids.tolist(), qs.tolist(), strict=True):
            self._read_q[w] = (q, taken_ms)
        if self.booking is not None:
            for w, q in zip(ids.tolist(), qs.tolist(), strict=True):
                self.booking.on_reading(w, q, taken_ms)
        else:
            self.router.on_broadcast(self.origin, ids, qs, now_ms, taken_ms)

    def vector(self, now_ms: float) -> QueueVector | None:
        """This region's vector now: the booked backlog of its workers (booking on) or the last
        poll reading (off), with this edge's forwards not landed; None before any reading."""
        flying = tuple(self.router.in_flight(now_ms)) if self.config.forward_ledger else ()
        if self.booking is not None:
            return QueueVector(
                self.origin, now_ms, self.local, self.booking.backlog(now_ms), flying
            )
        if not self._read_q:
            return None
        ids = np.array(sorted(self._read_q), dtype=np.int64)
        qs = np.array([self._read_q[w][0] for w in ids.tolist()], dtype=np.float64)
        taken = min(t for _, t in self._read_q.values())  # each answer at least this fresh
        return QueueVector(self.origin, taken, ids, qs, flying)

    def piggyback(self, dest_region: int, now_ms: float) -> QueueVector | None:
        """The vector to attach to a response (or refusal) leaving for ``dest_region``."""
        vec = self.vector(now_ms)
        if vec is not None:
            self.schedule.note_piggyback(dest_region, now_ms)
        return vec

    def broadcast(self, now_ms: float) -> list[tuple[int, QueueVector]]:
        """The Δ broadcast: (destination region, vector) pairs. The queues go to regions that got
        no piggyback within Δ; this edge's in-flight list goes to every region."""
        vec = self.vector(now_ms)
        due = set(self.schedule.targets(now_ms).tolist()) if vec is not None else set()
        flying = tuple(self.router.in_flight(now_ms)) if self.config.forward_ledger else ()
        out: list[tuple[int, QueueVector]] = []
        for dest in range(self.router.n_regions):
            if dest == self.origin or (dest not in due and not flying):
                continue
            if dest in due and vec is not None:
                out.append((dest, vec))
            else:
                out.append((dest, QueueVector(self.origin, now_ms, _NO_IDS, _NO_QUEUES, flying)))
        return out

    def on_vector(self, vector: QueueVector, now_ms: float) -> None:
        """A peer's vector (broadcast, piggyback or refusal) arrived."""
        r = vector.region
        if r == self.origin:
            return
        if vector.worker_ids.size:
            self.router.on_broadcast(r, vector.worker_ids, vector.queue_ms, now_ms, vector.taken_ms)
        if self.config.forward_ledger:
            entries = list(vector.in_flight)
            if self.booking is not None:  # its forwards to us reach us: we book them then
                entries = [e for e in entries if e[0] not in self._local]
            self.router.on_peer_in_flight(r, entries)

    def on_peer_forward(
        self, region: int, worker: int, arrive_ms: float, work_ms: float, now_ms: float
    ) -> None:
        """The edge of ``region`` announced one forward as it made it."""
        if self.booking is not None and worker in self._local:
            return
        self.router.queue_view.on_peer_forward(region, worker, arrive_ms, work_ms)

    # -- the index's position ----------------------------------------------------------------
    def set_index_marks(self, marks: NDArray[np.float64] | None, lag_p99_ms: float = 0.0) -> None:
        """The view's watermarks (per shard: every event produced up to then is reflected; the
        shell keeps the array current in place) and its observed event -> view lag P99. With
        marks, a pending holder lasts until the view reflects its registration (confirmed, or
        never made), whatever the lag; without them, until the derived path deadline. The lag
        only bounds how long a stalled view is covered: ``HOLD_CAP_FLOOR_MS`` or 10 P99s."""
        self._marks = marks
        if np.isfinite(lag_p99_ms) and lag_p99_ms > 0:
            self._hold_cap_ms = max(HOLD_CAP_FLOOR_MS, 10.0 * lag_p99_ms)

    def _hold(self, lk: Lookup, worker: int, done_ms: float) -> None:
        """Count ``lk``'s prefix as held by ``worker``, whose prefill ends at ``done_ms``."""
        assert self.overlay is not None
        r = self._region[worker]
        if self._marks is None:
            self.overlay.hold(lk.lengths, lk.keys, worker, done_ms + self._confirm[r])
            return
        registered = done_ms + REGISTRATION_SLACK_MS
        until = done_ms + max(self._confirm[r], self._hold_cap_ms)
        self.overlay.hold(lk.lengths, lk.keys, worker, until, registered)

    # -- internals -------------------------------------------------------------------------------
    def _answer(self, lookup: Lookup, now_ms: float) -> tuple[NDArray[np.int64], NDArray[np.uint8]]:
        """The view's answer raised by the overlay; local estimates refreshed from the booking."""
        m = lookup.match
        return self._raise(lookup, m.matched_tokens, m.tiers, now_ms)

    def _raise(
        self,
        lookup: Lookup,
        matched: NDArray[np.int64],
        tiers: NDArray[np.uint8],
        now_ms: float,
    ) -> tuple[NDArray[np.int64], NDArray[np.uint8]]:
        if now_ms >= self._stale_check_ms + self.config.broadcast_period_ms:
            self._stale_check_ms = now_ms  # once per Δ: a region silent for 10 Δ is forgotten
            self.router.queue_view.expire_stale(now_ms)
        if self.booking is not None:
            self.router.set_local_queues(self.booking.waits(now_ms), now_ms, now_ms)
        if self.overlay is not None:
            matched, tiers, _ = self.overlay.overlay(
                lookup.keys, matched, tiers, now_ms, self._marks
            )
        return matched, tiers
