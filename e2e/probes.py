"""Read-only probes of a running deployment: Kafka positions, edge view progress, truth vs views.

Owns what ``e2e.cluster`` asks to decide "quiescent", "every view equals the truth" and "nothing
accepted was lost":

- ``watermarks`` / ``group_lag`` / ``group_members``: end offsets of a topic, how far the
  maintenance units' consumer group (the Faust app id) is behind on ``kv-events`` and
  ``index-ops``, and how many members the group has (every maintenance process joined);
- ``view_offsets``: the next ``index-patches`` offset per shard recorded in an edge's view files
  (the edge writes it every ``offsets_flush_period_ms``, default 1 s);
- ``check_views``: the truth rebuilt offline from every ``kv-events`` record with the pipeline's
  own core (``pipeline.replay``) diffed against each edge's view directory;
- ``count_events``: every accepted ``kv-events`` record, rechunked offline, against the runs the
  rechunk agent wrote to ``index-ops`` (by source event), plus dead letters.

Must not: write to Kafka, to view files, or to any process.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient  # type: ignore[import-untyped]
from confluent_kafka import Consumer, KafkaException, TopicPartition

from kvcompass.deployment import Deployment
from kvcompass.errors import InvalidInputError, ViewFileError
from kvcompass.event_order import EventOrder, Verdict
from kvcompass.levels import Levels
from kvcompass.rechunk import EventRef, OpKind
from pipeline.replay import diff_view_dir, new_replay, read_kafka
from wire.codec import AvroCodec, worker_key_mismatch
from wire.index_ops import decode_op_batch
from wire.kafka_clients import aiokafka_kwargs, as_config, librdkafka_conf
from wire.registry import InProcessRegistry
from wire.view_files import open_view

CODEC = AvroCodec(InProcessRegistry())


def _consumer(bootstrap: str, group: str | None = None) -> Consumer:
    return Consumer(
        librdkafka_conf(
            bootstrap,
            {
                "enable.auto.commit": False,
                "group.id": group or f"e2e-probe-{uuid.uuid4().hex[:8]}",
                "log_level": 2,
            },
        )
    )


def watermarks(bootstrap: str, topic: str, timeout_s: float = 10.0) -> dict[int, tuple[int, int]]:
    """partition -> (low, high) of ``topic``. Retries until ``timeout_s`` (a new topic answers
    NOT_LEADER until its leaders are elected)."""
    c = _consumer(bootstrap)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                meta = c.list_topics(topic, timeout=timeout_s).topics[topic]
                if meta.error is not None:
                    raise KafkaException(meta.error)
                return {
                    p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)
                    for p in sorted(meta.partitions)
                }
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        c.close()


def ends(bootstrap: str, topic: str) -> dict[int, int]:
    """partition -> end offset (high watermark) of ``topic`` now."""
    return {p: high for p, (_, high) in watermarks(bootstrap, topic).items()}


def group_lag(
    bootstrap: str, group: str, topics: Iterable[str], timeout_s: float = 10.0
) -> dict[tuple[str, int], int]:
    """(topic, partition) -> records not yet committed by ``group`` (high - committed)."""
    marks = {t: watermarks(bootstrap, t, timeout_s) for t in topics}
    c = _consumer(bootstrap, group)  # never subscribes: reads the group's committed offsets only
    try:
        tps = [TopicPartition(t, p) for t, parts in marks.items() for p in parts]
        done = c.committed(tps, timeout=timeout_s)
    finally:
        c.close()
    lag = {}
    for tp in done:
        low, high = marks[tp.topic][tp.partition]
        committed = tp.offset if tp.offset >= 0 else low
        lag[(tp.topic, tp.partition)] = max(high - committed, 0)
    return lag


def group_members(bootstrap: str, group: str, timeout_s: float = 10.0) -> tuple[int, str]:
    """(members, state) of a consumer group, e.g. ``(2, "Stable")``.

    Through aiokafka's admin client, not confluent-kafka's: librdkafka aborts the whole process
    (``rd_kafka_enq_once_del_source_return: Assertion `eonce->refcnt > 0' failed``) when a
    coordinator-targeted admin request (DescribeConsumerGroups) meets a dropped connection, as
    during a broker restart (librdkafka issue #4605, fix proposed in PR #5397; seen here)."""
    return asyncio.run(asyncio.wait_for(_describe_group(bootstrap, group, timeout_s), timeout_s))


async def _describe_group(bootstrap: str, group: str, timeout_s: float) -> tuple[int, str]:
    admin = AIOKafkaAdminClient(**aiokafka_kwargs(as_config(bootstrap)),
                                request_timeout_ms=int(timeout_s * 1000))  # fmt: skip
    await admin.start()
    try:
        (resp,) = await admin.describe_consumer_groups([group])
    finally:
        await admin.close()
    # DescribeGroupsResponse group: (error_code, group_id, state, protocol_type, protocol,
    # members, ...)
    g = resp.groups[0]
    return len(g[5]), str(g[2])


def view_offsets(view_dir: Path) -> dict[int, int]:
    """shard -> smallest next ``index-patches`` offset over the newest committed view files.

    Files vanish while an edge deletes superseded epochs; such a file is skipped (the caller
    polls again)."""
    newest: dict[tuple[int, int], tuple[int, int]] = {}
    for path in sorted(Path(view_dir).glob("*.kvview")):
        try:
            vf = open_view(path)
            key, epoch, offset = (vf.table, vf.shard), vf.params.epoch, vf.consumer_offset
            committed = vf.committed
        except (OSError, ValueError, ViewFileError):
            continue
        if committed and (key not in newest or newest[key][0] < epoch):
            newest[key] = (epoch, offset)
    out: dict[int, int] = {}
    for (_, shard), (_, offset) in newest.items():
        out[shard] = min(out.get(shard, offset), offset)
    return out


@dataclass(frozen=True, slots=True)
class ViewCheck:
    """Each edge's view against the truth rebuilt from ``kv-events`` (after quiescence)."""

    events: int
    entries: int
    """Live (key, table) entries of the truth: the keys compared."""
    per_edge: Mapping[str, tuple[int, int, int]]
    """region -> (checked, mismatched, views missing)."""
    examples: Mapping[str, list[tuple[int, int, int, int]]] = field(default_factory=dict)
    """region -> first mismatches (table, key, truth value, view value)."""

    @property
    def ok(self) -> bool:
        return all(m == 0 for _, m, _ in self.per_edge.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "events": self.events,
            "entries": self.entries,
            "per_edge": {
                r: {"checked": c, "mismatched": m, "missing_views": x}
                for r, (c, m, x) in self.per_edge.items()
            },
            "examples": {r: [list(e) for e in ex] for r, ex in self.examples.items()},
        }

    def line(self) -> str:
        """One readable line: ``views: 3 edges × 3,721 entries, 0 mismatched``."""
        mismatched = sum(m for _, m, _ in self.per_edge.values())
        missing = sum(x for _, _, x in self.per_edge.values())
        out = f"views: {len(self.per_edge)} edges × {self.entries:,} entries, "
        out += f"{mismatched:,} mismatched"
        if mismatched:
            out += (
                " (" + ", ".join(f"{r} {m:,}" for r, (_, m, _) in self.per_edge.items() if m) + ")"
            )
        if missing:
            out += f", {missing:,} views missing"
        return out

    def __str__(self) -> str:
        rows = ", ".join(
            f"{r}: {m} of {c} mismatched" + (f" ({x} views missing)" if x else "")
            for r, (c, m, x) in self.per_edge.items()
        )
        return f"views vs truth of {self.events} events / {self.entries} entries: {rows}"


def check_views(
    bootstrap: str,
    kv_events_topic: str,
    dep: Deployment,
    n_shards: int,
    view_dirs: Mapping[str, Path],
    timeout_s: float = 120.0,
) -> ViewCheck:
    """Rebuild the truth from every ``kv-events`` record and diff it with each view directory.

    Compares every live key of the truth (a keyless view cannot say that a key is absent, so keys
    the truth no longer holds are not checked)."""
    replay = new_replay(dep, n_shards)
    for rec in read_kafka(bootstrap, kv_events_topic, timeout_s=timeout_s):
        replay.feed(rec, CODEC, kv_events_topic)
    matrix = Levels.from_deployment(dep).matrix
    per_edge: dict[str, tuple[int, int, int]] = {}
    examples: dict[str, list[tuple[int, int, int, int]]] = {}
    for region, directory in view_dirs.items():
        for attempt in range(3):  # an epoch file may be deleted under us: read again
            try:
                d = diff_view_dir(replay, directory, matrix)
                break
            except (OSError, ViewFileError):
                if attempt == 2:
                    raise
        per_edge[region] = (d.checked, d.mismatched, d.missing_views)
        if d.examples:
            examples[region] = list(d.examples)
    return ViewCheck(replay.events, int(replay.index.entries()), per_edge, examples)


@dataclass(frozen=True, slots=True)
class EventCount:
    """Accepted events vs what the rechunk agent logged in ``index-ops``."""

    kv_events: int
    """Records in ``kv-events`` (accepted by the broker)."""
    invalid: int
    """Records the pipeline must refuse (they go to dead letters, not to the index)."""
    with_ops: int
    """Valid events that change the index (the rest complete no registration length)."""
    logged: int
    """Of those, events whose runs appear in ``index-ops``."""
    expected_key_ops: int
    logged_key_ops: int
    """Key-ops of distinct runs in ``index-ops`` (a re-delivered run counts once)."""
    duplicate_records: int
    """(event, shard) runs written more than once (at-least-once re-delivery; harmless: ops are
    assignments)."""
    dead_letters: int

    @property
    def lost(self) -> int:
        return self.with_ops - self.logged

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.logged_key_ops == self.expected_key_ops

    def as_dict(self) -> dict[str, Any]:
        names = (
            "kv_events",
            "invalid",
            "with_ops",
            "logged",
            "expected_key_ops",
            "logged_key_ops",
            "duplicate_records",
            "dead_letters",
        )
        return {"ok": self.ok, "lost": self.lost, **{n: getattr(self, n) for n in names}}

    def line(self) -> str:
        """One readable line: ``events: 2,327 accepted, 0 lost, 0 dead letters``."""
        out = f"events: {self.kv_events:,} accepted, {self.lost:,} lost, "
        out += f"{self.dead_letters:,} dead letters"
        if self.logged_key_ops != self.expected_key_ops:
            out += f", key-ops {self.logged_key_ops:,} of {self.expected_key_ops:,} logged"
        if self.invalid:
            out += f", {self.invalid:,} invalid"
        if self.duplicate_records:
            out += f", {self.duplicate_records:,} re-delivered (counted once)"
        return out

    def __str__(self) -> str:
        return (
            f"{self.kv_events} events accepted ({self.invalid} invalid, {self.with_ops} "
            f"change the index), {self.logged} in index-ops, lost {self.lost}; key-ops "
            f"{self.logged_key_ops}/{self.expected_key_ops}, {self.duplicate_records} "
            f"re-delivered, {self.dead_letters} dead letters"
        )


def count_events(
    bootstrap: str,
    topics: Any,
    dep: Deployment,
    n_shards: int,
    timeout_s: float = 120.0,
    since: dict[int, int] | None = None,
) -> EventCount:
    """``topics``: ``wire.config.TopicNames`` of the deployment. ``since``: per ``kv-events``
    partition, the first offset to account for (a fault deleted the ``index-ops`` records of
    the events before it); None: every event.

    All runs of one event for one shard are written in one ``index-ops`` record (the rechunk
    agent groups one take by shard), so (event, shard) identifies them; seen again in another
    record it is a re-delivery. Events the pipeline does not apply (wrong key, out of order:
    ``kvcompass.event_order``) are counted invalid, as it dead-letters them."""
    rechunker = new_replay(dep, n_shards).rechunker
    order = EventOrder()
    expected: dict[tuple[int, int], int] = {}
    total = invalid = 0
    start = since or {}
    for rec in read_kafka(bootstrap, topics.kv_events, timeout_s=timeout_s):
        total += 1
        try:
            name, ev = CODEC.decode(rec.value or b"")
            if name != "KvEvent":
                raise InvalidInputError(f"expected KvEvent; got {name}")
            if worker_key_mismatch(rec.key, int(ev["worker_id"])) is not None:
                raise InvalidInputError("key")
            w, seq = int(ev["worker_id"]), int(ev["engine_seq"])
            if order.judge(w, seq, rec.partition, rec.offset) is not Verdict.APPLY:
                raise InvalidInputError("order")
            order.accept(w, seq, rec.partition, rec.offset)
            src = EventRef(
                int(ev["worker_id"]),
                int(ev["engine_seq"]),
                topics.kv_events,
                rec.partition,
                rec.offset,
                int(ev["timestamp_ms"]),
            )
            runs = rechunker.rechunk(ev, src)
        except (InvalidInputError, KeyError, ValueError):
            invalid += 1
            continue
        if runs and rec.offset >= start.get(rec.partition, 0):
            expected[(rec.partition, rec.offset)] = sum(_key_ops(b) for b in runs)
    seen: dict[tuple[int, int, int], int] = {}
    duplicates = 0
    for rec in read_kafka(bootstrap, topics.index_ops, timeout_s=timeout_s):
        try:
            name, r = CODEC.decode(rec.value or b"")
            runs = decode_op_batch(r) if name == "IndexOpBatch" else []
        except (InvalidInputError, KeyError, ValueError):
            continue
        here: dict[tuple[int, int, int], int] = {}
        for b in runs:
            if b.source.offset < start.get(b.source.partition, 0):
                continue
            k = (b.source.partition, b.source.offset, b.shard)
            here[k] = here.get(k, 0) + _key_ops(b)
        for k, n in here.items():
            duplicates += k in seen
            seen[k] = max(seen.get(k, 0), n)
    logged = {(p, o) for p, o, _ in seen}
    dead = sum(high - low for low, high in watermarks(bootstrap, topics.dead_letters).values())
    return EventCount(
        kv_events=total,
        invalid=invalid,
        with_ops=len(expected),
        logged=len(logged & expected.keys()),
        expected_key_ops=sum(expected.values()),
        logged_key_ops=sum(seen.values()),
        duplicate_records=duplicates,
        dead_letters=dead,
    )


def _key_ops(b: Any) -> int:
    """Keys a run writes; a whole-field clear counts as one op."""
    return 1 if b.op is OpKind.CLEAR_FIELD else int(b.keys.size)


def http(
    method: str, url: str, body: dict[str, Any] | None = None, timeout_s: float = 2.0
) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            return int(r.status), r.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()


def healthy(url: str) -> bool:
    try:
        return http("GET", url + "/health", timeout_s=1.0)[0] == 200
    except (OSError, ValueError):
        return False


def busy_workers(worker_urls: dict[int, str]) -> dict[int, int]:
    """Workers whose ``/v1/loads`` shows requests waiting or prefilling: their count (-1: no
    answer)."""
    busy: dict[int, int] = {}
    for w, url in worker_urls.items():
        try:
            status, body = http("GET", url + "/v1/loads", None, 5.0)
            loads = json.loads(body)["loads"] if status == 200 else []
        except (OSError, ValueError, KeyError):
            busy[w] = -1
            continue
        n = sum(int(x.get("num_waiting_reqs", 0)) + int(x.get("num_waiting_uncached_tokens", 0) > 0)
                for x in loads)  # fmt: skip
        if n:
            busy[w] = n
    return busy


def gateway_workers(url: str) -> int:
    """How many workers an SGLang gateway (``sglang-router``) lists as healthy in ``GET
    /workers`` (0 while it is starting or unreachable)."""
    try:
        status, body = http("GET", url + "/workers", timeout_s=2.0)
        if status != 200:
            return 0
        workers = json.loads(body).get("workers", [])
    except (OSError, ValueError, AttributeError):
        return 0
    return sum(1 for w in workers if isinstance(w, dict) and w.get("is_healthy"))


class ClearedWatch:
    """Follows ``kv-events`` from given offsets; remembers, per worker, whether a ``CLEARED`` was
    seen and whether anything was stored after it."""

    def __init__(self, bootstrap: str, topic: str, start: dict[int, int]) -> None:
        self.consumer = Consumer(
            librdkafka_conf(
                bootstrap,
                {
                    "log_level": 2,
                    "group.id": f"e2e-watch-{uuid.uuid4().hex[:8]}",
                    "enable.auto.commit": False,
                },
            )
        )
        self.consumer.assign([TopicPartition(topic, p, o) for p, o in start.items()])
        self.cleared: set[int] = set()
        self.dirty: set[int] = set()
        """Workers with a non-CLEARED event after their last CLEARED."""

    def poll(self) -> None:
        for m in self.consumer.consume(10_000, 0.2):
            if m.error() is not None:
                continue
            try:
                _, ev = CODEC.decode(m.value() or b"")
                w, op = int(ev["worker_id"]), str(ev["op"])
            except (ValueError, KeyError):
                continue
            if op == "CLEARED":
                self.cleared.add(w)
                self.dirty.discard(w)
            else:
                self.dirty.add(w)

    def close(self) -> None:
        self.consumer.close()
