"""e2e.readiness with real child processes: one that keeps logging, or keeps computing without a
word (a cold numba cache), is waited for past the silence bound; one silent or dead fails at
once with its log tail; one that logs forever hits the ceiling.

Deterministic: the wait's clock is the test's, and each of its pauses is one step of the child
(the test writes ``go`` on its stdin and reads its ``ack`` on stderr), so what the child did
between two probe rounds never depends on the machine's speed."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.process import Child, ClusterError
from e2e.readiness import Patience, wait_until_ready

CHILD = r"""
import sys, time
mode, ready_after, marker = sys.argv[1], int(sys.argv[2]), sys.argv[3]
print("connecting to the broker", flush=True)
for n, _ in enumerate(sys.stdin, 1):
    if mode == "log":
        print(f"compiling kernel {n}", flush=True)
    elif mode == "cpu":
        t = time.process_time()
        while time.process_time() - t < 0.15:
            pass
    elif mode == "die":
        print("boom: no such topic", flush=True)
        sys.stderr.write("ack\n"); sys.stderr.flush()
        sys.exit(3)
    if n == ready_after:
        open(marker, "w").close()
    sys.stderr.write("ack\n"); sys.stderr.flush()
"""
STEP_S = 6.0
PATIENCE = Patience(silence_s=10.0, ceiling_s=1000.0, cpu_quantum_s=0.1)


class Run:
    """One child under the wait, the test's clock, and the wait's pauses as the child's steps."""

    def __init__(
        self, tmp: Path, mode: str, ready_after: int = 10**9, name: str = "maintenance-0"
    ) -> None:
        self.marker = tmp / f"{name}.ready"
        log = tmp / f"{name}.log"
        with log.open("wb") as out:
            popen = subprocess.Popen(
                [sys.executable, "-c", CHILD, mode, str(ready_after), str(self.marker)],
                stdin=subprocess.PIPE, stdout=out, stderr=subprocess.PIPE,
            )  # fmt: skip
        self.child = Child(name, [], log, tmp, {}, popen)
        self.now = 0.0
        self.steps = 0

    def clock(self) -> float:
        return self.now

    def sleep(self, _s: float) -> None:
        p = self.child.popen
        assert p is not None and p.stdin is not None and p.stderr is not None
        if p.poll() is None:
            p.stdin.write(b"go\n")
            p.stdin.flush()
            assert p.stderr.readline() == b"ack\n"
            if self.child.argv == ["die"]:
                p.wait(30)
        self.steps += 1
        self.now += STEP_S

    def wait(self, patience: Patience = PATIENCE) -> float:
        return wait_until_ready(
            lambda: [] if self.marker.exists() else [self.child.name],
            lambda name: self.child if name == self.child.name else None,
            patience, clock=self.clock, sleep=self.sleep,
        )  # fmt: skip

    def close(self) -> None:
        p = self.child.popen
        assert p is not None
        p.kill()
        p.wait(30)
        for f in (p.stdin, p.stderr):
            if f is not None:
                f.close()


@pytest.fixture
def runs(tmp_path: Path) -> Iterator[list[Run]]:
    made: list[Run] = []
    yield made
    for r in made:
        r.close()


def _run(
    runs: list[Run], tmp: Path, mode: str, ready_after: int = 10**9, name: str = "maintenance-0"
) -> Run:
    r = Run(tmp, mode, ready_after, name)
    runs.append(r)
    return r


def test_a_process_that_keeps_logging_is_waited_for_past_the_silence_bound(
    tmp_path: Path, runs: list[Run]
) -> None:
    r = _run(runs, tmp_path, "log", ready_after=8)
    took = r.wait()
    assert took >= 8 * STEP_S > PATIENCE.silence_s  # one fixed 10 s timeout would have failed
    assert "compiling kernel 8" in r.child.log_path.read_text()


def test_a_process_computing_without_a_word_is_waited_for__numba_compiling(
    tmp_path: Path, runs: list[Run]
) -> None:
    r = _run(runs, tmp_path, "cpu", ready_after=6)
    took = r.wait()
    assert took >= 6 * STEP_S > PATIENCE.silence_s
    assert r.child.log_path.read_text() == "connecting to the broker\n"  # not a word since


def test_a_silent_process_fails_fast_with_its_log_tail(tmp_path: Path, runs: list[Run]) -> None:
    r = _run(runs, tmp_path, "silent")
    with pytest.raises(ClusterError) as err:
        r.wait()
    text = str(err.value)
    assert "maintenance-0" in text and "silent" in text
    assert "connecting to the broker" in text and str(r.child.log_path) in text
    assert r.now <= PATIENCE.silence_s + 2 * STEP_S < PATIENCE.ceiling_s  # not the ceiling


def test_a_dead_process_fails_at_the_next_round_with_its_log_tail(
    tmp_path: Path, runs: list[Run]
) -> None:
    r = _run(runs, tmp_path, "die")
    r.child.argv = ["die"]  # the test's pause waits for its exit
    with pytest.raises(ClusterError) as err:
        r.wait()
    assert "maintenance-0 exited before it was ready" in str(err.value)
    assert "boom: no such topic" in str(err.value)
    assert r.steps == 1


def test_a_process_that_logs_forever_but_is_never_ready_hits_the_ceiling(
    tmp_path: Path, runs: list[Run]
) -> None:
    r = _run(runs, tmp_path, "log")
    with pytest.raises(ClusterError) as err:
        r.wait(Patience(silence_s=10.0, ceiling_s=40.0, cpu_quantum_s=0.1))
    assert "not ready after 40 s (still making progress): maintenance-0" in str(err.value)
    assert 40.0 < r.now <= 40.0 + STEP_S


@pytest.mark.parametrize("together", [True, False])
def test_processes_that_wait_for_each_other_share_progress(
    tmp_path: Path, runs: list[Run], together: bool
) -> None:
    """Two maintenance units: the first joined the group and idles without a word while the
    second still compiles; the group is ready when the second is. Together, the idle one is
    waited for; alone, it would be the silent one."""
    idle = _run(runs, tmp_path, "silent", name="maintenance-0")
    busy = _run(runs, tmp_path, "log", ready_after=6, name="maintenance-1")
    names = [idle.child.name, busy.child.name]
    children = {r.child.name: r.child for r in (idle, busy)}

    def sleep(s: float) -> None:
        idle.sleep(s)
        busy.sleep(s)

    def wait() -> float:
        return wait_until_ready(
            lambda: [] if busy.marker.exists() else names, children.get, PATIENCE,
            together=[names] if together else (), clock=busy.clock, sleep=sleep,
        )  # fmt: skip

    if together:
        assert wait() >= 6 * STEP_S > PATIENCE.silence_s
    else:
        with pytest.raises(ClusterError, match=r"silent .*: maintenance-0\n"):
            wait()


def test_a_process_not_started_yet_is_waited_for_without_a_progress_check() -> None:
    now = [0.0]
    rounds = iter([["sidecar-0"]] * 5 + [[]])

    def sleep(_s: float) -> None:
        now[0] += STEP_S

    took = wait_until_ready(lambda: next(rounds), lambda _n: None, PATIENCE,
                            clock=lambda: now[0], sleep=sleep)  # fmt: skip
    assert took == 5 * STEP_S > PATIENCE.silence_s


def test_patience_refuses_non_positive_bounds() -> None:
    with pytest.raises(ValueError, match="silence_s"):
        Patience(silence_s=0)
