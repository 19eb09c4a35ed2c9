"""Readiness waits that follow each process's progress instead of one fixed timeout.

Owns ``Patience`` (the bounds) and ``wait_until_ready``: probe rounds until every named process
is ready; between rounds, each one still waited for must show **progress** — its log grew, or it
used ``cpu_quantum_s`` of CPU since its last progress (a process compiling numba kernels with a
cold cache logs nothing for minutes but runs flat out; one blocked on a socket does neither).
A process that is not ready and has shown no progress for ``silence_s`` fails the wait at once,
with its log tail; a dead one fails at the next round, with its log tail; one that keeps making
progress is waited for, up to ``ceiling_s`` (a backstop against a process that logs a retry
forever, not the readiness criterion). Why: a fixed 240 s start-up timeout failed the first
``make demo`` of a fresh clone on a busy 2-core machine while both maintenance units were still
compiling their kernels (issue 36); ``make`` now also warms the numba cache (``e2e.warm``).

CPU time is read from ``/proc/<pid>/stat`` (Linux; elsewhere only the log counts). Must not:
know what the processes are (``e2e.cluster`` names them and says what "ready" means).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from e2e.process import ClusterError, tail


@dataclass(frozen=True, slots=True)
class Patience:
    """How long a not-ready process may go without progress (``silence_s``), how much CPU counts
    as progress (``cpu_quantum_s``), and the backstop for the whole wait (``ceiling_s``)."""

    silence_s: float = 90.0
    ceiling_s: float = 1800.0
    cpu_quantum_s: float = 1.0

    def __post_init__(self) -> None:
        for name in ("silence_s", "ceiling_s", "cpu_quantum_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: expected > 0, got {getattr(self, name)}")


class Watched(Protocol):
    """What the wait reads of a process (``e2e.process.Child`` is one)."""

    @property
    def name(self) -> str: ...
    @property
    def log_path(self) -> Path: ...
    @property
    def pid(self) -> int | None: ...
    def alive(self) -> bool: ...


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU seconds of process ``pid`` (None: unknown or gone)."""
    if pid is None:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()  # after "pid (comm)": state is fields[0]
    try:
        return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime (fields 14, 15)
    except (IndexError, ValueError):
        return None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1


@dataclass(slots=True)
class _Mark:
    """A process's last progress: when, its log size and CPU time then."""

    at: float
    log_size: int
    cpu: float | None
    pid: int | None


@dataclass
class Progress:
    """Per process, when it last made progress (log growth or ``cpu_quantum_s`` of CPU)."""

    patience: Patience
    clock: Callable[[], float] = time.monotonic
    marks: dict[str, _Mark] = field(default_factory=dict)

    def silent_for(self, p: Watched) -> float:
        """Seconds since ``p`` last made progress (0 on first sight or after a restart)."""
        now, size, cpu, pid = self.clock(), _size(p.log_path), cpu_seconds(p.pid), p.pid
        m = self.marks.get(p.name)
        grew = m is not None and size > m.log_size
        busy = m is not None and cpu is not None and m.cpu is not None and (
            cpu - m.cpu >= self.patience.cpu_quantum_s
        )  # fmt: skip
        if m is None or m.pid != pid or grew or busy:
            self.marks[p.name] = _Mark(now, size, cpu, pid)
            return 0.0
        return now - m.at


def _tails(procs: Sequence[Watched], lines: int = 25) -> str:
    return "\n".join(f"--- end of {p.log_path} ---\n{tail(p.log_path, lines)}" for p in procs)


def wait_until_ready(
    step: Callable[[], list[str]],
    lookup: Callable[[str], Watched | None],
    patience: Patience,
    *,
    check_alive: Callable[[], None] = lambda: None,
    together: Sequence[Sequence[str]] = (),
    poll_s: float = 0.2,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> float:
    """Run probe rounds (``step``: the names still not ready; [] = all ready) until all are
    ready; return the seconds it took. A name ``lookup`` does not know (not started yet: e.g. a
    sidecar waiting for its engine) is waited for without a progress check; ``check_alive``
    raises for any other process that died. ``together``: sets of names that wait for each other
    (the maintenance units join one consumer group: the first in it idles until the last one
    has compiled its kernels), so one member's progress is the whole set's. Raises
    ``ClusterError`` naming the processes and with their log tails: one dead or silent for
    ``silence_s`` (at once), or every one still waiting once ``ceiling_s`` passed."""
    t0 = clock()
    progress = Progress(patience, clock)
    while True:
        check_alive()
        waiting = step()
        if not waiting:
            return clock() - t0
        procs = [p for p in map(lookup, waiting) if p is not None]
        dead = [p for p in procs if not p.alive()]
        if dead:
            check_alive()  # the owner's own report (exit code, log path) for one that died
            names = ", ".join(p.name for p in dead)  # just now, between the two checks
            raise ClusterError(f"{names} exited before it was ready\n{_tails(dead)}")
        quiet = {p.name: progress.silent_for(p) for p in procs}
        for group in together:  # a set moves as fast as its busiest member
            least = min((quiet[n] for n in group if n in quiet), default=0.0)
            quiet.update({n: least for n in group if n in quiet})
        silent = [p for p in procs if quiet[p.name] > patience.silence_s]
        if silent:
            names = ", ".join(p.name for p in silent)
            raise ClusterError(
                f"not ready and silent (no log line, under {patience.cpu_quantum_s:g} s of CPU) "
                f"for {patience.silence_s:.0f} s: {names}\n{_tails(silent)}"
            )
        if clock() - t0 > patience.ceiling_s:
            raise ClusterError(
                f"not ready after {patience.ceiling_s:.0f} s (still making progress): "
                f"{', '.join(waiting)}\n{_tails(procs[:3])}"
            )
        sleep(poll_s)


@dataclass(frozen=True, slots=True)
class _Proc:
    name: str
    log_path: Path
    pid: int

    def alive(self) -> bool:
        return True  # the blocking call ``wait_for`` follows reports the process's exit


def wait_for(
    done: Future[Any],
    name: str,
    log_path: Path,
    pid: Callable[[], int | None],
    patience: Patience,
    poll_s: float = 0.2,
) -> Any:
    """The result of ``done`` (a blocking start-up call running elsewhere, e.g. the local
    broker's ``up``), following the progress of the process it starts (``pid()``, None while it
    has not started: then only the ceiling applies) as ``wait_until_ready`` does."""

    def lookup(_name: str) -> Watched | None:
        p = pid()
        return None if p is None else _Proc(name, log_path, p)

    wait_until_ready(lambda: [] if done.done() else [name], lookup, patience, poll_s=poll_s)
    return done.result()
