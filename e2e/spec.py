"""What an end-to-end run is made of: ``ClusterSpec`` (what a ``LocalCluster`` starts) and
``DemoPlan`` (what ``kvcompass demo`` replays on it), with their defaults and validation.

Imports nothing heavy (the CLI registers ``kvcompass demo``'s flags from these defaults without
loading the demo). Must not start anything (``e2e.cluster``), build command lines
(``e2e.commands``) or run requests (``e2e.demo``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edge.scheme_names import EDGE_SCHEMES
from sim.datasets import MOONCAKE_TRACE


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """What to start. Units in the names; validated on construction."""

    deployment: str = "paper-testbed-14x3"
    """Built-in name or deployment TOML path (paper-testbed-14x3: us 8, eu 2, asia 4 workers)."""
    time_scale: float = 1.0
    """Emulated workers' sleep scale; the edges' ``wan_delay_scale`` is set equal."""
    n_shards: int = 4
    n_maintenance: int = 2
    """Maintenance (Faust) processes, one app id: Kafka splits the shards between them."""
    base_port: int = 0
    """0: free ports; else edges base+i, workers base+10+w, broker base+100 (+101 controller)."""
    vram_tokens: int = 32_768
    """Per emulated worker; small enough that a demo load evicts and moves pages to DRAM."""
    dram_tokens: int = 131_072
    edge_scheme: str = "kvcompass"
    bootstrap_servers: str | None = None
    """None: start a local broker (``wire.kafka_local``) in ``run_dir/broker``."""
    topic_prefix: str = ""
    model: str = "meta-llama/Llama-3.1-8B-Instruct"
    load_period_ms: int = 200
    """Δ of the sidecars' load reporters (queue vectors)."""
    stream_interval: int = 1
    """Emulated workers' ``--stream-interval`` (tokens per streamed chunk after the first)."""
    start_silence_s: float = 120.0
    """Start-up: a process not ready yet that shows no progress (no log line, under 1 s of CPU)
    for this long fails the start, with its log tail (``e2e.readiness``); a dead one fails at
    once. Also the quiescence wait's bound on a pipeline whose gap stops changing."""
    start_timeout_s: float = 1800.0
    """The backstop of every start-up wait: processes that keep making progress are waited for
    this long at most (a fresh clone's first start compiles every numba kernel unless ``make``
    warmed the cache: minutes on a busy 2-core machine)."""

    def __post_init__(self) -> None:
        if not self.time_scale >= 0:
            raise ValueError(f"time_scale: expected >= 0, got {self.time_scale}")
        for name in ("n_shards", "n_maintenance", "vram_tokens", "load_period_ms",
                     "stream_interval", "start_silence_s", "start_timeout_s"):  # fmt: skip
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: expected >= 1, got {getattr(self, name)}")
        if self.dram_tokens < 0:
            raise ValueError(f"dram_tokens: expected >= 0, got {self.dram_tokens}")
        if self.base_port and not 1024 <= self.base_port <= 65535 - 200:
            raise ValueError(f"base_port: expected 0 or 1024..65335, got {self.base_port}")


DEFAULT_TRACE = MOONCAKE_TRACE

SGLANG_GATEWAY = "sglang_router"
"""Scheme name of SGLang's own gateway (``sglang-router`` in ``cache_aware`` mode, one per region
in front of that region's workers): not an edge scheme, the load goes to the gateways."""

SCHEMES: tuple[str, ...] = (*EDGE_SCHEMES, SGLANG_GATEWAY)
"""Every scheme the demo can run."""

DEFAULT_SCHEMES: tuple[str, ...] = (
    "kvcompass",
    SGLANG_GATEWAY,
    "local_least_loaded",
    "consistent_hash",
)
"""What ``make demo`` compares on Mixed. ``local_cache_aware`` (our imitation of the gateway's
scheme fed by the exact index) is left out: the real gateway replaces it; run it with
``--schemes``."""


BURST_SCHEMES: tuple[str, ...] = ("kvcompass", "kvcompass_no_booking")
"""What the burst run compares: KVCompass with and without route-and-reserve (issue 25: a burst
of requests sharing a new long prefix from every region at once, where edges deciding alone
herd onto its one holder; ``sim.workloads.burst``)."""


@dataclass(frozen=True, slots=True)
class DemoPlan:
    deployment: str = "paper-testbed-14x3"
    schemes: tuple[str, ...] = DEFAULT_SCHEMES
    mixed_rates: tuple[float, ...] = (8.0, 16.0, 32.0)
    origin_mixes: tuple[str, ...] = ("workers", "uniform")
    tenants: int = 1
    """Independent tenants of the Mixed workload: one replay of its datasets, as a 14-GPU testbed
    at 4–40 req/s sees them (``sim.experiment.with_tenants``: the simulator's 50 feed 64 workers
    at 200–6000 req/s; ``kvcompass sim --tenants 1`` draws the same requests)."""
    trace_rates: tuple[float, ...] = ()
    """Mooncake trace rates; none by default (its runs would not fit the 10 minutes)."""
    burst_rates: tuple[float, ...] = (8.0,)
    """Mean rates of the burst run (uniform origins; ``sim.workloads.burst``: 24 requests a
    burst, one every 3 s at 8 req/s); () for none."""
    burst_schemes: tuple[str, ...] = BURST_SCHEMES
    trace: Path | None = DEFAULT_TRACE
    trace_block_size: int = 512
    warmup_s: float = 3.0
    """Model seconds of arrivals before the measurement, served but not summarised."""
    measure_s: float = 10.0
    """Model seconds of measured arrivals per run (requests = rate × (warm-up + this))."""
    time_scale: float = 1.0
    max_output_tokens: int = 16
    request_timeout_s: float = 10.0
    """Model seconds a client waits for its whole response; then it gives up and closes (a
    failed request; the worker aborts it, as SGLang does). Longer only lengthens the runs of a
    collapsed scheme: its failures are counted either way."""
    drain_timeout_s: float = 600.0
    """How long a run's leftovers may keep the workers busy before the next run."""
    seed: int = 1
    prime: bool = True
    """Replay the first run once, unmeasured, before any measured run (``e2e.demo.prime``)."""
    out_dir: Path = Path("demo-out")
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = [s for s in self.schemes if s not in SCHEMES]
        if unknown or not self.schemes:
            raise ValueError(f"schemes: expected names from {list(SCHEMES)}, got {unknown}")
        unknown = [s for s in self.burst_schemes if s not in SCHEMES]
        if unknown or (self.burst_rates and not self.burst_schemes):
            raise ValueError(f"burst_schemes: expected names from {list(SCHEMES)}, got {unknown}")
        if self.warmup_s < 0 or self.measure_s <= 0:
            raise ValueError(
                f"warmup_s >= 0 and measure_s > 0 expected, got {self.warmup_s}, {self.measure_s}"
            )


SMALL_TESTBED = """
name = "e2e-small-{n}x3"
block_size_tokens = 16
n_levels = 6
same_region_min_tokens = 128
in_region_one_way_ms = 0.5
wan_one_way_ms = [[0.0, 160.0, 126.0], [160.0, 0.0, 149.0], [126.0, 149.0, 0.0]]
[[regions]]
name = "us"
n_workers = {us}
prefill_ms_per_token = 0.085
[[regions]]
name = "eu"
n_workers = 1
prefill_ms_per_token = 0.085
[[regions]]
name = "asia"
n_workers = 1
prefill_ms_per_token = 0.085
"""
"""The paper testbed's three regions, β and WAN with few workers (us ``us``, eu 1, asia 1): the
deployment of the process-level tests and benchmarks that must fit beside other jobs."""


def small_testbed(directory: Path, us: int) -> Path:
    """Write the small testbed with ``us`` US workers into ``directory``; returns its path."""
    path = directory / f"small-{us}x3.toml"
    path.write_text(SMALL_TESTBED.format(n=us + 2, us=us), encoding="utf-8")
    return path
