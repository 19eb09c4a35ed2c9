"""Hold a take until it is done: a partition never moves past a record it did not handle.

Owns the retry policy of one take (``Hold.until_done``: run the step; on failure log an ERROR,
count it, wait with exponential backoff and run it again, forever) and the guard that keeps a
failed take's records from being acknowledged (``withheld_on_error``). Done means every record
of the take was applied or dead-lettered and the output delivered; a record that cannot even be
dead-lettered (the broker refuses the dead letter) or a shard that cannot be recovered exactly
(``RecoveryRefused``) holds its partition, loudly, instead of being skipped: no input offset is
committed past it, and processing resumes by itself once the cause is fixed.

Why the guard: Faust's ``take_events`` acknowledges a take's events in a ``finally`` when the
generator is closed, also when the agent body raised or was cancelled (a shutdown while held);
Faust would then commit offsets of records never handled. Marking their messages acknowledged
beforehand makes those acks no-ops (``Message.ack`` skips acked messages without telling the
consumer), so the committed offset stops at the gap and the records come back after a restart.

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

log = logging.getLogger(__name__)
T = TypeVar("T")


class RecoveryRefused(KVCompassError):
    """A shard's state cannot be rebuilt exactly from what its topics still hold."""


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
                    what, self.failures[what], self.held[what], delay,
                )  # fmt: skip
                if on_failure is not None:
                    on_failure(exc)
                await self._sleep(delay)
                delay = min(delay * 2, self.max_delay_s)
                continue
            if self.held.pop(what, None) is not None:
                log.warning("%s resumed after %d failed attempts", what, self.failures[what])
            return result


@contextlib.contextmanager
def withheld_on_error(events: Sequence[Any]) -> Iterator[None]:
    """Around one take's processing: if it raises (or is cancelled), its events are never acked."""
    try:
        yield
    except BaseException:
        for e in events:
            e.message.acked = True  # see the module docstring: Faust then skips their acks
        raise
