"""Reused-token extraction, the SSE splitter, the queue-vector header (edge.feedback) and the
relay shortlist header (edge.relay)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge.feedback import (
    SSEScanner,
    decode_queue_header,
    encode_queue_header,
    reused_from_json,
    reused_tokens,
)
from edge.relay import decode_shortlist, encode_shortlist
from kvcompass.decider import QueueVector, Shortlist


def test_reused_tokens__each_documented_shape() -> None:
    assert reused_tokens({"meta_info": {"cached_tokens": 96}}) == 96
    assert reused_tokens({"meta_info": {"cached_tokens_details": {"device": 64, "host": 32}}}) == 96
    usage = {"usage": {"prompt_tokens_details": {"cached_tokens": 48}}}
    assert reused_tokens(usage) == 48


def test_reused_tokens__absent_or_malformed_gives_none() -> None:
    assert reused_tokens({"meta_info": {"cached_tokens": -1}}) is None
    assert reused_tokens({"meta_info": {"cached_tokens": True}}) is None
    assert reused_tokens({"usage": None}) is None
    assert reused_tokens([1, 2]) is None
    assert reused_from_json(b"not json") is None


@settings(max_examples=100, deadline=None)
@given(
    events=st.lists(st.dictionaries(st.text(max_size=5), st.integers(), max_size=3), max_size=6),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8),
)
def test_sse_scanner__same_events_however_the_stream_is_chunked(
    events: list[dict[str, int]], cuts: list[int]
) -> None:
    stream = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    points = sorted({min(c, len(stream)) for c in cuts})
    pieces = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    sc = SSEScanner()
    got = [json.loads(p) for piece in pieces for p in sc.feed(piece)]
    assert got == events


@settings(max_examples=100, deadline=None)
@given(
    region=st.integers(0, 2),
    queues=st.dictionaries(
        st.integers(0, 13), st.floats(0, 1e6, allow_nan=False), min_size=0, max_size=14
    ),
    taken=st.floats(0, 2e12, allow_nan=False),
    flying=st.lists(
        st.tuples(st.integers(0, 13), st.floats(0, 2e12), st.floats(0, 1e5)), max_size=5
    ),
)
def test_queue_header__v2_round_trips_to_a_millisecond_thousandth(
    region: int, queues: dict[int, float], taken: float, flying: list[tuple[int, float, float]]
) -> None:
    ids, qs = list(queues), list(queues.values())
    vec = QueueVector(region, taken, np.array(ids, np.int64), np.array(qs), tuple(flying))
    got = decode_queue_header(encode_queue_header(vec), 3, 14, now_ms=5.0)
    assert got is not None
    assert got.region == region and got.worker_ids.tolist() == ids
    assert np.allclose(got.queue_ms, qs, atol=6e-4)
    assert got.taken_ms == pytest.approx(taken, abs=6e-4)
    assert len(got.in_flight) == len(flying)
    for (w, a, k), (gw, ga, gk) in zip(flying, got.in_flight, strict=True):
        assert gw == w and ga == pytest.approx(a, abs=6e-4) and gk == pytest.approx(k, abs=6e-4)


def test_queue_header__v1_still_reads_as_taken_now() -> None:
    got = decode_queue_header("v1;r=1;q=2:1.5,3:0.0", 3, 14, now_ms=42.0)
    assert got is not None and got.region == 1 and got.taken_ms == 42.0
    assert got.worker_ids.tolist() == [2, 3] and got.queue_ms.tolist() == [1.5, 0.0]
    assert got.in_flight == ()


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80))
def test_queue_header__garbage_is_refused_never_raises(value: str) -> None:
    got = decode_queue_header(value, 3, 14, 0.0)
    assert got is None or 0 <= got.region < 3


def test_queue_header__out_of_range_ids_and_negative_queues_refused() -> None:
    assert decode_queue_header("v1;r=1;q=99:1.0", 3, 14, 0.0) is None
    assert decode_queue_header("v1;r=1;q=2:-1.0", 3, 14, 0.0) is None
    assert decode_queue_header("v1;r=7;q=2:1.0", 3, 14, 0.0) is None
    assert decode_queue_header("v1;r=1;q=2:1.0,2:3.0", 3, 14, 0.0) is None
    assert decode_queue_header("v1;r=1;q=2:nan", 3, 14, 0.0) is None
    assert decode_queue_header("v2;r=1;t=inf;q=2:1.0;f=", 3, 14, 0.0) is None
    assert decode_queue_header("v2;r=1;t=5;q=2:1.0;f=99:1:1", 3, 14, 0.0) is None
    assert decode_queue_header("v2;r=1;t=5;q=2:1.0", 3, 14, 0.0) is None  # no f= field


@settings(max_examples=100, deadline=None)
@given(
    rows=st.lists(st.tuples(st.integers(0, 13), st.integers(0, 500), st.integers(0, 3)),
                  min_size=1, max_size=6, unique_by=lambda r: r[0]),
    lam=st.floats(0, 50, allow_nan=False),
    alt=st.one_of(st.just(float("inf")), st.floats(0, 1e6, allow_nan=False)),
    final=st.booleans(),
)  # fmt: skip
def test_shortlist_header__round_trips(
    rows: list[tuple[int, int, int]], lam: float, alt: float, final: bool
) -> None:
    ws, ms, ts = (tuple(c) for c in zip(*rows, strict=True))
    sl = Shortlist(0, 2, 500, ws, ms, ts, lam, alt, final)
    got = decode_shortlist(encode_shortlist(sl), 3, 14)
    assert got is not None
    assert (got.origin, got.region, got.prompt_tokens, got.final) == (0, 2, 500, final)
    assert (got.workers, got.matched_tokens, got.tiers) == (ws, ms, ts)
    assert got.lambda_price == pytest.approx(lam, rel=1e-5, abs=1e-9)
    assert got.alternative_ms == pytest.approx(alt, abs=6e-4)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=120))
def test_shortlist_header__garbage_is_refused_never_raises(value: str) -> None:
    got = decode_shortlist(value, 3, 14)
    assert got is None or got.workers


def test_shortlist_header__out_of_range_refused() -> None:
    ok = "v1;o=0;r=2;p=100;l=1;a=inf;z=0;w=3:64:0"
    assert decode_shortlist(ok, 3, 14) is not None
    assert decode_shortlist(ok.replace("r=2", "r=0"), 3, 14) is None  # relayed to itself
    assert decode_shortlist(ok.replace("w=3:64", "w=30:64"), 3, 14) is None
    assert decode_shortlist(ok.replace("w=3:64", "w=3:640"), 3, 14) is None  # > prompt
    assert decode_shortlist(ok.replace("l=1", "l=nan"), 3, 14) is None
    assert decode_shortlist(ok.replace("z=0", "z=2"), 3, 14) is None


def test_reused_from_json__fast_path_and_full_parse_agree() -> None:
    body = {"text": 'says "cached_tokens": 99', "meta_info": {"cached_tokens": 7, "x": 1}}
    assert reused_from_json(json.dumps(body).encode()) == 7
    details = {"meta_info": {"cached_tokens_details": {"device": 3, "host": 4}}}
    assert reused_from_json(json.dumps(details).encode()) == 7
    assert reused_from_json(b'{"text": "no count"}') is None
