"""``wire.stopping.StopDeadline``: a stop that hangs ends the process, saying what was left."""

from __future__ import annotations

import logging
import socket
import threading

import pytest

from wire.stopping import (
    EXIT_STUCK,
    STOP_WITHOUT_BROKER_S,
    WAIT_WITHOUT_BROKER_S,
    StopDeadline,
    active,
    broker_reachable,
    budget,
)


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
    assert "sidecar did not stop within 0.1 s" in line.getMessage()
    assert "Not done: 12 records undelivered" in line.getMessage()


def test_disarmed_deadline_never_fires__clean_stop() -> None:
    exited: list[int] = []
    d = StopDeadline("edge", 0.05, exit_=exited.append)
    d.arm()
    d.disarm()
    threading.Event().wait(0.2)
    assert exited == [] and not d.fired
    assert 0.0 <= d.remaining() <= 0.05


def test_broker_reachable__a_listening_socket_yes_a_closed_port_no() -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        assert broker_reachable(f"127.0.0.1:1,127.0.0.1:{port}")  # any address will do
    assert not broker_reachable(f"127.0.0.1:{port}")  # closed now: refused at once
    assert not broker_reachable("no-port-here")


def test_broker_unreachable_at_sigterm__the_stop_is_short_and_every_wait_bounded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 35 item 7: without a broker the deadline is ``without_broker_s`` (< 5 s) and each
    broker-bound wait at most ``WAIT_WITHOUT_BROKER_S``; with one, the usual timeout."""
    exited: list[int] = []
    down = StopDeadline("sidecar", 30.0, exit_=exited.append, broker="b:1",
                        reachable=lambda _: False)  # fmt: skip
    assert down.budget(10.0) == 10.0 and budget(10.0) == 10.0  # not armed: the usual bound
    with caplog.at_level(logging.INFO, logger="wire.stopping"):
        down.arm()
    try:
        assert down.broker_down and down.timeout_s == STOP_WITHOUT_BROKER_S
        assert active() is down
        assert 0.0 < budget(10.0) <= WAIT_WITHOUT_BROKER_S
        assert budget(10.0, reserve_s=STOP_WITHOUT_BROKER_S) == 0.0  # nothing left for it
        assert "broker unreachable (b:1): exiting within 4.5 s" in caplog.records[-1].getMessage()
    finally:
        down.disarm()
    assert active() is None and budget(10.0) == 10.0 and exited == []
    up = StopDeadline("edge", 40.0, exit_=exited.append, broker="b:1", reachable=lambda _: True)
    up.arm()
    try:
        assert not up.broker_down and up.timeout_s == 40.0
        assert 9.0 < up.budget(10.0) <= 10.0
    finally:
        up.disarm()
