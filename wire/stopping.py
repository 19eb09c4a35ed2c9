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
Must not: decide what a process flushes (its shell does).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

EXIT_STUCK = 3
"""Exit status of a process the deadline had to end (0: it stopped by itself)."""
DEFAULT_STOP_TIMEOUT_S = 30.0


class StopDeadline:
    """``arm()`` once a stop is asked; the process exits by ``timeout_s`` later, one way or the
    other. ``remaining()`` tells the shell how long its own flushes may take."""

    def __init__(
        self,
        what: str,
        timeout_s: float = DEFAULT_STOP_TIMEOUT_S,
        pending: Callable[[], list[str]] | None = None,
        exit_: Callable[[int], object] = os._exit,
    ) -> None:
        self.what = what
        self.timeout_s = timeout_s
        self.pending = pending or (lambda: [])
        self._exit = exit_
        self._armed_at: float | None = None
        self._done = threading.Event()
        self.fired = False

    def arm(self) -> None:
        """Start the countdown (idempotent: the first call counts)."""
        if self._armed_at is not None:
            return
        self._armed_at = time.monotonic()
        log.info("%s: stopping; exiting within %.0f s", self.what, self.timeout_s)
        threading.Thread(target=self._watch, name="kvc-stop-deadline", daemon=True).start()

    def remaining(self, floor_s: float = 0.0) -> float:
        """Seconds left before the deadline (the whole timeout if not armed)."""
        if self._armed_at is None:
            return self.timeout_s
        return max(floor_s, self.timeout_s - (time.monotonic() - self._armed_at))

    def disarm(self) -> None:
        """The process is about to exit by itself."""
        self._done.set()

    def _watch(self) -> None:
        if self._done.wait(self.timeout_s):
            return
        self.fired = True
        try:
            left = "; ".join(self.pending()) or "nothing known pending"
        except Exception as exc:  # the report must not keep the process alive
            left = f"(could not say: {exc!r})"
        log.error("%s did not stop within %.0f s; exiting now (status %d). Not done: %s",
                  self.what, self.timeout_s, EXIT_STUCK, left)  # fmt: skip
        for h in logging.getLogger().handlers:
            with contextlib.suppress(Exception):  # best effort before a hard exit
                h.flush()
        sys.stderr.flush()
        self._exit(EXIT_STUCK)
