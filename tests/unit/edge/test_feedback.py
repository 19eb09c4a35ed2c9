"""Reused-token extraction, the SSE splitter and the queue-vector header (edge.feedback)."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from edge.feedback import (
    SSEScanner,
    decode_queue_header,
    encode_queue_header,
    reused_from_json,
    reused_tokens,
)


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
        st.integers(0, 13), st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=14
    ),
)
def test_queue_header__round_trips_to_a_millisecond_thousandth(
    region: int, queues: dict[int, float]
) -> None:
    ids, qs = list(queues), list(queues.values())
    got = decode_queue_header(encode_queue_header(region, ids, qs), 3, 14)
    assert got is not None
    r, gids, gqs = got
    assert r == region and gids.tolist() == ids
    assert np.allclose(gqs, qs, atol=6e-4)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80))
def test_queue_header__garbage_is_refused_never_raises(value: str) -> None:
    got = decode_queue_header(value, 3, 14)
    assert got is None or (0 <= got[0] < 3 and got[1].size > 0)


def test_queue_header__out_of_range_ids_and_negative_queues_refused() -> None:
    assert decode_queue_header("v1;r=1;q=99:1.0", 3, 14) is None
    assert decode_queue_header("v1;r=1;q=2:-1.0", 3, 14) is None
    assert decode_queue_header("v1;r=7;q=2:1.0", 3, 14) is None
    assert decode_queue_header("v1;r=1;q=2:1.0,2:3.0", 3, 14) is None
    assert decode_queue_header("v1;r=1;q=2:nan", 3, 14) is None


def test_reused_from_json__fast_path_and_full_parse_agree() -> None:
    body = {"text": 'says "cached_tokens": 99', "meta_info": {"cached_tokens": 7, "x": 1}}
    assert reused_from_json(json.dumps(body).encode()) == 7
    details = {"meta_info": {"cached_tokens_details": {"device": 3, "host": 4}}}
    assert reused_from_json(json.dumps(details).encode()) == 7
    assert reused_from_json(b'{"text": "no count"}') is None
