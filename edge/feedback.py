"""What a worker's response tells the edge: reused tokens, and the piggybacked queue vector.

Owns reading the reused-prefix count out of SGLang and OpenAI response objects (whole bodies or
SSE events), splitting an SSE byte stream into events, and the queue-vector response header
(encode on the serving side, decode on the requesting side). Must not touch the router: the
service folds what this module extracts into ``Router.on_response``.

Reused tokens, first found wins:
``meta_info.cached_tokens`` (SGLang ``/generate``); ``meta_info.cached_tokens_details``
``{device, host}`` summed when ``cached_tokens`` is absent; ``usage.prompt_tokens_details
.cached_tokens`` (OpenAI shapes). A response naming none of them gives ``None`` (no feedback).

Queue-vector header (added by the serving region's EDGE to a relayed response — the worker and
its sidecar are not on the HTTP path, the edge is and already polls its workers' loads)::

    X-KVC-Queue-Vector: v1;r=<region id>;q=<worker id>:<queue ms>,<worker id>:<queue ms>,...

ASCII, ids as decimal ints, queue ms as non-negative decimals with at most 3 decimals, at most
``MAX_VECTOR_WORKERS`` entries (a few dozen bytes for a 16-worker region, paper §3.4).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

QUEUE_HEADER = "X-KVC-Queue-Vector"
RELAY_HEADER = "X-KVC-Forward-To"
WORKER_HEADER = "X-KVC-Worker"
"""Response header naming the global id of the worker that served the request (for clients
that account cross-region reuse, e.g. the end-to-end demo)."""
"""Set by an edge relaying a request to a peer edge: the global id of the worker to serve it."""
MAX_VECTOR_WORKERS = 4096


def reused_tokens(obj: Any) -> int | None:
    """Reused prefix tokens reported in one response object (body or stream chunk)."""
    if not isinstance(obj, dict):
        return None
    meta = obj.get("meta_info")
    if isinstance(meta, dict):
        n = meta.get("cached_tokens")
        if type(n) is int and n >= 0:
            return n
        det = meta.get("cached_tokens_details")
        if isinstance(det, dict):
            parts = [v for v in (det.get("device"), det.get("host")) if type(v) is int and v >= 0]
            if parts:
                return sum(parts)
    usage = obj.get("usage")
    if isinstance(usage, dict):
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict):
            n = details.get("cached_tokens")
            if type(n) is int and n >= 0:
                return n
    return None


_CACHED = re.compile(rb'"cached_tokens"\s*:\s*(\d{1,12})\s*[,}]')


def reused_from_json(raw: bytes) -> int | None:
    """``reused_tokens`` of a whole JSON body (None if it is not JSON or names no count).

    Fast path: the first ``"cached_tokens": <int>`` member, found by a regex over the bytes
    (a JSON string cannot contain an unescaped quote, so this only matches a member name). A body
    of any size costs microseconds; only bodies without it are parsed in full.
    """
    m = _CACHED.search(raw)
    if m is not None:
        return int(m.group(1))
    if b"cached_tokens" not in raw:
        return None
    try:
        return reused_tokens(json.loads(raw))
    except (ValueError, RecursionError):
        return None


class SSEScanner:
    """Splits an SSE byte stream into ``data:`` payloads, however the network chunks it."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, data: bytes) -> list[bytes]:
        buf = self._buf + data
        *events, self._buf = buf.split(b"\n\n")
        out = []
        for ev in events:
            for line in ev.split(b"\n"):
                if line.startswith(b"data:"):
                    out.append(line[5:].strip())
        return out


def encode_queue_header(region: int, worker_ids: Sequence[int], queue_ms: Sequence[float]) -> str:
    """The header value for ``region``'s vector."""
    pairs = ",".join(
        f"{int(w)}:{max(float(q), 0.0):.3f}" for w, q in zip(worker_ids, queue_ms, strict=True)
    )
    return f"v1;r={int(region)};q={pairs}"


def decode_queue_header(
    value: str, n_regions: int, n_workers: int
) -> tuple[int, np.ndarray, np.ndarray] | None:
    """(region, worker ids, queue ms) or None if the value is malformed or out of range."""
    parts = value.split(";")
    if len(parts) != 3 or parts[0] != "v1" or not parts[1].startswith("r="):
        return None
    if not parts[2].startswith("q="):
        return None
    try:
        region = int(parts[1][2:])
        items = [p.split(":") for p in parts[2][2:].split(",")] if parts[2][2:] else []
        if len(items) > MAX_VECTOR_WORKERS or any(len(it) != 2 for it in items):
            return None
        ids = np.array([int(a) for a, _ in items], dtype=np.int64)
        qs = np.array([float(b) for _, b in items], dtype=np.float64)
    except ValueError:
        return None
    if not 0 <= region < n_regions or not ids.size:
        return None
    if ids.min() < 0 or ids.max() >= n_workers or len(set(ids.tolist())) != ids.size:
        return None
    if not all(math.isfinite(q) and q >= 0 for q in qs.tolist()):
        return None
    return region, ids, qs
