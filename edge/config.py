"""EdgeConfig: everything one edge process needs, in one frozen value with units in the names.

Owns the edge's settings, their defaults and validation, and the TOML form it is read from. It
must not read files, the environment or the clock (``__post_init__`` only validates); the CLI
reads the file and hands the text to ``EdgeConfig.from_toml_text``.

TOML form (every key but ``region`` optional; ``[workers]`` maps global worker id → base URL)::

    [edge]
    region = "us"                      # this edge's region (name in the deployment)
    deployment = "paper-testbed-14x3"  # built-in name or path to a deployment TOML
    port = 8080
    wan_delay_scale = 0.01             # tests: sleep one-way WAN × scale on each cross-region hop
    scheme = "kvcompass"               # or a baseline: local_cache_aware, consistent_hash, ...
    admin = false                      # true: POST /admin/scheme switches the scheme live
    [workers]
    0 = "http://127.0.0.1:30000"
    8 = "http://127.0.0.1:30008"
    [peers]                            # edges of other regions (relay + piggybacked queues)
    eu = "http://127.0.0.1:8081"
    [pipeline]                         # optional: Kafka (wire.config.PipelineConfig keys)
    bootstrap_servers = "127.0.0.1:19092"
    [models."meta-llama/Llama-3.1-8B-Instruct"]   # optional: several models (edge.tenants)
    model_config = "bf16-tp1"
    workers = [0]
    [tenants.acme]                     # optional: API keys; then every request needs one
    api_key = "sk-acme-0123456789"
    sharing_group = "acme"             # key salt and engine cache_salt; default: the name

``edge.admin_token`` guards ``/debug/*`` and ``/admin/*`` (see ``edge.tenants``);
``edge.relay_key`` (required with ``[peers]``) signs relays between edges (``edge.relay_auth``).

A file that is itself a deployment (has ``regions``) may carry the same tables; the deployment
part is then used and ``edge.deployment`` is ignored (see ``cli.edge``).
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from typing import Any

from edge.pd import PDConfig
from edge.relay_auth import check_key
from edge.scheme_names import EDGE_SCHEMES
from edge.tenants import (
    ModelSpec,
    Tenancy,
    TenantSpec,
    models_from_mapping,
    tenants_from_mapping,
)
from kvcompass.config_mapping import kwargs_from_mapping
from kvcompass.errors import ConfigError
from wire.config import PipelineConfig

_KIB = 1024


@dataclass(frozen=True, slots=True)
class EdgeConfig:
    """Settings of one edge process (region ``region``)."""

    region: str
    deployment: str = "paper-testbed-14x3"
    host: str = "127.0.0.1"
    port: int = 8080
    model: str = "meta-llama/Llama-3.1-8B-Instruct"
    """The served model: requests naming another model get 404 ``model_not_found``."""
    model_config: str = ""
    """Part of the key namespace (kvcompass.keys.KeyNamespace): must match the workers'."""
    max_context_tokens: int = 131_072
    """Prompts longer than this are refused with 400 (``context_length_exceeded``)."""
    max_new_tokens: int = 32_768
    """Requests asking for more output tokens (``max_tokens``, ``max_new_tokens``...) get 400."""
    max_body_bytes: int = 4096 * _KIB
    """Request bodies above this get 413."""
    tokenizer: str = "builtin"
    """``builtin`` (the emulated worker's byte tokenizer) or ``hf:<local path>``."""
    workers: tuple[tuple[int, str], ...] = ()
    """(global worker id, base URL) of every worker this edge may forward to."""
    peers: tuple[tuple[str, str], ...] = ()
    """(region name, edge base URL): cross-region forwards go through that region's edge, which
    adds its queue vector to the response (piggyback). Regions not listed are reached directly."""
    connect_timeout_ms: float = 1000.0
    first_byte_timeout_ms: float = 30_000.0
    """A worker that sends no response headers within this is treated as failed (retry once)."""
    pool_size_per_worker: int = 256
    wan_delay_scale: float = 0.0
    """Emulated WAN: sleep ``wan_one_way_ms × scale`` before sending to and after hearing from a
    worker of another region (0: off; real deployments have a real WAN)."""
    loads_poll_period_ms: float = 100.0
    """Δ for local workers: how often ``GET /v1/loads`` is polled (0: never; tests set queues)."""
    decision_sample_rate: float = 1.0
    """Fraction of decisions published to ``routing-decisions``."""
    explain_capacity: int = 4096
    """Recent decisions kept for ``/debug/explain/{request_id}``."""
    view_dir: str | None = None
    """Directory of the memory-mapped view files; None keeps the views in memory."""
    view_mode: str = "writer"
    """``writer``: this process consumes ``index-patches`` into ``view_dir``. ``reader``: it serves
    the files another edge process on this host writes to ``view_dir`` (``edge.shared_view``)."""
    keepalive_timeout_ms: float = 30_000.0
    """A connection must send a complete request head within this after it opens or after its
    previous response, else it is closed: the idle keep-alive AND header-read (slowloris) timeout
    (aiohttp enforces both with one timer; ``edge.connections``)."""
    body_timeout_ms: float = 30_000.0
    """A request body must arrive whole within this, else 408 and the connection is closed."""
    stream_write_timeout_ms: float = 10_000.0
    """A streamed response whose client reads nothing for this long is ended (one WARNING line,
    ``stream_write_timeouts_total``) and the client's connection closed, which releases the
    worker's stream (issue 35 item 10: a client that never read held it >= 50 s)."""
    max_connections: int = 4096
    """Open client connections at most; beyond, a new connection gets 503 and is closed."""
    drain_timeout_ms: float = 10_000.0
    """On SIGTERM, wait at most this long for in-flight requests."""
    offsets_flush_period_ms: float = 1000.0
    patch_stall_check_ms: float = 10_000.0
    """Every this long the patch follower compares what it has read with the broker's end offsets:
    a partition with records to read that did not advance over a whole period is a stall (logged
    with the follower's and librdkafka's state, counted in ``patch_stalls_total``, listed in
    ``/health``) and the partitions are assigned again where the follower stands
    (``wire.follower_watch``)."""
    seed: int = 0
    """Seed of the decision sampler."""
    scheme: str = "kvcompass"
    """Routing scheme (``edge.scheme_names.EDGE_SCHEMES``): ``kvcompass`` or a baseline."""
    admin: bool = False
    """True: serve ``POST /admin/scheme`` (switch the scheme at run time; experiments only)."""
    pipeline: PipelineConfig | None = None
    """Kafka settings; None runs without Kafka (in-memory view, records dropped)."""
    models: tuple[ModelSpec, ...] = ()
    """``[models.*]``: several models, each its namespace config and workers; empty: the one
    ``model`` on every worker. With models, ``model`` is the default (requests naming none)."""
    tenants: tuple[TenantSpec, ...] = ()
    """``[tenants.*]``: API keys and sharing groups; empty: no authentication, no salt."""
    pd: PDConfig | None = None
    """``[pd]``: this region's workers are SGLang prefill workers, with these decode workers
    (``edge.pd``); None: aggregated workers."""
    admin_token: str | None = None
    """Bearer token of ``/debug/*`` and ``/admin/*`` (required for them when tenants exist)."""
    relay_key: str | None = None
    """The deployment's shared secret that signs relays between edges (``edge.relay_auth``; at
    least 32 characters, the same on every edge). Required with ``[peers]``; without it this
    edge acts on no ``X-KVC-*`` request header (every request is routed here)."""

    def __post_init__(self) -> None:
        if not isinstance(self.region, str) or not self.region:
            raise ConfigError(f"edge.region: expected a region name, got {self.region!r}")
        if not self.model:
            raise ConfigError("edge.model: expected a non-empty model id, got ''")
        if not 0 <= self.port < 65536:
            raise ConfigError(f"edge.port: expected 0..65535, got {self.port}")
        for name in ("max_context_tokens", "max_new_tokens", "max_body_bytes",
                     "pool_size_per_worker", "explain_capacity", "max_connections"):  # fmt: skip
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"edge.{name}: expected an int >= 1, got {value!r}")
        for name in ("connect_timeout_ms", "first_byte_timeout_ms", "drain_timeout_ms",
                     "offsets_flush_period_ms", "keepalive_timeout_ms",
                     "body_timeout_ms", "patch_stall_check_ms",
                     "stream_write_timeout_ms"):  # fmt: skip
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ConfigError(f"edge.{name}: expected a finite number > 0, got {value!r}")
        for name in ("wan_delay_scale", "loads_poll_period_ms"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise ConfigError(f"edge.{name}: expected a finite number >= 0, got {value!r}")
        if not 0.0 <= self.decision_sample_rate <= 1.0:
            raise ConfigError(
                f"edge.decision_sample_rate: expected [0, 1], got {self.decision_sample_rate}"
            )
        if not (self.tokenizer == "builtin" or self.tokenizer.startswith("hf:")):
            raise ConfigError(f"edge.tokenizer: expected 'builtin' or 'hf:<path>', got "
                              f"{self.tokenizer!r}")  # fmt: skip
        if self.scheme not in EDGE_SCHEMES:
            raise ConfigError(
                f"edge.scheme: expected one of {list(EDGE_SCHEMES)}, got {self.scheme!r}"
            )
        if not isinstance(self.admin, bool):
            raise ConfigError(f"edge.admin: expected true or false, got {self.admin!r}")
        if self.view_mode not in ("writer", "reader"):
            raise ConfigError(
                f"edge.view_mode: expected 'writer' or 'reader', got {self.view_mode!r}"
            )
        if self.view_mode == "reader" and self.view_dir is None:
            raise ConfigError(
                "edge.view_mode 'reader' needs edge.view_dir (the writer's directory)"
            )
        self.tenancy()  # models, tenants, admin token
        if self.relay_key is not None:
            check_key(self.relay_key)
        elif self.peers:
            raise ConfigError(
                "peers: relays between edges are signed: set edge.relay_key to the deployment's "
                "shared relay key (the same secret on every edge; edge/README.md, 'Relay "
                "authentication'), or KVCOMPASS_RELAY_KEY for `kvcompass edge`"
            )
        ids = [w for w, _ in self.workers]
        if len(set(ids)) != len(ids) or any(w < 0 for w in ids):
            raise ConfigError(f"workers: expected unique ids >= 0, got {ids}")
        for what, pairs in (("workers", self.workers), ("peers", self.peers)):
            for key, url in pairs:
                if not isinstance(url, str) or not url.startswith(("http://", "https://")):
                    raise ConfigError(f"{what}.{key}: expected an http(s):// URL, got {url!r}")

    def tenancy(self) -> Tenancy:
        """Models, tenants and admin token (validated: raises ``ConfigError``)."""
        models = self.models or (ModelSpec(self.model, self.model_config),)
        names = [m.name for m in models]
        default = self.model if self.model in names else names[0]
        return Tenancy(models, default, self.tenants, self.admin_token)

    def worker_urls(self) -> dict[int, str]:
        """Worker id → base URL without a trailing slash."""
        return {w: url.rstrip("/") for w, url in self.workers}

    @classmethod
    def from_mapping(
        cls,
        edge: dict[str, Any],
        workers: dict[str, Any] | None = None,
        peers: dict[str, Any] | None = None,
        pipeline: dict[str, Any] | None = None,
        models: dict[str, Any] | None = None,
        tenants: dict[str, Any] | None = None,
        pd: dict[str, Any] | None = None,
    ) -> EdgeConfig:
        """From parsed tables (or flags); unknown keys are refused so a typo is not a default."""
        kwargs = kwargs_from_mapping(
            cls, edge, "edge config",
            exclude=("workers", "peers", "pipeline", "models", "tenants", "pd"),
        )  # fmt: skip
        if pd is not None:
            kwargs["pd"] = PDConfig.from_mapping(pd)
        try:
            kwargs["workers"] = tuple(sorted((int(k), str(v)) for k, v in (workers or {}).items()))
        except ValueError as exc:
            raise ConfigError(f"workers: expected integer worker ids as keys: {exc}") from exc
        kwargs["peers"] = tuple(sorted((str(k), str(v)) for k, v in (peers or {}).items()))
        if pipeline is not None:
            kwargs["pipeline"] = PipelineConfig.from_mapping(pipeline)
        kwargs["models"] = models_from_mapping(models or {})
        kwargs["tenants"] = tenants_from_mapping(tenants or {})
        try:
            return cls(**kwargs)
        except TypeError as exc:
            raise ConfigError(f"edge config: {exc}") from exc

    @classmethod
    def from_toml_text(cls, text: str, overrides: dict[str, Any] | None = None) -> EdgeConfig:
        """Parse the ``[edge]``, ``[workers]``, ``[peers]``, ``[pipeline]``, ``[models.*]``,
        ``[tenants.*]`` and ``[pd]`` tables of a file;
        ``overrides`` (CLI flags, already snake_case) replace ``[edge]`` values."""
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"edge config: expected TOML: {exc}") from exc
        edge = dict(data.get("edge", {}))
        edge.update({k: v for k, v in (overrides or {}).items() if v is not None})
        return cls.from_mapping(
            edge, data.get("workers"), data.get("peers"), data.get("pipeline"),
            data.get("models"), data.get("tenants"), data.get("pd"),
        )  # fmt: skip
