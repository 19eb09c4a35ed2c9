"""Reader of Mooncake-format request traces (JSONL) into a ``Workload`` (paper Appendix D).

Owns the trace format below, its validation (``TraceFormatError`` names the line), the session
rule that places requests in regions, and nothing else. Must not alter prefix sharing: block ids
are the trace's hash ids, unchanged.

Format, one JSON object per line (Mooncake FAST'25 release, ``conversation_trace.jsonl``, and
the variants other producers write)::

    {"timestamp": <ms from trace start, number >= 0 | Unix time in ns as a string of digits>,
     "input_length": <prompt tokens, int >= 1>,
     "output_length": <tokens to decode, int >= 0>,
     "hash_ids": [<block id, int >= 0>, ...]}     # ideally ceil(input_length / block_size) ids

``hash_ids[i]`` names the prefix up to and including block i (blocks of ``block_size`` tokens,
512 in Mooncake's releases). Nanosecond timestamps (one file uses one kind) are rebased to the
first request. Too few or too many ids, and ids that are not prefix-closed, are repaired as
``sim.workloads.trace_ids`` says, and counted in ``Workload.notes``. Lines holding only
whitespace are ignored; any other malformed line raises ``TraceFormatError`` with its 1-based
line number. Timestamps need not be sorted: requests are sorted by timestamp (stable, so file
order breaks ties).

Sessions and regions (the trace carries no location). In arrival order, a request's *reused
depth* is the length of the leading run of its (canonical) ids that occurred in earlier
requests, and its *candidate* is the request that first carried the deepest of them. The request
continues the candidate's session, and inherits its region (transitively, its root's), when it
is longer than the candidate and reuses every full block of the candidate's prompt: it extends
that earlier prompt, as a later turn of a conversation extends the turns before it (the
candidate's partial last block is excluded: in the follow-up it is full, so its id differs).
Otherwise it is a *root*: it starts a session and draws a region with probability proportional
to ``region_weights`` (population, Appendix D; ``None`` means uniform). The rule has no
constant: sharing a system prompt (block 0 of every request in the conversation trace), however
long, does not make two conversations one, whatever the block size.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from kvcompass.errors import InvalidInputError
from sim.workloads.regions import assign_regions
from sim.workloads.sampling import region_probabilities
from sim.workloads.trace_ids import normalise
from sim.workloads.workload import Kind, Workload

_FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")


class TraceFormatError(InvalidInputError):
    """A trace line is not valid JSON or does not match the trace format."""


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


class _Nanos(int):
    """A timestamp given as Unix nanoseconds (rebased to the trace's first request)."""


def _parse_line(text: str, where: str) -> tuple[float | int, int, int, list[int]]:
    try:
        rec = json.loads(text)
    except json.JSONDecodeError as e:
        raise TraceFormatError(
            f"{where}: expected a JSON object, got invalid JSON ({e.msg} at column {e.colno})"
        ) from None
    if not isinstance(rec, dict):
        raise TraceFormatError(f"{where}: expected a JSON object, got {type(rec).__name__}")
    missing = [f for f in _FIELDS if f not in rec]
    if missing:
        raise TraceFormatError(f"{where}: expected fields {list(_FIELDS)}, missing {missing}")
    ts, inp, out, ids = (rec[f] for f in _FIELDS)
    if isinstance(ts, str) and ts.isascii() and ts.isdigit():
        ts = _Nanos(int(ts))
    elif not (
        isinstance(ts, int | float) and not isinstance(ts, bool) and math.isfinite(ts) and ts >= 0
    ):
        raise TraceFormatError(
            f"{where}: timestamp: expected a finite number >= 0 (ms) or a string of digits "
            f"(Unix ns), got {ts!r}"
        )
    if not _is_int(inp) or inp < 1:
        raise TraceFormatError(f"{where}: input_length: expected an int >= 1, got {inp!r}")
    if not _is_int(out) or out < 0:
        raise TraceFormatError(f"{where}: output_length: expected an int >= 0, got {out!r}")
    if not isinstance(ids, list) or not all(_is_int(h) and h >= 0 for h in ids):
        raise TraceFormatError(
            f"{where}: hash_ids: expected a list of ints >= 0, got {str(ids)[:80]}"
        )
    return ts, inp, out, ids


def read_mooncake(
    path: str | Path,
    *,
    block_size: int = 512,
    region_weights: NDArray[np.float64] | None = None,
    n_regions: int,
    rng: np.random.Generator,
    limit: int | None = None,
    time_scale: float = 1.0,
) -> Workload:
    """Read a Mooncake-format JSONL trace (see module docstring) into a ``Workload``.

    ``limit`` keeps the first ``limit`` requests of the file (before sorting). ``time_scale``
    multiplies every timestamp: 0.5 replays the trace in half the time, at twice the rate.
    Kind codes: ``Kind.TRACE_ROOT`` and ``Kind.TRACE_FOLLOWUP``; ``tenant`` is -1.
    """
    if not _is_int(block_size) or block_size < 1:
        raise InvalidInputError(f"block_size: expected an int >= 1, got {block_size!r}")
    if limit is not None and (not _is_int(limit) or limit < 0):
        raise InvalidInputError(f"limit: expected None or an int >= 0, got {limit!r}")
    if not (isinstance(time_scale, int | float) and math.isfinite(time_scale) and time_scale > 0):
        raise InvalidInputError(f"time_scale: expected a finite number > 0, got {time_scale!r}")
    probs = region_probabilities(n_regions, region_weights)
    ts_l: list[float | int] = []
    inp_l: list[int] = []
    out_l: list[int] = []
    rows: list[list[int]] = []
    nanos: bool | None = None
    with open(path, encoding="utf-8") as f:
        for lineno, text in enumerate(f, start=1):
            if limit is not None and len(ts_l) >= limit:
                break
            if not text.strip():
                continue
            where = f"{path}:{lineno}"
            ts, inp, out, ids = _parse_line(text, where)
            is_ns = isinstance(ts, _Nanos)
            if nanos is not None and is_ns != nanos:
                raise TraceFormatError(
                    f"{where}: timestamp: expected {'Unix ns strings' if nanos else 'ms numbers'}"
                    f" like the lines before, got {ts!r}"
                )
            nanos = is_ns
            ts_l.append(ts)
            inp_l.append(inp)
            out_l.append(out)
            rows.append(ids)
    n = len(ts_l)
    if nanos and n:
        t0 = min(int(t) for t in ts_l)
        times = np.asarray([(int(t) - t0) / 1e6 for t in ts_l], dtype=np.float64)
    else:
        times = np.asarray(ts_l, dtype=np.float64)
    order = np.argsort(times, kind="stable")
    prompt = np.asarray(inp_l, dtype=np.int64)[order]
    need = (-(-prompt // block_size)).tolist()
    block_ids, offsets, report = normalise([rows[i] for i in order.tolist()], need)
    region, is_root = _sessions(block_ids, offsets, prompt, block_size, probs, rng)
    notes = report.notes(block_size)
    if nanos:
        notes = ("timestamps are Unix ns strings, rebased to the first request", *notes)
    return Workload(
        name="mooncake",
        block_tokens=int(block_size),
        arrival_ms=times[order] * float(time_scale),
        origin_region=region,
        prompt_len=prompt,
        output_len=np.asarray(out_l, dtype=np.int64)[order],
        block_ids=block_ids,
        block_offsets=offsets,
        tenant=np.full(n, -1, dtype=np.int32),
        kind=np.where(is_root, Kind.TRACE_ROOT, Kind.TRACE_FOLLOWUP).astype(np.int8),
        notes=notes,
    )


def _sessions(
    block_ids: NDArray[np.int64],
    offsets: NDArray[np.int64],
    prompt: NDArray[np.int64],
    block_size: int,
    probs: NDArray[np.float64],
    rng: np.random.Generator,
) -> tuple[NDArray[np.int64], NDArray[np.bool_]]:
    """Regions and root flags of arrival-ordered requests by the session rule (module doc)."""
    n = offsets.shape[0] - 1
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
    counts = np.diff(offsets)
    req = np.repeat(np.arange(n, dtype=np.int64), counts)
    pos = np.arange(block_ids.shape[0], dtype=np.int64) - offsets[:-1][req]
    uniq, first = np.unique(block_ids, return_index=True)
    is_first = np.zeros(block_ids.shape[0], dtype=bool)
    is_first[first] = True
    # Reused depth = position of the first never-seen block (or the row length).
    cut = np.where(is_first, pos, counts[req])
    depth = np.minimum.reduceat(cut, offsets[:-1])
    deepest = block_ids[offsets[:-1] + np.maximum(depth, 1) - 1]
    candidate = req[first[np.searchsorted(uniq, deepest)]]
    extends = (depth >= prompt[candidate] // block_size) & (prompt > prompt[candidate])
    is_root = (depth < 1) | (candidate == np.arange(n)) | ~extends
    parent = np.where(is_root, np.arange(n), candidate)
    while True:  # pointer jumping: every request to its session root
        nxt = parent[parent]
        if np.array_equal(nxt, parent):
            break
        parent = nxt
    region = np.zeros(n, dtype=np.int64)
    roots = np.flatnonzero(is_root)
    region[roots] = assign_regions(roots.shape[0], probs, rng)
    return region[parent], is_root
