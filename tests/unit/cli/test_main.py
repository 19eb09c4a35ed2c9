"""``kvcompass`` builds its parser from flags alone: no shell, no numba, no aiohttp, no Faust.

Run in a fresh interpreter, so what other tests imported does not count.
"""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("numba", "numpy", "aiohttp", "faust", "confluent_kafka", "fastavro", "rich",
         "matplotlib", "zmq", "torch")  # fmt: skip
PROBE = (
    "import json, sys\n"
    "from cli.main import build_parser\n"
    "build_parser().format_help()\n"
    "print(json.dumps(sorted(sys.modules)))\n"
)


def test_help_imports_no_shell__fresh_interpreter() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout))
    roots = {m.split(".")[0] for m in loaded}
    assert not roots & set(HEAVY), sorted(roots & set(HEAVY))
    project = sorted(m for m in loaded if m.split(".")[0] in {"kvcompass", "wire", "pipeline",
                     "edge", "workers", "sim", "e2e"})  # fmt: skip
    # the demo's defaults and the scheme names, nothing that runs
    assert project == ["e2e", "e2e.spec", "edge", "edge.scheme_names", "kvcompass",
                       "kvcompass.errors", "sim", "sim.datasets"]  # fmt: skip


def test_help_lists_every_command__python_m_cli() -> None:
    out = subprocess.run([sys.executable, "-m", "cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    for command in ("demo", "demo-faults", "kafka", "sim", "pipeline", "replay", "export",
                    "worker", "edge"):  # fmt: skip
        assert f"    {command} " in out.stdout or f"    {command}\n" in out.stdout, command


def test_unknown_command_exits_2__with_a_message() -> None:
    out = subprocess.run([sys.executable, "-m", "cli", "nope"], capture_output=True, text=True)
    assert out.returncode == 2
    assert "invalid choice" in out.stderr
