"""Fuzz every edge endpoint: random and mutated bodies, queries and methods (Hypothesis).

The completion endpoints' JSON fields are fuzzed in ``test_handlers``; here every route the edge
serves gets random bytes, valid bodies with bytes flipped, cut or inserted, random query strings
and the wrong method. Properties: never a 5xx; every error is the OpenAI error shape with the
request id echoed; ``/health`` still answers afterwards (the process keeps serving).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.edge.test_handlers import MODEL, Rig, _check_error
from tests.unit.edge.test_handlers import rig as handlers_rig  # noqa: F401 (a fixture)


@pytest.fixture(scope="module")
def rig(request: pytest.FixtureRequest) -> Rig:
    """``test_handlers``' edge with a fake worker, shared by this module's examples."""
    got: Rig = request.getfixturevalue("handlers_rig")
    return got


VALID = {
    "/generate": {"text": "hello there", "sampling_params": {"max_new_tokens": 4}},
    "/v1/completions": {"model": MODEL, "prompt": "hello", "max_tokens": 4},
    "/v1/chat/completions": {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
    "/debug/lookup": {"text": "hello there"},
    "/admin/scheme": {"scheme": "kvcompass"},
}
GETS = ["/health", "/metrics", "/v1/models", "/debug/lookup", "/debug/explain/x", "/admin/scheme"]


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, bytes]:
    path = draw(st.sampled_from(sorted(VALID)))
    b = bytearray(json.dumps(VALID[path]).encode())
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(b) - 1)) if b else 0
        how = draw(st.sampled_from(["flip", "cut", "insert"]))
        if how == "flip" and b:
            b[i] ^= 1 << draw(st.integers(0, 7))
        elif how == "cut":
            del b[i:]
        else:
            b[i:i] = draw(st.binary(min_size=1, max_size=6))
    return path, bytes(b)


FUZZ = settings(max_examples=120, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip


async def _send(rig: Rig, method: str, path: str, data: bytes | None, rid: str) -> tuple[int, Any]:
    r = await rig.client.request(method, path, data=data, headers={"X-Request-Id": rid})
    raw = await r.read()
    if r.status >= 400:
        body = json.loads(raw)
        _check_error(r.status, body, r.headers.get("X-Request-Id", ""))
        return r.status, body
    return r.status, raw


@FUZZ
@given(case=mutated() | st.tuples(st.sampled_from(sorted(VALID)), st.binary(max_size=200)))
def test_mutated_and_random_bodies__never_5xx_on_any_post(
    rig: Rig, case: tuple[str, bytes]
) -> None:
    path, data = case
    status, _ = rig.run(_send(rig, "POST", path, data, "fz-1"))
    assert status < 500
    assert rig.run(rig.client.get("/health")).status == 200


@FUZZ
@given(path=st.sampled_from(GETS), query=st.dictionaries(
    st.sampled_from(["text", "input_ids", "x", "scheme"]), st.text(max_size=30), max_size=3),
    method=st.sampled_from(["GET", "PUT", "DELETE", "PATCH"]))  # fmt: skip
def test_random_queries_and_methods__never_5xx_on_any_route(
    rig: Rig, path: str, query: dict[str, str], method: str
) -> None:
    async def go() -> int:
        r = await rig.client.request(method, path, params=query, headers={"X-Request-Id": "q"})
        raw = await r.read()
        if r.status >= 400:
            _check_error(r.status, json.loads(raw), r.headers.get("X-Request-Id", ""))
        return r.status

    assert rig.run(go()) < 500
