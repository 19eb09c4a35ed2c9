"""A worker's expected queueing delay from its engine's load report (paper §3.4's Tq).

Owns the one estimate that the region's load reporter (``workers.load_reporter``, publishing the
queue vector other regions receive) and the edge's live local poll (``edge.loads``) both apply to
an SGLang ``GET /v1/loads`` body, so the two readings of a worker agree. Must not fetch the
report (the shells do) or keep history.

Estimate: a worker serves prefills one at a time, so a new request waits for the uncached tokens
queued ahead of it::

    queue_ms = num_waiting_uncached_tokens · β̂
    β̂ = total_prefill_busy_us / 1000 / total_prefill_uncached_tokens   (measured, cumulative)
        or the deployment region's prefill_ms_per_token before the first prefill

What SGLang counts in ``num_waiting_uncached_tokens`` (0.5.23, ``scheduler_components/
load_inquirer.py``): the uncached tokens of its waiting queue plus the unfinished chunks of the
prefill it is chunking (``chunked_req``); a prefill of a single chunk, and the last chunk of a
longer one, are not counted while they run, so the estimate leaves out up to one chunk
(``chunked_prefill_size``, 8192 tokens on an 80 GB GPU) of the running prefill. The simulator's
poll reports exactly these fields (``sim/engine/loads.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def queue_ms(load: Mapping[str, Any], fallback_ms_per_token: float) -> float:
    """Expected queueing delay of one ``loads[]`` entry (one DP rank), in ms, non-negative."""
    busy_us = float(load.get("total_prefill_busy_us") or 0)
    tokens = float(load.get("total_prefill_uncached_tokens") or 0)
    beta = busy_us / 1000.0 / tokens if tokens > 0 and busy_us > 0 else fallback_ms_per_token
    waiting = float(load.get("num_waiting_uncached_tokens") or 0)
    return max(waiting * beta, 0.0)


def worker_queue_ms(report: Mapping[str, Any], fallback_ms_per_token: float) -> float:
    """A ``/v1/loads`` body of one engine (all DP ranks of one worker): the busiest rank."""
    loads = report.get("loads") or []
    return max((queue_ms(x, fallback_ms_per_token) for x in loads), default=0.0)
