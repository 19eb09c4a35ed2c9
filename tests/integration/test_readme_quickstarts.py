"""The quickstart blocks of ``workers/README.md`` and ``edge/README.md`` run as written, one after
the other in one shell, as a new user would paste them: emulated worker, sidecar, a ``/generate``
request, an edge in front of the worker, an OpenAI completion through it; what the worker cached
reaches ``kv-events``, and none of our processes logs an error or a traceback.

Substituted, and only this: ``kvcompass`` is ``python -m cli`` of this interpreter (a shim
on ``PATH``); the block's ``kvcompass kafka up`` line is dropped and ``127.0.0.1:19092`` is the test
session's broker (``conftest.py``: a real local broker on free ports, the one ``kafka up`` would
start); the fixed ports 30000, 5557, 5558 and 8080 become free ones; the sidecar's topics get the
test's prefix (``KVCOMPASS_TOPIC_PREFIX``, an env var the sidecar reads anyway).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer

from wire.codec import AvroCodec
from wire.config import PipelineConfig
from wire.registry import InProcessRegistry

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
ROOT = Path(__file__).resolve().parents[2]


def quickstart(readme: Path, name: str) -> str:
    """The ```bash block right after ``<!-- quickstart:NAME -->``."""
    text = readme.read_text(encoding="utf-8")
    m = re.search(rf"<!-- quickstart:{name} -->\s*```bash\n(.*?)```", text, re.S)
    assert m is not None, f"{readme}: expected a <!-- quickstart:{name} --> bash block"
    return m.group(1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _script(bootstrap: str) -> str:
    text = quickstart(ROOT / "workers" / "README.md", "workers")
    text += quickstart(ROOT / "edge" / "README.md", "edge")
    lines = [ln for ln in text.splitlines() if not ln.startswith("kvcompass kafka up")]
    assert len(lines) < len(text.splitlines()), "expected the workers block to start a broker"
    script = "\n".join(lines).replace("127.0.0.1:19092", bootstrap)
    for port in ("30000", "5557", "5558", "8080"):
        script = re.sub(rf"\b{port}\b", str(_free_port()), script)
    return "set -e\n" + script + "\n"


def _kv_events(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    codec = AvroCodec(InProcessRegistry())
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
    c.subscribe([topic])
    out: list[dict[str, Any]] = []
    idle = 0
    try:
        while idle < 20 and not any(r["op"] == "STORED" for r in out):
            msg = c.poll(1.0)
            if msg is None or msg.error():
                idle += 1
                continue
            out.append(codec.decode(msg.value() or b"")[1])
    finally:
        c.close()
    return out


def _objects(text: str) -> list[dict[str, Any]]:
    """The JSON objects in ``text`` (curl answers back to back, no newline; other lines skipped)."""
    dec, out, i = json.JSONDecoder(), [], text.find("{")
    while i >= 0:
        try:
            value, end = dec.raw_decode(text, i)
        except ValueError:
            i = text.find("{", i + 1)
            continue
        if isinstance(value, dict):
            out.append(value)
        i = text.find("{", end)
    return out


def test_workers_and_edge_quickstarts_run_as_written(
    tmp_path: Path, kafka_bootstrap: str, topic_prefix: str
) -> None:
    shim = tmp_path / "bin" / "kvcompass"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m cli "$@"\n')
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{shim.parent}:{os.environ['PATH']}",
           "KVCOMPASS_TOPIC_PREFIX": topic_prefix, "PYTHONPATH": str(ROOT)}  # fmt: skip
    env.pop("KAFKA_BOOTSTRAP_SERVERS", None)  # as on a user's machine: the README's address only
    log, printed = tmp_path / "processes.log", tmp_path / "stdout.txt"
    # Files, not pipes: the background processes keep their ends open after the script exits.
    with log.open("wb") as err, printed.open("wb") as out:
        proc = subprocess.Popen(["bash", "-c", _script(kafka_bootstrap)], cwd=tmp_path, env=env,
                                stdout=out, stderr=err, start_new_session=True)  # fmt: skip
    try:
        proc.wait(timeout=240)
        events = _kv_events(kafka_bootstrap, PipelineConfig(topic_prefix=topic_prefix)
                            .topics.kv_events)  # fmt: skip
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the quickstart's background processes
    logs = log.read_text(errors="replace")
    assert proc.returncode == 0, logs[-4000:]
    answers = _objects(printed.read_text(errors="replace"))
    generated = next(a for a in answers if "meta_info" in a)
    completed = next(a for a in answers if "choices" in a)
    assert generated["meta_info"]["prompt_tokens"] > 128 and generated["text"]
    assert completed["object"] == "text_completion" and completed["choices"][0]["text"]
    stored = [r for r in events if r["op"] == "STORED"]
    assert stored and stored[0]["worker_id"] == 0 and stored[0]["registration_keys"]
    # Our loggers (a failed delivery is logged as ERROR by wire.producer) and any traceback;
    # aiokafka logs a fresh broker's transient GroupCoordinatorNotAvailable at ERROR and retries.
    ours = re.compile(r" ERROR (workers|edge|pipeline|kvcompass)\.|Traceback")
    errors = [ln for ln in logs.splitlines() if ours.search(ln)]
    assert errors == [], logs[-4000:]
