"""Every command that makes or uses the pipeline's topics takes the shard count the same way:
``--n-shards``, else ``KVCOMPASS_N_SHARDS``, else the config file's ``[pipeline]``, else the one
default (``wire.config.PipelineConfig``); a sidecar given 2 and an edge given 2 agree."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from cli import demo, demo_faults, edge, pipeline, pipeline_flags, worker
from wire.config import PipelineConfig


def _parse(module: Any, *argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    module.register(p.add_subparsers())
    return p.parse_args(list(argv))


def _shards_of_every_command(tmp_path: Path) -> dict[str, int]:
    toml = tmp_path / "edge.toml"
    toml.write_text('[pipeline]\nbootstrap_servers = "127.0.0.1:1"\n')
    side = _parse(worker, "worker", "sidecar", "--worker-id", "0")
    pipe = _parse(pipeline, "pipeline", "topics")
    ed = _parse(edge, "edge", "--region", "us", "--config", str(toml),
                "--deployment", "paper-testbed-14x3")  # fmt: skip
    cfg, _ = edge.options(ed)
    assert cfg.pipeline is not None
    return {"sidecar": worker._configs(side)[1].n_shards,
            "pipeline": pipeline._config(pipe).n_shards, "edge": cfg.pipeline.n_shards,
            "demo": pipeline_flags.n_shards(_parse(demo, "demo")),
            "demo-faults": pipeline_flags.n_shards(_parse(demo_faults, "demo-faults"))}  # fmt: skip


def test_one_default__every_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KVCOMPASS_N_SHARDS", raising=False)
    assert set(_shards_of_every_command(tmp_path).values()) == {PipelineConfig().n_shards}


def test_env__every_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVCOMPASS_N_SHARDS", "3")
    assert set(_shards_of_every_command(tmp_path).values()) == {3}


def test_flag_beats_env__sidecar_and_edge_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVCOMPASS_N_SHARDS", "3")
    side = _parse(worker, "worker", "sidecar", "--worker-id", "0", "--n-shards", "2")
    ed = _parse(edge, "edge", "--region", "us", "--config", "paper-testbed-14x3",
                "--bootstrap-servers", "127.0.0.1:1", "--n-shards", "2")  # fmt: skip
    cfg, _ = edge.options(ed)
    assert cfg.pipeline is not None
    assert worker._configs(side)[1].n_shards == cfg.pipeline.n_shards == 2
    assert pipeline._config(_parse(pipeline, "pipeline", "worker", "--n-shards", "2")).n_shards == 2


def test_edge__env_alone_does_not_turn_kafka_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVCOMPASS_N_SHARDS", "3")
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    cfg, _ = edge.options(_parse(edge, "edge", "--region", "us", "--config", "paper-testbed-14x3"))
    assert cfg.pipeline is None


def test_file_table_below_env_below_flag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    toml = tmp_path / "edge.toml"
    toml.write_text('[pipeline]\nn_shards = 5\ntopic_prefix = "f."\n')
    args = ["edge", "--region", "us", "--config", str(toml), "--deployment", "paper-testbed-14x3"]
    monkeypatch.delenv("KVCOMPASS_N_SHARDS", raising=False)
    monkeypatch.delenv("KVCOMPASS_TOPIC_PREFIX", raising=False)
    file_only = edge.options(_parse(edge, *args))[0].pipeline
    monkeypatch.setenv("KVCOMPASS_N_SHARDS", "6")
    env = edge.options(_parse(edge, *args))[0].pipeline
    flag = edge.options(_parse(edge, *args, "--n-shards", "7"))[0].pipeline
    assert file_only is not None and env is not None and flag is not None
    assert (file_only.n_shards, env.n_shards, flag.n_shards) == (5, 6, 7)
    assert file_only.topic_prefix == env.topic_prefix == flag.topic_prefix == "f."
