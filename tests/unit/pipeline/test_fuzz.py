"""Fuzz: random bytes and mutated valid Avro on every topic the pipeline consumes (Hypothesis).

``kv-events`` (the rechunk agent) and ``index-ops`` (the maintenance agent) get takes mixing valid
records, random bytes, null values and valid encodings with bytes flipped, cut, inserted or
deleted. Invariants, checked against the same core fed directly (the reference):
- the shell never raises (the process keeps running) and goes past every record;
- every input is either applied (its runs appear in the output, keys and all) or dead-lettered
  exactly once with a reason and its coordinates;
- accepted data is never lost: a valid record next to garbage is applied like it is alone.
Bounded: ``max_examples`` below, no deadline (numba's first calls are slow on a cold cache).
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvcompass.deployment import builtin_deployment
from kvcompass.event_order import EventOrder, Verdict
from kvcompass.maintenance import MaintenanceUnit, PatchScan
from kvcompass.rechunk import EventRef, OpBatch, by_shard
from pipeline.shell import PipelineShell, Raw, WorkerSettings
from tests.kv_event_fixtures import DEP, event
from tests.unit.pipeline.test_shell import FakeDelivery
from wire.codec import AvroCodec, DecodeError, decode_patch_key, int32_key
from wire.config import PipelineConfig
from wire.index_ops import decode_op_batch, encode_op_batch
from wire.patches import decode_value, encode_patch
from wire.registry import InProcessRegistry

CODEC = AvroCodec(InProcessRegistry())
N_SHARDS = 3
_SHELL: list[tuple[PipelineShell, FakeDelivery]] = []
FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _sent(fake: FakeDelivery, topic: str) -> list[bytes]:
    return [v for t, v, _, _ in fake.sent if t == topic and v is not None]


def _shell() -> tuple[PipelineShell, FakeDelivery]:
    if not _SHELL:  # one per module: its construction warms numba up
        fake = FakeDelivery()
        cfg = PipelineConfig(n_shards=N_SHARDS, topic_prefix="f.")
        dep = builtin_deployment("paper-testbed-14x3")
        _SHELL.append((PipelineShell(WorkerSettings(cfg, dep), delivery=fake), fake))  # type: ignore[arg-type]
    shell, fake = _SHELL[0]
    fake.sent.clear()
    shell.dead.counts.clear()
    return shell, fake


@st.composite
def kv_events(draw: st.DrawFn) -> dict[str, Any]:
    w = draw(st.integers(0, DEP.n_workers - 1))
    kind = draw(st.sampled_from(["keys", "tokens", "cleared", "removed"]))
    if kind == "tokens":
        n = draw(st.integers(0, 3000))
        toks = np.random.default_rng(draw(st.integers(0, 2**32 - 1))).integers(0, 50_000, n)
        return event(w, toks.astype(np.int32), engine_seq=draw(st.integers(0, 2**40)))
    keys = draw(st.lists(st.integers(1, 2**63 - 1), min_size=1, max_size=12, unique=True))
    op, tier = {"keys": ("STORED", "VRAM"), "cleared": ("CLEARED", "NONE"),
                "removed": ("REMOVED", "NONE")}[kind]  # fmt: skip
    ev = event(w, np.zeros(0, np.int32), op=op, tier=tier, engine_seq=draw(st.integers(0, 2**40)))
    if kind != "cleared":
        ev.update(token_ids=None, token_count=16 * len(keys), registration_keys=keys,
                  registration_lengths=[16 * (i + 1) for i in range(len(keys))])  # fmt: skip
    return ev


def _mutate(draw: st.DrawFn, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        how = draw(st.sampled_from(["flip", "cut", "insert", "delete"]))
        i = draw(st.integers(0, max(len(b) - 1, 0)))
        if how == "flip" and b:
            b[i] ^= 1 << draw(st.integers(0, 7))
        elif how == "cut":
            del b[i:]
        elif how == "insert":
            b[i:i] = draw(st.binary(min_size=1, max_size=8))
        elif b:
            del b[i : i + draw(st.integers(1, 8))]
    return bytes(b)


@st.composite
def hostile_values(draw: st.DrawFn, valid: st.SearchStrategy[bytes]) -> bytes | None:
    kind = draw(st.sampled_from(["valid", "valid", "random", "mutated", "null", "empty"]))
    if kind == "valid":
        return draw(valid)
    if kind == "random":
        return draw(st.binary(max_size=200))
    if kind == "mutated":
        return _mutate(draw, draw(valid))
    return None if kind == "null" else b""


def _rechunk_reference(
    value: bytes | None, offset: int, topic: str, order: EventOrder
) -> list[OpBatch] | None:
    """What the core makes of one record after those before it (``order``: the workers' last
    applied events): its runs, or None if it must be dead-lettered."""
    shell = _SHELL[0][0]
    try:
        if value is None:
            raise DecodeError("null")
        name, ev = CODEC.decode(value)
        if name != "KvEvent":
            return None
        src = EventRef(int(ev["worker_id"]), int(ev["engine_seq"]), topic, 0, offset,
                       int(ev["timestamp_ms"]))  # fmt: skip
        if order.judge(src.worker_id, src.engine_seq, 0, offset) is not Verdict.APPLY:
            return None  # out of order: a dead letter (never re-delivered here)
        runs = shell.rechunker.rechunk(ev, src)
        order.accept(src.worker_id, src.engine_seq, 0, offset)
        return runs
    except Exception:  # whatever the core refuses must reach the dead letters
        return None


def _key(value: bytes | None, wrong: bool) -> bytes:
    """The worker's Kafka key for a decodable event (or a wrong one), else garbage."""
    try:
        worker = int(CODEC.decode(value or b"")[1]["worker_id"])
    except Exception:
        return b"k"
    return int32_key(worker + 1 if wrong else worker)


@FUZZ
@given(st.lists(hostile_values(kv_events().map(lambda e: CODEC.encode("KvEvent", e))),
                min_size=1, max_size=12),
       st.lists(st.booleans(), min_size=12, max_size=12))  # fmt: skip
def test_kv_events_are_applied_or_dead_lettered__random_and_mutated(
    values: list[Any], wrong_keys: list[bool]
) -> None:
    shell, fake = _shell()
    shell.order = EventOrder()
    topic = shell.topics.kv_events
    keys = [_key(v, wrong) for v, wrong in zip(values, wrong_keys, strict=False)]
    batch = [Raw(topic, 0, i, keys[i], v) for i, v in enumerate(values)]
    asyncio.run(shell.rechunk(batch))  # never raises
    dead = [CODEC.decode(v)[1] for v in _sent(fake, shell.topics.dead_letters)]
    got: dict[int, list[tuple[int, int, int, int, int, list[int]]]] = {}
    for v in _sent(fake, shell.topics.index_ops):
        for b in decode_op_batch(CODEC.decode(v)[1]):
            got.setdefault(b.source.offset, []).append(
                (b.shard, b.table, b.field, int(b.op), int(b.tier), b.keys.tolist())
            )
    dead_offsets = [d["original_offset"] for d in dead]
    assert len(dead_offsets) == len(set(dead_offsets))  # each at most once
    assert all(d["reason"] and d["original_topic"] == topic for d in dead)
    order = EventOrder()
    for i, v in enumerate(values):
        want = None if keys[i] != _key(v, False) else _rechunk_reference(v, i, topic, order)
        if want is None:
            assert i in dead_offsets, f"record {i} neither applied nor dead-lettered"
            assert i not in got
        else:
            assert i not in dead_offsets
            runs = [(b.shard, b.table, b.field, int(b.op), int(b.tier), b.keys.tolist())
                    for s in sorted(by_shard(want)) for b in by_shard(want)[s]]  # fmt: skip
            assert sorted(got.get(i, [])) == sorted(runs), f"record {i}: accepted data lost"


@st.composite
def op_records(draw: st.DrawFn) -> bytes:
    """A valid IndexOpBatch of shard 0 (what rechunk writes), from a few valid events."""
    shell = _SHELL[0][0] if _SHELL else _shell()[0]
    runs: list[OpBatch] = []
    for j in range(draw(st.integers(1, 3))):
        ev = draw(kv_events())
        src = EventRef(int(ev["worker_id"]), j, "kv", 0, j, 0)
        runs += [b for b in shell.rechunker.rechunk(ev, src) if b.shard == 0]
    return CODEC.encode("IndexOpBatch", encode_op_batch(0, runs))


@FUZZ
@given(st.lists(hostile_values(op_records()), min_size=1, max_size=10))
def test_index_ops_are_applied_or_dead_lettered__random_and_mutated(values: list[Any]) -> None:
    shell, fake = _shell()
    topic = shell.topics.index_ops
    unit = MaintenanceUnit(shell.layout, 0, N_SHARDS, initial_capacity=16)
    unit.recover([], PatchScan(), 0)
    ref = MaintenanceUnit(shell.layout, 0, N_SHARDS, initial_capacity=16)
    ref.recover([], PatchScan(), 0)
    batch = [Raw(topic, 0, i, b"\x00\x00\x00\x00", v) for i, v in enumerate(values)]
    shell.apply(unit, batch)  # never raises
    assert unit.next_offset == len(values)  # went past every record
    dead = {CODEC.decode(v)[1]["original_offset"] for v in _sent(fake, shell.topics.dead_letters)}
    good: list[OpBatch] = []
    for i, v in enumerate(values):
        try:
            columns = shell._decode_ops(v)
            ok = unit.check_runs(columns) is None
            runs = columns.batches()
        except Exception:
            ok = False
        assert (i not in dead) == ok, f"record {i}: applied={ok}, dead-lettered={i in dead}"
        if ok:
            good += runs
    ref.apply(good, len(values) - 1)
    for t in range(shell.layout.n_tables):
        a, b = unit.state.tables[t].items(), ref.state.tables[t].items()
        oa, ob = np.argsort(a[0]), np.argsort(b[0])
        assert np.array_equal(a[0][oa], b[0][ob]) and np.array_equal(a[1][oa], b[1][ob])


def _patch_pairs() -> list[tuple[bytes, bytes]]:
    shell = _shell()[0]
    unit = MaintenanceUnit(shell.layout, 0, N_SHARDS, initial_capacity=16)
    pairs: list[tuple[bytes, bytes]] = []
    for p in unit.recover([], PatchScan(), 0).patches:
        keys, values = encode_patch(shell.sink.schema_id, p, 0, 0)
        pairs += list(zip(keys, values, strict=True))
    return pairs


PATCHES: list[tuple[bytes, bytes]] = []


@st.composite
def patch_records(draw: st.DrawFn) -> tuple[bytes | None, bytes | None]:
    if not PATCHES:
        PATCHES.extend(_patch_pairs())
    key, value = draw(st.sampled_from(PATCHES))
    how = draw(st.sampled_from(["valid", "tombstone", "bad-key", "bad-value", "random", "null"]))
    if how == "tombstone":
        return key, None
    if how == "bad-key":
        return _mutate(draw, key), value
    if how == "bad-value":
        return key, _mutate(draw, value)
    if how == "random":
        return draw(st.binary(max_size=40)), draw(st.binary(max_size=80))
    return (None, value) if how == "null" else (key, value)


@FUZZ
@given(st.lists(patch_records(), min_size=1, max_size=20))
def test_recovery_scan_skips_undecodable_patches__random_and_mutated(
    pairs: list[tuple[bytes | None, bytes | None]],
) -> None:
    shell, _ = _shell()
    before = shell.undecodable_patches
    topic = shell.topics.index_patches
    scan = shell.scan_patches([Raw(topic, 0, i, k, v) for i, (k, v) in enumerate(pairs)])
    ref, bad = PatchScan(), 0  # the decodable records alone, in order
    for k, v in pairs:
        if k is None:
            continue
        try:
            key = decode_patch_key(k).as_tuple()
            seq = None if v is None else decode_value(shell.sink.schema_id, v).record.seq
        except Exception:
            bad += 1
            continue
        ref.observe(key, seq)
    assert shell.undecodable_patches - before == bad
    assert (scan.last_seq, scan.max_epoch, scan.live) == (ref.last_seq, ref.max_epoch, ref.live)
