"""Work on its way to each worker that its last queue reading cannot include (herding guard).

Owns, for one edge, every forward known to head for each worker — this edge's own, and those
other edges reported in their in-flight lists — with the time it reaches the worker and its
predicted prefill work. A queue reading of worker w taken at T includes exactly the forwards
that reached w by T, so the work to add to that reading is the sum over known forwards that
reach w after T. That is the herding guard made exact in time: a remote vector taken before
this edge's last forwards landed no longer erases them (the old rule zeroed all pending work at
any refresh), and other edges' forwards, which no reading can show until they land and the next
vector crosses the WAN, are counted from their own edge's report (paper §3.4's vectors extended
to carry in-flight work; an edge learns another's forwards one broadcast + one WAN late).

Per worker the ledger is a list of (arrive_ms, work_ms, source); source -1 is this edge, r >= 0
the edge of region r. Must not know the score or talk to anything; the queue view asks for the
pending sum after every change.
"""

from __future__ import annotations

from collections.abc import Iterable

OWN = -1
"""Source tag of this edge's own forwards."""


class ForwardLedger:
    """Known forwards per worker; ``pending_after(w, t)`` is the work landing after ``t``."""

    __slots__ = ("_by_worker", "_peer_workers")

    def __init__(self, n_workers: int) -> None:
        self._by_worker: list[list[tuple[float, float, int]]] = [[] for _ in range(n_workers)]
        self._peer_workers: dict[int, set[int]] = {}  # source -> workers it reported

    def add_own(self, worker: int, arrive_ms: float, work_ms: float) -> None:
        """This edge forwarded ``work_ms`` of prefill that reaches ``worker`` at ``arrive_ms``."""
        self._by_worker[worker].append((arrive_ms, work_ms, OWN))

    def own_in_flight(self, now_ms: float) -> list[tuple[int, float, float]]:
        """(worker, arrive_ms, work_ms) of this edge's forwards not yet landed at ``now_ms``:
        the in-flight list this edge sends with its region's queue vector."""
        out: list[tuple[int, float, float]] = []
        for w, entries in enumerate(self._by_worker):
            for arrive, work, src in entries:
                if src == OWN and arrive > now_ms:
                    out.append((w, arrive, work))
        return out

    def set_peer(self, source: int, entries: Iterable[tuple[int, float, float]]) -> set[int]:
        """Replace region ``source``'s reported in-flight list; return the workers touched."""
        touched = self._peer_workers.pop(source, set())
        for w in touched:
            self._by_worker[w] = [e for e in self._by_worker[w] if e[2] != source]
        now_set: set[int] = set()
        for w, arrive, work in entries:
            self._by_worker[w].append((arrive, work, source))
            now_set.add(w)
        if now_set:
            self._peer_workers[source] = now_set
        return touched | now_set

    def add_peer(self, source: int, worker: int, arrive_ms: float, work_ms: float) -> None:
        """Region ``source``'s edge announced one forward (until its next list replaces it)."""
        self._by_worker[worker].append((arrive_ms, work_ms, source))
        self._peer_workers.setdefault(source, set()).add(worker)

    def pending_after(self, worker: int, taken_ms: float) -> float:
        """Work of the known forwards reaching ``worker`` after ``taken_ms``; older ones (already
        in any reading taken since) are dropped."""
        entries = self._by_worker[worker]
        keep = [e for e in entries if e[0] > taken_ms]
        if len(keep) != len(entries):
            self._by_worker[worker] = keep
            for src in {e[2] for e in entries} - {e[2] for e in keep}:
                if src != OWN:
                    self._peer_workers.get(src, set()).discard(worker)
        return sum(e[1] for e in keep)
