"""SimConfig: every knob of one simulation run, frozen, units in the field names.

Owns the defaults of the simulated hardware (``kvcompass.costs``, the one home of those numbers;
``sim.cost`` says where each comes from),
of the worker caches, of the control-plane network (delay, loss, jitter of index patches and
queue vectors; paper Table 4's robustness knobs) and of the metrics. Must not read files, the
environment or the clock; ``__post_init__`` only validates. The router's own tunables (Δ, w,
λ_max, H, T_h) live in ``kvcompass.router.RouterConfig``; the sim passes them through.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvcompass import costs
from kvcompass.errors import ConfigError

EVICTION_POLICIES: tuple[str, ...] = ("lru", "lfu", "fifo")

GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class SimConfig:
    """One run's configuration. Defaults model an A100-80GB serving Llama-3.1-8B BF16 (§5.3)."""

    seed: int = 1

    # -- worker hardware (sim.cost explains each figure) ---------------------------------------
    kv_bytes_per_token: int = costs.LLAMA31_8B_BF16_KV_BYTES_PER_TOKEN
    """Llama-3.1-8B BF16: 32 layers x 8 KV heads x 128 dims x (K,V) x 2 bytes = 128 KiB."""
    vram_kv_bytes: int = 32 * GIB
    """KV cache budget in VRAM (paper §5.3: 32 GB of the 80 GB card)."""
    dram_kv_bytes: int = 128 * GIB
    """Host DRAM KV cache per worker (paper §5.3: 128 GB)."""
    pcie_bytes_per_s: float = costs.HOST_DEVICE_BYTES_PER_S
    """Host -> device reload bandwidth (PCIe 4.0 x16, paper §5.3: ~25 GB/s)."""
    decode_ms_per_token: float = costs.DECODE_MS_PER_TOKEN
    """Time per output token of a request in a continuous batch (sim.cost derives it)."""
    engine_chunk_tokens: int = 8192
    """The engine's chunked-prefill size: SGLang's ``chunked_prefill_size`` default for a 60–90 GB
    GPU (sglang 0.5.23 ``arg_groups/memory_hook.py``). Only its load report reads it: a running
    prefill counts as waiting until its last chunk starts (``sim.engine.loads``)."""
    intra_region_bytes_per_s: float = costs.INTRA_REGION_BYTES_PER_S
    """Worker-to-worker KV copy bandwidth inside a region (100 Gb/s), used by migrations."""

    # -- worker caches --------------------------------------------------------------------------
    eviction: str = "lru"
    """Worker eviction policy: lru | lfu | fifo (paper: LFU for Mixed, LRU for WildChat/LMSYS)."""
    cache_chunk_tokens: int = 0
    """Cache granularity in tokens; 0 = the workload's block size (16 tokens for the synthetic
    workloads: the KV page size of vLLM/SGLang paged attention; 512 for Mooncake traces, whose
    hash ids are all we know). The cache keeps whole chunks only (a partial tail is not cached);
    a coarser chunk runs faster but loses up to a chunk of reuse per request."""

    # -- network ------------------------------------------------------------------------------
    wan_jitter_frac: float = 0.0
    """Actual WAN latency of each message = matrix value x U(1 - j, 1 + j) (Table 4: 0-100%)."""
    index_base_delay_ms: float = 50.0
    """Pipeline latency inside the maintenance units' cluster (Kafka hops, Faust processing),
    on top of the batch window and the two WAN legs: worker region -> ``maintenance_region``
    (the sidecar publishes there) and ``maintenance_region`` -> each edge's region. Used by
    KVCompass's index path only with ``index_delay_measured`` off (and by the baselines whose
    directories take index updates)."""
    index_delay_measured: bool = True
    """KVCompass's index path draws its pipeline latency per window and edge region from the
    event -> view lag the pipeline bench measured (``sim.index_lag``: P50 58 ms, P99 292 ms at
    1,000 events/s) instead of the constant ``index_base_delay_ms``."""
    maintenance_region: str = ""
    """Region (by name) whose cluster runs the maintenance units; "" = the home region, the
    deployment's first region (the README's deployment example runs them in ``us``)."""
    loads_poll_period_ms: float = 100.0
    """Δ of every edge's local load poll (``EdgeConfig.loads_poll_period_ms``'s default)."""
    index_extra_delay_ms: float = 0.0
    """Added index-update delay (Table 4: 100-300 ms)."""
    index_batch_ms: float = 10.0
    """Maintenance units apply the cache events of each window of this length as one batch of
    index ops (the consumer's poll/linger); its patches travel and are lost together."""
    index_loss: float = 0.0
    """Probability an index patch batch is lost and never applied (Table 4: 10-30%)."""
    queue_loss: float = 0.0
    """Probability a queue-vector broadcast or piggyback is lost."""
    kafka_hop_ms: float = 1.3
    """One Kafka hop, a record's produce (linger 0) to its consumer's poll on one cluster:
    ``bench/kafka_hop.py`` on the local broker (apache/kafka 4.1.1, one broker, acks=all,
    2,000 records of 67 B at 200/s; 2026-12-04, 2-core VM shared with other jobs): P50 1.26 ms,
    P99 32 ms, mean 2.7 ms. A queue vector or forward announcement crosses two (sim/README
    "the sync path"): its origin region's cluster, then the destination's."""
    mirror_delay_ms: float = 5.0
    """MirrorMaker 2's own delay between consuming a record from the origin cluster and
    producing it to the destination's, from its documented defaults: the Connect worker leaves
    the producer's ``linger.ms`` at the client default, 5 ms since Kafka 4.0 (KIP-1030; 0
    before); its consumer's fetch returns as soon as one byte is there (``fetch.min.bytes`` 1;
    ``fetch.max.wait.ms`` 500 and MM2's ``consumer.poll.timeout.ms`` 1000 only bound an idle
    wait). The WAN leg is charged apart."""

    edge_clock_skew_ms: float = 5.0
    """Standard deviation of each edge's clock offset (drawn once per run and region): chrony
    over NTP keeps cloud hosts within a few ms of UTC, and the error of one sync is bounded by
    half the path asymmetry to its server (sim/README "clock skew"). KVCompass's edges compare
    times from different clocks (reading times, peers' landing times); 0 = one shared clock."""

    # -- KVCompass switches beyond the RouterConfig ablations ----------------------------------
    fp_bits: int = 8
    """Fingerprint bits per index slot in the edge views (0 reproduces the paper's keyless view)."""
    monotone: bool = True
    """Prefix monotonicity rule in the view's match (architecture §5)."""
    n_shards: int = 4
    """Index shards (maintenance units)."""

    # -- metrics -------------------------------------------------------------------------------
    load_bin_ms: float = 10_000.0
    """Time bin of the per-worker load factor (paper Fig. 14). 10 s: at our rates a worker gets
    a few requests per second with heavy-tailed prefill times, and 1 s bins would measure that
    sampling noise rather than imbalance (the paper's 2750 req/s gives ~43 per worker-second)."""

    def __post_init__(self) -> None:
        if self.eviction not in EVICTION_POLICIES:
            raise ConfigError(
                f"eviction: expected one of {EVICTION_POLICIES}, got {self.eviction!r}"
            )
        for name in ("kv_bytes_per_token", "vram_kv_bytes", "n_shards", "engine_chunk_tokens"):
            if int(getattr(self, name)) <= 0:
                raise ConfigError(f"{name}: expected a positive integer, got {getattr(self, name)}")
        for name in (
            "pcie_bytes_per_s",
            "intra_region_bytes_per_s",
            "load_bin_ms",
            "index_batch_ms",
            "loads_poll_period_ms",
        ):
            v = float(getattr(self, name))
            if not math.isfinite(v) or v <= 0:
                raise ConfigError(f"{name}: expected a positive finite number, got {v}")
        for name in (
            "decode_ms_per_token",
            "index_base_delay_ms",
            "index_extra_delay_ms",
            "edge_clock_skew_ms",
            "kafka_hop_ms",
            "mirror_delay_ms",
        ):
            v = float(getattr(self, name))
            if not math.isfinite(v) or v < 0:
                raise ConfigError(f"{name}: expected a finite number >= 0, got {v}")
        if self.dram_kv_bytes < 0 or self.cache_chunk_tokens < 0:
            raise ConfigError("dram_kv_bytes and cache_chunk_tokens must be >= 0")
        if not 0.0 <= self.wan_jitter_frac <= 1.0:
            raise ConfigError(f"wan_jitter_frac: expected 0..1, got {self.wan_jitter_frac}")
        for name in ("index_loss", "queue_loss"):
            v = float(getattr(self, name))
            if not 0.0 <= v < 1.0:
                raise ConfigError(f"{name}: expected a probability in [0, 1), got {v}")
        if self.fp_bits not in (0, 8, 16):
            raise ConfigError(f"fp_bits: expected 0, 8 or 16, got {self.fp_bits}")

    @property
    def vram_tokens(self) -> int:
        return self.vram_kv_bytes // self.kv_bytes_per_token

    @property
    def dram_tokens(self) -> int:
        return self.dram_kv_bytes // self.kv_bytes_per_token

    @property
    def index_delay_ms(self) -> float:
        return self.index_base_delay_ms + self.index_extra_delay_ms

    @property
    def sync_path_ms(self) -> float:
        """What a record between two regions' edges adds to the WAN one-way: produce->consume on
        the origin's cluster, MirrorMaker 2, produce->consume on the destination's."""
        return 2.0 * self.kafka_hop_ms + self.mirror_delay_ms

    def chunk_tokens_for(self, block_tokens: int) -> int:
        """The cache chunk for a workload whose blocks are ``block_tokens`` long."""
        if self.cache_chunk_tokens:
            if self.cache_chunk_tokens % block_tokens:
                raise ConfigError(
                    f"cache_chunk_tokens: expected a multiple of the workload block size "
                    f"{block_tokens}, got {self.cache_chunk_tokens}"
                )
            return self.cache_chunk_tokens
        return block_tokens
