"""Every process stops when told, within a bounded time (issue 26 item 4).

Owns ``StopDeadline``: armed when a process is asked to stop (SIGTERM/SIGINT), a daemon thread
that, if the process is still alive ``timeout_s`` later, writes one ERROR line naming what it was
still doing (``pending()``: e.g. "4 kv-events records undelivered", "final checkpoint of shard 2")
and ends the process with ``os._exit(EXIT_STUCK)``. A clean stop never reaches it. Why a thread
and ``os._exit``: what hangs is not ours to cancel (a Faust worker whose broker is gone waits in
its consumer's commit and leave-group retries; aiokafka's ``consumer.stop()`` retries its commit;
a librdkafka flush is bounded only by its message timeout), and it may hold the event loop, so
neither a task nor a signal handler on that loop would run.

Shells arm it where they handle the stop signal (``cli.worker``, ``pipeline.agents``,
``edge.main``); each still flushes what it can within the time and says what it could not.

Without a broker a stop is short (issue 35 item 7: edge 11.9 s, sidecar 17.8 s, maintenance
31.9 s before): given the process's ``broker`` (its bootstrap servers), ``arm`` tries a TCP
connection to each (``broker_reachable``, at most 0.3 s per address); if none answers, the
deadline becomes ``without_broker_s`` (default ``STOP_WITHOUT_BROKER_S``, 4.5 s; an edge adds its
drain of in-flight requests, which do not need the broker) and one WARNING says so. What cannot
reach Kafka anyway is not waited for: every broker-bound wait of a stop takes ``budget(...)``
(its usual bound, cut to what the deadline leaves minus a reserve for the steps after it, and to
1 s without a broker), then says what it left.
Must not: decide what a process flushes (its shell does).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

EXIT_STUCK = 3
"""Exit status of a process the deadline had to end (0: it stopped by itself)."""
DEFAULT_STOP_TIMEOUT_S = 30.0
STOP_WITHOUT_BROKER_S = 4.5
"""The whole stop when no broker address answers at SIGTERM (nothing more can be delivered):
under the 5 s issue 35 item 7 asks, with room for the exit itself on a loaded machine."""
WAIT_WITHOUT_BROKER_S = 1.0
"""One broker-bound wait of a stop (``budget``) when the broker was unreachable at SIGTERM."""
_active: StopDeadline | None = None


def broker_reachable(bootstrap_servers: str, timeout_s: float = 0.3) -> bool:
    """Whether any ``host:port`` of ``bootstrap_servers`` accepts a TCP connection now."""
    for address in bootstrap_servers.split(","):
        host, _, port = address.strip().rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
                return True
        except (OSError, ValueError):
            continue
    return False


def active() -> StopDeadline | None:
    """The deadline armed in this process and not yet disarmed (None: no stop under way)."""
    return _active


def budget(usual_s: float, reserve_s: float = 0.5) -> float:
    """``active().budget(usual_s, reserve_s)``, or ``usual_s`` when no stop is under way."""
    return usual_s if _active is None else _active.budget(usual_s, reserve_s)


class StopDeadline:
    """``arm()`` once a stop is asked; the process exits by ``timeout_s`` later, one way or the
    other. ``remaining()`` tells the shell how long its own flushes may take."""

    def __init__(
        self,
        what: str,
        timeout_s: float = DEFAULT_STOP_TIMEOUT_S,
        pending: Callable[[], list[str]] | None = None,
        exit_: Callable[[int], object] = os._exit,
        *,
        broker: str | None = None,
        without_broker_s: float = STOP_WITHOUT_BROKER_S,
        reachable: Callable[[str], bool] = broker_reachable,
    ) -> None:
        self.what = what
        self.timeout_s = timeout_s
        self.pending = pending or (lambda: [])
        self.broker = broker
        """Bootstrap servers the process delivers to (None: it has no broker)."""
        self.without_broker_s = without_broker_s
        self._reachable = reachable
        self.broker_down = False
        self._exit = exit_
        self._armed_at: float | None = None
        self._done = threading.Event()
        self.fired = False

    def arm(self) -> None:
        """Start the countdown (idempotent: the first call counts)."""
        global _active
        if self._armed_at is not None:
            return
        self._armed_at = time.monotonic()
        _active = self
        if self.broker and not self._reachable(self.broker):
            self.broker_down = True
            self.timeout_s = min(self.timeout_s, self.without_broker_s)
            log.warning("%s: stopping with the broker unreachable (%s): exiting within %.1f s; "
                        "what cannot be delivered is not waited for", self.what, self.broker,
                        self.timeout_s)  # fmt: skip
        else:
            log.info("%s: stopping; exiting within %.0f s", self.what, self.timeout_s)
        threading.Thread(target=self._watch, name="kvc-stop-deadline", daemon=True).start()

    def remaining(self, floor_s: float = 0.0) -> float:
        """Seconds left before the deadline (the whole timeout if not armed)."""
        if self._armed_at is None:
            return self.timeout_s
        return max(floor_s, self.timeout_s - (time.monotonic() - self._armed_at))

    def budget(self, usual_s: float, reserve_s: float = 0.5) -> float:
        """How long one broker-bound wait of the stop may take (a flush, a consumer's stop):
        ``usual_s``, or less if the deadline leaves less than that plus ``reserve_s`` (the steps
        after it); at most ``WAIT_WITHOUT_BROKER_S`` if the broker was unreachable at SIGTERM (a
        broker back within it still gets the records); never negative. Unarmed: ``usual_s``."""
        if self._armed_at is None:
            return usual_s
        limit = self.remaining() - reserve_s
        if self.broker_down:
            limit = min(limit, WAIT_WITHOUT_BROKER_S)
        return max(0.0, min(usual_s, limit))

    def disarm(self) -> None:
        """The process is about to exit by itself."""
        global _active
        self._done.set()
        if _active is self:
            _active = None

    def _watch(self) -> None:
        if self._done.wait(self.timeout_s):
            return
        self.fired = True
        try:
            left = "; ".join(self.pending()) or "nothing known pending"
        except Exception as exc:  # the report must not keep the process alive
            left = f"(could not say: {exc!r})"
        why = " (broker unreachable)" if self.broker_down else ""
        log.error("%s did not stop within %.1f s%s; exiting now (status %d). Not done: %s",
                  self.what, self.timeout_s, why, EXIT_STUCK, left)  # fmt: skip
        for h in logging.getLogger().handlers:
            with contextlib.suppress(Exception):  # best effort before a hard exit
                h.flush()
        sys.stderr.flush()
        self._exit(EXIT_STUCK)
        self.disarm()  # only reached with a stand-in exit (tests)
