"""`kvcompass worker sidecar|bridge|load|migrate|emulate|sglang`: the worker-side processes.

Parses flags into ``SidecarConfig`` / ``EmulatedConfig`` / ``PipelineConfig`` and starts the
shells in ``workers/`` (imported lazily, inside each command). Long-lived loops run under
asyncio and stop on SIGTERM/SIGINT: the main task is cancelled, the shell flushes what it can and
says what it could not, and a ``wire.stopping.StopDeadline`` ends the process if it is still
alive ``--stop-timeout-s`` later (a sidecar whose broker was gone once outlived SIGTERM by
minutes). Must not: hold sidecar logic.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Coroutine
from typing import Any

from cli import pipeline_flags

# The emulated worker publishes unless told otherwise (SGLang only with --kv-events-config).
EMULATE_KV_EVENTS = (
    '{"publisher":"zmq","endpoint":"tcp://*:5557","replay_endpoint":"tcp://*:5558",'
    '"topic":"kv-events"}'
)


def _run(
    coro: Coroutine[Any, Any, None], what: str, stop_timeout_s: float, broker: str | None = None
) -> int:
    from wire.stopping import StopDeadline

    # with ``broker`` unreachable at SIGTERM the whole stop takes under 5 s (wire.stopping)
    deadline = StopDeadline(what, stop_timeout_s, broker=broker)

    def stop(task: asyncio.Future[None]) -> None:
        deadline.arm()
        task.cancel()

    async def main() -> None:
        task = asyncio.ensure_future(coro)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop, task)
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(main())
    deadline.disarm()
    return 0


def _sidecar_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--worker-id", type=int, required=True, help="global worker index (rank 0)")
    p.add_argument("--deployment", default="paper-testbed-14x3", help="built-in name or TOML")
    p.add_argument("--model", default="meta-llama/Llama-3.1-8B-Instruct", help="key namespace")
    p.add_argument("--model-config", default="", help="namespace: dtype, TP layout...")
    p.add_argument("--sharing-group", default=None, help="namespace: tenant salt")
    p.add_argument("--engine-url", default="http://127.0.0.1:30000")
    p.add_argument("--events-endpoint", default="tcp://127.0.0.1:5557")
    p.add_argument("--replay-endpoint", default="tcp://127.0.0.1:5558")
    p.add_argument("--events-topic", default="kv-events", help="ZMQ topic of the engine")
    p.add_argument("--page-size-tokens", type=int, default=16)
    p.add_argument("--dp-size", type=int, default=1)
    p.add_argument("--load-period-ms", type=int, default=200, help="Δ of the queue vector")
    p.add_argument(
        "--no-discover",
        action="store_true",
        help="use the endpoint flags instead of the engine's /server_info",
    )
    p.add_argument(
        "--peer",
        action="append",
        default=[],
        metavar="ID=URL",
        help="same-region worker a migration may copy KV pages from (repeatable)",
    )
    p.add_argument(
        "--region-worker",
        action="append",
        default=[],
        metavar="ID=URL",
        help="worker the load reporter polls (repeatable; default: this worker)",
    )
    pipeline_flags.add(p)
    _stop_flag(p)


def _stop_flag(p: argparse.ArgumentParser) -> None:
    text = "after SIGTERM, exit within this long whatever hangs (status 3 if cut short)"
    p.add_argument("--stop-timeout-s", type=float, default=30.0, help=text)


def _pairs(values: list[str], flag: str) -> tuple[tuple[int, str], ...]:
    out = []
    for v in values:
        wid, sep, url = v.partition("=")
        if not sep or not wid.isdigit():
            raise SystemExit(f"{flag}: expected ID=URL, got {v!r}")
        out.append((int(wid), url))
    return tuple(out)


def _configs(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    from wire.deployments import load_deployment
    from workers.config import SidecarConfig

    cfg = SidecarConfig(
        worker_id=args.worker_id,
        deployment=args.deployment,
        model=args.model,
        model_config=args.model_config,
        sharing_group=args.sharing_group,
        engine_url=args.engine_url,
        events_endpoint=args.events_endpoint,
        replay_endpoint=args.replay_endpoint or None,
        events_topic=args.events_topic,
        page_size_tokens=args.page_size_tokens,
        dp_size=args.dp_size,
        load_period_ms=args.load_period_ms,
        peers=_pairs(args.peer, "--peer"),
        region_workers=_pairs(args.region_worker, "--region-worker"),
    )
    return cfg, pipeline_flags.config(args), load_deployment(args.deployment)


async def _sidecar(args: argparse.Namespace, loops: dict[str, bool]) -> None:
    from wire.codec import AvroCodec
    from wire.producer import KafkaProducer
    from wire.registry import registry_from_url
    from wire.stopping import budget
    from workers.sidecar import (
        apply_discovery,
        discover,
        ensure_kafka_topics,
        flush_or_say,
        run_sidecar,
    )

    cfg, pipe, dep = _configs(args)
    if not args.no_discover and loops.get("bridge", False):
        cfg = apply_discovery(cfg, await discover(cfg.engine_url))
    await asyncio.to_thread(ensure_kafka_topics, pipe)
    sink = KafkaProducer(pipe)
    codec = AvroCodec(registry_from_url(pipe.schema_registry_url))
    try:
        await run_sidecar(cfg, pipe, dep, sink, codec, **loops)
    finally:  # within what the stop deadline leaves (under 5 s in all without a broker)
        flush_or_say(sink, budget(min(10.0, args.stop_timeout_s / 2)),
                     f"sidecar of worker {cfg.worker_id}")  # fmt: skip


def _cmd_sidecar(args: argparse.Namespace) -> int:
    loops = {
        "sidecar": {"bridge": True, "load": True, "migrate": True},
        "bridge": {"bridge": True, "load": False, "migrate": False},
        "load": {"bridge": False, "load": True, "migrate": False},
        "migrate": {"bridge": False, "load": False, "migrate": True},
    }[args.worker_action]
    broker = pipeline_flags.config(args).bootstrap_servers
    return _run(_sidecar(args, loops), f"worker {args.worker_action}", args.stop_timeout_s, broker)


def _cmd_emulate(args: argparse.Namespace) -> int:
    from workers.emulated.costs import EmulatedCosts
    from workers.emulated.worker import EmulatedConfig, EmulatedWorker, kv_events_fields

    tiny = None
    if args.model == "tiny-llama":  # torch only here (the `torch` extra)
        from workers.emulated.tiny_llama import TinyLlamaConfig

        tiny = TinyLlamaConfig(seed=args.seed)
    cfg = EmulatedConfig(
        tiny_llama=tiny,
        model=args.model,
        host=args.host,
        port=args.port,
        page_size_tokens=args.page_size,
        vram_tokens=args.vram_tokens,
        dram_tokens=args.dram_tokens,
        radix_eviction_policy=args.radix_eviction_policy,
        chunked_prefill_size=args.chunked_prefill_size,
        **kv_events_fields(args.kv_events_config),
        enable_cache_report=args.enable_cache_report,
        stream_interval=args.stream_interval,
        context_length_tokens=args.context_length,
        enable_metrics=args.enable_metrics,
        enable_get_load=args.enable_get_load,
        shutdown_timeout_s=args.shutdown_timeout_s,
        disaggregation_mode=args.disaggregation_mode,
        disaggregation_bootstrap_port=args.disaggregation_bootstrap_port,
        disaggregation_transfer_backend=args.disaggregation_transfer_backend,
        costs=EmulatedCosts(
            prefill_ms_per_token=args.prefill_ms_per_token,
            decode_ms_per_token=args.decode_ms_per_token,
            time_scale=args.time_scale,
            pd_link_bytes_per_s=args.pd_link_gbps * 1e9 / 8,
            pd_link_one_way_ms=args.pd_link_one_way_ms,
        ),
    )
    return _run(EmulatedWorker(cfg).serve_forever(), "emulated worker", args.stop_timeout_s)


def _wait_health(url: str, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"sglang exited with code {proc.returncode} before it was healthy")
        with contextlib.suppress(OSError), urllib.request.urlopen(url + "/health", timeout=2) as r:
            if r.status == 200:
                return
        time.sleep(2)
    raise SystemExit(f"sglang: no healthy /health at {url} within {timeout_s:.0f} s")


def _cmd_sglang(args: argparse.Namespace) -> int:
    from workers.sglang_launch import build_command

    cfg, _, _ = _configs(args)
    extra = [a for a in args.sglang_args if a != "--"]
    cmd = build_command(cfg, extra, hierarchical_cache=not args.no_hierarchical_cache)
    print(" ".join(cmd), file=sys.stderr)
    if args.dry_run:
        return 0
    proc = subprocess.Popen(cmd)
    try:
        _wait_health(cfg.engine_url, proc, args.start_timeout_s)
        loops = {"bridge": True, "load": True, "migrate": True}
        broker = pipeline_flags.config(args).bootstrap_servers
        return _run(_sidecar(args, loops), "sglang sidecar", args.stop_timeout_s, broker)
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(30)
        if proc.poll() is None:
            proc.kill()


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "worker",
        help="worker sidecar (KV-event bridge, load reporter, migrations), emulated SGLang",
        description="Processes beside each GPU worker (architecture §8).",
    )
    actions = p.add_subparsers(dest="worker_action", metavar="ACTION", required=True)
    for name, text in (
        ("sidecar", "bridge + load reporter + migration executor in one process"),
        ("bridge", "only the KV-event bridge (engine ZMQ -> kv-events)"),
        ("load", "only the load reporter (/v1/loads -> queue-vectors)"),
        ("migrate", "only the migration executor (migrations -> prefill-only requests)"),
    ):
        a = actions.add_parser(name, help=text)
        _sidecar_flags(a)
        a.set_defaults(func=_cmd_sidecar)

    e = actions.add_parser("emulate", help="an emulated SGLang worker (no GPU)")
    e.add_argument(
        "--model-path",
        "--model",
        dest="model",
        default="meta-llama/Llama-3.1-8B-Instruct",
        help="model id; 'tiny-llama' computes real KV tensors (random-weight torch model, CPU)",
    )
    e.add_argument("--seed", type=int, default=0, help="tiny-llama weights seed")
    e.add_argument("--host", default="127.0.0.1")
    e.add_argument("--port", type=int, default=30000)
    e.add_argument("--page-size", type=int, default=16)
    e.add_argument("--vram-tokens", type=int, default=262_144)
    e.add_argument("--dram-tokens", type=int, default=1_048_576)
    e.add_argument("--chunked-prefill-size", type=int, default=4096,
                   help="SGLang's flag (its default on a 32 GB GPU): a running prefill counts as "
                   "waiting in /v1/loads until its last chunk starts")  # fmt: skip
    e.add_argument("--radix-eviction-policy", choices=("lru", "lfu"), default="lru",
                   help="SGLang's flag: which cached prefix to evict first")  # fmt: skip
    e.add_argument(
        "--kv-events-config",
        default=EMULATE_KV_EVENTS,
        help="SGLang's flag: JSON {publisher, endpoint, replay_endpoint, topic, buffer_steps}; "
        "'tcp://127.0.0.1:*' binds a free port (advertised in /server_info)",
    )
    e.add_argument(
        "--enable-cache-report",
        action="store_true",
        help="SGLang's flag: usage.prompt_tokens_details.cached_tokens in OpenAI responses",
    )
    e.add_argument("--prefill-ms-per-token", type=float, default=0.085)
    e.add_argument("--decode-ms-per-token", type=float, default=10.0)
    e.add_argument("--time-scale", type=float, default=1.0, help="multiplies every sleep")
    e.add_argument(
        "--stream-interval", type=int, default=1, help="tokens per streamed chunk (SGLang's flag)"
    )
    _stop_flag(e)
    e.add_argument("--context-length", type=int, default=131_072,
                   help="SGLang's flag: longer inputs (or input + max) get its 400")  # fmt: skip
    e.add_argument("--enable-metrics", action="store_true",
                   help="SGLang's flag: serve GET /metrics (SGLang 0.5.23's sglang: names); "
                   "without it /metrics is 404, as on SGLang")  # fmt: skip
    e.add_argument("--enable-get-load", action="store_true",
                   help="serve GET /get_load, the legacy shape sglang-router's power_of_two "
                   "polls (our flag; SGLang 0.5.23 has no /get_load: 404)")  # fmt: skip
    e.add_argument("--shutdown-timeout-s", type=float, default=3.0,
                   help="on SIGTERM, how long in-flight requests may finish before they are "
                   "cancelled (wall seconds)")  # fmt: skip
    e.add_argument("--disaggregation-mode", choices=("null", "prefill", "decode"),
                   default="null", help="SGLang's flag: a prefill-only or decode-only worker "
                   "(PD; requests carry the PD router's bootstrap fields)")  # fmt: skip
    e.add_argument("--disaggregation-bootstrap-port", type=int, default=8998,
                   help="SGLang's flag: the prefill worker's bootstrap server port")  # fmt: skip
    e.add_argument("--disaggregation-transfer-backend", default="mooncake",
                   help="SGLang's flag (in /server_info; 'fake': no KV transfer)")  # fmt: skip
    e.add_argument("--pd-link-gbps", type=float, default=100.0,
                   help="decode mode: Gb/s of the link from the prefill workers")  # fmt: skip
    e.add_argument("--pd-link-one-way-ms", type=float, default=0.0,
                   help="decode mode: that link's one-way latency (the WAN's)")  # fmt: skip
    e.set_defaults(func=_cmd_emulate)

    s = actions.add_parser("sglang", help="start a real SGLang server with the sidecar beside it")
    _sidecar_flags(s)
    s.add_argument("--no-hierarchical-cache", action="store_true", help="no DRAM tier")
    s.add_argument("--start-timeout-s", type=float, default=900.0)
    s.add_argument("--dry-run", action="store_true", help="print the command and exit")
    s.add_argument("sglang_args", nargs=argparse.REMAINDER, help="-- then SGLang's own args")
    s.set_defaults(func=_cmd_sglang)
