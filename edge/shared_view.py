"""Reader mode: serve the view files that another edge process on the same host keeps current.

Owns following a view directory written by one *writer* edge (``view_mode = "writer"``, the
default, which consumes ``index-patches``): every ``offsets_flush_period_ms`` it reads each
file's 256-byte header (no mapping), and when the newest committed epoch of a (table, shard) or
its parameters changed (new epoch, or new seeds after a locator rebuild) it maps that file and
serves it (``IndexView.install``). Between such changes nothing is copied: both processes map the
same pages (``MAP_SHARED``), so the writer's bucket and word updates are visible to the reader at
once. Must not write to the files or consume Kafka for patches.

Known limit: a reader may look up while the writer is in the middle of applying one batch (the
writer applies between its own requests, the reader does not know when), so one lookup can see
a cuckoo move half done: a missed or spurious holder for that one request, which the score and
the cache belief absorb like any stale entry (paper §3.3). Epoch swaps are atomic for readers
(a new file is served only once its header says committed).
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from edge.app import EdgeApp
from kvcompass.errors import ViewFileError
from kvcompass.ludo import LudoView
from wire.view_files import FLAG_COMMITTED, HEADER_SIZE, open_view

_SIG = slice(16, 160)
"""Header bytes that change when a file must be re-mapped: table, shard, params, flags."""


def _header(path: Path) -> bytes | None:
    try:
        with path.open("rb") as f:
            head = f.read(HEADER_SIZE)
    except OSError:
        return None
    return head if len(head) == HEADER_SIZE else None


class ViewFileFollower:
    """Keeps ``edge.view`` serving the newest committed files of ``edge.config.view_dir``."""

    def __init__(self, edge: EdgeApp) -> None:
        if edge.config.view_dir is None:
            raise ViewFileError("reader mode needs view_dir (the writer edge's directory)")
        self.edge = edge
        self.directory = Path(edge.config.view_dir)
        self.installed: dict[tuple[int, int], tuple[int, bytes]] = {}
        self.refreshes = 0

    def refresh(self) -> int:
        """Install what changed since the last call; return how many views were (re)installed."""
        newest: dict[tuple[int, int], tuple[int, Path, bytes]] = {}
        for path in self.directory.glob("*.kvview"):
            parts = path.stem.split("-")  # t0000-s0000-e00000000
            head = _header(path)
            if head is None or len(parts) != 3:
                continue
            if not int.from_bytes(head[28:32], "little") & FLAG_COMMITTED:
                continue
            key = (int(parts[0][1:]), int(parts[1][1:]))
            epoch = int(parts[2][1:])
            if key not in newest or newest[key][0] < epoch:
                newest[key] = (epoch, path, head[_SIG])
        view = self.edge.view
        n = 0
        for (table, shard), (epoch, path, sig) in newest.items():
            if self.installed.get((table, shard)) == (epoch, sig):
                continue
            try:
                vf = open_view(path)
            except ViewFileError:  # the writer retired it meanwhile: next refresh
                continue
            view.install(table, shard, LudoView(vf.params, vf.arrays), vf.last_seq)
            self.installed[(table, shard)] = (epoch, sig)
            n += 1
        self.refreshes += 1
        if n:
            svc = self.edge.service
            svc.view_applied_ms = svc.clock_ms()
            svc.metrics.inc("view_files_installed_total", n)
        return n

    async def run(self, stop: asyncio.Event) -> None:
        period_s = self.edge.config.offsets_flush_period_ms / 1000.0
        while not stop.is_set():
            self.refresh()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), period_s)
