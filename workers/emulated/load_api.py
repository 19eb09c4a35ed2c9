"""The emulated worker's load routes in SGLang's shapes: ``GET /v1/loads`` (and ``GET /get_load``).

``/v1/loads`` (what the sidecar's load reporter and the edge's local poll read): SGLang 0.5.23's
``sglang/srt/entrypoints/v1_loads.py`` (``get_loads``): ``{"timestamp": ISO-8601, "version",
"accelerator", "num_accelerators", "loads": [one entry per DP rank]}``; an entry is
``LoadSnapshot.to_dict()`` (``sglang/srt/managers/load_snapshot.py``) as
``SchedulerLoadInquirer.get_loads`` fills it (``managers/scheduler_components/
load_inquirer.py``): the core scalars, then the ``disaggregation`` and ``queues`` sections
(``memory`` needs a GPU and is left out, as SGLang leaves it out when it cannot measure it).

- ``num_used_tokens`` / ``token_usage``: ``Engine.kv_used_tokens`` — what running requests hold
  (``PoolStats.get_kv_token_stats``: capacity − (available + evictable)); an idle worker full of
  evictable cache reports 0 and 0.0, not 1.0. ``token_usage`` rounded to 4 places, as SGLang.
- ``num_total_tokens``: used + the waiting requests' prompt lengths; ``num_active_tokens`` equal
  (no disaggregation). ``cache_hit_rate``: cached ÷ prompt tokens over the worker's life.
- ``num_waiting_uncached_tokens``, ``total_prefill_busy_us``, ``total_prefill_uncached_tokens``:
  what the queue estimate reads (``kvcompass/router/load_report.py``).

``/get_load``: what ``sglang-router`` 0.3.2's ``power_of_two`` policy polls (its load monitor
GETs ``/get_load`` and reads ``num_tokens``). SGLang 0.5.23 no longer serves it (no such route
in its ``http_server.py``, and no flag brings it back), so by default this answers 404 too, and
the router gets from ours what it gets from a real 0.5.23: its load monitor (every 30 s) records
each 404 as load -1, and ``power_of_two``, comparing -1 with -1, takes either of its two
candidates, busy or not (before its first poll that finds the workers it compares its own
in-flight counts, ``policies/power_of_two.rs``; later router releases skip the -1s and always
do). ``EmulatedConfig.enable_get_load`` (``--enable-get-load``, our
flag) serves the legacy shim of the last releases that had the route, over ``/v1/loads``:
``[{"dp_rank", "num_reqs": running + waiting, "num_waiting_reqs", "num_tokens":
num_total_tokens, "num_pending_tokens": num_total_tokens − num_used_tokens, "ts_tic"}]``.
Must not: hold engine state (``engine``).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from workers.emulated.engine import Engine
from workers.emulated.http_common import ENGINE, INFO

MAX_RUNNING_REQUESTS = 4096
"""SGLang's ``--max-running-requests`` when not set is derived from the memory pool; the emulated
engine has no such bound (decode is unbatched sleeping), so it reports this constant."""


def snapshot(engine: Engine) -> dict[str, Any]:
    """One ``loads[]`` entry (DP rank 0) of the engine now."""
    ld, cache = engine.loads, engine.cache
    cap = cache.vram_pages * cache.page_size
    used = engine.kv_used_tokens()
    total = used + engine.waiting_prompt_tokens()
    hit = ld.prefill_cached_tokens / ld.prefill_prompt_tokens if ld.prefill_prompt_tokens else 0.0
    return {
        "timestamp": time.time(),
        "dp_rank": 0,
        "num_running_reqs": ld.running,
        "num_waiting_reqs": ld.waiting,
        "num_waiting_uncached_tokens": engine.waiting_uncached_tokens(),
        "num_used_tokens": used,
        "num_total_tokens": total,
        "num_active_tokens": total,
        "num_prealloc_ready_tokens": 0,
        "max_total_num_tokens": cap,
        "max_running_requests": MAX_RUNNING_REQUESTS,
        "token_usage": round(used / cap, 4) if cap else 0.0,
        "gen_throughput": 0.0,
        "cache_hit_rate": round(hit, 4),
        "utilization": 0.0,
        "total_prefill_uncached_tokens": ld.prefill_uncached_tokens,
        "total_prefill_busy_us": ld.prefill_busy_us,
        "decode_moments": None,
        "disaggregation": {"mode": "null", "prefill_bootstrap_queue_reqs": 0,
                           "prefill_inflight_queue_reqs": 0, "decode_prealloc_queue_reqs": 0,
                           "decode_transfer_queue_reqs": 0, "decode_retracted_queue_reqs": 0,
                           "kv_transfer_speed_gb_s": 0.0, "kv_transfer_latency_ms": 0.0},
        "queues": {"waiting": ld.waiting, "grammar": 0, "paused": 0, "retracted": 0,
                   "prealloc_ready": 0},
    }  # fmt: skip


async def loads(request: web.Request) -> web.Response:
    return web.json_response(
        {
            "timestamp": datetime.now(UTC).isoformat(),
            "version": request.app[INFO]["version"],
            "accelerator": None,
            "num_accelerators": 1,
            "loads": [snapshot(request.app[ENGINE])],
        }
    )


async def get_load(request: web.Request) -> web.Response:
    s = snapshot(request.app[ENGINE])
    entry = {
        "dp_rank": s["dp_rank"],
        "num_reqs": s["num_running_reqs"] + s["num_waiting_reqs"],
        "num_waiting_reqs": s["num_waiting_reqs"],
        "num_tokens": s["num_total_tokens"],
        "num_pending_tokens": s["num_total_tokens"] - s["num_used_tokens"],
        "ts_tic": time.perf_counter(),
    }
    return web.json_response([entry])
