"""Logs an operator can read: repeated lines rate-limited with a count, malformed input without
tracebacks. The one home of both; every process installs them through ``install`` (``cli.main``
for every command, ``pipeline.agents`` again after Faust replaces the root handlers).

``RepeatFilter`` (a ``logging.Filter`` on the root handlers, so it sees third-party loggers too:
aiokafka, Faust, aiohttp, confluent-kafka's ``logger``): a WARNING-or-worse line is let through,
then lines *like it* (same logger, same level, same text once every run of digits is masked:
"Connect to 127.0.0.1:19092 failed (attempt 7)" is like "... (attempt 8)") are counted, not
written, for ``period_s``; the first one after the period carries the count ("[+41 like this in
the last 30 s]"). ``summary()`` writes one line per key still holding a count (at exit), so
nothing counted is lost. INFO and DEBUG pass untouched: they are opted into. A line that is
already paced by its caller (a held step's retries, with backoff) opts out with
``extra=EVERY_LINE``.

``MalformedInputFilter`` (on the ``aiohttp.server`` logger): aiohttp logs a request it cannot
parse (a malformed request line, a header too long: ``aiohttp.http_exceptions``) with
``logger.exception``, i.e. ERROR and a traceback, per request. That is a client's mistake, not
the server's: it becomes one WARNING line naming the peer and the parser's message, and is then
rate-limited like any other line.

Must not: decide what is logged where (the callers do), or configure levels and formats
(``cli.main``).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

_DIGITS = re.compile(r"\d+")
_MAX_KEYS = 2048
"""Distinct lines remembered; the oldest is forgotten first (its pending count is summarised)."""
_KEY_CHARS = 240


_NO_ARGS = ()
"""What a rewritten record's ``args`` become once its message is formatted into ``msg``: an empty
tuple, never None. mode's formatter (Faust's root handlers) turns a non-tuple ``args`` into a
one-element tuple, so ``None`` became ``msg % (None,)`` and every annotated line was a
"--- Logging error ---" traceback in the pipeline worker (issue 35 item 8); an empty tuple is
left alone by both it and ``LogRecord.getMessage``, even if ``msg`` holds a '%'."""

EVERY_LINE = {"kvc_every_line": True}
"""``log.error(..., extra=EVERY_LINE)``: never rate-limited (the caller paces it)."""


class RepeatFilter(logging.Filter):
    """Rate-limits WARNING-or-worse lines by likeness; thread-safe (librdkafka's threads log)."""

    def __init__(
        self,
        period_s: float = 30.0,
        *,
        min_level: int = logging.WARNING,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.period_s = period_s
        self.min_level = min_level
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: OrderedDict[tuple[str, int, str], list[float]] = OrderedDict()
        """key -> [start of the current period, lines suppressed in it]."""
        self.suppressed_total = 0

    @staticmethod
    def key(record: logging.LogRecord) -> tuple[str, int, str]:
        try:
            text = record.getMessage()
        except Exception:  # a broken format string: still one key per call site
            text = str(record.msg)
        return record.name, record.levelno, _DIGITS.sub("#", text)[:_KEY_CHARS]

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < self.min_level or getattr(record, "_kvc_counted", False):
            return True
        if getattr(record, "kvc_every_line", False):
            return True
        key = self.key(record)
        now = self._clock()
        with self._lock:
            state = self._seen.get(key)
            if state is not None and now - state[0] < self.period_s:
                state[1] += 1
                self.suppressed_total += 1
                return False
            if state is not None and state[1]:
                _annotate(record, int(state[1]), now - state[0])
            self._seen[key] = [now, 0]
            self._seen.move_to_end(key)
            dropped = self._seen.popitem(last=False) if len(self._seen) > _MAX_KEYS else None
        record._kvc_counted = True  # other handlers: same verdict
        if dropped is not None and dropped[1][1]:
            _summary_line(dropped[0], int(dropped[1][1]))
        return True

    def summary(self) -> int:
        """Write one line per key with suppressed lines not yet reported; returns how many."""
        with self._lock:
            pending = [(k, int(s[1])) for k, s in self._seen.items() if s[1]]
            for k, _ in pending:
                self._seen[k][1] = 0
        for k, n in pending:
            _summary_line(k, n)
        return len(pending)


def _annotate(record: logging.LogRecord, n: int, over_s: float) -> None:
    record.msg = f"{record.getMessage()} [+{n} like this in the last {over_s:.0f} s]"
    record.args = _NO_ARGS


def _summary_line(key: tuple[str, int, str], n: int) -> None:
    name, level, text = key
    rec = logging.LogRecord(name, level, __file__, 0, "%d more like: %s", (n, text), None)
    rec._kvc_counted = True
    logging.getLogger(name).handle(rec)


class MalformedInputFilter(logging.Filter):
    """aiohttp's per-request parse errors: ERROR + traceback -> one WARNING line."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is None or not type(exc).__module__.startswith("aiohttp.http_exceptions"):
            return True
        record.msg = f"{record.getMessage()}: malformed request: {exc}"
        record.args = _NO_ARGS
        record.exc_info = None
        record.exc_text = None
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


_HTTP_SERVER_LOGGER = "aiohttp.server"


def install(root: logging.Logger | None = None, period_s: float = 30.0) -> RepeatFilter:
    """Put one ``RepeatFilter`` on every handler of ``root`` (default: the root logger) and the
    ``MalformedInputFilter`` on aiohttp's server logger; idempotent. Returns the filter."""
    root = root or logging.getLogger()
    found: RepeatFilter | None = None
    for h in root.handlers:
        for f in h.filters:
            if isinstance(f, RepeatFilter):
                found = f
    repeat = found or RepeatFilter(period_s)
    for h in root.handlers:
        if repeat not in h.filters:
            h.addFilter(repeat)
    server = logging.getLogger(_HTTP_SERVER_LOGGER)
    if not any(isinstance(f, MalformedInputFilter) for f in server.filters):
        server.addFilter(MalformedInputFilter())
    return repeat


def one_line(exc: BaseException) -> str:
    """A configuration error as the one line an operator reads: its message, no traceback."""
    text = " ".join(str(exc).split())
    return f"error: {text or type(exc).__name__}"
