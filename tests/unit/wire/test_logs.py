"""``wire.logs``: repeated lines are counted, not written; malformed requests lose tracebacks."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator

import pytest

from wire.logs import MalformedInputFilter, RepeatFilter, install, one_line


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    @property
    def messages(self) -> list[str]:
        return [r.getMessage() for r in self.records]


@pytest.fixture
def setup() -> Iterator[tuple[logging.Logger, Lines, RepeatFilter, Clock]]:
    clock = Clock()
    log = logging.getLogger("test.wire.logs")
    log.propagate = False
    log.setLevel(logging.DEBUG)
    lines = Lines()
    f = RepeatFilter(30.0, clock=clock)
    lines.addFilter(f)
    log.addHandler(lines)
    yield log, lines, f, clock
    log.removeHandler(lines)
    log.propagate = True


def test_repeats_are_counted_then_reported__same_text_but_digits(
    setup: tuple[logging.Logger, Lines, RepeatFilter, Clock],
) -> None:
    log, lines, f, clock = setup
    for attempt in range(1, 101):  # a broker outage: one error per retry, every 0.1 s
        clock.t = attempt * 0.1
        log.error("connect to 127.0.0.1:19092 failed (attempt %d)", attempt)
    assert lines.messages == ["connect to 127.0.0.1:19092 failed (attempt 1)"]
    assert f.suppressed_total == 99
    clock.t = 40.0
    log.error("connect to 127.0.0.1:19092 failed (attempt %d)", 101)
    assert lines.messages[-1] == (
        "connect to 127.0.0.1:19092 failed (attempt 101) [+99 like this in the last 40 s]"
    )


def test_different_lines_and_info_pass__rate_limit_is_per_likeness(
    setup: tuple[logging.Logger, Lines, RepeatFilter, Clock],
) -> None:
    log, lines, _, _ = setup
    log.warning("dead letter kv-events[0]@5: bad key")
    log.warning("shard 2 rebuilt from kv-events")  # a different line
    log.error("dead letter kv-events[0]@5: bad key")  # another level: another key
    for i in range(5):
        log.info("caught up %d", i)  # INFO is never limited
    assert len(lines.records) == 8


def test_summary_reports_what_is_still_counted__nothing_lost(
    setup: tuple[logging.Logger, Lines, RepeatFilter, Clock],
) -> None:
    log, lines, f, _ = setup
    for i in range(7):
        log.warning("delivery to kv-events failed: timed out (%d)", i)
    assert f.summary() == 1
    assert lines.messages[-1] == "6 more like: delivery to kv-events failed: timed out (#)"
    assert f.summary() == 0  # reported once


def test_every_line_it_writes_formats__faust_root_handler_formatter() -> None:
    """Issue 35 item 8: under Faust (mode's ``ExtensionFormatter`` on the root handlers) the
    annotated line, the summary line and a rewritten aiohttp line each format; formatting here
    raises instead of printing "--- Logging error ---"."""
    from aiohttp.http_exceptions import BadStatusLine
    from mode.utils.logging import ExtensionFormatter

    formatter = ExtensionFormatter(fmt="%(levelname)s %(message)s %(extra)s")

    class Formatted(Lines):
        def __init__(self) -> None:
            super().__init__()
            self.text: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.records.append(record)
            self.text.append(formatter.format(record).rstrip())

    clock = Clock()
    log = logging.getLogger("test.wire.logs.faust")
    log.propagate = False
    lines = Formatted()
    f = RepeatFilter(30.0, clock=clock)
    lines.addFilter(f)
    log.addHandler(lines)
    log.addFilter(MalformedInputFilter())
    try:
        for i in range(3):
            log.warning("Connect to %s failed: %d%% of retries used", "127.0.0.1:19092", i)
        log.warning("plain 100% line")
        log.warning("plain 100% line")
        clock.t = 31.0
        log.warning("Connect to %s failed: %d%% of retries used", "127.0.0.1:19092", 9)
        log.warning("plain 100% line")
        log.warning("plain 100% line")
        assert f.summary() == 1
        try:
            raise BadStatusLine("GARBAGE 50% / HTTP/9")
        except BadStatusLine:
            log.exception("Error handling request from %s", "10.0.0.7")
    finally:
        log.removeHandler(lines)
        log.propagate = True
    text = lines.text
    assert text[:5] == [
        "WARNING Connect to 127.0.0.1:19092 failed: 0% of retries used",
        "WARNING plain 100% line",
        "WARNING Connect to 127.0.0.1:19092 failed: 9% of retries used "
        "[+2 like this in the last 31 s]",
        "WARNING plain 100% line [+1 like this in the last 31 s]",
        "WARNING 1 more like: plain #% line",
    ], text
    assert len(text) == 6 and "GARBAGE 50% / HTTP/9" in text[5], text
    assert text[5].startswith("WARNING Error handling request from 10.0.0.7: malformed request")


def test_malformed_request_becomes_one_warning__no_traceback() -> None:
    from aiohttp.http_exceptions import BadStatusLine

    log = logging.getLogger("test.wire.logs.server")
    log.propagate = False
    lines = Lines()
    log.addHandler(lines)
    log.addFilter(MalformedInputFilter())
    try:
        try:
            raise BadStatusLine("GARBAGE / HTTP/9")
        except BadStatusLine:
            log.exception("Error handling request from %s", "10.0.0.7")
        try:
            raise RuntimeError("a real bug")
        except RuntimeError:
            log.exception("Error handling request from %s", "10.0.0.8")
    finally:
        log.removeHandler(lines)
        log.propagate = True
    first, second = lines.records
    assert first.levelno == logging.WARNING and first.exc_info is None
    assert first.getMessage().startswith("Error handling request from 10.0.0.7: malformed request")
    assert "GARBAGE" in first.getMessage()
    assert second.levelno == logging.ERROR and second.exc_info is not None  # bugs keep theirs


def test_install_is_idempotent__one_filter_per_handler() -> None:
    root = logging.Logger("test-root")
    h = logging.StreamHandler()
    root.addHandler(h)
    a, b = install(root), install(root)
    assert a is b and h.filters.count(a) == 1


def test_one_line__collapses_whitespace() -> None:
    assert one_line(ValueError("a:\n   b  c")) == "error: a: b c"


def test_config_error_is_one_line_exit_2__kvcompass_cli() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "cli", "pipeline", "topics", "--n-shards", "0"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2, out
    assert out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith("error: n_shards: expected an int >= 1; got 0"), out.stderr
    assert "Traceback" not in out.stderr
