"""RouterConfig: every tunable of the edge router in one frozen value, units in the names.

Owns the defaults and the reasoning behind each one (paper §5.1 where the paper gives a value,
a derivation from the cost model of §3.5 where it does not). It must not read files, the
environment or the clock: shells build it and pass it in; ``__post_init__`` only validates.

The capacity normaliser τ
-------------------------
``λ = min(λ_max, min_r Tq(r) / τ)`` inflates the price of recomputed tokens by spare capacity.
τ is the queueing delay at which recomputation should cost double (λ = 1). The M/G/1 model of
§3.5 says where that point is: a match of ``m`` tokens saves ``β·m`` ms, and the
Pollaczek–Khinchine wait ``E[Tq](ρ) = ρ/(1-ρ) · E[S](1+Cv²)/2`` equals that saving at the
crossover utilisation ρ*(m). Above ρ* an idle recomputing worker beats a loaded holder only if
idle workers still exist; once even the least-loaded worker waits longer than ``β·m``, every
recomputed token costs queued requests more than it saves, so reuse should be priced up. Hence

    τ = β̃ · m_ref        (β̃: median prefill ms/token of the pool)

which makes λ cross 1 exactly at ρ*(m_ref). ``m_ref = 2048`` tokens is the geometric middle of
the 1K–4K match range for which §3.5 reports ρ* = 0.13–0.37. Fitting P–K to those two
figures gives ``E[S](1+Cv²)/2 ≈ 6977·β``, so λ reaches 1 at ρ ≈ 0.23 and the cap λ_max = 8 at
ρ ≈ 0.70 of the least-loaded worker: near zero while idle workers exist, at the cap as the pool
saturates. Nothing here is fitted to a trace; set ``tau_ms`` to override.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvcompass import costs
from kvcompass.errors import ConfigError


@dataclass(frozen=True, slots=True)
class RouterConfig:
    """Parameters of the joint score, the queue view, the cache belief and the hot-prefix tracker.

    Defaults: Δ = 100 ms, w = 0.5, λ_max = 8, H = 3, T_h = 1 s are the paper's (§5.1); γ is
    derived from Llama-3.1-8B BF16 over a 25 GB/s host↔device link; τ is derived in the module
    docstring. The booleans are the ablation switches of §5.4 plus the switches beyond the paper.
    """

    # Queue view (paper §3.4, §5.1).
    broadcast_period_ms: float = 100.0
    """Δ: each region broadcasts its per-worker queue vector this often."""
    queue_ewma_weight: float = 0.5
    """w: weight of a fresh remote sample in the queue estimate (1 = replace)."""

    # Capacity price.
    lambda_max: float = 8.0
    """Cap on λ, so a stale or wrong estimate can skew one decision by a bounded amount."""
    tau_ms: float | None = None
    """τ; None derives ``median(β) · tau_reference_match_tokens`` at router construction."""
    tau_reference_match_tokens: int = 2048
    """m_ref of the τ derivation: the match whose M/G/1 crossover is where λ = 1."""

    # DRAM reload cost γ = KV bytes per token / host↔device bandwidth (``kvcompass.costs``).
    kv_bytes_per_token: int = costs.LLAMA31_8B_BF16_KV_BYTES_PER_TOKEN
    host_device_bandwidth_bytes_per_s: float = costs.HOST_DEVICE_BYTES_PER_S

    # Cache belief (paper §3.4; the weight and prior are ours).
    belief_ewma_weight: float = 0.2
    """Weight of one response's reused/claimed ratio. 0.2: a single race (eviction between the
    index update and the request's arrival) costs a fifth of the trust, three straight false
    claims push it below one half."""
    belief_prior: float = 1.0
    """Belief of a worker never heard from. 1: index entries come from the worker's own events,
    so they are trusted until responses say otherwise; a lower prior would tax new workers."""

    # Hot prefixes and migration (paper §3.4 Insert, §5.1).
    hot_miss_threshold: int = 3
    """H: local misses of a prefix family (and H consecutive losses to load) that trigger."""
    hot_window_ms: float = 1000.0
    """T_h: the sliding window the H misses must fall in."""
    idle_queue_eps_ms: float = 0.5
    """An estimated queue at or below this counts as zero (EWMA estimates only approach 0)."""
    migration_idle_min_ms: float = 500.0
    """'Persistently idle': estimated queue at zero for at least this long (5 Δ, so one lucky
    broadcast or one drained burst does not qualify a worker)."""
    migration_cooldown_ms: float = 10_000.0
    """A family is not migrated again within this time of its last request. A replica lands
    (intra-region copy of 4K tokens ≈ 0.5 GiB at 100 Gb/s ≈ 45 ms; cross-region recompute
    ≈ 0.5 s) and is registered through the pipeline well within it, so a re-trigger means the
    replica did not help, not that it has not arrived yet."""
    migration_timeout_ms: float = 10_000.0
    """An in-flight migration whose completion is never reported stops blocking after this."""

    # Explain / debug.
    explain_top_k: int = 3
    """Candidates whose every score term the Decision keeps for /debug/explain."""

    # Ablation switches (paper §5.4) and the herding guard (beyond the paper).
    load_aware: bool = True
    """False: drop Tq and λ from the score (No-load-aware)."""
    cross_region_reuse: bool = True
    """False: matches of workers outside the edge's region are ignored (No-xregion-reuse)."""
    tier_aware: bool = True
    """False: drop the γ term, pricing DRAM hits like VRAM hits (Tier-blind)."""
    migration: bool = True
    """False: the hot-prefix tracker never asks for a replica (No-KVmigration)."""
    herding_guard: bool = True
    """True: add the predicted prefill of this edge's own forwards since a worker's last refresh
    to its queue estimate, so one burst does not pile onto the same stale-idle worker."""
    use_belief: bool = True
    """False: b_r = 1 for every worker."""
    forward_ledger: bool = True
    """True (beyond the paper): the herding guard keeps each forward until a reading taken after
    it landed, and counts the forwards other edges report (``kvcompass.router.forwards``)."""
    pending_holders: bool = True
    """True (beyond the paper): a prompt this edge forwarded counts as held by its target until
    the index can confirm it (``kvcompass.router.pending``)."""

    booking: bool = True
    """True (beyond the paper): route-and-reserve. The edge of a region is the booking authority
    of its workers: it books every forward it dispatches to them and retires it at its first
    token (an exact queue model of its own region), and a request whose best worker is in
    another region is relayed to that region's edge with a shortlist, which picks the worker
    or refuses (``kvcompass.decider``). False: every decision is final at the origin edge."""

    def __post_init__(self) -> None:
        positive = {
            "broadcast_period_ms": self.broadcast_period_ms,
            "host_device_bandwidth_bytes_per_s": self.host_device_bandwidth_bytes_per_s,
            "hot_window_ms": self.hot_window_ms,
        }
        non_negative = {
            "lambda_max": self.lambda_max,
            "kv_bytes_per_token": float(self.kv_bytes_per_token),
            "idle_queue_eps_ms": self.idle_queue_eps_ms,
            "migration_idle_min_ms": self.migration_idle_min_ms,
            "migration_cooldown_ms": self.migration_cooldown_ms,
            "migration_timeout_ms": self.migration_timeout_ms,
        }
        for name, value in positive.items():
            if not (math.isfinite(value) and value > 0):
                raise ConfigError(f"RouterConfig.{name}: expected a finite value > 0, got {value}")
        for name, value in non_negative.items():
            if not (math.isfinite(value) and value >= 0):
                raise ConfigError(f"RouterConfig.{name}: expected a finite value >= 0, got {value}")
        unit = {
            "queue_ewma_weight": self.queue_ewma_weight,
            "belief_ewma_weight": self.belief_ewma_weight,
        }
        for name, value in unit.items():
            if not (0 < value <= 1):
                raise ConfigError(f"RouterConfig.{name}: expected a value in (0, 1], got {value}")
        if not 0 <= self.belief_prior <= 1:
            raise ConfigError(
                f"RouterConfig.belief_prior: expected a value in [0, 1], got {self.belief_prior}"
            )
        if self.tau_ms is not None and not (math.isfinite(self.tau_ms) and self.tau_ms > 0):
            raise ConfigError(f"RouterConfig.tau_ms: expected None or > 0, got {self.tau_ms}")
        if self.tau_reference_match_tokens < 1:
            raise ConfigError(
                "RouterConfig.tau_reference_match_tokens: expected >= 1, "
                f"got {self.tau_reference_match_tokens}"
            )
        if self.hot_miss_threshold < 1:
            raise ConfigError(
                f"RouterConfig.hot_miss_threshold: expected >= 1, got {self.hot_miss_threshold}"
            )
        if self.explain_top_k < 1:
            raise ConfigError(
                f"RouterConfig.explain_top_k: expected >= 1, got {self.explain_top_k}"
            )

    @property
    def stale_vector_ms(self) -> float:
        """A remote region's estimates are forgotten after this long without a vector: 10 Δ.
        Every region sends one every Δ (or piggybacks one sooner), so ten missed in a row mean
        the channel is broken; an estimate that old says nothing about the queue now."""
        return 10.0 * self.broadcast_period_ms

    @property
    def max_clock_ahead_ms(self) -> float:
        """How far in this edge's future a reading time may lie: Δ. Clocks of a deployment are
        synchronised to a few ms (NTP/chrony; the simulator draws per-edge offsets of σ = 5 ms),
        so a vector further ahead comes from a broken clock or a forged ``seq``."""
        return self.broadcast_period_ms

    @property
    def gamma_ms_per_token(self) -> float:
        """γ: ms to reload one token's KV from host DRAM (Llama-3.1-8B, 25 GB/s: 0.00524)."""
        return costs.transfer_ms_per_token(
            self.kv_bytes_per_token, self.host_device_bandwidth_bytes_per_s
        )

    def resolve_tau_ms(self, median_beta_ms_per_token: float) -> float:
        """τ for a pool whose median prefill cost is ``median_beta_ms_per_token``."""
        if self.tau_ms is not None:
            return self.tau_ms
        tau = median_beta_ms_per_token * self.tau_reference_match_tokens
        if not (math.isfinite(tau) and tau > 0):
            raise ConfigError(f"derived tau_ms: expected a finite value > 0, got {tau}")
        return tau


def load_poll_timeout_ms(period_ms: float) -> float:
    """How long an edge waits for one local worker's load answer: ``max(3 Δ, 1 s)``.

    A busy host answers late and a late reading is still better than none, so the wait spans
    several periods, and at least a second for short periods. The edge's poll
    (``edge/loads.py``) and the simulator's twin (``sim/engine/loads.py``) both use this.
    """
    return max(3.0 * period_ms, 1000.0)
