"""The edge's HTTP API under bad and random input (Hypothesis + aiohttp's test client).

The worker is a small in-test aiohttp app speaking SGLang's ``/generate`` and OpenAI's
``/v1/completions`` shapes (a fake of the worker protocol, so fuzzing stays fast). Properties:
no client input yields a 5xx; every error is the OpenAI error shape with the request id echoed
in the header and the body; the process keeps serving (``/health``) after everything.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from edge.app import EdgeApp, assemble, build_app
from edge.config import EdgeConfig
from kvcompass.deployment import Deployment

MODEL = "fuzz-model"
DEP = Deployment.from_dict(
    {
        "name": "fuzz-2x2",
        "wan_one_way_ms": [[0.0, 50.0], [50.0, 0.0]],
        "regions": [
            {"name": "a", "n_workers": 1, "prefill_ms_per_token": 0.1},
            {"name": "b", "n_workers": 1, "prefill_ms_per_token": 0.1},
        ],
    }
)


async def _fake_generate(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    # SGLang reads input_ids on /generate and prompt on /v1/completions (other keys ignored)
    ids = body.get("prompt") if request.path == "/v1/completions" else body.get("input_ids")
    assert isinstance(ids, list), "the edge must forward token ids"
    if body.get("stream"):
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(2):
            chunk = {"text": "x" * (i + 1), "meta_info": {"cached_tokens": 0, "id": "f"},
                     "choices": [{"index": 0, "text": "x"}],
                     "usage": {"prompt_tokens_details": {"cached_tokens": 0}}}  # fmt: skip
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp
    return web.json_response(
        {"id": "cmpl-f", "text": "xy", "meta_info": {"cached_tokens": 0},
         "choices": [{"index": 0, "text": "xy", "finish_reason": "length"}],
         "usage": {"prompt_tokens_details": {"cached_tokens": 0}}}
    )  # fmt: skip


@dataclass
class Rig:
    loop: asyncio.AbstractEventLoop
    edge: EdgeApp
    client: TestClient

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)


@pytest.fixture(scope="module")
def rig() -> Iterator[Rig]:
    loop = asyncio.new_event_loop()
    worker_app = web.Application()
    worker_app.router.add_post("/generate", _fake_generate)
    worker_app.router.add_post("/v1/completions", _fake_generate)
    worker = TestServer(worker_app)
    loop.run_until_complete(worker.start_server())
    url = str(worker.make_url("")).rstrip("/")
    cfg = EdgeConfig.from_mapping(
        {"region": "a", "model": MODEL, "max_context_tokens": 512, "max_new_tokens": 16,
         "max_body_bytes": 64 * 1024, "loads_poll_period_ms": 0.0},
        {"0": url, "1": url},
    )  # fmt: skip
    edge = assemble(cfg, DEP)

    async def make_client() -> TestClient:
        c = TestClient(TestServer(build_app(edge)))
        await c.start_server()
        return c

    client = loop.run_until_complete(make_client())
    yield Rig(loop, edge, client)
    loop.run_until_complete(client.close())
    loop.run_until_complete(worker.close())
    loop.close()


async def _post(client: TestClient, path: str, data: bytes, rid: str) -> tuple[int, Any, str]:
    headers = {"X-Request-Id": rid, "Content-Type": "application/json"}
    r = await client.post(path, data=data, headers=headers)
    raw = await r.read()
    body = json.loads(raw) if r.content_type == "application/json" else raw
    return r.status, body, r.headers.get("X-Request-Id", "")


def _check_error(status: int, body: Any, header_rid: str) -> None:
    assert status < 500, body
    if status >= 400:
        assert set(body["error"]) >= {"message", "type", "param", "code", "request_id"}
        assert body["error"]["request_id"] == header_rid


PATHS = st.sampled_from(["/generate", "/v1/completions", "/v1/chat/completions"])
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda kids: st.lists(kids, max_size=4)
    | st.dictionaries(st.text(max_size=8), kids, max_size=4),
    max_leaves=20,
)  # fmt: skip
FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "model": st.sampled_from([MODEL, "other", 3, None]),
        "input_ids": st.lists(st.integers(-5, 2**31 + 5), max_size=600) | JSON,
        "text": st.text(max_size=50) | JSON,
        "prompt": st.text(max_size=50) | st.lists(st.integers(-2, 300), max_size=20) | JSON,
        "messages": st.lists(
            st.fixed_dictionaries({"role": st.sampled_from(["user", 1]),
                                   "content": st.text(max_size=20) | JSON}), max_size=3
        ) | JSON,
        "stream": st.booleans() | JSON,
        "max_tokens": st.integers(-3, 40) | JSON,
        "sampling_params": st.fixed_dictionaries({}, optional={"max_new_tokens":
                                                               st.integers(-3, 40)}) | JSON,
        "rid": st.text(max_size=10) | JSON,
    },
)  # fmt: skip


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(path=PATHS, body=FIELDS, rid=st.from_regex(r"[A-Za-z0-9]{1,12}", fullmatch=True))
def test_random_requests__never_5xx_and_errors_echo_the_request_id(
    rig: Rig, path: str, body: dict[str, Any], rid: str
) -> None:
    status, out, header_rid = rig.run(_post(rig.client, path, json.dumps(body).encode(), rid))
    _check_error(status, out, header_rid)
    if status >= 400 and "rid" not in body:
        assert header_rid == rid


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(path=PATHS, raw=st.binary(max_size=300), rid=st.text(max_size=140))
def test_random_bytes_and_headers__4xx_json_errors(
    rig: Rig, path: str, raw: bytes, rid: str
) -> None:
    # Only what an HTTP client can send in a header: printable latin-1.
    safe_rid = "".join(c for c in rid if 0x20 <= ord(c) < 0x7F or 0xA0 <= ord(c) <= 0xFF)
    status, out, header_rid = rig.run(_post(rig.client, path, raw, safe_rid))
    _check_error(status, out, header_rid)
    if status >= 400:
        assert header_rid  # a fresh id when the client's is unusable


def test_oversize_body__413_and_process_keeps_serving(rig: Rig) -> None:
    big = json.dumps({"input_ids": [1] * 40_000}).encode()
    status, out, _ = rig.run(_post(rig.client, "/generate", big, "big-1"))
    assert status == 413 and out["error"]["request_id"] == "big-1"
    health = rig.run(rig.client.get("/health"))
    assert health.status == 200


def test_unknown_model_and_long_prompt__404_and_400_codes(rig: Rig) -> None:
    body = json.dumps({"model": "nope", "prompt": "x"}).encode()
    status, out, _ = rig.run(_post(rig.client, "/v1/completions", body, "m-1"))
    assert status == 404 and out["error"]["code"] == "model_not_found"
    body = json.dumps({"model": MODEL, "prompt": "x" * 600}).encode()
    status, out, _ = rig.run(_post(rig.client, "/v1/completions", body, "m-2"))
    assert status == 400 and out["error"]["code"] == "context_length_exceeded"


def test_unknown_path_and_explain__json_404(rig: Rig) -> None:
    r = rig.run(rig.client.get("/nope", headers={"X-Request-Id": "p-1"}))
    assert r.status == 404 and rig.run(r.json())["error"]["request_id"] == "p-1"
    r = rig.run(rig.client.get("/debug/explain/never-seen"))
    assert r.status == 404 and rig.run(r.json())["error"]["code"] == "decision_not_found"


def test_streaming_generate__bytes_passed_through_and_explained(rig: Rig) -> None:
    body = json.dumps({"text": "hello", "stream": True}).encode()
    status, out, _ = rig.run(_post(rig.client, "/generate", body, "s-1"))
    assert status == 200 and out.endswith(b"data: [DONE]\n\n") and out.count(b"data: ") == 3
    r = rig.run(rig.client.get("/debug/explain/s-1"))
    got = rig.run(r.json())
    assert got["reused_tokens"] == 0 and got["served_by"] in (0, 1)
    assert {"wan_ms", "queue_ms", "prefill_ms", "reload_ms", "belief"} <= set(got["candidates"][0])


def test_metrics__prometheus_text_with_decisions_and_beliefs(rig: Rig) -> None:
    rig.run(_post(rig.client, "/generate", json.dumps({"text": "hi"}).encode(), "mt-1"))
    r = rig.run(rig.client.get("/metrics"))
    text = rig.run(r.text())
    assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    got = {(s.name, tuple(s.labels.items())) for f in text_string_to_metric_families(text)
           for s in f.samples}  # fmt: skip
    assert ("kvc_edge_decisions_total", ()) in got
    assert ("kvc_edge_belief", (("worker", "1"),)) in got
    # no patch applied yet: unknown staleness is absent, never NaN or inf (scrapers drop those)
    assert "kvc_edge_view_staleness_ms" not in {n for n, _ in got}
    assert all(math.isfinite(s.value) for f in text_string_to_metric_families(text)
               for s in f.samples)  # fmt: skip
    svc = rig.edge.service
    svc.on_local_loads(np.array([0], np.int64), np.array([3.0]), svc.clock_ms())
    svc.view_applied_ms = svc.clock_ms()
    text = rig.run(rig.run(rig.client.get("/metrics")).text())
    got = {(s.name, tuple(s.labels.items())) for f in text_string_to_metric_families(text)
           for s in f.samples}  # fmt: skip
    assert ("kvc_edge_queue_staleness_ms", (("worker", "0"),)) in got
    assert ("kvc_edge_view_staleness_ms", ()) in got
