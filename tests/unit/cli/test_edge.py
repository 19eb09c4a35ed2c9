"""``kvcompass edge`` flag parsing into EdgeConfig + Deployment (cli.edge)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from cli import edge as cli
from kvcompass.errors import ConfigError


def _parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    cli.register(p.add_subparsers())
    return p.parse_args(["edge", *argv])


def test_builtin_deployment_name_and_flags__config_built(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cli.RELAY_KEY_ENV, "k" * 32)  # peers need the relay key: from the env
    args = _parse("--region", "eu", "--config", "paper-testbed-14x3", "--port", "9001",
                  "--worker", "8=http://127.0.0.1:30008", "--peer", "us=http://127.0.0.1:8080",
                  "--bootstrap-servers", "127.0.0.1:19092", "--n-shards", "3")  # fmt: skip
    cfg, dep = cli.options(args)
    assert dep.name == "paper-testbed-14x3" and cfg.region == "eu" and cfg.port == 9001
    assert cfg.worker_urls() == {8: "http://127.0.0.1:30008"}
    assert cfg.peers == (("us", "http://127.0.0.1:8080"),) and cfg.relay_key == "k" * 32
    assert cfg.pipeline is not None and cfg.pipeline.n_shards == 3
    monkeypatch.delenv(cli.RELAY_KEY_ENV)
    with pytest.raises(ConfigError, match="relay_key"):
        cli.options(args)


def test_relay_key__the_files_first_else_the_environments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "edge.toml"
    path.write_text('[edge]\nregion = "eu"\n[peers]\nus = "http://127.0.0.1:8080"\n')
    monkeypatch.setenv(cli.RELAY_KEY_ENV, "e" * 32)
    cfg, _ = cli.options(_parse("--region", "eu", "--config", str(path)))
    assert cfg.relay_key == "e" * 32
    path.write_text(
        f'[edge]\nregion = "eu"\nrelay_key = "{"f" * 32}"\n[peers]\nus = "http://x:1"\n'
    )
    cfg, _ = cli.options(_parse("--region", "eu", "--config", str(path)))
    assert cfg.relay_key == "f" * 32


def test_deployment_file_with_edge_tables__both_read(tmp_path: Path) -> None:
    path = tmp_path / "dep.toml"
    path.write_text(
        'name = "tiny"\nwan_one_way_ms = [[0.0, 10.0], [10.0, 0.0]]\n'
        '[[regions]]\nname = "a"\nn_workers = 1\nprefill_ms_per_token = 0.1\n'
        '[[regions]]\nname = "b"\nn_workers = 1\nprefill_ms_per_token = 0.1\n'
        '[edge]\nport = 8123\n[workers]\n1 = "http://127.0.0.1:1"\n'
    )
    cfg, dep = cli.options(_parse("--region", "b", "--config", str(path)))
    assert (
        dep.name == "tiny" and cfg.port == 8123 and cfg.worker_urls() == {1: "http://127.0.0.1:1"}
    )
    assert cfg.pipeline is None


def test_malformed_worker_flag__config_error() -> None:
    with pytest.raises(ConfigError, match="KEY=URL"):
        cli.options(_parse("--region", "us", "--worker", "nourl"))
