"""Router: one edge's forwarding decision and the feedback that keeps its inputs fresh.

Owns the packed score state of one edge (origin region o) — β, WAN, n1, locality, and views of
the queue estimates and cache beliefs — and wires the queue view, the cache belief and the
hot-prefix tracker to the score kernel. It must not hash prompts or read the index (the caller
passes the index's per-worker answer) and must not send anything: it returns ``Decision`` and
``MigrationRequest`` values that the edge, the simulator or a benchmark act on.

Per request:  ``choose`` → (forward) ``on_forward`` → ``observe`` (hot prefixes);
per response: ``on_response`` (belief + piggybacked queue vector);
asynchronously: ``set_local_queues`` (live local readings), ``on_broadcast``.

It takes plain arrays and imports the deployment and level modules for annotations only;
``from_deployment`` is the convenience constructor for code that has those objects.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from kvcompass.errors import InvalidInputError
from kvcompass.router import score as sc
from kvcompass.router.belief import CacheBelief
from kvcompass.router.config import RouterConfig
from kvcompass.router.decision import Decision
from kvcompass.router.hot_prefix import HotPrefixTracker, MigrationRequest
from kvcompass.router.queue_view import QueueView

if TYPE_CHECKING:  # annotations only: the router works on plain arrays
    from kvcompass.deployment import Deployment
    from kvcompass.levels import Levels

QueueVector = tuple[int, NDArray[np.int64] | list[int], NDArray[np.float64] | list[float]]
"""(region, worker ids, queue ms): a region's per-worker queue vector as carried on the wire."""


class Router:
    """Joint-score forwarding for one edge over every worker of the deployment."""

    __slots__ = (
        "_local",
        "_local_mask",
        "_params",
        "_scores",
        "_state",
        "_top_k",
        "_wan",
        "belief",
        "config",
        "hot_prefixes",
        "n_regions",
        "n_workers",
        "origin",
        "queue_view",
        "tau_ms",
        "worker_region",
    )

    def __init__(
        self,
        origin: int,
        worker_region: NDArray[np.int64],
        beta_ms_per_token: NDArray[np.float64],
        rtt_ms: NDArray[np.float64],
        n1_tokens: NDArray[np.int64],
        config: RouterConfig | None = None,
    ) -> None:
        """Validate the deployment arrays and build the packed state.

        worker_region (W,) int64 region of each worker; beta_ms_per_token (W,) prefill cost;
        rtt_ms (R, R) round trip between regions (WAN(o, r) = rtt_ms[o, region(r)], forced to 0
        inside o); n1_tokens (R, R) first latency-derived prefix length from o toward r.
        """
        cfg = RouterConfig() if config is None else config
        wr, beta, rtt, n1 = _validated(origin, worker_region, beta_ms_per_token, rtt_ms, n1_tokens)
        n_workers, n_regions = wr.shape[0], rtt.shape[0]
        self.config = cfg
        self.origin = origin
        self.worker_region = wr
        self.n_workers = n_workers
        self.n_regions = n_regions
        local = wr == origin
        state = np.zeros((sc.N_STATE_ROWS, n_workers), np.float64)
        state[sc.ROW_BETA] = beta
        state[sc.ROW_WAN] = np.where(local, 0.0, rtt[origin, wr])
        self._wan = state[sc.ROW_WAN].copy()
        state[sc.ROW_N1] = n1[origin, wr]
        state[sc.ROW_LOCAL] = local
        state[sc.ROW_ORDER] = -1e300  # never sent to: first among equals (finite: validated)
        self._state = state
        self._scores = np.empty(n_workers, np.float64)
        self._top_k = min(cfg.explain_top_k, n_workers)
        self._local = local.tolist()
        self._local_mask = local
        self.queue_view = QueueView(
            wr, origin, n_regions, cfg, state[sc.ROW_QUEUE], state[sc.ROW_PENDING]
        )
        self.belief = CacheBelief(
            n_workers, cfg.belief_ewma_weight, cfg.belief_prior, state[sc.ROW_BELIEF]
        )
        self.hot_prefixes = HotPrefixTracker(wr, origin, cfg)
        self.tau_ms = cfg.resolve_tau_ms(float(np.median(beta)))
        params = np.zeros(sc.N_PARAMS, np.float64)
        params[sc.P_GAMMA] = cfg.gamma_ms_per_token
        params[sc.P_TAU] = self.tau_ms
        params[sc.P_LAMBDA_MAX] = cfg.lambda_max
        params[sc.P_LOAD] = cfg.load_aware
        params[sc.P_XREGION] = cfg.cross_region_reuse
        params[sc.P_TIER] = cfg.tier_aware
        params[sc.P_BELIEF] = cfg.use_belief
        params[sc.P_HERD] = cfg.herding_guard
        self._params = params

    @classmethod
    def from_deployment(
        cls,
        deployment: Deployment,
        levels: Levels,
        origin: int,
        config: RouterConfig | None = None,
    ) -> Router:
        """Build the router of the edge in region ``origin`` from a deployment and its levels.

        β per worker is its region's ``prefill_ms_per_token``; WAN is ``deployment.rtt_ms``
        (2 × one-way); n1 is ``levels.n1_matrix``.
        """
        wr = np.asarray(deployment.worker_region, dtype=np.int64)
        rtt = 2.0 * np.asarray(deployment.wan_matrix_ms, dtype=np.float64)
        beta = np.asarray(deployment.prefill_ms_per_token, dtype=np.float64)[wr]
        n1 = np.asarray(levels.n1_matrix, dtype=np.int64)
        return cls(origin, wr, beta, rtt, n1, config)

    def choose(
        self,
        prompt_tokens: int,
        matched_tokens: NDArray[np.int64],
        tiers: NDArray[np.uint8],
        now_ms: float,
    ) -> Decision:
        """Score every worker for one request and return the winner with its explanation.

        ``matched_tokens``/``tiers``: the index's (W,) answer for this request at this edge.
        ``now_ms`` is part of the contract but does not enter the score: the score is a pure
        function of the current estimates (staleness is handled by refreshing them).
        """
        sc.check_request_arrays(prompt_tokens, matched_tokens, tiers, self.n_workers)
        terms = np.empty((self._top_k, sc.N_TERMS), np.float64)
        (status, winner, lam, min_q, holder, lost, remote, service, claimed, best) = (
            sc._score_kernel(
                prompt_tokens, matched_tokens, tiers, self._state, self._params, self._scores, terms
            )
        )
        if status != sc.STATUS_OK:
            sc.raise_for_status(status, winner, prompt_tokens, matched_tokens)
        # Positional on purpose: this is the per-request path (see Decision's docstring).
        return Decision(
            winner,
            best,
            lam,
            min_q,
            prompt_tokens,
            claimed,
            service,
            claimed > 0 and self._local[winner],
            holder,
            lost,
            remote,
            int(matched_tokens[remote]) if remote >= 0 else 0,
            terms,
        )

    def choose_in_region(
        self,
        prompt_tokens: int,
        matched_tokens: NDArray[np.int64],
        tiers: NDArray[np.uint8],
        lambda_price: float,
        now_ms: float,
    ) -> Decision:
        """``choose`` restricted to this edge's own region, at a given λ (route-and-reserve).

        The owning region re-scores a request relayed to it with the origin's λ, so its scores
        and the origin's alternative are priced alike (``kvcompass.decider``); workers of other
        regions cannot win (their WAN term is +inf for this call only).
        """
        if not (math.isfinite(lambda_price) and lambda_price >= 0):
            raise InvalidInputError(f"expected lambda_price finite >= 0, got {lambda_price}")
        wan = self._state[sc.ROW_WAN]
        saved = wan.copy()
        wan[~self._local_mask] = np.inf
        self._params[sc.P_FIX_LAMBDA] = 1.0
        self._params[sc.P_LAMBDA] = lambda_price
        try:
            return self.choose(prompt_tokens, matched_tokens, tiers, now_ms)
        finally:
            wan[:] = saved
            self._params[sc.P_FIX_LAMBDA] = 0.0

    @property
    def scores(self) -> NDArray[np.float64]:
        """Every worker's score of the last ``choose`` (read-only view, overwritten by the next)."""
        view = self._scores.view()
        view.flags.writeable = False
        return view

    def best_score_outside(self, region: int) -> float:
        """Lowest score of the last ``choose`` among workers outside ``region`` (+inf: none)."""
        mask = self.worker_region != region
        return float(self._scores[mask].min()) if mask.any() else math.inf

    def on_forward(self, decision: Decision, now_ms: float, arrive_ms: float | None = None) -> None:
        """The edge forwarded ``decision``'s request (landing at ``arrive_ms`` if known): count
        its work until a reading includes it."""
        self.queue_view.on_forward(
            decision.worker, decision.predicted_service_ms, now_ms, arrive_ms
        )

    def note_sent(self, worker: int, now_ms: float) -> None:
        """This edge sent work to ``worker`` at ``now_ms``: among workers of exactly equal score
        the one it sent to least recently wins (idle workers share the load instead of the
        lowest id taking every tie)."""
        self._state[sc.ROW_ORDER, worker] = now_ms

    def observe(
        self,
        family_key: int,
        matched_tokens: NDArray[np.int64],
        decision: Decision,
        now_ms: float,
    ) -> list[MigrationRequest]:
        """Feed the hot-prefix tracker; return the migrations this request triggers."""
        view = self.queue_view
        return self.hot_prefixes.observe(
            family_key,
            decision,
            matched_tokens,
            view.idle_since_ms,
            lambda: view.persistently_idle(now_ms),
            now_ms,
        )

    def complete_migration(self, family_key: int, now_ms: float) -> None:
        """The replica for ``family_key`` landed or failed: stop counting it as in flight."""
        self.hot_prefixes.complete(family_key, now_ms)

    def on_response(
        self,
        worker: int,
        claimed_tokens: int,
        reused_tokens: int,
        now_ms: float,
        queue_vector: QueueVector | None = None,
        vector_taken_ms: float | None = None,
    ) -> None:
        """A response came back: update b_worker and fold in a piggybacked queue vector."""
        self.belief.update(worker, claimed_tokens, reused_tokens)
        if queue_vector is not None:
            region, ids, queue_ms = queue_vector
            self.queue_view.on_vector(
                region,
                np.asarray(ids, np.int64),
                np.asarray(queue_ms, np.float64),
                now_ms,
                vector_taken_ms,
            )

    def on_broadcast(
        self,
        region: int,
        worker_ids: NDArray[np.int64] | list[int],
        queue_ms: NDArray[np.float64] | list[float],
        now_ms: float,
        taken_ms: float | None = None,
    ) -> None:
        """A periodic queue-vector broadcast (or a local poll) of ``region`` arrived."""
        self.queue_view.on_vector(
            region,
            np.asarray(worker_ids, np.int64),
            np.asarray(queue_ms, np.float64),
            now_ms,
            taken_ms,
        )

    def set_local_queues(
        self,
        queue_ms: NDArray[np.float64] | list[float],
        now_ms: float,
        taken_ms: float | None = None,
    ) -> None:
        """Live queue readings of the local workers (``queue_view.local_workers`` order)."""
        self.queue_view.set_local(np.asarray(queue_ms, np.float64), now_ms, taken_ms)

    def on_peer_in_flight(self, region: int, entries: list[tuple[int, float, float]]) -> None:
        """The edge of ``region`` reported its forwards not yet landed (worker, arrive, work)."""
        self.queue_view.on_peer_in_flight(region, entries)

    def in_flight(self, now_ms: float) -> list[tuple[int, float, float]]:
        """This edge's forwards not yet landed at ``now_ms`` (sent with its region's vector)."""
        return self.queue_view.own_in_flight(now_ms)

    def set_unroutable(self, workers: Iterable[int]) -> None:
        """Workers the caller cannot forward to (an edge with no URL for them): their WAN term
        becomes +inf, so one never wins or outranks a routable worker in the top k while any
        routable worker exists. Replaces the previous set; their loads still enter λ."""
        out = np.zeros(self.n_workers, dtype=bool)
        for w in workers:
            if not 0 <= w < self.n_workers:
                raise InvalidInputError(
                    f"unroutable worker: expected an id in 0..{self.n_workers - 1}, got {w}"
                )
            out[w] = True
        self._state[sc.ROW_WAN] = np.where(out, np.inf, self._wan)

    @property
    def gamma_ms_per_token(self) -> float:
        """γ used by the score."""
        return float(self._params[sc.P_GAMMA])

    def state_view(self) -> NDArray[np.float64]:
        """Read-only view of the packed score state (rows ``score.ROW_*``), for tools and tests."""
        view = self._state.view()
        view.flags.writeable = False
        return view


def _validated(
    origin: int,
    worker_region: NDArray[np.int64],
    beta: NDArray[np.float64],
    rtt: NDArray[np.float64],
    n1: NDArray[np.int64],
) -> tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.float64], NDArray[np.int64]]:
    wr = np.asarray(worker_region)
    b = np.asarray(beta, dtype=np.float64)
    t = np.asarray(rtt, dtype=np.float64)
    n = np.asarray(n1)
    if wr.ndim != 1 or wr.shape[0] < 1 or not np.issubdtype(wr.dtype, np.integer):
        raise InvalidInputError(
            f"expected worker_region as 1-d ints, W >= 1, got {wr.dtype}{wr.shape}"
        )
    w = wr.shape[0]
    if t.ndim != 2 or t.shape[0] != t.shape[1] or t.shape[0] < 1:
        raise InvalidInputError(f"expected rtt_ms of shape (R, R), got {t.shape}")
    r = t.shape[0]
    if n.shape != (r, r) or not np.issubdtype(n.dtype, np.integer) or (n.size and n.min() < 0):
        raise InvalidInputError(f"expected n1_tokens ints >= 0 of shape ({r}, {r}), got {n.shape}")
    if not 0 <= origin < r:
        raise InvalidInputError(f"expected origin in [0, {r}), got {origin}")
    if wr.min() < 0 or wr.max() >= r:
        raise InvalidInputError(
            f"expected worker_region values in [0, {r}), got [{wr.min()}, {wr.max()}]"
        )
    if b.shape != (w,) or not np.all(np.isfinite(b)) or b.min() <= 0:
        raise InvalidInputError(
            f"expected beta_ms_per_token finite > 0 of shape ({w},), got {b.shape} {b.tolist()}"
        )
    if not np.all(np.isfinite(t)) or t.min() < 0:
        raise InvalidInputError(f"expected rtt_ms finite >= 0, got {t.tolist()}")
    return wr.astype(np.int64), b, t, n.astype(np.int64)
