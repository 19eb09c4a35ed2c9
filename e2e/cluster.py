"""``LocalCluster``: a whole multi-region KVCompass deployment as real processes on one machine.

Owns starting, probing, faulting and stopping every process of a deployment (default the
paper's 14-worker, 3-region testbed), each a subprocess of the ``kvcompass`` CLI
(``sys.executable -m cli ...``) with its log in ``run_dir/logs/<name>.log``:

``broker`` (``wire.kafka_local.LocalBroker`` in ``run_dir/broker``, unless
``bootstrap_servers`` is given), ``maintenance-<i>`` (``kvcompass pipeline worker``, one Faust app
id: Kafka splits the shards), ``worker-<w>`` (``kvcompass worker emulate``), ``sidecar-<w>``
(``kvcompass worker sidecar``: bridge + load reporter + migrations) and ``edge-<region>``
(``kvcompass edge --config run_dir/edge-<region>.toml``: every worker, the other regions' edges as
peers, views in ``run_dir/views/<region>``). Command lines: ``e2e.commands``; table:
``e2e/README.md``.

Ports and URLs: ``e2e.layout``; SGLang's gateways (the demo's local baseline): ``e2e.gateways``.

**WAN emulation.** This kernel has no ``netem`` qdisc (``tc qdisc ... netem`` answers "Specified
qdisc kind is unknown"; network namespaces work), so the WAN is injected by the edge's forwarder:
``wan_delay_scale = time_scale`` makes every cross-region hop sleep the deployment's one-way
latency × scale before sending and again when the response headers arrive. Queue vectors and
index patches travel through the one local broker without WAN delay.

Start-up is concurrent (everything is launched, then health is polled): broker, topics, then
maintenance units + workers + edges at once, sidecars as soon as their worker answers (they read
its ``/server_info``). Ready = every worker and edge answers ``/health``, every sidecar's
start-up ``CLEARED`` event is in ``kv-events``, every maintenance process joined the group, and
the pipeline is quiescent. Every wait follows progress (``e2e.readiness``): a process still
starting (its log grows, or it computes: numba compiling kernels) is waited for; one dead, or
silent for ``ClusterSpec.start_silence_s``, fails the start at once with its log tail;
``start_timeout_s`` is only the backstop. The quiescence wait fails when the pipeline's gap
stops changing for as long. ``stop`` (also on exceptions, ``KeyboardInterrupt`` and interpreter
exit) SIGTERMs the tiers in order edges → sidecars → workers → maintenance → broker, waits,
SIGKILLs stragglers; children also get SIGKILL from the kernel if the launcher dies.

Must not: change what the processes do (only flags and config files the CLI already takes).
"""

from __future__ import annotations

import atexit
import secrets
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from e2e import commands, probes
from e2e.gateways import Gateways
from e2e.layout import Layout
from e2e.probes import EventCount, ViewCheck
from e2e.process import Child, ClusterError, Spawner, child_env
from e2e.readiness import Patience, Watched, wait_for, wait_until_ready
from e2e.spec import ClusterSpec
from kvcompass.deployment import Deployment
from pipeline.rechunk_consumer import rechunk_group
from wire.config import PipelineConfig
from wire.deployments import load_deployment
from wire.kafka_clients import librdkafka_conf
from wire.kafka_local import BrokerError

__all__ = ["ClusterError", "ClusterSpec", "EventCount", "LocalCluster", "ViewCheck"]


class LocalCluster:
    """``with LocalCluster(spec, run_dir) as c:`` starts on enter and stops on exit."""

    def __init__(
        self, spec: ClusterSpec, run_dir: Path, on_status: Callable[[str], None] | None = None
    ) -> None:
        self.spec = spec
        self.run_dir = Path(run_dir).resolve()
        self.on_status = on_status or (lambda _msg: None)
        self.dep: Deployment = load_deployment(spec.deployment)
        self.regions = [r.name for r in self.dep.regions]
        self.n_workers = int(self.dep.worker_region.size)
        layout = Layout.plan(self.regions, self.n_workers, spec.base_port)
        self.edge_urls = layout.edge_urls
        self.worker_urls = layout.worker_urls
        self.gateway_urls = layout.gateway_urls
        """One SGLang gateway per region (``gateways``); not started by ``start``."""
        self.layout = layout
        self._broker_ports = layout.broker_ports
        self.broker: Any = None
        """``wire.kafka_local.LocalBroker`` when this cluster started the broker."""
        self.bootstrap = spec.bootstrap_servers or f"127.0.0.1:{self._broker_ports[0]}"
        self.pipe = PipelineConfig(
            bootstrap_servers=self.bootstrap, n_shards=spec.n_shards, topic_prefix=spec.topic_prefix
        )
        self.topics = self.pipe.topics
        self.app_id = f"{spec.topic_prefix}kvcompass-pipeline"
        self.logs = self.run_dir / "logs"
        self.spawner = Spawner()
        self.startup_s: float | None = None
        """Seconds from ``start()`` to every process ready and the pipeline quiescent."""
        self._env = child_env()
        self._started = False
        self.events_since: dict[int, int] | None = None
        """``kv-events`` offsets from which ``count_events`` accounts (``delete_index_ops``)."""
        self._down: set[str] = set()
        """Children stopped on purpose (a fault in progress): not an error when found dead."""
        self.gateways = Gateways(self)

    # -- layout ------------------------------------------------------------------------------

    def view_dir(self, region: str) -> Path:
        return self.run_dir / "views" / region

    def spawn(self, name: str, argv: list[str], cwd: Path | None = None) -> Child:
        """Start (or restart) child ``name`` with its log in ``logs/<name>.log``."""
        return self._spawn(name, argv, cwd)

    def expect_down(self, name: str, down: bool) -> None:
        """Mark ``name`` as stopped on purpose (``down``), or as expected to run again."""
        (self._down.add if down else self._down.discard)(name)

    def _spawn(self, name: str, argv: list[str], cwd: Path | None = None) -> Child:
        return self.spawner.spawn(
            name, argv, self.logs / f"{name}.log", cwd or self.run_dir, self._env
        )

    def _write_edge_toml(self, region: str) -> None:
        key_file = self.run_dir / "relay.key"  # the run's relay key: one secret for its edges
        if not key_file.exists():
            key_file.write_text(secrets.token_hex(32), encoding="utf-8")
        text = commands.edge_toml(
            self.spec, region, int(self.edge_urls[region].rsplit(":", 1)[1]),
            self.view_dir(region), self.worker_urls, self.edge_urls, self.bootstrap,
            key_file.read_text(encoding="utf-8").strip(),
        )  # fmt: skip
        (self.run_dir / f"edge-{region}.toml").write_text(text, encoding="utf-8")

    # -- starting ----------------------------------------------------------------------------

    def _start_maintenance(self, i: int) -> Child:
        # Faust keeps a data directory in its working directory: one per process.
        argv = commands.maintenance(self.spec, self.bootstrap)
        return self._spawn(f"maintenance-{i}", argv, self.run_dir / f"maintenance-{i}")

    def _start_worker(self, w: int) -> Child:
        port = int(self.worker_urls[w].rsplit(":", 1)[1])
        return self._spawn(f"worker-{w}", commands.worker(self.spec, self.dep, w, port))

    def _start_sidecar(self, w: int) -> Child:
        argv = commands.sidecar(self.spec, w, self.worker_urls[w], self.bootstrap)
        return self._spawn(f"sidecar-{w}", argv)

    def _start_edge(self, region: str) -> Child:
        argv = commands.edge(region, self.run_dir / f"edge-{region}.toml")
        return self._spawn(f"edge-{region}", argv)

    def _names(self, kind: str) -> list[str]:
        ids = {"edge": self.regions, "gateway": self.regions,
               "maintenance": range(self.spec.n_maintenance)}  # fmt: skip
        return [f"{kind}-{i}" for i in ids.get(kind, range(self.n_workers))]

    def start(self) -> None:
        """Start everything and wait until it is ready (see the module docstring)."""
        if self._started:
            raise ClusterError("cluster already started")
        self._started = True
        atexit.register(self.stop)
        t0 = time.monotonic()
        try:
            self._start_all(t0)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - t0
        self.on_status(f"cluster ready in {self.startup_s:.1f} s")

    def _start_all(self, t0: float) -> None:
        s = self.spec
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if s.bootstrap_servers is None:
            from wire.kafka_local import LocalBroker

            port, controller = self._broker_ports
            self.broker = LocalBroker(port, controller_port=controller, die_with_parent=True,
                                      state_dir=self.run_dir / "broker")  # fmt: skip
            # The broker is this run's: data of an earlier run in the same run_dir goes.
            self.broker.down()
            shutil.rmtree(self.run_dir / "broker", ignore_errors=True)
            self.on_status(f"starting broker on {self.bootstrap}")
            self._broker_up(s.start_timeout_s)
        from wire.topics import ensure_topics

        ensure_topics(AdminClient(librdkafka_conf(self.bootstrap, {"log_level": 3})), self.pipe)
        shutil.rmtree(self.run_dir / "views", ignore_errors=True)  # views of an earlier run
        for r in self.regions:
            self.view_dir(r).mkdir(parents=True, exist_ok=True)
            self._write_edge_toml(r)
        marks = probes.ends(self.bootstrap, self.topics.kv_events)
        self.on_status(
            f"launching {s.n_maintenance} maintenance, {self.n_workers} workers, "
            f"{len(self.regions)} edges"
        )
        for i in range(s.n_maintenance):
            self._start_maintenance(i)
        for w in range(self.n_workers):
            self._start_worker(w)
        for r in self.regions:
            self._start_edge(r)
        pending_workers = set(range(self.n_workers))
        watch = probes.ClearedWatch(self.bootstrap, self.topics.kv_events, marks)
        edges_up: set[str] = set()
        group_ok = False

        def waiting() -> list[str]:
            """One probe round: start the sidecars of healthy workers; what is not ready yet."""
            nonlocal group_ok
            for w in sorted(pending_workers):
                if probes.healthy(self.worker_urls[w]):
                    pending_workers.discard(w)
                    self._start_sidecar(w)
            edges_up.update(r for r, url in self.edge_urls.items()
                            if r not in edges_up and probes.healthy(url))  # fmt: skip
            watch.poll()
            if not group_ok:
                group_ok = self._group_size() >= s.n_maintenance
            out = [f"worker-{w}" for w in sorted(pending_workers)]
            out += [f"edge-{r}" for r in self.regions if r not in edges_up]
            out += [f"sidecar-{w}" for w in range(self.n_workers) if w not in watch.cleared]
            return out if group_ok else out + self._names("maintenance")

        try:
            wait_until_ready(waiting, self._watched, self._patience(), together=[self._names(
                "maintenance")], check_alive=self._check_alive)  # fmt: skip
        finally:
            watch.close()
        self.on_status(
            f"all processes up after {time.monotonic() - t0:.1f} s; waiting for the pipeline"
        )
        self.wait_quiescent(s.start_silence_s)

    def _patience(self, ceiling_s: float | None = None) -> Patience:
        return Patience(silence_s=self.spec.start_silence_s,
                        ceiling_s=ceiling_s or self.spec.start_timeout_s)  # fmt: skip

    def _watched(self, name: str) -> Watched | None:
        """A child that runs (one not started yet, e.g. a sidecar waiting for its engine: None)."""
        c = self.spawner.children.get(name)
        return c if c is not None and c.popen is not None else None

    def _broker_up(self, timeout_s: float) -> None:
        """Start the broker (on the spawner thread: it forks), following its log and CPU."""
        b = self.broker
        done = self.spawner.submit(lambda: b.up(timeout_s=timeout_s))
        wait_for(done, "broker", b.log_file, b.running_pid, self._patience(timeout_s))

    def _group_size(self) -> int:
        try:
            members, state = probes.group_members(self.bootstrap, self.app_id, 5.0)
        except Exception:  # a group that does not exist yet, or the broker restarting
            return 0
        return members if state.upper() == "STABLE" else 0

    def _check_alive(self) -> None:
        for c in self.spawner.children.values():
            if c.popen is not None and not c.alive() and c.name not in self._down:
                raise ClusterError(
                    f"{c.name} exited with code {c.popen.returncode} "
                    f"(log: {c.log_path})\n{c.log_tail()}"
                )
        if self.broker is not None and self.broker.running_pid() is None:
            raise ClusterError(f"broker exited (log: {self.broker.log_file})")

    # -- probes ------------------------------------------------------------------------------

    def wait_quiescent(self, timeout_s: float) -> None:
        """Return once the maintenance group has committed every ``kv-events`` and ``index-ops``
        record and every edge's view files record every ``index-patches`` record as applied,
        twice in a row with no new ``kv-events`` in between. Stop the load first.

        Follows progress: fails once what is behind has not changed for ``timeout_s`` (a stalled
        pipeline), or after the spec's ``start_timeout_s`` whatever happens (the backstop)."""
        t0 = moved = time.monotonic()
        last_events: int | None = None
        why = last_why = "not checked"
        while True:
            try:
                why = self._quiescence_gap()
            except Exception as exc:  # broker restarting: try again until the deadline
                why = f"probe failed: {type(exc).__name__}: {exc}"
            if not why:
                ev = sum(probes.ends(self.bootstrap, self.topics.kv_events).values())
                if ev == last_events:
                    return
                last_events = ev
            else:
                last_events = None
            now = time.monotonic()
            if why != last_why:
                moved, last_why = now, why
            if now - moved > timeout_s:
                raise ClusterError(f"not quiescent: no progress for {timeout_s:.0f} s: {why}")
            if now - t0 > max(timeout_s, self.spec.start_timeout_s):
                raise ClusterError(f"not quiescent after {now - t0:.0f} s: {why}")
            time.sleep(0.5)

    def _quiescence_gap(self) -> str:
        """'' when quiescent, else what is still behind."""
        lag = probes.group_lag(self.bootstrap, rechunk_group(self.app_id), [self.topics.kv_events])
        lag |= probes.group_lag(self.bootstrap, self.app_id, [self.topics.index_ops])
        behind = {f"{t}[{p}]": n for (t, p), n in lag.items() if n}
        if behind:
            return f"maintenance group {self.app_id} lags {behind}"
        highs = probes.watermarks(self.bootstrap, self.topics.index_patches)
        rows, late = [], []
        for r in self.regions:  # every edge and shard: a stall names all it concerns
            have = probes.view_offsets(self.view_dir(r))
            pairs = {p: (have.get(p, -1), h) for p, (_, h) in highs.items()}
            rows.append(f"{r} {pairs}")
            if any(h > 0 and have.get(p, -1) < h for p, (_, h) in highs.items()):
                late.append(r)
        if late:
            return (f"edges {late} have not applied every index-patches record; (applied, end) "
                    f"per shard: {'; '.join(rows)}")  # fmt: skip
        return ""

    def check_views(self) -> ViewCheck:
        """Every edge's view against the truth rebuilt from ``kv-events`` (after quiescence)."""
        return probes.check_views(
            self.bootstrap,
            self.topics.kv_events,
            self.dep,
            self.spec.n_shards,
            {r: self.view_dir(r) for r in self.regions},
        )

    def count_events(self) -> EventCount:
        """Accepted ``kv-events`` records vs the runs logged in ``index-ops`` (none lost), from
        ``events_since`` on (set by a fault that deleted ``index-ops`` records)."""
        return probes.count_events(self.bootstrap, self.topics, self.dep, self.spec.n_shards,
                                   since=self.events_since)  # fmt: skip

    # -- control -----------------------------------------------------------------------------

    def set_scheme(self, scheme: str) -> None:
        """``POST /admin/scheme`` on every edge (their TOML sets ``admin = true``)."""
        for r, url in self.edge_urls.items():
            status, body = probes.http("POST", url + "/admin/scheme", {"scheme": scheme}, 10.0)
            if status != 200:
                raise ClusterError(
                    f"edge {r}: POST /admin/scheme {scheme!r} -> {status}: {body[:300]!r}"
                )

    def wait_workers_idle(self, timeout_s: float = 60.0) -> None:
        """Until no worker's ``/v1/loads`` shows a request waiting or prefilling (bounded)."""
        deadline = time.monotonic() + timeout_s
        busy: dict[int, int] = {}
        while time.monotonic() < deadline:
            busy = probes.busy_workers(self.worker_urls)
            if not busy:
                return
            time.sleep(0.5)
        raise ClusterError(f"workers not idle after {timeout_s:.0f} s (requests per worker, "
                           f"-1 = no answer): {busy}")  # fmt: skip

    def flush_caches(self, timeout_s: float = 60.0) -> None:
        """``POST /flush_cache`` on every worker, then wait until every worker's ``CLEARED`` is in
        ``kv-events`` with nothing stored after it and the pipeline is quiescent (the index and
        every view are then empty). Stop the load first; requests a client gave up on may still
        run in the workers (an engine does not abort a queued request when its client leaves),
        so this waits, bounded, until every worker is idle before flushing."""
        self.wait_workers_idle(timeout_s)
        marks = probes.ends(self.bootstrap, self.topics.kv_events)
        for w, url in self.worker_urls.items():
            status, body = probes.http("POST", url + "/flush_cache", None, 10.0)
            if status != 200:
                raise ClusterError(f"worker {w}: POST /flush_cache -> {status}: {body[:200]!r}")
        deadline = time.monotonic() + timeout_s
        watch = probes.ClearedWatch(self.bootstrap, self.topics.kv_events, marks)
        try:
            while len(watch.cleared) < self.n_workers or watch.dirty:
                if time.monotonic() > deadline:
                    missing = sorted(set(range(self.n_workers)) - watch.cleared)
                    raise ClusterError(
                        f"flush_caches: after {timeout_s:.0f} s no CLEARED from "
                        f"workers {missing}; stored after clear: "
                        f"{sorted(watch.dirty)} (is a load still running?)"
                    )
                watch.poll()
        finally:
            watch.close()
        self.wait_quiescent(max(deadline - time.monotonic(), 10.0))

    def region_workers(self, region: str) -> list[int]:
        """The workers of ``region``, in id order."""
        r = self.regions.index(region)
        return [w for w in range(self.n_workers) if int(self.dep.worker_region[w]) == r]

    # -- faults ------------------------------------------------------------------------------

    def kill_maintenance(self, i: int) -> None:
        """SIGKILL maintenance process ``i`` (a crash: no clean leave; its shards move to the
        others after the group's session timeout, 10 s)."""
        self._down.add(f"maintenance-{i}")
        self.spawner.kill(f"maintenance-{i}")

    def start_maintenance(self, i: int, timeout_s: float = 90.0) -> None:
        """Start maintenance process ``i`` again and wait until every live one is in the group."""
        self._start_maintenance(i)
        self._down.discard(f"maintenance-{i}")
        self._wait_group(timeout_s)

    def _wait_group(self, timeout_s: float) -> None:
        want = sum(self.spawner.children[n].alive() for n in self._names("maintenance"))
        self.poll_until(lambda: self._group_size() >= want, self._names("maintenance"), timeout_s)

    def poll_until(self, ready: Callable[[], bool], names: list[str], timeout_s: float) -> None:
        """Poll ``ready`` until true, following ``names``' progress (``e2e.readiness``): raise
        with their log tails as soon as one dies, or is not ready and silent (no log line, no
        CPU) for ``timeout_s``; one that keeps making progress is waited for up to the spec's
        ``start_timeout_s``."""
        patience = Patience(
            silence_s=timeout_s, ceiling_s=max(timeout_s, self.spec.start_timeout_s)
        )
        wait_until_ready(lambda: [] if ready() else list(names), self._watched, patience,
                         check_alive=self._check_alive, together=[names], poll_s=0.3)  # fmt: skip

    def restart_edge(self, region: str, timeout_s: float = 120.0) -> None:
        """SIGTERM the edge of ``region`` (it drains and saves its view offsets), start it again
        on the same view directory (it resumes from the files) and wait for ``/health``."""
        name = f"edge-{region}"
        self._down.add(name)
        self.spawner.stop([name], timeout_s=30.0)
        self._start_edge(region)
        self._down.discard(name)
        self.poll_until(lambda: probes.healthy(self.edge_urls[region]), [name], timeout_s)

    def restart_broker(self, timeout_s: float = 240.0) -> dict[str, float]:
        """Stop the broker (SIGTERM, SIGKILL after 30 s) and start it again on its data (only a
        broker this cluster started); wait until the maintenance group is whole again. Returns
        the seconds of each step: ``down``, ``up`` (serving), ``group``."""
        if self.broker is None:
            raise ClusterError("restart_broker: the broker was given, not started here")
        t0 = time.monotonic()
        self.broker.down()
        t1 = time.monotonic()
        self.on_status(f"broker down in {t1 - t0:.1f} s; starting it again")
        try:
            self._broker_up(timeout_s)
        except BrokerError as exc:  # a loaded machine: up() stopped it again; one more try
            self.on_status(f"broker not ready ({str(exc)[:80]}...); starting it once more")
            self._broker_up(timeout_s)
        t2 = time.monotonic()
        self.on_status(f"broker up in {t2 - t1:.1f} s; waiting for the maintenance group")
        self._wait_group(timeout_s)
        return {"down": t1 - t0, "up": t2 - t1, "group": time.monotonic() - t2}

    def drop_queue_vectors(self, seconds: float) -> None:
        """No queue vector reaches ``queue-vectors`` for ``seconds``: every sidecar is paused
        (SIGSTOP), then resumed (SIGCONT).

        Why pausing the sidecars: the load reporter runs inside the sidecar process (bridge + load
        + migrate), so it cannot be stopped alone, and deleting the topic would make every
        sidecar's one idempotent producer (shared with the KV-event bridge) fail deliveries.
        Side effect, on purpose: KV events of the pause wait in the engines' ZMQ queues and replay
        buffers and arrive late (the index ages meanwhile); ``count_events`` and ``check_views``
        afterwards show whether they all arrived. Edges keep their own region's queues live (they
        poll local workers); remote regions' estimates only age."""
        names = self._names("sidecar")
        for n in names:
            self.spawner.pause(n, True)
        try:
            time.sleep(seconds)
        finally:
            for n in names:
                self.spawner.pause(n, False)

    # -- stopping ----------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop every process (idempotent): SIGTERM tier by tier, SIGKILL what remains."""
        atexit.unregister(self.stop)
        try:
            for kind in ("gateway", "edge", "sidecar", "worker", "maintenance"):
                killed = self.spawner.stop(self._names(kind), timeout_s=20.0)
                if killed:
                    self.on_status(f"SIGKILLed after SIGTERM timeout: {killed}")
            if self.broker is not None:
                self.broker.down()
        finally:
            self.spawner.kill_all()
            self.spawner.close()

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
