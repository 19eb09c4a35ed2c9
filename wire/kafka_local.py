"""A real single-node Apache Kafka broker (KRaft) on 127.0.0.1, without Docker.

Owns, after ``wire.kafka_jars`` has fetched the jars from Maven Central (once per version
into ``${KVCOMPASS_CACHE:-~/.cache/kvcompass}/kafka/<version>/lib``): formatting the storage,
starting ``kafka.Kafka`` in its own session, waiting until it serves, and stopping it. Every
broker has a state directory (``${KVCOMPASS_STATE:-~/.cache/kvcompass}/broker-<port>/``) holding
``server.properties``, ``data/``, ``broker.log`` (JVM output and the broker's log) and ``pid``;
a second ``LocalBroker`` on the same state directory (another process) sees and stops the same
broker. Why this Kafka version and these logging jars: ``infra/local/README.md``.

Must not: create the pipeline's topics (``wire.topics``) or touch anything but its own
processes and directories. By default the broker has no authentication and listens on loopback
only; ``secure=True`` (``kvcompass kafka up --secure``) gives it one SASL_SSL client listener
instead (one SCRAM-SHA-512 user per role, a controller listener on mutual TLS, a local CA:
``wire.kafka_secure``; once it serves, the roles' ACLs of the default deployment, ``wire.acls``),
in its own state directory (``broker-<port>-secure``), and ``client_config(role)`` says how a
process of that role reaches it.
"""

from __future__ import annotations

import base64
import ctypes
import os
import re
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path
from string import Template
from typing import Any

from confluent_kafka.admin import AdminClient

from wire import kafka_secure
from wire.acls import AclError, ensure_acls
from wire.config import PipelineConfig
from wire.kafka_clients import librdkafka_conf
from wire.kafka_jars import (
    INFRA_DIR,
    BrokerError,
    ToolMissingError,
    fetch_jars,
    jars_complete,
    tail,
)

__all__ = [
    "DEFAULT_PORT",
    "DEFAULT_VERSION",
    "BrokerError",
    "LocalBroker",
    "ToolMissingError",
    "new_cluster_id",
    "port_accepts",
    "render_server_properties",
]

DEFAULT_VERSION = "4.1.1"
DEFAULT_PORT = 19092
_PR_SET_PDEATHSIG = 1
_STORAGE_TOOLS = ("kafka.tools.StorageTool", "org.apache.kafka.tools.StorageTool")
_JVM_FLAGS = (
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
)


def default_cache_dir(env: dict[str, str] | None = None) -> Path:
    e = os.environ if env is None else env
    return Path(e.get("KVCOMPASS_CACHE") or Path.home() / ".cache" / "kvcompass")


def default_state_root(env: dict[str, str] | None = None) -> Path:
    e = os.environ if env is None else env
    return Path(e.get("KVCOMPASS_STATE") or Path.home() / ".cache" / "kvcompass")


def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (Kafka's ``Uuid``).

    Ids starting with '-' are skipped for the same reason Kafka skips them: a CLI parser would
    read ``-t -xyz`` as an option.
    """
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cid.startswith("-"):
            return cid


def render_server_properties(port: int, controller_port: int, data_dir: Path) -> str:
    """``infra/local/server.properties.template`` filled in for one broker."""
    template = Template((INFRA_DIR / "server.properties.template").read_text(encoding="utf-8"))
    return template.substitute(port=port, controller_port=controller_port, data_dir=data_dir)


def port_accepts(port: int, timeout_s: float = 0.5) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:``port``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s):
            return True
    except OSError:
        return False


class LocalBroker:
    """One local broker, identified by its state directory. All methods are idempotent."""

    def __init__(
        self,
        port: int = DEFAULT_PORT,
        *,
        controller_port: int | None = None,
        state_dir: Path | str | None = None,
        cache_dir: Path | str | None = None,
        version: str = DEFAULT_VERSION,
        heap_mb: int = 512,
        java: str | None = None,
        mvn: str = "mvn",
        die_with_parent: bool = False,
        secure: bool = False,
    ) -> None:
        self.port = port
        self.secure = secure
        self.controller_port = controller_port if controller_port is not None else port + 1
        name = f"broker-{port}-secure" if secure else f"broker-{port}"
        self.state_dir = Path(state_dir or default_state_root() / name).resolve()
        self.version = version
        self.lib_dir = Path(cache_dir or default_cache_dir()) / "kafka" / version / "lib"
        self.heap_mb = heap_mb
        java_home = os.environ.get("JAVA_HOME")
        self.java = java or (str(Path(java_home) / "bin" / "java") if java_home else "java")
        self.mvn = mvn
        # Test sessions set this: a killed pytest must not leave a JVM behind (Linux only).
        self.die_with_parent = die_with_parent
        self.log_file = self.state_dir / "broker.log"
        self.pid_file = self.state_dir / "pid"
        self.properties_file = self.state_dir / "server.properties"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def client_config(self, role: str = "admin") -> PipelineConfig:
        """How a client of ``role`` (``wire.acls.ROLES``) reaches this broker: PLAINTEXT, or
        (secure) SASL_SSL with that role's SCRAM credentials and the local CA (made on first
        use)."""
        if not self.secure:
            return PipelineConfig(bootstrap_servers=self.bootstrap)
        return kafka_secure.prepare(self.state_dir).client_config(self.bootstrap, role)

    def fetch(self) -> Path:
        """Resolve the broker's runtime jars once; later calls (any process) reuse them."""
        return fetch_jars(self.lib_dir, self.version, self.mvn)

    # -- life cycle ------------------------------------------------------------------------

    def up(self, timeout_s: float = 90.0) -> str:
        """Start the broker unless it runs already; return its bootstrap address once it serves."""
        if self.running_pid() is not None:
            self.wait_ready(timeout_s)
            return self.bootstrap
        self.pid_file.unlink(missing_ok=True)
        for port in (self.port, self.controller_port):
            if port_accepts(port):
                raise BrokerError(
                    f"127.0.0.1:{port} is taken by a process that is not the broker of "
                    f"{self.state_dir}; choose another port"
                )
        self._check_java()
        lib = self.fetch()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        data_dir = self.state_dir / "data"
        props = render_server_properties(self.port, self.controller_port, data_dir)
        formatted = (data_dir / "meta.properties").exists()
        if self.secure and formatted and not kafka_secure.current_scheme(self.state_dir):
            raise BrokerError(
                f"{self.state_dir} was formatted by an older --secure (one shared client user, "
                f"a PLAINTEXT controller); start over: rm -rf {self.state_dir}"
            )
        if self.secure:
            files = kafka_secure.prepare(self.state_dir)
            props += files.server_properties(self.port, self.controller_port)
            kafka_secure.write_client_env(files, self.bootstrap)
        self.properties_file.write_text(props, encoding="utf-8")
        if not formatted:
            self._format(lib)
        with open(self.log_file, "ab") as log:
            self._proc = subprocess.Popen(
                [self.java, "-Xms256m", f"-Xmx{self.heap_mb}m", *_JVM_FLAGS, *self._log_flags(),
                 "-cp", f"{lib}/*", "kafka.Kafka", str(self.properties_file)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                cwd=self.state_dir, start_new_session=True,
                preexec_fn=_parent_death_signal if self.die_with_parent else None,
            )  # fmt: skip
        self.pid_file.write_text(f"{self._proc.pid}\n")
        try:
            self.wait_ready(timeout_s)
            if self.secure:  # the roles' ACLs of the default deployment (idempotent)
                ensure_acls(AdminClient(librdkafka_conf(self.client_config())), PipelineConfig())
        except (BrokerError, AclError):
            self.down()
            raise
        return self.bootstrap

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Return once the port accepts AND an admin ``list_topics`` succeeds; bounded."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self.running_pid() is None:
                raise BrokerError(
                    f"broker process exited; end of {self.log_file}:\n{self._log_tail()}"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BrokerError(
                    f"broker on {self.bootstrap} not ready after {timeout_s} s; "
                    f"end of {self.log_file}:\n{self._log_tail()}"
                )
            if port_accepts(self.port) and self._admin_answers(min(5.0, remaining)):
                return
            time.sleep(0.2)

    def down(self, timeout_s: float = 30.0) -> bool:
        """Stop the broker (SIGTERM, then SIGKILL after ``timeout_s``); True if one was running."""
        pid = self.running_pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 10.0)):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait_s
            while self.running_pid() is not None and time.monotonic() < deadline:
                time.sleep(0.1)
            if self.running_pid() is None:
                break
        if self.running_pid() is not None:
            raise BrokerError(f"broker pid {pid} survived SIGKILL")
        self.pid_file.unlink(missing_ok=True)
        self._proc = None
        return True

    def status(self) -> dict[str, Any]:
        """Running or not, where its files are, and its resident memory."""
        pid = self.running_pid()
        return {
            "running": pid is not None,
            "ready": pid is not None and port_accepts(self.port),
            "pid": pid,
            "bootstrap": self.bootstrap,
            "controller_port": self.controller_port,
            "version": self.version,
            "state_dir": str(self.state_dir),
            "log_file": str(self.log_file),
            "lib_dir": str(self.lib_dir),
            "fetched": jars_complete(self.lib_dir),
            "rss_kb": _rss_kb(pid) if pid is not None else None,
        }

    def running_pid(self) -> int | None:
        """Pid of this state directory's broker if it is alive (never some recycled pid)."""
        if self._proc is not None:
            return self._proc.pid if self._proc.poll() is None else None
        try:
            pid = int(self.pid_file.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, ValueError, IndexError):
            return None
        ours = b"kafka.Kafka" in cmdline and str(self.properties_file).encode() in cmdline
        return pid if ours and state not in ("Z", "X") else None

    # -- helpers ---------------------------------------------------------------------------

    def _log_flags(self) -> list[str]:
        return [f"-Dlog4j2.configurationFile={INFRA_DIR / 'log4j2.properties'}",
                f"-Dkafka.logs.dir={self.state_dir}"]  # fmt: skip

    def _format(self, lib: Path) -> None:
        cid = new_cluster_id()
        with open(self.log_file, "ab") as log:
            for main in _STORAGE_TOOLS:  # StorageTool may move to the tools module some day
                cmd = [
                    self.java,
                    "-Xmx256m",
                    *self._log_flags(),
                    "-cp",
                    f"{lib}/*",
                    main,
                    "format",
                    "-t",
                    cid,
                    "-c",
                    str(self.properties_file),
                    "--ignore-formatted",
                    *(kafka_secure.prepare(self.state_dir).scram_args() if self.secure else []),
                ]
                done = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=False)
                if done.returncode == 0:
                    return
        raise BrokerError(f"formatting KRaft storage failed; end of {self.log_file}:\n"
                          + self._log_tail())  # fmt: skip

    def _check_java(self) -> None:
        try:
            done = subprocess.run(
                [self.java, "-version"], capture_output=True, text=True, check=False
            )
        except FileNotFoundError:
            raise ToolMissingError(
                f"expected a Java 17+ runtime at {self.java!r} (set JAVA_HOME or install "
                "openjdk-17-jre-headless)"
            ) from None
        found = re.search(r'version "(\d+)', done.stderr + done.stdout)
        major = int(found.group(1)) if found else 0
        if major < 17:  # Kafka 4.x brokers need 17; the project pins 4.x
            raise ToolMissingError(f"Kafka {self.version} needs Java 17+; {self.java} is {major}")

    def _admin_answers(self, timeout_s: float) -> bool:
        admin = AdminClient(librdkafka_conf(self.client_config(), {"log_level": 2}))
        try:
            admin.list_topics(timeout=timeout_s)
        except Exception:  # any failure just means "not yet": the loop is bounded by its caller
            return False
        return True

    def _log_tail(self) -> str:
        try:
            return tail(self.log_file.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            return "(no log)"


def _parent_death_signal() -> None:
    # Runs in the forked child before exec: ask the kernel for SIGTERM when the parent dies.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _rss_kb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None
