"""The edge's aiohttp application: assembling the parts, the routes, the read-only endpoints.

Owns ``EdgeApp`` (everything a handler reaches: config, service, forwarder, tokenizer), the
factory ``assemble`` that builds it from an ``EdgeConfig`` and a ``Deployment`` (in-memory or
file-backed view, router of the region, Avro codec, record sink), ``build_app`` (routes), and
``/health``, ``/metrics``, ``/v1/models``, ``/debug/explain/{id}``, ``/debug/lookup`` and, with
``admin = true``, ``/admin/scheme`` (switch the routing scheme live, for comparisons); the debug
and admin endpoints ask ``edge.tenants.Tenancy.check_admin`` first. Must not run anything
forever or consume Kafka (``edge.main``, ``edge.sync``).

Why aiohttp: it is already a dependency (workers, pipeline tooling), its server and client
share one event loop with no ASGI adapter layer in between, ``StreamResponse`` writes chunks
straight to the transport (streaming pass-through without a generator/queue per chunk), and its
client has per-session connection pools. Starlette/uvicorn would add an ASGI hop per message
and a second HTTP client library for forwarding.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from aiohttp import web

from edge import debug_views
from edge import openai_shapes as shapes
from edge.cache_states import CacheStates
from edge.config import EdgeConfig
from edge.forwarder import Forwarder, WorkerRoute
from edge.handlers import EDGE, error_middleware, make_completion_handler, read_body
from edge.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from edge.off_loop import OffLoop
from edge.pd import Disaggregation
from edge.relay_auth import RelayAuth
from edge.request_ids import AmbiguousClientId, ClientIds
from edge.schemes import EDGE_SCHEMES, Schemes
from edge.service import EdgeService
from edge.tenants import Tenancy
from edge.tokenizer import Tokenizer, make_tokenizer
from kvcompass.decider import Decider
from kvcompass.decider.paths import edge_paths
from kvcompass.deployment import Deployment
from kvcompass.errors import ConfigError
from kvcompass.index_view import IndexView
from kvcompass.keys import KeyNamespace, PrefixHasher
from kvcompass.layout import TableLayout
from kvcompass.levels import Levels
from kvcompass.router import RouterConfig
from wire.codec import AvroCodec
from wire.config import PipelineConfig
from wire.producer import NullProducer, ProducerPort
from wire.registry import SchemaRegistry, registry_from_url
from wire.view_files import ViewStore


@dataclass(slots=True)
class EdgeApp:
    """What one edge process serves with."""

    config: EdgeConfig
    service: EdgeService
    forwarder: Forwarder
    tokenizer: Tokenizer
    view: IndexView
    pipeline: PipelineConfig
    registry: SchemaRegistry
    tenancy: Tenancy
    store: ViewStore | None = None
    open_requests: int = 0
    bound_port: int = 0
    patch_follower: Any = None
    """``wire.patch_follower.PatchFollower`` when the views follow Kafka (set by ``edge.main``)."""
    vector_follower: Any = None
    """``edge.sync.QueueVectorFollower`` when queue vectors follow Kafka (set by ``edge.main``)."""
    local_workers: frozenset[int] = field(default_factory=frozenset)
    cache_states: CacheStates = field(default_factory=CacheStates)
    """Workers whose cache their sidecar reports unknown (degraded), from ``queue-vectors``."""
    started_s: int = field(default_factory=lambda: int(time.time()))
    """When this edge was assembled (``/v1/models`` ``created``)."""
    off_loop: OffLoop = field(default_factory=OffLoop)
    """Parses and tokenizes large bodies off the event loop (``edge.off_loop``)."""
    client_ids: ClientIds = field(default_factory=lambda: ClientIds(4096))
    """(tenant, client's request id) → edge request id, for ``/debug/explain``."""
    scratch_deciders: Callable[[], list[Decider]] | None = None
    """Fresh deciders built as the service's are, over an empty view of their own: the start-up
    warm-up drives them through every entry point (``kvcompass.decider.rehearsal``)."""

    @property
    def limits(self) -> shapes.Limits:
        """Limits of a request for the default model."""
        return self.limits_for(self.tenancy.default_model)

    def limits_for(self, model: str) -> shapes.Limits:
        c = self.config
        return shapes.Limits(model, c.max_context_tokens, c.max_new_tokens)

    def relay_target(self, header: str) -> int:
        """The local worker a peer edge asks this edge to serve on (400 if not one)."""
        try:
            w = int(header)
        except ValueError:
            w = -1
        if w not in self.local_workers or not self.forwarder.reachable(w):
            raise shapes.ApiError(400, f"X-KVC-Forward-To: expected a worker of this region "
                                       f"with a configured URL, got {header[:40]!r}")  # fmt: skip
        return w


def assemble(
    config: EdgeConfig,
    deployment: Deployment,
    *,
    sink: ProducerPort | None = None,
    router_config: RouterConfig | None = None,
) -> EdgeApp:
    """Build every part of an edge for ``config.region`` (no I/O but creating the view dir)."""
    origin = deployment.region_index(config.region)
    tenancy = config.tenancy()
    for what, ws in [(f"models.{m.name}", m.workers) for m in tenancy.models] + [
        (f"tenants.{t.name}", t.workers) for t in tenancy.tenants
    ]:
        bad = sorted(w for w in ws or () if w >= deployment.n_workers)
        if bad:
            raise ConfigError(f"{what}.workers: expected ids in 0..{deployment.n_workers - 1}, "
                              f"got {bad}")  # fmt: skip
    pipe = config.pipeline or PipelineConfig()
    levels = Levels.from_deployment(deployment)
    layout = TableLayout.for_regions([r.n_workers for r in deployment.regions])
    store = None
    if config.view_dir is not None and config.view_mode == "writer":
        Path(config.view_dir).mkdir(parents=True, exist_ok=True)
        store = ViewStore(Path(config.view_dir))
        view = IndexView(layout, levels.matrix, pipe.n_shards, allocator=store.allocate,
                         on_params=store.adopt)  # fmt: skip
    else:
        view = IndexView(layout, levels.matrix, pipe.n_shards)
    default = tenancy.model(None)
    hasher = PrefixHasher(KeyNamespace(model_id=default.name, model_config=default.model_config))
    # the one decider (architecture §6); its latencies from the deployment, the maintenance
    # units in the home region (the deployment's first), as the simulator prices them
    rc = router_config or RouterConfig()
    paths = edge_paths(deployment, origin)
    decider = Decider.for_deployment(deployment, levels, origin, rc, hasher, view, paths)
    # the ablation without route-and-reserve (edge scheme kvcompass_no_booking): its own decider
    # on the same view, told the same facts, so a live switch compares like with like
    no_booking = Decider.for_deployment(deployment, levels, origin, replace(rc, booking=False),
                                        hasher, view, paths)  # fmt: skip

    def scratch_deciders() -> list[Decider]:
        return [Decider.for_deployment(deployment, levels, origin, c, hasher,
                                       IndexView(layout, levels.matrix, pipe.n_shards), paths)
                for c in (rc, replace(rc, booking=False))]  # fmt: skip

    discovery = decider.discovery
    registry = registry_from_url(pipe.schema_registry_url)
    codec = AvroCodec(registry)
    wr_arr = np.asarray(deployment.worker_region, dtype=np.int64)
    beta = np.asarray(deployment.prefill_ms_per_token, dtype=np.float64)[wr_arr]
    schemes = Schemes(discovery, levels, wr_arr, beta)
    service = EdgeService(
        deployment, decider, model=default.name, codec=codec,
        sink=sink if sink is not None else NullProducer(), topics=pipe.topics,
        decision_sample_rate=config.decision_sample_rate,
        explain_capacity=config.explain_capacity, seed=config.seed,
        schemes=schemes, scheme=config.scheme, variants={"kvcompass_no_booking": no_booking},
    )  # fmt: skip
    wr = deployment.worker_region
    wan = deployment.wan_matrix_ms
    peers = {deployment.region_index(name): url.rstrip("/") for name, url in config.peers}
    routes: dict[int, WorkerRoute] = {}
    for w, url in config.worker_urls().items():
        if not 0 <= w < deployment.n_workers:
            raise ConfigError(f"workers: expected ids in 0..{deployment.n_workers - 1}, got {w}")
        r = int(wr[w])
        delay = float(wan[origin, r]) * config.wan_delay_scale / 1000.0 if r != origin else 0.0
        via = peers.get(r) if r != origin else None
        routes[w] = WorkerRoute(w, via or url, via is not None, delay)
    for r, url in peers.items():  # workers of a peer region reached only through its edge
        for w in deployment.workers_of(r).tolist():
            if w not in routes and r != origin:
                delay = float(wan[origin, r]) * config.wan_delay_scale / 1000.0
                routes[w] = WorkerRoute(w, url, True, delay)
    service.restrict_to(routes)  # a partial [workers] map: score only what can be reached
    pd = None
    if config.pd is not None:  # this region's workers are prefill workers (edge.pd)
        prefill = {w: r.base_url for w, r in routes.items() if int(wr[w]) == origin}
        pd = Disaggregation(
            config.pd, prefill, config.pool_size_per_worker,
            on_prefill_error=lambda why: service.metrics.inc("pd_prefill_failures_total",
                                                             reason=why),
        )  # fmt: skip
    relay_auth = RelayAuth(config.relay_key) if config.relay_key is not None else None
    forwarder = Forwarder(
        routes, pool_size=config.pool_size_per_worker,
        connect_timeout_ms=config.connect_timeout_ms,
        first_byte_timeout_ms=config.first_byte_timeout_ms, pd=pd, relay_auth=relay_auth,
    )  # fmt: skip
    local = frozenset(int(w) for w in deployment.workers_of(origin).tolist())
    return EdgeApp(
        config=config, service=service, forwarder=forwarder,
        tokenizer=make_tokenizer(config.tokenizer), view=view, pipeline=pipe, registry=registry,
        tenancy=tenancy, store=store, local_workers=local,
        client_ids=ClientIds(config.explain_capacity), scratch_deciders=scratch_deciders,
    )  # fmt: skip


def build_app(edge: EdgeApp) -> web.Application:
    """The aiohttp application of ``edge`` (body limit from the config, error middleware)."""
    app = web.Application(
        client_max_size=edge.config.max_body_bytes, middlewares=[error_middleware]
    )
    app[EDGE] = edge
    app.router.add_post("/generate", make_completion_handler("generate"))
    app.router.add_post("/v1/completions", make_completion_handler("completions"))
    app.router.add_post("/v1/chat/completions", make_completion_handler("chat"))
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/debug/explain/{request_id}", explain)
    app.router.add_get("/debug/lookup", lookup)
    app.router.add_post("/debug/lookup", lookup)
    if edge.config.admin:
        app.router.add_get("/admin/scheme", scheme)
        app.router.add_post("/admin/scheme", scheme)
    app.on_cleanup.append(_close_forwarder)
    return app


async def scheme(request: web.Request) -> web.Response:
    """GET: the active routing scheme; POST ``{"scheme": name}``: switch to it (admin only)."""
    e = request.app[EDGE]
    e.tenancy.check_admin(request.headers.get("Authorization"))
    if request.method == "POST":
        body = shapes.parse_json(await read_body(request))
        name = body.get("scheme")
        if name not in EDGE_SCHEMES:
            raise shapes.ApiError(
                400, f"scheme: expected one of {list(EDGE_SCHEMES)}, got {name!r}"
            )
        e.service.set_scheme(name)
    return web.json_response({"scheme": e.service.scheme, "schemes": list(EDGE_SCHEMES)})


async def _close_forwarder(app: web.Application) -> None:
    await app[EDGE].forwarder.close()
    app[EDGE].off_loop.close()


async def health(request: web.Request) -> web.Response:
    e = request.app[EDGE]
    unknown = e.cache_states.unknown()
    stalled = list(getattr(e.patch_follower, "stalled", []))
    return web.json_response({
        # still 200: the edge serves; "degraded" says some workers' caches are not in the index,
        # or the view follower found partitions it does not read (wire.follower_watch)
        "status": "degraded" if unknown or stalled else "ok",
        "cache_unknown_workers": unknown,
        "patches_stalled_partitions": stalled,
        "region": e.config.region,
        "model": e.tenancy.default_model,
        "workers_reachable": len(e.forwarder.routes),
        "views_present": int(e.view.present.sum()),
        "views_total": int(e.view.present.size),
        "open_requests": e.open_requests,
    })  # fmt: skip


async def models(request: web.Request) -> web.Response:
    """OpenAI ``ModelList``: the models this edge serves (``created`` = edge start); with
    tenants, only for a valid API key (as OpenAI's)."""
    e = request.app[EDGE]
    e.tenancy.authenticate(request.headers.get("Authorization"))
    cards = [
        {"id": m.name, "object": "model", "created": e.started_s, "owned_by": "kvcompass"}
        for m in e.tenancy.models
    ]
    return web.json_response({"object": "list", "data": cards})


async def metrics(request: web.Request) -> web.Response:
    e = request.app[EDGE]
    f = e.patch_follower
    lag = [] if f is None else [("index_lag_ms", f.applier.event_to_view)]
    text = e.service.metrics.render(gauges(e), lag)
    return web.Response(body=text.encode("utf-8"), headers={"Content-Type": METRICS_CONTENT_TYPE})


def gauges(e: EdgeApp) -> list[tuple[str, tuple[tuple[str, str], ...], float]]:
    """State read at scrape time: belief, queue estimates and their staleness, view progress."""
    svc = e.service
    now = svc.clock_ms()
    belief, queue, stale = svc.decider.gauges(now)
    out: list[tuple[str, tuple[tuple[str, str], ...], float]] = []
    for w in range(belief.shape[0]):
        lab = (("worker", str(w)),)
        out.append(("belief", lab, float(belief[w])))
        out.append(("queue_estimate_ms", lab, float(queue[w])))
        if np.isfinite(stale[w]):  # unknown is absent, not NaN or inf (scrapers drop those)
            out.append(("queue_staleness_ms", lab, float(stale[w])))
    if np.isfinite(svc.view_applied_ms):
        out.append(("view_staleness_ms", (), float(now - svc.view_applied_ms)))
    out.append(("decider_open_forwards", (), float(svc.decider.open_forwards())))
    for s, seq in enumerate(e.view.last_seq.tolist()):
        out.append(("view_last_seq", (("shard", str(s)),), float(seq)))
    out.append(("views_present", (), float(e.view.present.sum())))
    out.append(("open_requests", (), float(e.open_requests)))
    if e.forwarder.pd is not None:
        pd = e.forwarder.pd
        out.extend(("pd_decode_open_requests", (("decode", u),), float(n))
                   for u, n in zip(pd.urls, pd.open, strict=True))  # fmt: skip
    out.extend(("cache_unknown", (("worker", str(w)),), 1.0) for w in e.cache_states.unknown())
    return out


async def explain(request: web.Request) -> web.Response:
    request.app[EDGE].tenancy.check_admin(request.headers.get("Authorization"))
    rid = request.match_info["request_id"]
    e = request.app[EDGE]
    got = debug_views.explain(e.service, rid)
    if got is None:  # not an edge id: a client's id, in its tenant's scope
        tenant = request.query.get("tenant")
        if tenant is not None:
            tenant = e.tenancy.tenant(tenant).name
        try:
            edge_id = e.client_ids.resolve(rid, tenant, any_tenant=tenant is None)
        except AmbiguousClientId as exc:
            raise shapes.ApiError(409, f"request id {rid!r} was used by several tenants "
                                       f"{exc.tenants}: add ?tenant=<name>", param="tenant",
                                  code="ambiguous_request_id") from None  # fmt: skip
        got = debug_views.explain(e.service, edge_id) if edge_id is not None else None
    if got is None:
        raise shapes.ApiError(404, f"no recent decision for request id {rid[:128]!r}",
                              code="decision_not_found")  # fmt: skip
    # the state now, not at decision time: a worker listed here is served with an empty index
    unknown = request.app[EDGE].cache_states.unknown()
    owner = e.client_ids.of_edge(got["request_id"])
    client = {"tenant": owner[0], "client_request_id": owner[1]} if owner else {}
    return web.json_response({**got, **client, "cache_unknown_workers": unknown})


async def lookup(request: web.Request) -> web.Response:
    """GET ``?text=...`` or ``?input_ids=1,2,3``; POST ``{"text": ...}`` or ``{"input_ids": [...]}``
    (long prompts do not fit in a URL). Optional ``model`` and ``tenant`` (a tenant's name): the
    namespace looked up in; default: the default model, unsalted."""
    e = request.app[EDGE]
    e.tenancy.check_admin(request.headers.get("Authorization"))
    src: Any
    if request.method == "POST":
        src = shapes.parse_json(await read_body(request))
    else:
        q = request.query
        src = {"text": q["text"]} if "text" in q else {}
        if "input_ids" in q:
            try:
                src = {"input_ids": [int(x) for x in q["input_ids"].split(",") if x.strip()]}
            except ValueError:
                raise shapes.ApiError(400, "input_ids: expected comma-separated ints",
                                      param="input_ids") from None  # fmt: skip
        src.update((k, q[k]) for k in ("model", "tenant") if k in q)
    if "input_ids" not in src and not isinstance(src.get("text"), str):
        raise shapes.ApiError(400, "expected 'text' (string) or 'input_ids' (token ids)")
    model = e.tenancy.model(src.get("model"))
    tenant = e.tenancy.tenant(src.pop("tenant")) if "tenant" in src else None
    parsed = shapes.parse_generate(src, e.tokenizer, e.limits_for(model.name))
    scope = e.tenancy.scope(model, tenant)
    body: dict[str, Any] = debug_views.holders(e.service, parsed.tokens, scope)
    return web.json_response(body)
