"""The Faust agents hand each take to the shell with Kafka coordinates (agent.test_context)."""

from __future__ import annotations

import asyncio
from typing import Any

import faust

from pipeline.agents import register_agents
from pipeline.progress import Hold
from pipeline.reads import Raw
from wire.config import PipelineConfig


class FakeShell:
    """Records what the agents pass on (the shell's own logic is tested on its own)."""

    def __init__(self) -> None:
        self.topics = PipelineConfig(topic_prefix="t.").topics
        self.settings = type("S", (), {"take_max": 10, "take_within_s": 0.01})()
        self.rechunked: list[Raw] = []
        self.maintained: list[list[Raw]] = []
        self.hold = Hold()

    async def rechunk_until_done(self, batch: list[Raw]) -> int:
        self.rechunked.extend(batch)
        return len(batch)

    async def maintain_until_done(self, batch: list[Raw]) -> int:
        self.maintained.append(batch)
        return len(batch)


def _app(shell: Any) -> faust.App:
    app = faust.App(
        "test-agents", broker="kafka://127.0.0.1:1", web_enabled=False, store="memory://"
    )
    register_agents(app, shell)
    return app


def test_agents_pass_raw_records_with_coordinates__test_context() -> None:
    shell = FakeShell()
    app = _app(shell)
    agents = {a.name.rsplit(".", 1)[-1]: a for a in app.agents.values()}
    assert set(agents) == {"maintain"}  # rechunk is a task (pipeline.rechunk_consumer)
    assert agents["maintain"].isolated_partitions

    async def run() -> None:
        async with agents["maintain"].test_context() as agent:
            await agent.put(b"v1", key=b"k1", partition=2, wait=False)
            await agent.put(b"v2", key=b"k2", partition=2, wait=False)
            for _ in range(100):
                if sum(len(b) for b in shell.maintained) == 2:
                    break
                await asyncio.sleep(0.02)

    asyncio.run(run())
    got = [(r.partition, r.offset, r.key, r.value) for b in shell.maintained for r in b]
    assert got == [(2, 0, b"k1", b"v1"), (2, 1, b"k2", b"v2")]


def test_agents_withhold_takes_once_stopping__nothing_processed_nothing_acked() -> None:
    shell = FakeShell()
    shell.hold.stop()
    app = _app(shell)
    agents = {a.name.rsplit(".", 1)[-1]: a for a in app.agents.values()}

    async def run() -> None:
        async with agents["maintain"].test_context() as agent:
            event = await agent.put(b"v1", key=b"k1", partition=0, wait=False)
            for _ in range(50):
                await asyncio.sleep(0.02)
            assert event.message.acked  # withheld: Faust's own ack becomes a no-op

    asyncio.run(run())
    assert shell.maintained == []
