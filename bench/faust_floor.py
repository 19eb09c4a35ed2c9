"""Faust's floor: CPU per record of an agent that does nothing, vs librdkafka's batched consume.

Why ``kv-events`` is not read by a Faust agent (``pipeline/rechunk_consumer.py``). Writes
``--records`` records of 100 bytes to a fresh 4-partition topic, then reads them (1) with a Faust
agent (``stream.take_events(4000, within=10 ms)``, raw bytes, the pipeline worker's settings)
that only counts, in a child process, and (2) with confluent-kafka's ``consume(4000, 0.01)``;
prints the CPU time per record of each reader process (``--json`` for machines).

    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:19092 .venv/bin/python bench/faust_floor.py
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

_AGENT = """
import os, sys, time
import faust
n, topic, broker = int(os.environ["N"]), os.environ["TOPIC"], os.environ["BROKER"]
app = faust.App("floor-" + topic, broker="kafka://" + broker, web_enabled=False,
                store="memory://", consumer_auto_offset_reset="earliest",
                stream_buffer_maxsize=8000, processing_guarantee="at_least_once")
t = app.topic(topic, key_type=bytes, value_type=bytes, key_serializer="raw",
              value_serializer="raw")
seen = [0, None]

@app.agent(t)
async def count(stream):
    async for evs in stream.take_events(4000, within=0.01):
        if seen[1] is None:
            seen[1] = time.process_time()
        seen[0] += len(evs)
        if seen[0] >= n:
            cpu = (time.process_time() - seen[1]) / seen[0] * 1e6
            print(f"CPU_US={cpu:.3f}", flush=True)
            os._exit(0)

app.main()
"""


def _produce(bootstrap: str, topic: str, n: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, 4, 1)]).values():
        f.result(30)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                  "queue.buffering.max.messages": 2_000_000})  # fmt: skip
    value = b"x" * 100
    for i in range(n):
        p.produce(topic, value, (i % 14).to_bytes(4, "big"))
        if i % 10_000 == 0:
            p.poll(0)
    p.flush(60)


def _librdkafka(bootstrap: str, topic: str, n: int) -> float:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"floor-{uuid.uuid4().hex[:6]}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 5})  # fmt: skip
    c.subscribe([topic])
    seen, t0 = 0, None
    while seen < n:
        msgs = c.consume(4000, 0.01)
        if msgs and t0 is None:
            t0 = time.process_time()
        seen += sum(1 for m in msgs if m.error() is None)
    cpu = time.process_time() - (t0 or time.process_time())
    c.close()
    return cpu / n * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=150_000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:19092")
    out: dict[str, float] = {}
    for reader in ("faust", "librdkafka"):
        topic = f"floor-{reader}-{uuid.uuid4().hex[:8]}"
        _produce(bootstrap, topic, args.records)
        if reader == "librdkafka":
            out["librdkafka_cpu_us_per_record"] = _librdkafka(bootstrap, topic, args.records)
            continue
        with tempfile.TemporaryDirectory() as tmp:
            script = Path(tmp) / "floor_app.py"
            script.write_text(_AGENT)
            done = subprocess.run(
                [sys.executable, str(script), "worker", "-l", "warn"], cwd=tmp,
                capture_output=True, text=True, timeout=600,
                env={**os.environ, "N": str(args.records), "TOPIC": topic, "BROKER": bootstrap},
            )  # fmt: skip
        found = re.findall(r"CPU_US=([0-9.]+)", done.stdout + done.stderr)
        if not found:
            raise RuntimeError(f"the Faust reader said nothing: {done.stderr[-2000:]}")
        out["faust_cpu_us_per_record"] = float(found[-1])
    out["load_avg_1m"] = os.getloadavg()[0]
    if args.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k:>30}: {v:,.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
