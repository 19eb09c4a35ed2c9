"""Issue 35 item 3 against a real broker: one valid-looking ``IndexPatch`` for table 99 in the
compacted ``index-patches`` made every fresh view die while bootstrapping. A fresh follower now
reads past it, applies the real patches around it, and names the record it skipped."""

from __future__ import annotations

import dataclasses

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from kvcompass.maintenance import MaintenanceUnit, PatchScan
from kvcompass.patch_stream import explode
from tests.kv_event_fixtures import LAYOUT, LEVELS
from wire.codec import encode_patch_key
from wire.config import PipelineConfig
from wire.patch_follower import follow
from wire.patches import decode_value, encode_records
from wire.registry import InProcessRegistry
from wire.topics import ensure_topics

SID = InProcessRegistry().writer_id("IndexPatch")


def test_fresh_view_bootstraps_past_a_patch_for_table_99(
    kafka_admin: AdminClient, kafka_bootstrap: str, topic_prefix: str
) -> None:
    cfg = PipelineConfig(bootstrap_servers=kafka_bootstrap, topic_prefix=topic_prefix, n_shards=2)
    ensure_topics(kafka_admin, cfg)
    unit = MaintenanceUnit(LAYOUT, 0, 2, initial_capacity=16)
    step = unit.recover([], PatchScan(), 0)
    records = [kv for p in step.patches for kv in encode_records(SID, explode(p), -1, 1)]
    first = encode_records(SID, explode(step.patches[0]), -1, 1)[1]  # a BUCKET image
    rec = dataclasses.replace(decode_value(SID, first[1]).record, table=99)
    forged_key = encode_patch_key(99, 0, rec.epoch, rec.kind, rec.index)
    forged = encode_records(SID, [rec], -1, 1)[0][1]
    p = Producer({"bootstrap.servers": kafka_bootstrap})
    p.produce(cfg.topics.index_patches, forged, forged_key, 0)  # first on the partition
    for k, v in records:
        p.produce(cfg.topics.index_patches, v, k, 0)
    assert p.flush(30) == 0
    for attempt in range(2):  # two fresh edges' views, as in the probe
        view = follow(cfg, LAYOUT, LEVELS.matrix, None)
        try:
            assert view.catch_up(60), f"view {attempt} did not catch up"
            assert view.applier.stats.applied >= 1
            assert [why for _, _, why in view.applier.refused if "table 99" in why]
            assert forged_key.hex() in view.applier.refused[0][2]
        finally:
            view.close()
