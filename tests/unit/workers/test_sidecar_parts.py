"""Sidecar pieces without sockets: config validation and DP endpoints, server_info discovery,
the SGLang command line, the queue estimate and its Avro record, migration idempotence."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import numpy as np
import pytest

from kvcompass.errors import ConfigError
from kvcompass.router.load_report import queue_ms, worker_queue_ms
from wire.codec import AvroCodec
from wire.producer import MemoryProducer
from wire.registry import InProcessRegistry
from workers.config import SidecarConfig, offset_endpoint
from workers.load_reporter import vector_record
from workers.migration import MigrationExecutor
from workers.protocol import decode_payload
from workers.sglang_launch import build_command
from workers.sidecar import dead_letter_filer, parse_server_info


def test_dp_ranks_get_consecutive_ports__tcp_and_inproc() -> None:
    cfg = SidecarConfig(worker_id=2, dp_size=3)
    assert cfg.events_endpoints() == [f"tcp://127.0.0.1:{p}" for p in (5557, 5558, 5559)]
    assert offset_endpoint("inproc://ev", 2) == "inproc://ev_dp2"


@pytest.mark.parametrize(
    "kwargs",
    [{"worker_id": -1}, {"worker_id": 0, "dp_size": 0}, {"worker_id": 0, "engine_url": "x"},
     {"worker_id": 0, "events_endpoint": "udp://a"}, {"worker_id": 0, "load_period_ms": 0}],
)  # fmt: skip
def test_bad_sidecar_config_is_refused__config_error(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        SidecarConfig(**kwargs)  # type: ignore[arg-type]


def test_server_info_of_real_sglang_is_discovered__kv_events_config_string() -> None:
    info = {
        "page_size": 32,
        "dp_size": 2,
        "kv_events_config": json.dumps(
            {"publisher": "zmq", "endpoint": "tcp://*:6000", "replay_endpoint": "tcp://*:6001",
             "topic": "t"}
        ),
    }  # fmt: skip
    found = parse_server_info(info, "http://10.0.0.5:30000")
    assert found.events_endpoint == "tcp://10.0.0.5:6000"
    assert found.replay_endpoint == "tcp://10.0.0.5:6001"
    assert (found.topic, found.page_size_tokens, found.dp_size) == ("t", 32, 2)
    with pytest.raises(ValueError, match="--kv-events-config"):
        parse_server_info({"page_size": 1, "kv_events": None}, "http://h:1")


def test_kv_events_block_wins__sglang_0_5_descriptor_ports_and_wildcard_host() -> None:
    # describe_kv_events_publisher's shape; kv_events_config says other ports on purpose
    block: dict[str, Any] = {
        "publisher": "zmq", "endpoint_host": "*", "endpoint_port_base": 6001,
        "replay_endpoint_port_base": 6002, "topic": "", "block_size": 32, "dp_size": 2,
    }  # fmt: skip
    info: dict[str, Any] = {
        "page_size": 16, "dp_size": 1, "kv_events": block,
        "kv_events_config": json.dumps({"publisher": "zmq", "endpoint": "tcp://*:5557"}),
    }  # fmt: skip
    found = parse_server_info(info, "http://10.0.0.5:30000")
    assert found.events_endpoint == "tcp://10.0.0.5:6001"
    assert found.replay_endpoint == "tcp://10.0.0.5:6002"
    assert (found.topic, found.page_size_tokens, found.dp_size) == ("", 32, 2)
    concrete = {k: v for k, v in block.items() if k != "replay_endpoint_port_base"}
    found = parse_server_info({**info, "kv_events": {**concrete, "endpoint_host": "10.9.9.9"}},
                              "http://[::1]:30000")  # fmt: skip
    assert (found.events_endpoint, found.replay_endpoint) == ("tcp://10.9.9.9:6001", None)
    v6 = parse_server_info({**info, "kv_events": {**block, "endpoint_host": "::"}},
                           "http://[::1]:30000")  # fmt: skip
    assert v6.events_endpoint == "tcp://[::1]:6001"


def test_sglang_command_sets_consistent_flags__from_sidecar_config() -> None:
    cfg = SidecarConfig(
        worker_id=0,
        engine_url="http://0.0.0.0:31000",
        events_endpoint="tcp://127.0.0.1:7000",
        replay_endpoint="tcp://127.0.0.1:7001",
        events_topic="kv",
        page_size_tokens=64,
        model="m/x",
    )
    cmd = build_command(cfg, ["--tp", "2"], python="py")
    assert cmd[:3] == ["py", "-m", "sglang.launch_server"]
    flag = {cmd[i]: cmd[i + 1] for i in range(3, len(cmd) - 1) if cmd[i].startswith("--")}
    assert flag["--model-path"] == "m/x" and flag["--port"] == "31000"
    assert flag["--page-size"] == "64" and flag["--tp"] == "2"
    kv = json.loads(flag["--kv-events-config"])
    assert kv == {"publisher": "zmq", "endpoint": "tcp://*:7000",
                  "replay_endpoint": "tcp://*:7001", "topic": "kv"}  # fmt: skip
    assert {"--enable-metrics", "--enable-cache-report", "--enable-hierarchical-cache"} <= set(cmd)
    with pytest.raises(ConfigError, match="--page-size"):
        build_command(cfg, ["--page-size=16"])


def test_queue_estimate_uses_measured_prefill_rate__fallback_before_first_prefill() -> None:
    busy = {"num_waiting_uncached_tokens": 1000, "total_prefill_busy_us": 50_000,
            "total_prefill_uncached_tokens": 1000}  # fmt: skip
    assert queue_ms(busy, 0.085) == pytest.approx(50.0)
    assert queue_ms({"num_waiting_uncached_tokens": 1000}, 0.085) == pytest.approx(85.0)
    report = {"loads": [busy, {"num_waiting_uncached_tokens": 0}]}
    assert worker_queue_ms(report, 0.085) == pytest.approx(50.0)
    rec = vector_record(1, [(4, 50.0), (5, 0.0)], 1_796_000_000_000)
    codec = AvroCodec(InProcessRegistry(), validate=True)
    assert codec.decode(codec.encode("QueueVector", rec))[1]["queue_ms"] == [50.0, 0.0]


def _migration(rid: str, target: int) -> dict[str, object]:
    return {"request_id": rid, "target_worker_id": target, "mode": "CROSS_REGION_RECOMPUTE",
            "prefix_tokens": np.arange(5, dtype="<i4").tobytes()}  # fmt: skip


def test_migration_is_idempotent_per_request_id__and_filtered_by_target() -> None:
    ex = MigrationExecutor(3, "http://h:1", dedupe_entries=2)
    assert ex.accept(_migration("a", 3)) and not ex.accept(_migration("a", 3))
    assert not ex.accept(_migration("b", 4))
    assert ex.stats.duplicates == 1 and ex.stats.other_worker == 1
    body = ex.request_body(_migration("a", 3))
    assert body["input_ids"] == [0, 1, 2, 3, 4]
    assert body["sampling_params"] == {"max_new_tokens": 0}


def test_region_reporter_polls_listed_workers__default_is_own_worker() -> None:
    own = SidecarConfig(worker_id=4, engine_url="http://h:1")
    assert own.reported_workers() == [(4, "http://h:1")]
    region = SidecarConfig(worker_id=4, region_workers=((4, "http://a:1"), (5, "http://b:1")))
    assert region.reported_workers() == [(4, "http://a:1"), (5, "http://b:1")]
    with pytest.raises(ConfigError, match="peers"):
        SidecarConfig(worker_id=4, peers=((5, "not a url"),))


def test_undecodable_event_is_dead_lettered__reason_and_raw_bytes_kept() -> None:
    codec = AvroCodec(InProcessRegistry(), validate=True)
    out = MemoryProducer()
    reject = dead_letter_filer(out, codec, "dl", 3, "tcp://h:5557")
    batch = decode_payload(9, msgspec.msgpack.encode([1.0, [["AllBlocksCleared"], ["Nope"]], 0]))
    (rej,) = batch.rejected
    reject(batch.seq, rej)
    ((key, value),) = out.of("dl")
    _, rec = codec.decode(value or b"")
    assert key == b"zmq:tcp://h:5557" and rec["reason_code"] == "UNDECODABLE"
    assert rec["original_offset"] == 9 and rec["raw"] == msgspec.msgpack.encode(["Nope"])
    assert "event 1" in rec["reason"]
