"""The in-region load poll of every region's edge: the simulator's twin of ``edge/loads.py``.

Owns when each region's queue readings are taken, what they say, and when they reach that
region's edge. A real edge polls ``GET /v1/loads`` of its local workers, waits for every answer
(or the timeout), then sleeps one period before the next poll (polls never overlap). Here, per
region: the poll leaves at ``t``; every worker answers with its report at ``t + h`` (``h`` = the
deployment's in-region one-way hop); the answers are back at ``t + 2h``; the next poll leaves
at ``t + 2h + period``. The timeout (``kvcompass.router.config.load_poll_timeout_ms``, the
edge's) never fires here: a simulated worker always answers within ``2h``, far below it; it is
carried so schemes and the README state the same rule as the edge.

What a worker answers is what SGLang's ``/v1/loads`` gives (0.5.23,
``scheduler_components/load_inquirer.py::get_num_waiting_uncached_tokens``), and the reading is
the estimate the real edge and load reporter make of it (``kvcompass.router.load_report
.queue_ms``, the same function). ``num_waiting_uncached_tokens`` = the uncached tokens of the
requests waiting for their prefill (SGLang's prefix-matched branch: exact) plus, for a prefill
split into chunks of ``SimConfig.engine_chunk_tokens`` (SGLang's ``chunked_prefill_size``, 8192
on an 80 GB GPU), the tokens of the chunks not finished yet while it is SGLang's
``chunked_req`` — that is, until its last chunk starts; a prefill of one chunk, and the last
chunk of a longer one, are not in the count while they run. ``total_prefill_busy_us`` /
``total_prefill_uncached_tokens`` are cumulative over the prefills finished so far (β̂ = their
ratio, DRAM reloads included; the region's β before the first). The runner tells the poll what
each worker serves as it arrives (``admit``; the FIFO's start and finish are known then) and
the GPU time of each migration recompute (``admit_recompute``), on ``EngineReports``.

Readings go to every subscriber of the region (``subscribe``) and are kept as the region's
``last`` reading: the vector the region's load reporter broadcasts and its edge piggybacks on
cross-region responses. Must not route or know schemes; polls stop at the horizon (the last
arrival), after which no decision is made.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from kvcompass.router.config import load_poll_timeout_ms
from kvcompass.router.load_report import queue_ms
from sim.engine.loop import PRIO_DELIVERY, EventLoop
from sim.schemes.base import LoadReading


class _Served:
    """One worker's prefills: (start, finish, uncached tokens, GPU ms), FIFO order."""

    __slots__ = ("busy_ms", "jobs", "uncached")

    def __init__(self) -> None:
        self.jobs: deque[tuple[float, float, float, float]] = deque()
        self.busy_ms = 0.0
        self.uncached = 0.0

    def report(self, t: float, chunk: int) -> dict[str, float]:
        jobs = self.jobs
        while jobs and jobs[0][1] <= t:
            _, _, tokens, gpu = jobs.popleft()
            self.busy_ms += gpu
            self.uncached += tokens
        waiting = 0.0
        for start, finish, tokens, _ in reversed(jobs):
            if start <= t:  # running: its chunks not finished, unless it is in its last one
                n = math.ceil(tokens / chunk)
                done = int((t - start) / (finish - start) * n) if finish > start else n
                if done < n - 1:
                    waiting += tokens - done * chunk
                break
            waiting += tokens
        return {
            "num_waiting_uncached_tokens": waiting,
            "total_prefill_busy_us": self.busy_ms * 1000.0,
            "total_prefill_uncached_tokens": self.uncached,
        }


class Reports(Protocol):
    def report(self, worker: int, t: float) -> Mapping[str, float]: ...


class EngineReports:
    """What each simulated worker's ``/v1/loads`` says (implements ``Reports``)."""

    def __init__(self, beta_ms_per_token: NDArray[np.float64], chunk_tokens: int) -> None:
        """``chunk_tokens``: the engine's chunked prefill (``SimConfig.engine_chunk_tokens``)."""
        self._beta = np.asarray(beta_ms_per_token, dtype=np.float64).tolist()
        self._chunk = int(chunk_tokens)
        self._served = [_Served() for _ in self._beta]

    def admit(self, worker: int, start_ms: float, finish_ms: float, uncached_tokens: int) -> None:
        """A request reached ``worker``: its prefill runs from ``start_ms`` to ``finish_ms``."""
        self._served[worker].jobs.append(
            (start_ms, finish_ms, float(uncached_tokens), finish_ms - start_ms)
        )

    def admit_recompute(
        self, worker: int, start_ms: float, finish_ms: float, gpu_ms: float
    ) -> None:
        """A migration recomputes ``gpu_ms`` of prefill at ``worker`` (queued like a request)."""
        tokens = gpu_ms / self._beta[worker]
        self._served[worker].jobs.append((start_ms, finish_ms, tokens, gpu_ms))

    def report(self, worker: int, t: float) -> dict[str, float]:
        """``worker``'s ``loads[]`` entry at ``t`` (one DP rank)."""
        return self._served[worker].report(t, self._chunk)


class RegionLoadPoll:
    """One run's load polls, one cycle per region (implements ``schemes.base.LoadPoll``)."""

    def __init__(
        self,
        reports: Reports,
        beta_ms_per_token: NDArray[np.float64],
        workers_of: list[NDArray[np.int64]],
        hop_ms: float,
        period_ms: float,
        loop: EventLoop,
        horizon_ms: float,
    ) -> None:
        """``reports``: what each worker answers; ``beta_ms_per_token``: the estimate's
        fallback β per worker (its region's, before any prefill)."""
        self.period_ms = float(period_ms)
        self.timeout_ms = load_poll_timeout_ms(self.period_ms)
        self._reports = reports
        self._beta = np.asarray(beta_ms_per_token, dtype=np.float64).tolist()
        self._workers_of = workers_of
        self._hop = float(hop_ms)
        self._loop = loop
        self._horizon = float(horizon_ms)
        self._subs: list[list[Callable[[LoadReading], None]]] = [[] for _ in workers_of]
        self._last: list[LoadReading | None] = [None] * len(workers_of)
        self.polls = 0

    def start(self) -> None:
        """Every region's first poll leaves at time 0 (edges start with the run)."""
        for r, ws in enumerate(self._workers_of):
            if ws.size:
                self._loop.schedule(0.0, self._leave, r, PRIO_DELIVERY)

    def subscribe(self, region: int, deliver: Callable[[LoadReading], None]) -> None:
        self._subs[region].append(deliver)

    def last(self, region: int) -> LoadReading | None:
        return self._last[region]

    def _leave(self, at: float, region: int) -> None:
        if at > self._horizon:
            return
        self._loop.schedule(at + self._hop, self._answer, region, PRIO_DELIVERY)

    def _answer(self, at: float, region: int) -> None:
        ws = self._workers_of[region]
        beta = self._beta
        values = np.array(
            [queue_ms(self._reports.report(w, at), beta[w]) for w in ws.tolist()],
            dtype=np.float64,
        )
        reading = LoadReading(region, ws, values, at, at + self._hop)
        self._loop.schedule(at + self._hop, self._back, reading, PRIO_DELIVERY)

    def _back(self, at: float, reading: LoadReading) -> None:
        self.polls += 1
        self._last[reading.region] = reading
        for deliver in self._subs[reading.region]:
            deliver(reading)
        self._loop.schedule(at + self.period_ms, self._leave, reading.region, PRIO_DELIVERY)
