"""Hold a take until it is done: a partition never moves past a record it did not handle.

Owns the retry policy of one take (``Hold.until_done``: run the step; on failure log an ERROR,
count it, wait with exponential backoff and run it again, forever) and the guard that keeps a
failed take's records from being acknowledged (``withheld_on_error``). Done means every record
of the take was applied or dead-lettered and the output delivered; a record that cannot even be
dead-lettered (the broker refuses the dead letter) or a shard whose recovery fails (its reads
time out) holds its partition, loudly, instead of being skipped: no input offset is
committed past it, and processing resumes by itself once the cause is fixed.

Why the guard: Faust's ``take_events`` acknowledges a take's events in a ``finally`` when the
generator is closed, also when the agent body raised or was cancelled (a shutdown while held);
Faust would then commit offsets of records never handled. Marking their messages acknowledged
beforehand makes those acks no-ops (``Message.ack`` skips acked messages without telling the
consumer), so the committed offset stops at the gap and the records come back after a restart.

A stop ends the hold (``Hold.stop``, at SIGTERM): the step's current wait is cut short and,
instead of another attempt, ``StepAbandoned`` is raised: the take stays unacknowledged (so Faust's
shutdown, which waits for every taken message to be acknowledged, no longer waits for it: a held
unit once kept a worker alive 13 minutes after SIGTERM) and nothing is committed past it; the
next start takes it again.

Must not: know what a step does (the shell's ``rechunk`` / ``maintain``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, TypeVar

from kvcompass.errors import KVCompassError
from wire.logs import EVERY_LINE

log = logging.getLogger(__name__)
T = TypeVar("T")


class StepAbandoned(KVCompassError):
    """A held step given up because the process is stopping (its take stays unacknowledged)."""


class Hold:
    """Runs takes until they succeed; counts failures and knows which steps are held now."""

    def __init__(
        self,
        *,
        first_delay_s: float = 0.5,
        max_delay_s: float = 30.0,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        self.first_delay_s = first_delay_s
        self.max_delay_s = max_delay_s
        self._sleep = sleep
        self.failures: Counter[str] = Counter()
        """Failed attempts per step name (``rechunk``, ``maintain[3]``), the stall metric."""
        self.held: dict[str, str] = {}
        """Steps failing right now -> their last error."""
        self.stopping = False
        self._wake: asyncio.Event | None = None

    def stop(self) -> None:
        """No more attempts: every held step raises ``StepAbandoned`` now (call on the loop)."""
        self.stopping = True
        if self._wake is not None:
            self._wake.set()

    async def _wait(self, delay: float) -> None:
        if self._sleep is not asyncio.sleep:  # an injected clock (tests)
            await self._sleep(delay)
            return
        if self._wake is None:
            self._wake = asyncio.Event()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), delay)

    async def until_done(
        self,
        what: str,
        step: Callable[[], Awaitable[T]],
        on_failure: Callable[[BaseException], object] | None = None,
    ) -> T:
        """``await step()`` until it returns; ``on_failure`` runs after each failed attempt."""
        delay = self.first_delay_s
        while True:
            try:
                result = await step()
            except Exception as exc:
                self.failures[what] += 1
                self.held[what] = f"{type(exc).__name__}: {exc}"
                log.error(
                    "%s held (attempt %d failed: %s): its records stay unacknowledged, nothing "
                    "is committed past them; retrying in %.1f s",
                    what, self.failures[what], self.held[what], delay, extra=EVERY_LINE,
                )  # fmt: skip
                if on_failure is not None:
                    on_failure(exc)
                if not self.stopping:
                    await self._wait(delay)
                if self.stopping:
                    log.warning("%s abandoned at stop (held, %d failed attempts): its records "
                                "stay unacknowledged; the next start takes them again", what,
                                self.failures[what])  # fmt: skip
                    raise StepAbandoned(
                        f"{what}: abandoned at stop after {self.failures[what]} failed attempts "
                        f"(last: {self.held[what]}); its records stay unacknowledged"
                    ) from exc
                delay = min(delay * 2, self.max_delay_s)
                continue
            if self.held.pop(what, None) is not None:
                log.warning("%s resumed after %d failed attempts", what, self.failures[what])
            return result


def withhold(events: Sequence[Any]) -> None:
    """Never acknowledge these events (nothing is committed past them; they come back after a
    restart): see the module docstring."""
    for e in events:
        e.message.acked = True  # Faust then skips their acks and forgets them


@contextlib.contextmanager
def withheld_on_error(events: Sequence[Any]) -> Iterator[None]:
    """Around one take's processing: if it raises (or is cancelled), its events are never acked."""
    try:
        yield
    except BaseException:
        withhold(events)
        raise
