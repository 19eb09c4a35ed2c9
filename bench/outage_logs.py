"""Log lines a broker outage costs, and how long each process kind takes to stop without a broker.

Starts a small deployment (``e2e.LocalCluster``: 1 maintenance process, 3 emulated workers with
their sidecars, 3 edges) on a broker of its own, puts a little load on it, stops the broker for
``--outage-s`` (default 12) and counts, per process log, the lines written meanwhile (WARNING,
ERROR, librdkafka's ``%N|`` lines, tracebacks); then stops the broker for good and SIGTERMs a
sidecar, an edge, an emulated worker and the maintenance process in turn, printing each one's
exit time and status (3: ended by its stop deadline, ``wire.stopping``). Figures for issue 26
items 4 and 8 (``e2e/README.md``, ``bench/README.md``). Wall-clock figures on a shared machine:
read them as orders of magnitude.

    python -m bench.outage_logs /tmp/outage [--outage-s 12] [--json]
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

from e2e.cluster import ClusterSpec, LocalCluster
from e2e.faults import BackgroundLoad
from e2e.spec import small_testbed

_LEVEL = re.compile(r"\b(ERROR|WARNING|CRITICAL)\b|^%\d\|")


def _sizes(logs: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in logs.glob("*.log")}


def _count(logs: Path, before: dict[str, int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for p in sorted(logs.glob("*.log")):
        lines = p.read_bytes()[before.get(p.name, 0) :].decode(errors="replace").splitlines()
        kinds: Counter[str] = Counter()
        for line in lines:
            m = _LEVEL.search(line)
            if m:
                kinds["librdkafka" if m.group(0).startswith("%") else m.group(0)] += 1
        kinds["traceback"] = sum(line.startswith("Traceback") for line in lines)
        out[p.name.removesuffix(".log")] = {"lines": len(lines), **kinds}
    return out


def main() -> None:
    a = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    a.add_argument("run_dir", type=Path)
    a.add_argument("--outage-s", type=float, default=12.0)
    a.add_argument("--json", action="store_true")
    args = a.parse_args()
    args.run_dir.mkdir(parents=True, exist_ok=True)
    dep = small_testbed(args.run_dir, 1)
    spec = ClusterSpec(deployment=str(dep), time_scale=0.05, n_maintenance=1)
    c = LocalCluster(spec, args.run_dir / "run")
    logs = args.run_dir / "run" / "logs"
    result: dict[str, Any] = {}
    try:
        c.start()
        load = BackgroundLoad(c.edge_urls, clients=2, seed=1)
        load.start()
        load.phase("outage")
        time.sleep(5)
        before = _sizes(logs)
        c.broker.down()
        time.sleep(args.outage_s)
        c.spawner.on_thread(lambda: c.broker.up(timeout_s=240))
        result["outage_lines"] = _count(logs, before)
        time.sleep(10)
        load.pause()
        load.stop()
        c.broker.down()
        time.sleep(3)
        stops: dict[str, Any] = {}
        for name in ("sidecar-0", "edge-us", "worker-0", "maintenance-0"):
            child = c.spawner.children[name]
            c.expect_down(name, True)
            t0 = time.monotonic()
            child.signal_group(signal.SIGTERM)
            assert child.popen is not None
            try:
                child.popen.wait(90)
                stops[name] = {"exit_s": round(time.monotonic() - t0, 1),
                               "status": child.popen.returncode}  # fmt: skip
            except Exception:
                stops[name] = {"exit_s": None, "status": "alive after 90 s"}
        result["stop_without_broker"] = stops
    finally:
        c.stop()
    if args.json:
        print(json.dumps(result))
        return
    print(f"lines written during a {args.outage_s:.0f} s broker outage:")
    for name, kinds in result["outage_lines"].items():
        print(f"  {name:16s} {kinds}")
    print("SIGTERM with the broker gone:")
    for name, s in result["stop_without_broker"].items():
        print(f"  {name:16s} exited after {s['exit_s']} s, status {s['status']}")


if __name__ == "__main__":
    main()
