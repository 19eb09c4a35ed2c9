"""Fault scenarios against a started ``LocalCluster``, under a small background load.

Owns ``BackgroundLoad`` (a few asyncio clients in one thread, each pinned to one edge, sending
``POST /generate`` with prompts that share per-family prefixes, so the index fills, pages move to
DRAM and get evicted) and ``run_scenarios``: for each scenario, the load runs while the fault
happens and for ``settle_s`` after it; then the load pauses, the pipeline must become quiescent,
every edge's view must equal the truth rebuilt from ``kv-events`` (``check_views``), every
accepted event must appear in ``index-ops`` (``count_events``) and every engine's published
batches must imply the cache ``kv-events`` says its worker holds (``e2e.engine_check``).

Scenarios (``SCENARIOS``): ``baseline`` (no fault), ``maintenance-crash`` (SIGKILL maintenance 0,
run ``hold_s``, start it again), ``sidecar-crash`` (SIGKILL the sidecar of the first region's
first worker while its engine keeps publishing, ``hold_s`` down, start it again: CLEARED, then the
engine's replay buffer), ``edge-restart`` (SIGTERM + start the edge of the second region:
its clients see refused connections meanwhile, the others are served), ``broker-restart`` (only
when the cluster owns its broker; a bounded error burst is allowed and reported),
``queue-vectors-drop`` (``drop_queue_vectors(hold_s)``), ``poison-record`` (999,960 bytes of
garbage on ``kv-events``: one bounded dead letter, the valid events around it all applied),
``index-ops-lost`` (SIGKILL every maintenance process, delete every ``index-ops`` record as
retention would, start them again: each shard whose tail is gone rebuilds itself from
``kv-events``; the checks then account for the events after the deletion in ``index-ops`` and
for all of them in the views).

Must not: be the project's load generator for experiments (that is ``e2e/loadgen.py``).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import aiohttp
import numpy as np

from e2e import commands, probes
from e2e.cluster import LocalCluster
from e2e.engine_check import EngineCheck, check_engines
from e2e.probes import EventCount, ViewCheck

_ALPHABET = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz      .,", dtype=np.uint8)


@dataclass
class EdgeTally:
    served: int = 0
    refused: int = 0
    """Connection refused or reset: the edge process is not there (restart)."""
    failed: int = 0
    """An HTTP error status or a timeout from a running edge."""


@dataclass
class PhaseStats:
    """Requests started during one phase, per edge, and when failures happened."""

    name: str
    per_edge: dict[str, EdgeTally] = field(default_factory=dict)
    first_error_s: float | None = None
    last_error_s: float | None = None
    """Seconds since the phase started."""
    errors: dict[str, int] = field(default_factory=dict)
    """Error kind (status or exception name) -> count."""

    def _tally(self, region: str) -> EdgeTally:
        return self.per_edge.setdefault(region, EdgeTally())

    @property
    def served(self) -> int:
        return sum(t.served for t in self.per_edge.values())

    @property
    def refused(self) -> int:
        return sum(t.refused for t in self.per_edge.values())

    @property
    def failed(self) -> int:
        return sum(t.failed for t in self.per_edge.values())

    @property
    def error_window_s(self) -> float:
        """First to last failed or refused request of the phase (0: none or one)."""
        if self.first_error_s is None or self.last_error_s is None:
            return 0.0
        return self.last_error_s - self.first_error_s


class BackgroundLoad:
    """``clients`` asyncio clients in a daemon thread; client i talks to edge i mod n."""

    def __init__(
        self,
        edge_urls: dict[str, str],
        *,
        clients: int = 6,
        seed: int = 0,
        families: int = 24,
        prompt_tokens: tuple[int, int] = (300, 2200),
        max_new_tokens: int = 2,
        think_s: float = 0.05,
        timeout_s: float = 30.0,
    ) -> None:
        self.edge_urls = dict(edge_urls)
        self.clients = clients
        self.rng = np.random.default_rng(seed)
        lo, hi = prompt_tokens
        self.prefixes = [
            self._text(int(self.rng.integers(lo // 2, lo + 1))) for _ in range(families)
        ]
        self.lengths = (lo, hi)
        self.convs = list(self.prefixes)
        self.max_new_tokens = max_new_tokens
        self.think_s = think_s
        self.timeout_s = timeout_s
        self.phases: list[PhaseStats] = []
        self._phase: PhaseStats | None = None
        self._phase_t0 = 0.0
        self._go = threading.Event()
        self._quit = threading.Event()
        self._thread: threading.Thread | None = None
        self.in_flight = 0

    def _text(self, n: int) -> str:
        return bytes(self.rng.choice(_ALPHABET, size=n)).decode()

    def prompt(self) -> str:
        """The next turn of a random family's conversation: its previous prompt plus 64–400
        new tokens (so turns reuse ever longer prefixes), back to the family's prefix once longer
        than the upper prompt length."""
        fam = int(self.rng.integers(len(self.prefixes)))
        text = self.convs[fam] + self._text(int(self.rng.integers(64, 400)))
        if len(text) > self.lengths[1]:
            text = self.prefixes[fam] + self._text(int(self.rng.integers(64, 400)))
        self.convs[fam] = text
        return text

    # -- control (any thread) ----------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._main()), name="e2e-load", daemon=True
        )
        self._thread.start()

    def phase(self, name: str) -> PhaseStats:
        """Start counting a new phase and (re)start sending."""
        p = PhaseStats(name)
        self.phases.append(p)
        self._phase_t0 = time.monotonic()
        self._phase = p
        self._go.set()
        return p

    def pause(self, timeout_s: float = 60.0) -> None:
        """Stop sending and wait for the requests in flight."""
        self._go.clear()
        deadline = time.monotonic() + timeout_s
        while self.in_flight and time.monotonic() < deadline:
            time.sleep(0.05)

    def stop(self) -> None:
        self._go.clear()
        self._quit.set()
        if self._thread is not None:
            self._thread.join(self.timeout_s + 5)

    # -- the clients (load thread) -----------------------------------------------------------

    async def _main(self) -> None:
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        regions = list(self.edge_urls)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            await asyncio.gather(
                *(self._client(http, regions[i % len(regions)]) for i in range(self.clients))
            )

    async def _client(self, http: aiohttp.ClientSession, region: str) -> None:
        url = self.edge_urls[region] + "/generate"
        while not self._quit.is_set():
            phase = self._phase
            if not self._go.is_set() or phase is None:
                await asyncio.sleep(0.05)
                continue
            body = {
                "text": self.prompt(),
                "sampling_params": {"max_new_tokens": self.max_new_tokens},
            }
            self.in_flight += 1
            kind = ""
            answered = False  # a status line came back: the edge took the request
            try:
                async with http.post(url, json=body) as r:
                    answered = True
                    await r.read()
                    if r.status != 200:
                        kind = f"HTTP {r.status}"
            except (
                aiohttp.ClientConnectorError,
                aiohttp.ServerDisconnectedError,
                ConnectionResetError,
            ) as exc:
                kind = f"refused:{type(exc).__name__}"
            except aiohttp.ClientOSError as exc:
                # A reset while the request is written on a pooled keep-alive connection that the
                # stopping edge has just closed (HTTP/1.1's idle-close race): the edge never took
                # the request, so it is a refusal; a reset after the status line is a failure.
                kind = f"refused:{type(exc).__name__}" if not answered else type(exc).__name__
            except (TimeoutError, aiohttp.ClientError) as exc:
                kind = type(exc).__name__
            finally:
                self.in_flight -= 1
            self._count(phase, region, kind)
            await asyncio.sleep(self.think_s if not kind else 0.2)

    def _count(self, phase: PhaseStats, region: str, kind: str) -> None:
        t = phase._tally(region)
        if not kind:
            t.served += 1
            return
        if kind.startswith("refused:"):
            t.refused += 1
        else:
            t.failed += 1
        phase.errors[kind] = phase.errors.get(kind, 0) + 1
        at = time.monotonic() - self._phase_t0
        phase.first_error_s = at if phase.first_error_s is None else phase.first_error_s
        phase.last_error_s = at


@dataclass
class ScenarioResult:
    name: str
    fault: str
    """What was done."""
    fault_s: float
    """Seconds the fault action took (restart included)."""
    load: PhaseStats
    quiescent_s: float = 0.0
    views: ViewCheck | None = None
    events: EventCount | None = None
    engines: EngineCheck | None = None
    """What every engine published vs what ``kv-events`` holds (``e2e.engine_check``)."""
    error: str | None = None
    skipped: bool = False

    @property
    def ok(self) -> bool:
        if self.skipped:
            return True
        return (
            self.error is None
            and self.load.served > 0
            and self.views is not None
            and self.views.ok
            and self.events is not None
            and self.events.ok
            and self.engines is not None
            and self.engines.ok
        )


Fault = Callable[[LocalCluster, float], str]
"""(cluster, hold_s) -> description; runs while the load is on."""


def _baseline(c: LocalCluster, hold_s: float) -> str:
    time.sleep(hold_s)
    return f"none ({hold_s:.0f} s of load)"


def _sidecar_crash(c: LocalCluster, hold_s: float) -> str:
    w = c.region_workers(c.regions[0])[0]
    name = f"sidecar-{w}"
    c.expect_down(name, True)
    c.spawner.kill(name)  # SIGKILL mid-stream: nothing flushed, nothing said
    time.sleep(hold_s)  # its engine keeps serving and publishing; nobody subscribes
    marks = probes.ends(c.bootstrap, c.topics.kv_events)
    log_at = c.spawner.children[name].log_path.stat().st_size
    c.spawn(name, commands.sidecar(c.spec, w, c.worker_urls[w], c.bootstrap))
    c.expect_down(name, False)
    watch = probes.ClearedWatch(c.bootstrap, c.topics.kv_events, marks)
    try:

        def cleared() -> bool:
            watch.poll()
            return w in watch.cleared

        c.poll_until(cleared, [name], 90.0)
    finally:
        watch.close()
    with c.spawner.children[name].log_path.open(errors="replace") as f:
        f.seek(log_at)
        lost = "older than the engine's replay buffer" in f.read()
    how = ("its engine's replay buffer had lost events: degraded until it re-learns" if lost
           else "every batch again from the engine's replay buffer")  # fmt: skip
    return (f"SIGKILL {name}, {hold_s:.0f} s down while worker-{w} served and published; "
            f"started again: CLEARED, then {how}")  # fmt: skip


def _maintenance_crash(c: LocalCluster, hold_s: float) -> str:
    c.kill_maintenance(0)
    time.sleep(hold_s)
    c.start_maintenance(0)
    return f"SIGKILL maintenance-0, {hold_s:.0f} s down, started again"


def _edge_restart(c: LocalCluster, hold_s: float) -> str:
    region = c.regions[1 % len(c.regions)]
    c.restart_edge(region)
    return f"SIGTERM edge-{region}, started again on its view files"


def _broker_restart(c: LocalCluster, hold_s: float) -> str:
    took = c.restart_broker()
    return (
        f"broker stopped ({took['down']:.0f} s), started on its data ({took['up']:.0f} s), "
        f"maintenance group whole ({took['group']:.0f} s)"
    )


def _queue_vectors_drop(c: LocalCluster, hold_s: float) -> str:
    c.drop_queue_vectors(hold_s)
    return f"all sidecars paused {hold_s:.0f} s (no queue vectors)"


def _poison_record(c: LocalCluster, hold_s: float) -> str:
    from confluent_kafka import Producer

    from wire.kafka_clients import librdkafka_conf

    garbage = b"\x7b" + np.random.default_rng(13).bytes(999_959)  # no Avro magic: UNDECODABLE
    producer = Producer(librdkafka_conf(c.bootstrap, {"log_level": 3}))
    producer.produce(c.topics.kv_events, garbage, b"\x00\x00\x00\x00", 0)
    if producer.flush(30):
        raise RuntimeError("the poison record was not delivered")
    time.sleep(hold_s)
    return f"{len(garbage):,} bytes of garbage on {c.topics.kv_events}[0]"


def _index_ops_lost(c: LocalCluster, hold_s: float) -> str:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    from e2e.probes import ends
    from wire.kafka_clients import librdkafka_conf

    names = [n for n in c.spawner.children if n.startswith("maintenance-")]
    for n in names:  # a crash: no final checkpoint
        c.expect_down(n, True)
        c.spawner.kill(n)
    marks = ends(c.bootstrap, c.topics.index_ops)
    c.events_since = ends(c.bootstrap, c.topics.kv_events)  # ops of earlier events are deleted
    admin = AdminClient(librdkafka_conf(c.bootstrap, {"log_level": 3}))
    parts = [TopicPartition(c.topics.index_ops, p, high) for p, high in marks.items()]
    for fut in admin.delete_records(parts).values():
        fut.result(30)
    time.sleep(hold_s)
    for i in range(len(names)):
        c.start_maintenance(i)
    deleted = sum(marks.values())
    return (f"SIGKILL {len(names)} maintenance, all {deleted} index-ops records deleted, "
            f"{hold_s:.0f} s down, started again")  # fmt: skip


SCENARIOS: dict[str, Fault] = {
    "baseline": _baseline,
    "maintenance-crash": _maintenance_crash,
    "sidecar-crash": _sidecar_crash,
    "edge-restart": _edge_restart,
    "broker-restart": _broker_restart,
    "queue-vectors-drop": _queue_vectors_drop,
    "poison-record": _poison_record,
    "index-ops-lost": _index_ops_lost,
}


def run_scenarios(
    cluster: LocalCluster,
    names: Sequence[str] = tuple(SCENARIOS),
    *,
    hold_s: float = 12.0,
    settle_s: float = 5.0,
    load: BackgroundLoad | None = None,
    quiescent_timeout_s: float = 180.0,
    on_status: Callable[[str], None] | None = None,
    on_result: Callable[[ScenarioResult], None] | None = None,
) -> list[ScenarioResult]:
    """Run ``names`` in order on a started cluster; a failing check is recorded, not raised."""
    say = on_status or (lambda _m: None)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        raise ValueError(f"unknown scenarios {unknown}; expected some of {list(SCENARIOS)}")
    load = load or BackgroundLoad(cluster.edge_urls)
    load.start()
    results: list[ScenarioResult] = []
    try:
        for name in names:
            if name == "broker-restart" and cluster.broker is None:
                res = ScenarioResult(
                    name,
                    "skipped: the broker was given, not started here",
                    0.0,
                    PhaseStats(name),
                    skipped=True,
                )
            else:
                res = _run_one(cluster, name, load, hold_s, settle_s, quiescent_timeout_s, say)
            results.append(res)
            if on_result is not None:
                on_result(res)
    finally:
        load.stop()
    return results


def _run_one(
    cluster: LocalCluster,
    name: str,
    load: BackgroundLoad,
    hold_s: float,
    settle_s: float,
    quiescent_timeout_s: float,
    say: Callable[[str], None],
) -> ScenarioResult:
    phase = load.phase(name)
    say(f"{name}: fault under load")
    t0 = time.monotonic()
    res = ScenarioResult(name, "", 0.0, phase)
    try:
        res.fault = SCENARIOS[name](cluster, hold_s)
        res.fault_s = time.monotonic() - t0
        say(f"{name}: {settle_s:.0f} s more load")
        time.sleep(settle_s)
    except Exception as exc:  # record it and still check what state the cluster is in
        res.error = f"{type(exc).__name__}: {exc}"
        res.fault_s = time.monotonic() - t0
    load.pause()
    if cluster.broker is not None and cluster.broker.running_pid() is None:
        res.error = (res.error or "") + "; the broker is down: checks skipped"
        return res
    say(f"{name}: waiting for quiescence")
    t1 = time.monotonic()
    try:
        cluster.wait_quiescent(quiescent_timeout_s)
        res.quiescent_s = time.monotonic() - t1
        say(f"{name}: checking views and events")
        res.views = cluster.check_views()
        res.events = cluster.count_events()
        infos = {w: json.loads(probes.http("GET", url + "/server_info", None, 10.0)[1])
                 for w, url in cluster.worker_urls.items()}  # fmt: skip
        res.engines = check_engines(cluster.bootstrap, cluster.topics.kv_events, cluster.dep,
                                    cluster.spec.model, cluster.worker_urls, infos)  # fmt: skip
    except Exception as exc:
        res.error = (res.error + "; " if res.error else "") + f"{type(exc).__name__}: {exc}"
    return res
