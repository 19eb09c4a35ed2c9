"""The Faust agents: thin loops that take a batch, hand it to the shell, and go on.

- ``rechunk``: ``kv-events`` -> ``index-ops`` (one record per source event and shard).
- ``maintain``: ``index-ops`` -> ``index-patches``; ``isolated_partitions=True`` gives one actor
  per partition, i.e. per shard, so each shard has exactly one writer in the process and its
  records are applied in offset order.

Both use ``stream.take_events`` (values plus Kafka coordinates) so one core call covers many
records. A take is retried until done and its events are never acknowledged unless it was
(``pipeline.progress``). Must not: decode, validate or decide anything (``PipelineShell`` does).
"""

from __future__ import annotations

from typing import Any

import faust

from pipeline.app import PipelineShell, Raw
from pipeline.progress import withheld_on_error


def _raw(event: Any) -> Raw:
    m = event.message
    return Raw(m.topic, m.partition, m.offset, m.key, m.value)


def register_agents(app: faust.App, shell: PipelineShell) -> None:
    """Declare the two topics (raw bytes) and attach the agents to ``app``."""
    t = shell.topics
    take_max, within = shell.settings.take_max, shell.settings.take_within_s
    kv_events = app.topic(t.kv_events, key_type=bytes, value_type=bytes,
                          key_serializer="raw", value_serializer="raw")  # fmt: skip
    index_ops = app.topic(t.index_ops, key_type=bytes, value_type=bytes,
                          key_serializer="raw", value_serializer="raw")  # fmt: skip

    @app.agent(kv_events, name="rechunk")
    async def rechunk(stream: Any) -> None:
        async for events in stream.take_events(take_max, within=within):
            with withheld_on_error(events):
                await shell.rechunk_until_done([_raw(e) for e in events])

    @app.agent(index_ops, name="maintain", isolated_partitions=True)
    async def maintain(stream: Any) -> None:
        async for events in stream.take_events(take_max, within=within):
            with withheld_on_error(events):
                await shell.maintain_until_done([_raw(e) for e in events])
