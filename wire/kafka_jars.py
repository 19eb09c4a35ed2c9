"""The local broker's runtime jars: resolved from Maven Central once per Kafka version.

Owns ``infra/local/pom.xml`` → ``<cache>/kafka/<version>/lib`` (plus ``complete.json``: the jar
list and the SHA-256 of the POM, so editing the POM refetches; and ``fetch.lock``, so processes
fetching the same version wait for each other instead of racing), and the launcher's error types.
Must not: start or stop processes (``wire.kafka_local``).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

from kvcompass.errors import KVCompassError

INFRA_DIR = Path(__file__).resolve().parents[1] / "infra" / "local"
_DEP_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies"
_MARKER = "complete.json"


class BrokerError(KVCompassError):
    """The local broker could not be fetched, formatted, started, reached or stopped."""


class ToolMissingError(BrokerError):
    """``java`` or ``mvn`` is not installed (or too old)."""


def jars_complete(lib_dir: Path) -> bool:
    """Whether ``lib_dir`` holds every jar the current POM resolved to."""
    try:
        info = json.loads((lib_dir.parent / _MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    jars = info.get("jars") or [None]
    return info.get("pom_sha256") == _pom_digest() and all((lib_dir / j).is_file() for j in jars)


def fetch_jars(lib_dir: Path, version: str, mvn: str = "mvn") -> Path:
    """Copy ``kafka_2.13:<version>`` and its runtime dependencies into ``lib_dir`` unless there.

    Maven writes into a temporary sibling directory that replaces ``lib_dir`` only on success,
    so an interrupted fetch never leaves a half-filled classpath behind.
    """
    if jars_complete(lib_dir):
        return lib_dir
    mvn_path = shutil.which(mvn)
    if mvn_path is None:
        raise ToolMissingError(
            f"expected Maven ({mvn!r}) on PATH to fetch Kafka {version} "
            "from Maven Central; install it (Debian: apt-get install maven)"
        )
    lib_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(lib_dir.parent / "fetch.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if jars_complete(lib_dir):
            return lib_dir
        tmp = lib_dir.parent / f"lib.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        cmd = [mvn_path, "-B", "-q", "-f", str(INFRA_DIR / "pom.xml"), _DEP_PLUGIN,
               "-DincludeScope=runtime", f"-DoutputDirectory={tmp}",
               f"-Dkafka.version={version}"]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise BrokerError(
                f"mvn could not fetch Kafka {version} (exit {done.returncode}):\n"
                + tail(done.stdout + done.stderr)
            )
        shutil.rmtree(lib_dir, ignore_errors=True)
        tmp.rename(lib_dir)
        jars = sorted(p.name for p in lib_dir.glob("*.jar"))
        marker = {"version": version, "pom_sha256": _pom_digest(), "jars": jars}
        (lib_dir.parent / _MARKER).write_text(json.dumps(marker, indent=1))
    return lib_dir


def tail(text: str, lines: int = 30) -> str:
    """The last ``lines`` lines of a log, for error messages."""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _pom_digest() -> str:
    return hashlib.sha256((INFRA_DIR / "pom.xml").read_bytes()).hexdigest()
