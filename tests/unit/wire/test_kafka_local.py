"""LocalBroker without starting a JVM: rendering, ids, state, and the clear errors (missing
tools, a port taken by a stranger, a pid file pointing at another process). The real broker is
exercised in tests/integration/test_broker.py."""

from __future__ import annotations

import base64
import json
import os
import socket
from pathlib import Path

import pytest

from cli.main import main
from wire.kafka_local import (
    BrokerError,
    LocalBroker,
    ToolMissingError,
    new_cluster_id,
    render_server_properties,
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _broker(tmp_path: Path, **kw: object) -> LocalBroker:
    return LocalBroker(_free_port(), state_dir=tmp_path / "state", cache_dir=tmp_path / "cache",
                       **kw)  # type: ignore[arg-type]  # fmt: skip


def test_cluster_id_is_kafka_uuid__base64url_16_bytes() -> None:
    for _ in range(200):
        cid = new_cluster_id()
        assert len(cid) == 22
        assert not cid.startswith("-")
        assert len(base64.urlsafe_b64decode(cid + "==")) == 16


def test_properties_name_ports_and_data_dir__rendered(tmp_path: Path) -> None:
    text = render_server_properties(29092, 29093, tmp_path / "data")
    assert "listeners=PLAINTEXT://127.0.0.1:29092,CONTROLLER://127.0.0.1:29093" in text
    assert "controller.quorum.voters=1@127.0.0.1:29093" in text
    assert f"log.dirs={tmp_path / 'data'}" in text
    assert "log.cleaner.dedupe.buffer.size=33554432" in text
    assert "$" not in text.split("\n", 3)[3]


def test_status_reports_not_running__fresh_state_dir(tmp_path: Path) -> None:
    status = _broker(tmp_path).status()
    assert status["running"] is False
    assert status["fetched"] is False
    assert status["pid"] is None


def test_down_is_idempotent__nothing_running(tmp_path: Path) -> None:
    broker = _broker(tmp_path)
    assert broker.down() is False
    assert broker.down() is False


def test_pid_of_another_process_is_not_ours__recycled_pid(tmp_path: Path) -> None:
    broker = _broker(tmp_path)
    broker.state_dir.mkdir(parents=True)
    broker.pid_file.write_text(f"{os.getpid()}\n")
    assert broker.running_pid() is None
    assert broker.down() is False  # and it must not have signalled this test process


def test_missing_maven_raises__fetch(tmp_path: Path) -> None:
    with pytest.raises(ToolMissingError, match="Maven"):
        _broker(tmp_path, mvn="/nonexistent/mvn").fetch()


def test_missing_java_raises__up(tmp_path: Path) -> None:
    with pytest.raises(ToolMissingError, match="Java 17"):
        _broker(tmp_path, java="/nonexistent/java").up(timeout_s=1)


def test_port_taken_by_stranger_raises__up(tmp_path: Path) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        broker = LocalBroker(port, state_dir=tmp_path / "s", cache_dir=tmp_path / "c")
        with pytest.raises(BrokerError, match=f"127.0.0.1:{port} is taken"):
            broker.up(timeout_s=1)


def test_cli_status_prints_json__not_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = _free_port()
    assert main(["kafka", "status", "--port", str(port), "--state-dir", str(tmp_path)]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["running"] is False
    assert status["bootstrap"] == f"127.0.0.1:{port}"
    assert main(["kafka", "down", "--port", str(port), "--state-dir", str(tmp_path)]) == 0
    assert "not running" in capsys.readouterr().out
