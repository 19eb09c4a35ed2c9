"""Open-loop load generator: replay a workload against the regions' edges, measure per request.

Owns turning a simulator ``Workload`` (arrival times, origin regions, prompts as token ids, output
lengths) into real HTTP requests — SGLang ``POST /generate`` with ``input_ids`` and ``stream``
on, sent to the edge of the request's origin region at its (time-scaled) arrival instant — and
recording what came back: time to the first streamed chunk (TTFT), time to the last (end to
end), the worker that served it (``X-KVC-Worker``), ``meta_info.cached_tokens`` and output
tokens. Open loop: a slow response never delays later arrivals (Poisson arrivals stay Poisson).
Must not start processes (``e2e.cluster``) or summarise (``e2e.report``).

Time scale ``s``: the emulated workers sleep ``s ×`` model time and the edges' WAN delay is scaled
the same, so wall = ``s`` × model. Arrivals are sent at ``s × arrival_ms`` and every latency is
divided by ``s`` before it is recorded: results are in model milliseconds (RTX 5090 at 0.085
ms/token, the paper's WAN), independent of the scale chosen to fit the demo's wall time.

Payloads are encoded before the clock starts, so JSON work does not delay arrivals.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import aiohttp
import numpy as np
from numpy.typing import NDArray

from sim.workloads.workload import Workload

WORKER_HEADER = "X-KVC-Worker"


@dataclass(frozen=True, slots=True)
class Results:
    """Per-request outcome, as arrays (model ms; -1 where not applicable)."""

    origin: NDArray[np.int64]
    arrival_ms: NDArray[np.float64]
    """Arrival instant, model ms after the first arrival."""
    prompt_tokens: NDArray[np.int64]
    ttft_ms: NDArray[np.float64]
    e2e_ms: NDArray[np.float64]
    worker: NDArray[np.int64]
    cached_tokens: NDArray[np.int64]
    output_tokens: NDArray[np.int64]
    status: NDArray[np.int64]
    """HTTP status; 0: no response (connection error or timeout)."""
    span_ms: float
    """Model time from the first arrival to the last completion."""
    errors: tuple[str, ...]
    """First few error messages, for the report."""

    @property
    def ok(self) -> NDArray[np.bool_]:
        return np.asarray((self.status == 200) & (self.ttft_ms >= 0), dtype=np.bool_)


def _payload(tokens: NDArray[np.int32], max_new: int) -> bytes:
    # No body "rid": the request id goes in X-Request-Id, so the edge forwards these bytes as
    # they are (a body rid is replaced by the edge's own id, which re-encodes the body).
    body = {
        "input_ids": tokens.tolist(),
        "sampling_params": {"max_new_tokens": max_new, "ignore_eos": True},
        "stream": True,
    }
    return json.dumps(body, separators=(",", ":")).encode()


class LoadGenerator:
    """Replays one workload against ``edge_urls[origin region]``."""

    def __init__(
        self,
        workload: Workload,
        edge_urls: Sequence[str],
        *,
        time_scale: float = 1.0,
        max_output_tokens: int = 128,
        timeout_s: float = 120.0,
        run_id: str = "run",
        bodies: Sequence[bytes] | None = None,
    ) -> None:
        """``bodies``: the request bodies already encoded (``payloads()`` of an equal generator):
        the demo encodes a run's requests once for every scheme."""
        if time_scale <= 0:
            raise ValueError(f"time_scale: expected > 0, got {time_scale}")
        if len(edge_urls) < workload.n_regions_used:
            raise ValueError(
                f"edge_urls: expected one per region ({workload.n_regions_used}), got "
                f"{len(edge_urls)}"
            )
        self.workload = workload
        self.edge_urls = [u.rstrip("/") for u in edge_urls]
        self.scale = float(time_scale)
        self.max_out = int(max_output_tokens)
        self.timeout_s = float(timeout_s)
        self.run_id = run_id
        if bodies is not None and len(bodies) != len(workload):
            raise ValueError(f"bodies: expected {len(workload)}, got {len(bodies)}")
        self.bodies = bodies

    def payloads(self) -> list[bytes]:
        wl = self.workload
        flat, offsets = wl.tokens_batch(0, len(wl))
        out = []
        for i in range(len(wl)):
            max_new = int(min(max(int(wl.output_len[i]), 1), self.max_out))
            out.append(_payload(flat[offsets[i] : offsets[i + 1]], max_new))
        return out

    async def run(self, on_done: Callable[[int], None] | None = None) -> Results:
        """Send every request at its arrival instant; return when all have finished."""
        wl = self.workload
        n = len(wl)
        bodies = self.payloads() if self.bodies is None else self.bodies
        ttft = np.full(n, -1.0)
        e2e = np.full(n, -1.0)
        worker = np.full(n, -1, np.int64)
        cached = np.full(n, -1, np.int64)
        produced = np.zeros(n, np.int64)
        status = np.zeros(n, np.int64)
        errors: list[str] = []
        arrivals = (wl.arrival_ms - wl.arrival_ms[0]) * self.scale / 1000.0 if n else wl.arrival_ms
        conn = aiohttp.TCPConnector(limit=0, force_close=False)
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        done_count = 0

        async def one(i: int, session: aiohttp.ClientSession, t0: float) -> None:
            nonlocal done_count
            url = self.edge_urls[int(wl.origin_region[i])] + "/generate"
            sent = time.perf_counter()
            try:
                hdrs = {"Content-Type": "application/json", "X-Request-Id": f"{self.run_id}-{i}"}
                async with session.post(url, data=bodies[i], headers=hdrs) as r:
                    status[i] = r.status
                    if r.status != 200:
                        if len(errors) < 10:
                            errors.append(f"{r.status}: {(await r.text())[:200]}")
                        return
                    worker[i] = int(r.headers.get(WORKER_HEADER, "-1"))
                    last: dict[str, object] | None = None
                    async for line in r.content:
                        if not line.startswith(b"data:"):
                            continue
                        data = line[5:].strip()
                        if data == b"[DONE]":
                            break
                        if ttft[i] < 0:
                            ttft[i] = (time.perf_counter() - sent) * 1000.0 / self.scale
                        last = json.loads(data)
                    e2e[i] = (time.perf_counter() - sent) * 1000.0 / self.scale
                    meta = last.get("meta_info") if isinstance(last, dict) else None
                    if isinstance(meta, dict):
                        cached[i] = int(meta.get("cached_tokens") or 0)
                        produced[i] = int(meta.get("completion_tokens") or 0)
            except (TimeoutError, aiohttp.ClientError, ValueError) as exc:
                status[i] = 0
                if len(errors) < 10:
                    errors.append(f"request {i}: {type(exc).__name__}: {exc}"[:200])
            finally:
                done_count += 1
                if on_done is not None:
                    on_done(done_count)

        async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:
            t0 = time.perf_counter()
            tasks = []
            for i in range(n):
                delay = float(arrivals[i]) - (time.perf_counter() - t0)
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(one(i, session, t0)))
            await asyncio.gather(*tasks)
            span_ms = (time.perf_counter() - t0) * 1000.0 / self.scale
        return Results(
            origin=wl.origin_region.copy(),
            arrival_ms=np.asarray(wl.arrival_ms - wl.arrival_ms[0] if n else wl.arrival_ms, float),
            prompt_tokens=wl.prompt_len.copy(),
            ttft_ms=ttft,
            e2e_ms=e2e,
            worker=worker,
            cached_tokens=cached,
            output_tokens=produced,
            status=status,
            span_ms=span_ms,
            errors=tuple(errors),
        )
