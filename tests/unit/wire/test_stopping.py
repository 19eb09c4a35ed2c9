"""``wire.stopping.StopDeadline``: a stop that hangs ends the process, saying what was left."""

from __future__ import annotations

import logging
import threading

import pytest

from wire.stopping import EXIT_STUCK, StopDeadline


def test_deadline_exits_and_says_what_is_left__stuck_stop(caplog: pytest.LogCaptureFixture) -> None:
    exited: list[int] = []
    done = threading.Event()

    def fake_exit(code: int) -> None:
        exited.append(code)
        done.set()

    d = StopDeadline("sidecar", 0.05, lambda: ["12 records undelivered"], exit_=fake_exit)
    with caplog.at_level(logging.INFO, logger="wire.stopping"):
        d.arm()
        assert done.wait(5)
    assert exited == [EXIT_STUCK] and d.fired
    line = caplog.records[-1]
    assert line.levelno == logging.ERROR
    assert "sidecar did not stop within 0 s" in line.getMessage()
    assert "Not done: 12 records undelivered" in line.getMessage()


def test_disarmed_deadline_never_fires__clean_stop() -> None:
    exited: list[int] = []
    d = StopDeadline("edge", 0.05, exit_=exited.append)
    d.arm()
    d.disarm()
    threading.Event().wait(0.2)
    assert exited == [] and not d.fired
    assert 0.0 <= d.remaining() <= 0.05
