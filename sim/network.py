"""The simulated WAN: static one-way latency matrix plus per-message jitter, delay and loss.

Owns message timing for requests (edge -> worker -> edge) and for control channels (index
patches, queue vectors, DHT hops, directory lookups). The matrix is what routers may assume;
each message's actual latency is ``matrix x U(1 - j, 1 + j)`` (``SimConfig.wan_jitter_frac``,
paper Table 4) plus the channel's extra delay, and control messages may be lost. Must not know
schemes or workers; randomness comes from the run's spawned generator only.

Channels: ``"index"`` (patch batches: base + extra delay, ``index_loss``), ``"queue"``
(broadcasts and piggybacks: ``queue_loss``), anything else (plain WAN, never lost).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from sim.config import SimConfig
from sim.engine.loop import PRIO_DELIVERY, EventLoop


class WanNetwork:
    """One run's network; ``one_way_ms`` is static, ``sample_ms``/``send`` add jitter and loss."""

    def __init__(
        self,
        wan_one_way_ms: NDArray[np.float64],
        config: SimConfig,
        loop: EventLoop,
        rng: np.random.Generator,
    ) -> None:
        self.matrix = np.ascontiguousarray(wan_one_way_ms, dtype=np.float64)
        self._rows = self.matrix.tolist()
        self.jitter = float(config.wan_jitter_frac)
        self.loop = loop
        self.rng = rng
        self._loss = {"index": config.index_loss, "queue": config.queue_loss}
        self._extra = {"index": config.index_delay_ms, "queue": 0.0}
        self.sent: dict[str, int] = {}
        self.lost: dict[str, int] = {}
        # Jitter draws are consumed in blocks: one Generator call per 4096 messages.
        self._u = np.empty(0)
        self._ui = 0

    def one_way_ms(self, src_region: int, dst_region: int) -> float:
        return float(self._rows[src_region][dst_region])

    def _uniform(self) -> float:
        if self._ui >= self._u.size:
            self._u = self.rng.random(4096)
            self._ui = 0
        u = float(self._u[self._ui])
        self._ui += 1
        return u

    def sample_ms(self, src_region: int, dst_region: int) -> float:
        """Actual latency of one message between two regions (jittered)."""
        base: float = self._rows[src_region][dst_region]
        if self.jitter == 0.0:
            return base
        return base * (1.0 + self.jitter * (2.0 * self._uniform() - 1.0))

    def send(
        self,
        channel: str,
        src_region: int,
        dst_region: int,
        now_ms: float,
        deliver: Callable[[float, Any], None],
        payload: Any,
        extra_delay_ms: float = 0.0,
    ) -> bool:
        self.sent[channel] = self.sent.get(channel, 0) + 1
        loss = self._loss.get(channel, 0.0)
        if loss > 0.0 and self._uniform() < loss:
            self.lost[channel] = self.lost.get(channel, 0) + 1
            return False
        at = (
            now_ms
            + self.sample_ms(src_region, dst_region)
            + self._extra.get(channel, 0.0)
            + extra_delay_ms
        )
        self.loop.schedule(at, deliver, payload, PRIO_DELIVERY)
        return True
