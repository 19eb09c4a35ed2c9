"""Lifecycle of one edge process: load, bootstrap the views, serve, shut down gracefully.

Owns reading the config file (``load``), the start order (views caught up from Kafka BEFORE the
port opens, so the first request already sees the index), the long-lived tasks under one
``asyncio.TaskGroup`` (patch follower, queue-vector follower, local loads poller), and shutdown on
SIGTERM/SIGINT: stop accepting, drain in-flight requests (up to ``drain_timeout_ms``), stop the
followers, write the consumer offsets and last seqs into the view files, flush the producer.
Must not hold request logic.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import time
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
from aiohttp import web
from confluent_kafka.admin import AdminClient

from edge.app import EdgeApp, assemble, build_app
from edge.config import EdgeConfig
from edge.connections import CappedTCPSite, server_timeouts
from edge.loads import LocalLoads
from edge.schemes import EDGE_SCHEMES
from edge.shared_view import ViewFileFollower
from edge.sync import broadcast, open_followers
from kvcompass.decider.rehearsal import rehearse
from kvcompass.deployment import Deployment
from kvcompass.errors import ConfigError
from wire.deployments import load_deployment
from wire.kafka_clients import librdkafka_conf
from wire.producer import KafkaProducer, NullProducer, ProducerPort
from wire.stopping import STOP_WITHOUT_BROKER_S, StopDeadline
from wire.topics import ensure_topics

log = logging.getLogger(__name__)
BOOTSTRAP_TIMEOUT_S = 120.0


def load(path: str | Path | None, overrides: dict[str, Any]) -> tuple[EdgeConfig, Deployment]:
    """EdgeConfig and Deployment from a file (edge tables, optionally a whole deployment)."""
    text = ""
    if path is not None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"edge config: expected a readable TOML file: {exc}") from exc
    cfg = EdgeConfig.from_toml_text(text, overrides)
    data = tomllib.loads(text) if text else {}
    if "regions" in data:
        edge_tables = ("edge", "workers", "peers", "pipeline", "models", "tenants", "pd")
        rest = {k: v for k, v in data.items() if k not in edge_tables}
        return cfg, Deployment.from_dict(rest)
    return cfg, load_deployment(cfg.deployment)


WARM_UP_TOKENS = 8192
"""Prompt length of the start-up warm-up: deeper than every level of the built-in deployments'
first ladders, so each lookup and scoring kernel runs once."""


def warm_up(edge: EdgeApp) -> float:
    """Run one decision and every scheme's ordering on a made-up prompt before the edge accepts
    requests, and drive scratch deciders (booking on and off) through every entry point
    (``kvcompass.decider.rehearsal``: dispatch, first token, relay, refusal, vectors), so numba
    compiles (or loads from its cache) every kernel a request reaches. With a cold numba cache
    (a fresh clone) the first requests otherwise waited seconds for the compiler: the demo's
    first KVCompass run timed out in a clean-clone CI run, and once the edge booked, a fresh
    clone's first KVCompass run had a 3 s P99 from kernels compiled on the first relays. No
    state changes: the service's decision is not dispatched, the scratch deciders are dropped.
    Returns the seconds it took."""
    t0 = time.perf_counter()
    tokens = (np.arange(WARM_UP_TOKENS, dtype=np.int32) * 7919) % 32_000
    svc = edge.service
    lookup = svc.decider.lookup(tokens)
    plan = svc.decider.decide(0, lookup, len(tokens), svc.clock_ms())  # never dispatched
    if svc.schemes is not None:
        for name in EDGE_SCHEMES:
            svc.schemes.order(name, tokens, lookup, plan.decision)
    for scratch in edge.scratch_deciders() if edge.scratch_deciders is not None else ():
        rehearse(scratch, tokens, svc.clock_ms())
    return time.perf_counter() - t0


async def run_edge(
    config: EdgeConfig,
    deployment: Deployment,
    *,
    stop: asyncio.Event | None = None,
    started: asyncio.Future[EdgeApp] | None = None,
) -> EdgeApp:
    """Serve until ``stop`` is set (or SIGTERM/SIGINT); returns the edge after shutdown."""
    stop = stop or asyncio.Event()
    sink: ProducerPort = NullProducer()
    if config.pipeline is not None:
        # A broker that does not auto-create topics would hold this edge's records until they
        # time out, and leave its followers waiting: create what is missing (idempotent).
        admin = AdminClient(librdkafka_conf(config.pipeline))
        await asyncio.to_thread(ensure_topics, admin, config.pipeline)
        sink = KafkaProducer(config.pipeline, linger_ms=5)
    edge = assemble(config, deployment, sink=sink)
    followers = open_followers(edge, sink) if config.pipeline is not None else None
    if followers is not None:
        edge.vector_follower = followers[1]
    reader = ViewFileFollower(edge) if config.view_mode == "reader" else None
    if reader is not None:
        log.info("reader mode: %d views from %s", reader.refresh(), config.view_dir)
    elif followers is not None:
        edge.patch_follower = followers[0]
        resumed = followers[0].resumed
        ok = await followers[0].acatch_up(BOOTSTRAP_TIMEOUT_S)
        log.info("views %s (resumed %s): caught up=%s", "resumed" if resumed else "bootstrapped",
                 resumed, ok)  # fmt: skip
    log.info("kernels warmed up in %.1f s", await asyncio.to_thread(warm_up, edge))
    # Everything allocated so far (numba, numpy, the deployment) lives for the whole process: move
    # it out of the collector's reach, so a gen-2 pass does not stall requests for milliseconds.
    gc.collect()
    gc.freeze()
    drain_s = config.drain_timeout_ms / 1000.0
    runner = web.AppRunner(build_app(edge), access_log=None, shutdown_timeout=drain_s,
                           **server_timeouts(config))  # fmt: skip
    await runner.setup()
    site = CappedTCPSite(
        runner,
        config.host,
        config.port,
        max_connections=config.max_connections,
        on_refused=lambda: edge.service.metrics.inc("connections_refused_total"),
    )
    await site.start()
    loop = asyncio.get_running_loop()
    # the drain, then 30 s for the followers and the flush: past that, exit whatever hangs; with
    # the broker unreachable at SIGTERM, the drain then 4.5 s (its in-flight requests do not need
    # the broker; what does is not waited for: wire.stopping)
    broker = config.pipeline.bootstrap_servers if config.pipeline is not None else None
    deadline = StopDeadline(f"edge {config.region}", drain_s + 30.0, broker=broker,
                            without_broker_s=drain_s + STOP_WITHOUT_BROKER_S)  # fmt: skip

    def on_signal() -> None:
        deadline.arm()
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, on_signal)
    edge.bound_port = int(runner.addresses[0][1]) if runner.addresses else config.port
    log.info("edge %s serving on %s:%s", config.region, config.host, edge.bound_port)
    if started is not None:
        started.set_result(edge)
    try:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(LocalLoads(edge).run(stop))
            if reader is not None:
                tg.create_task(reader.run(stop))
            elif followers is not None:
                tg.create_task(
                    followers[0].run(
                        stop,
                        config.offsets_flush_period_ms / 1000.0,
                        config.patch_stall_check_ms / 1000.0,
                    )
                )
            if followers is not None:
                tg.create_task(followers[1].run(stop))
                tg.create_task(broadcast(edge, stop))
            await stop.wait()
            await runner.cleanup()  # stop accepting, drain in-flight (shutdown_timeout)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)
        if followers is not None:
            followers[0].close()  # offsets + last seqs into the view files
            followers[1].close()
        elif edge.store is not None:
            edge.store.flush()
        flush_s = deadline.budget(10.0)
        left = sink.flush(flush_s)
        if left:
            msg = "edge %s stopping: %d records not delivered within %.1f s (broker unreachable?)"
            log.error(msg, config.region, left, flush_s)
        deadline.disarm()
    return edge
