"""The Faust app and its agents: thin loops that take a batch, hand it to the shell, and go on.

The one module of the project that imports Faust. ``build_app`` makes the app (web server off and
bound to 127.0.0.1, at_least_once, in-memory tables) and registers:

- ``rechunk`` (an app task, not an agent): ``kv-events`` -> ``index-ops`` (one record per take
  and shard), through ``pipeline.rechunk_consumer`` (librdkafka's batched consume: Faust's
  per-record path alone cost more than the whole per-event budget, see that module).
- ``maintain``: ``index-ops`` -> ``index-patches``; ``isolated_partitions=True`` gives one actor
  per partition, i.e. per shard, so each shard has exactly one writer in the process and its
  records are applied in offset order.

Both take batches (values plus Kafka coordinates) so one core call covers many records. A take
is retried until done and its records are never acknowledged (committed) unless it was
(``pipeline.progress``). Must not: decode, validate or decide anything (``PipelineShell`` does).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import faust
from mode import OneForOneSupervisor
from mode.utils.times import rate_limit

from pipeline.progress import StepAbandoned, withheld_on_error, withhold
from pipeline.reads import Raw
from pipeline.rechunk_consumer import RechunkConsumer, rechunk_group
from pipeline.shell import PipelineShell, WorkerSettings
from wire.config import PipelineConfig
from wire.kafka_clients import aiokafka_kwargs
from wire.logs import EVERY_LINE
from wire.logs import install as install_log_filters
from wire.stopping import StopDeadline


def _raw(event: Any) -> Raw:
    m = event.message
    ts = m.timestamp  # seconds (float) in Faust's Message; None when the broker gave none
    return Raw(m.topic, m.partition, m.offset, m.key, m.value, -1 if ts is None else int(ts * 1000))


class RebalanceSupervisor(OneForOneSupervisor):
    """Faust's agent supervisor, with a restart budget that holds its own rate.

    mode's supervisor grants ``max_restarts`` per ``over`` seconds as a token bucket whose
    capacity is ``over`` (Faust asks 100 per 1 s: a bucket of ONE token refilled at 100/s). A
    rebalance stops every actor of an ``isolated_partitions`` agent whose partition moved, and
    each is restarted within milliseconds: the second restart found the bucket empty, raised
    ``MaxRestartsExceeded`` and the worker exited (seen in CI: ``maintain`` actors of partitions
    1 and 3 restarted 3 ms apart, ``SystemExit(1)``). Same rate; the bucket holds
    ``max_restarts`` tokens."""

    def __init__(
        self, *services: Any, max_restarts: float = 100.0, over: float = 1.0, **kwargs: Any
    ) -> None:
        super().__init__(*services, max_restarts=max_restarts, over=over, **kwargs)
        self._bucket = rate_limit(
            self.max_restarts / self.over, self.max_restarts, raises=self.raises
        )


def register_agents(app: faust.App, shell: PipelineShell) -> None:
    """Declare ``index-ops`` (raw bytes) and attach the maintenance agent and the rechunk task
    (``pipeline.rechunk_consumer``: kv-events through librdkafka's batched consume) to ``app``."""
    t = shell.topics
    take_max, within = shell.settings.take_max, shell.settings.take_within_s
    index_ops = app.topic(t.index_ops, key_type=bytes, value_type=bytes,
                          key_serializer="raw", value_serializer="raw")  # fmt: skip

    async def rechunk() -> None:
        group = rechunk_group(app.conf.id)
        await RechunkConsumer(shell, shell.settings.config, group, take_max, within).run()

    app.task(rechunk)

    # Stopping while held: the take is abandoned (``StepAbandoned``) and stays unacknowledged;
    # Faust's shutdown waits until every message handed to a stream is acknowledged, so the
    # agent keeps draining its stream, withholding what it no longer processes.
    @app.agent(index_ops, name="maintain", isolated_partitions=True,
               supervisor_strategy=RebalanceSupervisor)  # fmt: skip
    async def maintain(stream: Any) -> None:
        async for events in stream.take_events(take_max, within=within):
            if shell.hold.stopping:
                withhold(events)
                continue
            with contextlib.suppress(StepAbandoned), withheld_on_error(events):
                await shell.maintain_until_done([_raw(e) for e in events])


def broker_credentials(cfg: PipelineConfig) -> Any:
    """Faust's credentials object for ``cfg``'s security settings (None: PLAINTEXT); the values
    are ``wire.kafka_clients.aiokafka_kwargs``, Faust's aiokafka driver takes them apart again."""
    kw = aiokafka_kwargs(cfg)
    if cfg.security_protocol.startswith("SASL_"):
        return faust.SASLCredentials(
            username=kw["sasl_plain_username"],
            password=kw["sasl_plain_password"],
            ssl_context=kw.get("ssl_context"),
            mechanism=kw["sasl_mechanism"],
        )
    if cfg.security_protocol == "SSL":
        return faust.SSLCredentials(kw["ssl_context"])
    return None


def build_app(settings: WorkerSettings, shell: PipelineShell | None = None) -> faust.App:
    """The Faust app with the rechunk and maintenance agents registered."""
    cfg = settings.config
    app = faust.App(
        settings.app_id,
        broker=[f"kafka://{h.strip()}" for h in cfg.bootstrap_servers.split(",")],
        broker_credentials=broker_credentials(cfg),
        processing_guarantee="at_least_once",
        web_enabled=False,
        web_bind="127.0.0.1",
        web_host="127.0.0.1",
        topic_replication_factor=cfg.replication_factor,
        topic_partitions=cfg.n_shards,
        consumer_auto_offset_reset="earliest",
        store="memory://",
        table_standby_replicas=0,
        stream_buffer_maxsize=max(4096, 2 * settings.take_max),
        broker_commit_interval=1.0,
        # a killed worker's partitions move after this, not after the 60 s default
        broker_session_timeout=10.0,
        broker_heartbeat_interval=1.0,
    )
    register_agents(app, shell or PipelineShell(settings))
    return app


class _Worker(faust.Worker):
    """Faust's worker, told about the stop first and logging through ``wire.logs``."""

    def __init__(self, app: faust.App, shell: PipelineShell, deadline: StopDeadline,
                 **kw: Any) -> None:  # fmt: skip
        super().__init__(app, **kw)
        self._shell = shell
        self._deadline = deadline

    def on_setup_root_logger(self, logger: logging.Logger, level: int) -> None:
        super().on_setup_root_logger(logger, level)
        install_log_filters(logger)  # Faust replaced the root handlers cli.main had filtered

    def _schedule_shutdown(self, signal: Any) -> None:  # mode.Worker's one SIGTERM/SIGINT path
        self._deadline.arm()
        self._shell.begin_stop()
        if self._deadline.broker_down:  # say now what this stop cannot do (issue 35 item 7)
            logging.getLogger(__name__).error(
                "pipeline worker stopping without the broker: cannot write %s; the next start "
                "replays index-ops from each shard's last periodic checkpoint",
                "; ".join(self._shell.pending()) or "nothing pending", extra=EVERY_LINE,
            )  # fmt: skip
        super()._schedule_shutdown(signal)


def run_worker(
    app: faust.App, loglevel: str, shell: PipelineShell, stop_timeout_s: float = 30.0
) -> None:
    """Run ``app`` in this process until SIGTERM/SIGINT (Faust's own worker loop), then write
    the final checkpoints; the whole stop takes at most ``stop_timeout_s``
    (``wire.stopping.StopDeadline``: past it the process exits, status 3, saying what is left)."""
    # with the broker unreachable at SIGTERM the whole stop takes under 5 s (wire.stopping)
    broker = shell.settings.config.bootstrap_servers
    deadline = StopDeadline("pipeline worker", stop_timeout_s, shell.pending, broker=broker)
    worker = _Worker(app, shell, deadline, loglevel=loglevel, redirect_stdouts=False)
    try:
        worker.execute_from_commandline()
    finally:
        shell.close(deadline.remaining(floor_s=1.0) - 1.0)
        deadline.disarm()
