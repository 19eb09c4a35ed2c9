"""What a worker's response tells the edge: reused tokens, and the piggybacked queue vector.

Owns reading the reused-prefix count out of SGLang and OpenAI response objects (whole bodies or
SSE events), splitting an SSE byte stream into events, and the queue-vector response header
(encode on the serving side, decode on the requesting side). Must not touch the decider: the
service folds what this module extracts into it.

Reused tokens, first found wins:
``meta_info.cached_tokens`` (SGLang ``/generate``); ``meta_info.cached_tokens_details``
``{device, host}`` summed when ``cached_tokens`` is absent; ``usage.prompt_tokens_details
.cached_tokens`` (OpenAI shapes). A response naming none of them gives ``None`` (no feedback).

Queue-vector header (added by the serving region's EDGE to a relayed response or a refusal —
the worker and its sidecar are not on the HTTP path, the edge is and books its workers): the
decider's ``QueueVector`` (v3 fields, architecture §6)::

    X-KVC-Queue-Vector: v2;r=<region>;t=<taken ms, sender's clock>;q=<worker>:<queue ms>,...;
                        f=<worker>:<arrive ms>:<work ms>,...

ASCII, ids as decimal ints, times with at most 3 decimals, at most ``MAX_VECTOR_WORKERS``
entries (a few dozen bytes for a 16-worker region, paper §3.4); ``f`` (the sender's forwards not
landed) may be empty. A v1 value (``v1;r=..;q=..``, no time, no forwards) still reads.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import numpy as np

from kvcompass.decider import QueueVector

QUEUE_HEADER = "X-KVC-Queue-Vector"
RELAY_HEADER = "X-KVC-Forward-To"
WORKER_HEADER = "X-KVC-Worker"
"""Response header naming the global id of the worker that served the request (for clients
that account cross-region reuse, e.g. the end-to-end demo)."""
"""Set by an edge relaying a request to a peer edge: the global id of the worker to serve it."""
ORIGIN_HEADER = "X-KVC-Origin-Region"
"""Set with ``X-KVC-Forward-To``: the region index of the relaying edge (its piggyback's
destination)."""
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


def encode_queue_header(vec: QueueVector) -> str:
    """The header value for ``vec`` (v2: reading time and in-flight forwards included)."""
    pairs = ",".join(
        f"{int(w)}:{max(float(q), 0.0):.3f}"
        for w, q in zip(vec.worker_ids.tolist(), vec.queue_ms.tolist(), strict=True)
    )
    flying = ",".join(f"{int(w)}:{a:.3f}:{max(k, 0.0):.3f}" for w, a, k in vec.in_flight)
    return f"v2;r={int(vec.region)};t={vec.taken_ms:.3f};q={pairs};f={flying}"


def _fields(value: str) -> dict[str, str] | None:
    parts = value.split(";")
    out = {}
    for p in parts[1:]:
        k, sep, v = p.partition("=")
        if not sep or k in out:
            return None
        out[k] = v
    return out


def decode_queue_header(
    value: str, n_regions: int, n_workers: int, now_ms: float
) -> QueueVector | None:
    """The vector in a header value, or None if it is malformed or out of range. A v1 value
    (no reading time, no in-flight list) is taken as read at ``now_ms``."""
    version = value.split(";", 1)[0]
    fields = _fields(value) if version in ("v1", "v2") else None
    want = {"r", "q"} if version == "v1" else {"r", "t", "q", "f"}
    if fields is None or set(fields) != want:
        return None
    try:
        region = int(fields["r"])
        taken = float(fields["t"]) if "t" in fields else now_ms
        items = [p.split(":") for p in fields["q"].split(",")] if fields["q"] else []
        flying = [p.split(":") for p in fields["f"].split(",")] if fields.get("f") else []
        if len(items) + len(flying) > MAX_VECTOR_WORKERS:
            return None
        if any(len(it) != 2 for it in items) or any(len(it) != 3 for it in flying):
            return None
        ids = np.array([int(a) for a, _ in items], dtype=np.int64)
        qs = np.array([float(b) for _, b in items], dtype=np.float64)
        in_flight = tuple((int(w), float(a), float(k)) for w, a, k in flying)
    except ValueError:
        return None
    if not 0 <= region < n_regions or not math.isfinite(taken):
        return None
    if version == "v1" and not ids.size:
        return None
    every = ids.tolist() + [w for w, _, _ in in_flight]
    if any(not 0 <= w < n_workers for w in every) or len(set(ids.tolist())) != ids.size:
        return None
    times = qs.tolist() + [x for _, a, k in in_flight for x in (a, k)]
    if not all(math.isfinite(q) for q in times) or any(q < 0 for q in qs.tolist()):
        return None
    return QueueVector(region, taken, ids, qs, in_flight)
