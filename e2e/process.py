"""Child processes of the launcher: spawn with a log file, signal, stop, and show a log's tail.

Owns the life of every subprocess ``e2e.cluster`` starts: each runs in its own session (so a
Ctrl-C in the terminal reaches only the launcher, which stops the children in its own order, and
a signal to the child's group also reaches anything it forks), writes stdout+stderr to one log
file (appended across restarts, with a ``=== start`` line per start), and gets SIGKILL from the
kernel if the launcher dies (``PR_SET_PDEATHSIG``), so even ``kill -9`` of the launcher leaves no
orphan. SIGKILL, not SIGTERM: a Faust worker whose broker is gone too hangs in its SIGTERM
shutdown forever (seen: an orphan after the launcher aborted). The orderly path is ``stop``.

Why one spawner thread: the kernel sends the parent-death signal when the *thread* that forked
the child exits, not the process. All forks therefore happen on one long-lived thread owned by
``Spawner``, which is shut down only after every child is gone; callers may be on any thread.
Must not: know what the processes are (``e2e.cluster`` does).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TypeVar

from wire.config import PipelineConfig

_PR_SET_PDEATHSIG = 1
T = TypeVar("T")


class ClusterError(RuntimeError):
    """A process did not start, did not become ready, or a check timed out (message says which,
    and where its log is)."""


def _die_with_parent() -> None:
    # Runs in the forked child before exec.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a log file ('(no log)' if unreadable)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(size - 64 * 1024, 0))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


@dataclass
class Child:
    """One named process: its command line, log file, and the running ``Popen`` (if any)."""

    name: str
    argv: list[str]
    log_path: Path
    cwd: Path
    env: dict[str, str]
    popen: subprocess.Popen[bytes] | None = None
    starts: int = 0
    started_at: float = 0.0
    stopped: bool = field(default=False)
    """SIGSTOPped (paused) right now."""

    @property
    def pid(self) -> int | None:
        return None if self.popen is None else self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        return f"--- end of {self.log_path} ---\n{tail(self.log_path, lines)}"

    def signal_group(self, sig: int) -> None:
        """Send ``sig`` to the child's process group (its own session), if the child is alive:
        a reaped pid may already belong to someone else."""
        if not self.alive() or self.popen is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, sig)


class Spawner:
    """Starts children on one dedicated thread (see the module docstring) and stops them."""

    def __init__(self) -> None:
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="e2e-spawner")
        self.children: dict[str, Child] = {}

    def on_thread(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the spawner thread (anything that forks a long-lived child)."""
        return self._thread.submit(fn).result()

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        """``on_thread`` without waiting: the caller follows the child's progress meanwhile."""
        return self._thread.submit(fn)

    def spawn(
        self, name: str, argv: Sequence[str], log_path: Path, cwd: Path, env: dict[str, str]
    ) -> Child:
        """Start (or restart) ``name``; a running one is an error."""
        child = self.children.get(name)
        if child is not None and child.alive():
            raise ClusterError(f"{name}: already running (pid {child.pid})")
        if child is None:
            child = Child(name, list(argv), log_path, cwd, env)
            self.children[name] = child
        log_path.parent.mkdir(parents=True, exist_ok=True)
        cwd.mkdir(parents=True, exist_ok=True)

        def start() -> subprocess.Popen[bytes]:
            with open(child.log_path, "ab") as log:
                stamp = time.strftime("%Y-%m-%d %H:%M:%S")
                log.write(f"=== start {stamp}: {' '.join(child.argv)}\n".encode())
                log.flush()
                return subprocess.Popen(
                    child.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=child.cwd,
                    env=child.env,
                    start_new_session=True,
                    preexec_fn=_die_with_parent,
                )

        child.popen = self.on_thread(start)
        child.starts += 1
        child.started_at = time.monotonic()
        child.stopped = False
        return child

    def kill(self, name: str) -> None:
        """SIGKILL ``name`` (a crash) and reap it."""
        child = self.children[name]
        if not child.alive() or child.popen is None:
            return
        child.signal_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.popen.wait(10)

    def pause(self, name: str, paused: bool) -> None:
        """SIGSTOP / SIGCONT the whole process group of ``name``."""
        child = self.children[name]
        child.signal_group(signal.SIGSTOP if paused else signal.SIGCONT)
        child.stopped = paused

    def stop(self, names: Sequence[str], timeout_s: float = 15.0) -> list[str]:
        """SIGTERM every named child at once, wait up to ``timeout_s``, SIGKILL the rest.
        Returns the names that needed SIGKILL."""
        live = [self.children[n] for n in names if n in self.children]
        live = [c for c in live if c.alive()]
        for c in live:
            if c.stopped:  # a paused process cannot act on SIGTERM
                c.signal_group(signal.SIGCONT)
                c.stopped = False
            c.signal_group(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        try:
            while any(c.alive() for c in live) and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            killed = [c.name for c in live if c.alive()]
            for c in live:
                if c.alive():  # never signal a reaped pid: it may belong to someone else now
                    c.signal_group(signal.SIGKILL)
                if c.popen is not None:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        c.popen.wait(10)
        return killed

    def kill_all(self) -> None:
        """Last resort (exceptions inside ``stop``): SIGKILL every child still alive."""
        for c in self.children.values():
            if c.alive():
                c.signal_group(signal.SIGKILL)
        for c in self.children.values():
            if c.popen is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    c.popen.wait(5)

    def close(self) -> None:
        self._thread.shutdown(wait=True)


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_ports(n: int, rng: random.Random | None = None) -> list[int]:
    """``n`` distinct ports that are free now, chosen BELOW the kernel's ephemeral range.

    Why not ``bind(0)``: that hands out an ephemeral port, and between choosing it and the child
    binding it (an edge binds only after its views caught up, tens of seconds later) any outgoing
    connection on this host may take it as its local port. Ports below the range are only ever
    taken by an explicit bind."""
    rng = rng or random.Random()
    top = _ephemeral_start()
    out: list[int] = []
    for port in rng.sample(range(20_000, top), min(top - 20_000, 50 * n + 100)):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        out.append(port)
        if len(out) == n:
            return out
    raise ClusterError(f"no {n} free ports between 20000 and {top}")


def child_env() -> dict[str, str]:
    """The launcher's environment without what would override the flags we pass (the sidecars
    and pipeline read ``KAFKA_BOOTSTRAP_SERVERS`` and ``KVCOMPASS_<field>`` over their flags)."""
    pipeline_vars = {"KVCOMPASS_" + f.name.upper() for f in fields(PipelineConfig)}
    env = {
        k: v
        for k, v in os.environ.items()
        if k != "KAFKA_BOOTSTRAP_SERVERS" and k not in pipeline_vars
    }
    env["PYTHONUNBUFFERED"] = "1"
    return env
