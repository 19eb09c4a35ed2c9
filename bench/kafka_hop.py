"""One Kafka hop: a record's produce() to its consumer's poll() on one broker (linger 0).

The simulator charges this hop twice on every queue vector and forward announcement (the origin
region's cluster, then the destination's: ``sim.config.SimConfig.kafka_hop_ms``). Against
``--bootstrap`` (default ``KAFKA_BOOTSTRAP_SERVERS``, else the local ``kvcompass kafka up``
broker at 127.0.0.1:19092), on a fresh one-partition topic: a confluent-kafka producer with
``linger.ms=0`` sends ``--records`` small records (``--bytes`` each, a queue vector's size) at
``--rate`` per second, each carrying its ``time.perf_counter_ns()`` send time; a consumer in the
same process (a second thread, ``fetch.wait.max.ms`` 100, assigned before the first send) stamps
each record when its ``poll()`` returns it. One clock, so no skew. ``--json`` prints P50, P99,
mean and max in ms. The topic is deleted at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
import threading
import time
import uuid
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path; drop it (nothing there we import).
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import numpy as np  # noqa: E402
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # noqa: E402  # public, not in __all__
    AdminClient,
    NewTopic,
)

DEFAULT_BOOTSTRAP = "127.0.0.1:19092"


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", DEFAULT_BOOTSTRAP)
    )
    p.add_argument("--records", type=int, default=2000)
    p.add_argument("--rate", type=float, default=200.0, help="records per second")
    p.add_argument("--bytes", type=int, default=67, help="record size (a v3 vector: 67 B)")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    if a.records <= 0 or a.rate <= 0 or a.bytes < 8:
        p.error("expected --records > 0, --rate > 0, --bytes >= 8")
    return a


def _make_topic(admin: AdminClient, topic: str) -> None:
    fut = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    fut[topic].result(timeout=30)


def measure(bootstrap: str, records: int, rate: float, size: int) -> dict[str, float]:
    """Produce→poll latency of ``records`` records (ms): p50, p99, mean, max, n."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = f"bench-kafka-hop-{uuid.uuid4().hex[:12]}"
    _make_topic(admin, topic)
    got: dict[int, int] = {}
    done = threading.Event()
    ready = threading.Event()
    errors: list[str] = []

    def consume() -> None:
        c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": topic,
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 100,
                "auto.offset.reset": "earliest",
            }
        )
        try:
            c.assign([TopicPartition(topic, 0, 0)])
            ready.set()
            deadline = time.monotonic() + records / rate + 60.0
            while len(got) < records and time.monotonic() < deadline:
                m = c.poll(0.5)
                now = time.perf_counter_ns()
                if m is None:
                    continue
                if m.error() is not None:
                    errors.append(str(m.error()))
                    continue
                value = m.value()
                if value is None or len(value) < 8:
                    errors.append("record without a send time")
                    continue
                got[len(got)] = now - struct.unpack_from(">q", value)[0]
        finally:
            c.close()
            done.set()

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    ready.wait(30)
    time.sleep(1.0)  # the consumer's first fetch is in flight before the first record
    prod = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all"})
    pad = b"\0" * (size - 8)
    gap = 1.0 / rate
    start = time.perf_counter()
    for i in range(records):
        wait = start + i * gap - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        prod.produce(topic, struct.pack(">q", time.perf_counter_ns()) + pad)
        prod.poll(0)
    prod.flush(30)
    done.wait(records / rate + 90.0)
    admin.delete_topics([topic])
    if errors:
        raise KafkaException(f"{len(errors)} bad records, first: {errors[0]}")
    if len(got) < records:
        raise RuntimeError(f"only {len(got)} of {records} records came back")
    ms = np.array(list(got.values()), dtype=np.float64) / 1e6
    return {
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
        "mean_ms": float(ms.mean()),
        "max_ms": float(ms.max()),
        "records": float(ms.size),
    }


def main(argv: list[str] | None = None) -> int:
    a = _args(argv)
    res = measure(a.bootstrap, a.records, a.rate, a.bytes)
    if a.json:
        print(json.dumps({"bootstrap": a.bootstrap, "rate_per_s": a.rate, "bytes": a.bytes, **res}))
    else:
        print(
            f"produce→poll on {a.bootstrap}, {int(res['records'])} records of {a.bytes} B at "
            f"{a.rate:g}/s: P50 {res['p50_ms']:.2f} ms, P99 {res['p99_ms']:.2f} ms, "
            f"mean {res['mean_ms']:.2f}, max {res['max_ms']:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
