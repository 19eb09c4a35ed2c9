"""PipelineShell without a broker: rechunk output, maintenance apply, dead-letter decisions."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from kvcompass.deployment import builtin_deployment
from kvcompass.maintenance import MaintenanceUnit, PatchScan
from pipeline.shell import PipelineShell, Raw, WorkerSettings
from tests.kv_event_fixtures import event
from wire.codec import AvroCodec, int32_key
from wire.config import PipelineConfig
from wire.index_ops import decode_runs
from wire.patches import decode_value
from wire.registry import InProcessRegistry

CODEC = AvroCodec(InProcessRegistry(), validate=True)


class FakeDelivery:
    """ProducerPort + the waiting API, recording what was produced."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes | None, bytes | None, int]] = []

    def produce(self, topic: str, value: Any = None, key: Any = None, partition: int = -1) -> None:
        self.sent.append((topic, value, key, partition))

    def poll(self, timeout: float = 0) -> int:
        return 0

    def flush(self, timeout: float = 0) -> int:
        return 0

    def mark(self) -> dict[tuple[str, int], int]:
        return {}

    async def delivered_up_to(
        self, target: dict[tuple[str, int], int], since: dict[tuple[str, int], int] | None = None
    ) -> None:
        return None


def _shell() -> tuple[PipelineShell, FakeDelivery]:
    fake = FakeDelivery()
    cfg = PipelineConfig(n_shards=3, topic_prefix="u.")
    dep = builtin_deployment("paper-testbed-14x3")
    return PipelineShell(WorkerSettings(cfg, dep), delivery=fake), fake  # type: ignore[arg-type]


def _raw(topic: str, offset: int, value: bytes | None, partition: int = 0) -> Raw:
    """A record keyed as its producer must: a KvEvent by its worker id (else a stray key)."""
    try:
        name, rec = CODEC.decode(value or b"")
        key = int32_key(int(rec["worker_id"]) % 2**32) if name == "KvEvent" else b"k"
    except ValueError:
        key = b"k"
    return Raw(topic, partition, offset, key, value)


def test_rechunk_writes_one_record_per_shard_and_dead_letters_bad_events__mixed_take() -> None:
    shell, fake = _shell()
    t = shell.topics
    toks = np.arange(900, dtype=np.int32)
    good = [CODEC.encode("KvEvent", event(w, toks + w)) for w in (0, 5, 9)]
    bad = [b"\x7bjunk", CODEC.encode("KvEvent", {**event(0, toks), "worker_id": 99}), None]
    batch = [_raw(t.kv_events, i, v) for i, v in enumerate([good[0], bad[0], good[1], bad[1],
                                                             bad[2], good[2]])]  # fmt: skip
    produced = asyncio.run(shell.rechunk(batch))
    ops = [s for s in fake.sent if s[0] == t.index_ops]
    assert produced == len(ops) == len({p for *_, p in ops})
    assert all(CODEC.decode(v)[0] == "IndexOpBatch" for _, v, _, _ in ops)  # type: ignore[arg-type]
    assert shell.dead.counts == {"UNDECODABLE": 2, "UNKNOWN_WORKER": 1}
    letters = [CODEC.decode(v)[1] for topic, v, _, _ in fake.sent if topic == t.dead_letters]  # type: ignore[arg-type]
    assert sorted(d["original_offset"] for d in letters) == [1, 3, 4]


def test_apply_sends_patches_and_skips_seen_offsets__redelivery() -> None:
    shell, fake = _shell()
    t = shell.topics
    toks = np.arange(900, dtype=np.int32)
    asyncio.run(shell.rechunk([_raw(t.kv_events, 0, CODEC.encode("KvEvent", event(3, toks)))]))
    ops = [(p, v) for topic, v, _, p in fake.sent if topic == t.index_ops]
    shard, value = ops[0]
    unit = MaintenanceUnit(shell.layout, shard, 3)
    unit.recover([], PatchScan(), 0)
    fake.sent.clear()
    n = shell.apply(unit, [_raw(t.index_ops, 0, value, shard)])
    patches = [v for topic, v, _, _ in fake.sent if topic == t.index_patches]
    assert n > 0 and patches
    assert {decode_value(shell.sink.schema_id, v).source_offset for v in patches} == {0}  # type: ignore[arg-type]
    fake.sent.clear()
    assert shell.apply(unit, [_raw(t.index_ops, 0, value, shard)]) == 0  # already reflected
    assert fake.sent == []


def test_apply_dead_letters_a_record_of_another_shard__wrong_partition() -> None:
    shell, fake = _shell()
    t = shell.topics
    toks = np.arange(900, dtype=np.int32)
    asyncio.run(shell.rechunk([_raw(t.kv_events, 0, CODEC.encode("KvEvent", event(3, toks)))]))
    shard, value = next((p, v) for topic, v, _, p in fake.sent if topic == t.index_ops)
    other = (shard + 1) % 3
    unit = MaintenanceUnit(shell.layout, other, 3)
    unit.recover([], PatchScan(), 0)
    fake.sent.clear()
    assert shell.apply(unit, [_raw(t.index_ops, 0, value, other)]) == 0
    assert shell.dead.counts == {"INVALID": 1}
    assert unit.next_offset == 1  # the bad record is consumed, not retried forever


def test_large_valid_take_is_cut_into_bounded_records__4096_keys_per_event() -> None:
    from wire.index_ops import MAX_OP_RECORD_BYTES, decode_op_batch

    shell, fake = _shell()
    t = shell.topics
    rng = np.random.default_rng(3)
    batch = []
    for i in range(120):  # 120 x 4096 keys: ~1.3 MB of keys per shard in one take
        keys = rng.integers(1, 2**62, 4096, dtype=np.int64).tolist()
        lengths = list(range(16, 16 * 4097, 16))
        ev = event(i % 14, np.zeros(0, np.int32), token_ids=None, token_count=16 * 4096,
                   registration_keys=keys, registration_lengths=lengths)  # fmt: skip
        batch.append(_raw(t.kv_events, i, CODEC.encode("KvEvent", ev)))
    produced = asyncio.run(shell.rechunk(batch))
    ops = [(p, v) for topic, v, _, p in fake.sent if topic == t.index_ops]
    assert produced == len(ops) > 3  # more records than shards
    assert max(len(v) for _, v in ops) <= MAX_OP_RECORD_BYTES + 1024  # type: ignore[arg-type]
    runs = [b for _, v in ops for b in decode_op_batch(CODEC.decode(v)[1])]  # type: ignore[arg-type]
    keys_out = sum(int(b.keys.size) for b in runs)
    assert keys_out == 120 * 4096 and shell.dead.total == 0


def test_rechunk_follows_each_workers_cache_state__degraded_then_relearned() -> None:
    shell, _ = _shell()
    t = shell.topics
    toks = np.arange(900, dtype=np.int32)
    states = ["KNOWN", "UNKNOWN", "UNKNOWN", "KNOWN"]
    batch = [_raw(t.kv_events, i, CODEC.encode("KvEvent", event(3, toks, cache_state=s)))
             for i, s in enumerate(states)]  # fmt: skip
    seen = []
    for raw in batch:
        asyncio.run(shell.rechunk([raw]))
        seen.append(sorted(shell.cache_unknown))
    assert seen == [[], [3], [3], []]
    assert shell.cache_unknown_reports == 1  # one episode


def test_rechunk_dead_letters_a_wrong_key_and_a_late_event__skips_a_redelivery() -> None:
    shell, fake = _shell()
    t = shell.topics
    toks = np.arange(900, dtype=np.int32)
    first, second = event(4, toks, engine_seq=10), event(4, toks, engine_seq=11)
    v1, v2 = CODEC.encode("KvEvent", first), CODEC.encode("KvEvent", second)
    batch = [
        Raw(t.kv_events, 1, 0, int32_key(5), v1),  # worker 4's event under worker 5's key
        _raw(t.kv_events, 1, v2, partition=1),  # seq 11
        _raw(t.kv_events, 2, v1, partition=1),  # seq 10 after 11: late
    ]
    asyncio.run(shell.rechunk(batch))
    letters = [CODEC.decode(v)[1] for topic, v, _, _ in fake.sent if topic == t.dead_letters]  # type: ignore[arg-type]
    assert [d["original_offset"] for d in letters] == [0, 2]
    assert letters[0]["reason"].startswith("key: expected worker_id 4 as 4-byte big-endian")
    assert letters[1]["reason"].startswith("engine_seq: expected > 11 (worker 4's last applied")
    sources = {r.offset for topic, v, _, _ in fake.sent if topic == t.index_ops
               for r in decode_runs(CODEC.decode(v)[1]).sources}  # type: ignore[arg-type]  # fmt: skip
    assert sources == {1}
    fake.sent.clear()
    asyncio.run(shell.rechunk([_raw(t.kv_events, 1, v2, partition=1)]))  # re-delivered
    assert fake.sent == [] and shell.redelivered == 1


def test_rechunk_dead_letters_negative_lengths__token_count_block_size_registration() -> None:
    shell, _ = _shell()
    t = shell.topics
    toks = np.arange(32, dtype=np.int32)
    bad = [
        event(1, np.zeros(0, np.int32), op="REMOVED", tier="NONE", token_count=-16,
              token_ids=None, registration_keys=[5], registration_lengths=[16]),
        event(2, toks, block_size_tokens=-16),
        event(3, toks, token_ids=None, registration_keys=[5, 6], registration_lengths=[16, -32]),
        event(6, toks, token_ids=None, registration_keys=[5, 6], registration_lengths=[16]),
    ]  # fmt: skip
    asyncio.run(shell.rechunk([_raw(t.kv_events, i, CODEC.encode("KvEvent", e))
                               for i, e in enumerate(bad)]))  # fmt: skip
    assert shell.dead.counts == {"INVALID": 4}
