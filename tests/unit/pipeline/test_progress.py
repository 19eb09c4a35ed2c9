"""A take is retried until done and, if abandoned, never acknowledged (``pipeline.progress``)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest
from faust.types.tuples import Message

from pipeline.progress import Hold, StepAbandoned, withheld_on_error


class ConsumerThatRecordsAcks:
    """What ``Message.ack`` tells the consumer (Faust's consumer adds the offset to its commit)."""

    def __init__(self) -> None:
        self.acked: list[int] = []


@dataclass
class Event:
    message: Message


def _message(offset: int) -> Message:
    return Message("kv", 0, offset, 0.0, 0, None, b"k", b"v", None)


def test_until_done_retries_with_backoff_and_reports_the_hold__two_failures() -> None:
    slept: list[float] = []

    async def sleep(s: float) -> None:
        slept.append(s)

    hold = Hold(first_delay_s=1.0, max_delay_s=3.0, sleep=sleep)
    attempts: list[int] = []
    dropped: list[str] = []
    seen_held: list[dict[str, str]] = []

    async def step() -> int:
        attempts.append(1)
        seen_held.append(dict(hold.held))
        if len(attempts) <= 3:
            raise RuntimeError(f"broker refused #{len(attempts)}")
        return 7

    got = asyncio.run(hold.until_done("maintain[2]", step, lambda e: dropped.append(str(e))))
    assert got == 7 and len(attempts) == 4
    assert slept == [1.0, 2.0, 3.0]  # doubling, capped
    assert dropped == ["broker refused #1", "broker refused #2", "broker refused #3"]
    assert seen_held[-1] == {"maintain[2]": "RuntimeError: broker refused #3"}
    assert hold.failures == {"maintain[2]": 3} and hold.held == {}


def test_withheld_take_is_never_acked__cancelled_while_held() -> None:
    events = [Event(_message(o)) for o in (10, 11, 12)]
    with pytest.raises(asyncio.CancelledError), withheld_on_error(events):
        raise asyncio.CancelledError
    # what take_events' finally does next: the real Message.ack, which must not reach the consumer
    assert [e.message.ack(ConsumerThatRecordsAcks()) for e in events] == [False, False, False]  # type: ignore[arg-type]


def test_finished_take_is_acked_normally__no_error() -> None:
    events = [Event(_message(o)) for o in (10, 11)]
    with withheld_on_error(events):
        pass
    assert [e.message.ack(ConsumerThatRecordsAcks()) for e in events] == [True, True]  # type: ignore[arg-type]


def test_stop_ends_a_held_step__abandoned_within_its_backoff() -> None:
    """A held step waits up to 30 s between attempts; a stop must not wait for it (Faust's
    shutdown waits for the take: a held unit once kept a worker 13 minutes after SIGTERM)."""
    hold = Hold(first_delay_s=30.0)
    attempts = 0

    async def failing() -> int:
        nonlocal attempts
        attempts += 1
        raise RuntimeError("broker refuses the dead letter")

    async def scenario() -> float:
        task = asyncio.create_task(hold.until_done("rechunk", failing))
        await asyncio.sleep(0.05)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        hold.stop()
        with pytest.raises(StepAbandoned, match="rechunk: abandoned at stop after 1 failed"):
            await task
        return loop.time() - t0

    waited = asyncio.run(scenario())
    assert attempts == 1 and waited < 30.0  # no second attempt, the 30 s backoff cut short
    assert hold.held == {"rechunk": "RuntimeError: broker refuses the dead letter"}
