"""The local broker's SASL_SSL listener (``kvcompass kafka up --secure``): certificates, SCRAM
credentials and the server properties that turn them on.

Owns, in a broker's state directory ``tls/``: a throw-away CA and a broker certificate for
127.0.0.1 / localhost, made with **openssl** (``openssl req -x509``, ``openssl x509 -req``, then
``openssl pkcs12 -export`` into the PKCS12 keystore the broker reads); two SCRAM-SHA-512 users
(``broker`` for the broker's own inter-broker connections, ``kvcompass`` for clients) with random
passwords, added to the KRaft metadata at format time (``kafka-storage format --add-scram``,
KIP-900: no ZooKeeper, no running broker needed); and ``client.env``, the ``KVCOMPASS_*``
settings a client needs (``PipelineConfig.from_env`` reads them).

The client port speaks only SASL_SSL: a client without credentials (or PLAINTEXT) is refused.
The KRaft controller listener stays PLAINTEXT on 127.0.0.1 (controller RPCs only; a client cannot
produce or fetch there). Must not: start or stop processes (``wire.kafka_local``).
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from wire.config import PipelineConfig
from wire.kafka_jars import ToolMissingError

MECHANISM = "SCRAM-SHA-512"
CLIENT_USER = "kvcompass"
BROKER_USER = "broker"
_DAYS = "3650"


@dataclass(frozen=True, slots=True)
class SecureFiles:
    """What ``prepare`` made (or found) in ``<state_dir>/tls``."""

    directory: Path
    ca_pem: Path
    keystore: Path
    keystore_password: str
    broker_password: str
    client_password: str

    def client_config(self, bootstrap: str) -> PipelineConfig:
        return PipelineConfig(
            bootstrap_servers=bootstrap,
            security_protocol="SASL_SSL",
            sasl_mechanism=MECHANISM,
            sasl_username=CLIENT_USER,
            sasl_password=self.client_password,
            ssl_ca_location=str(self.ca_pem),
        )

    def client_env(self, bootstrap: str) -> dict[str, str]:
        c = self.client_config(bootstrap)
        return {
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "KVCOMPASS_SECURITY_PROTOCOL": c.security_protocol,
            "KVCOMPASS_SASL_MECHANISM": c.sasl_mechanism,
            "KVCOMPASS_SASL_USERNAME": c.sasl_username,
            "KVCOMPASS_SASL_PASSWORD": c.sasl_password,
            "KVCOMPASS_SSL_CA_LOCATION": c.ssl_ca_location,
        }

    def scram_args(self) -> list[str]:
        """``kafka-storage format`` arguments creating both users."""
        return [
            "--add-scram", f"{MECHANISM}=[name={BROKER_USER},password={self.broker_password}]",
            "--add-scram", f"{MECHANISM}=[name={CLIENT_USER},password={self.client_password}]",
        ]  # fmt: skip

    def server_properties(self, port: int, controller_port: int) -> str:
        """Lines appended to the rendered template (later keys win in a Java properties file)."""
        jaas = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{BROKER_USER}" password="{self.broker_password}";'
        )
        return "\n".join(
            [
                "",
                "# --secure (wire.kafka_secure): clients only over SASL_SSL with SCRAM-SHA-512",
                f"listeners=SASL_SSL://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
                f"advertised.listeners=SASL_SSL://127.0.0.1:{port}",
                "listener.security.protocol.map=CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL",
                "inter.broker.listener.name=SASL_SSL",
                f"sasl.enabled.mechanisms={MECHANISM}",
                f"sasl.mechanism.inter.broker.protocol={MECHANISM}",
                f"listener.name.sasl_ssl.{MECHANISM.lower()}.sasl.jaas.config={jaas}",
                "ssl.keystore.type=PKCS12",
                f"ssl.keystore.location={self.keystore}",
                f"ssl.keystore.password={self.keystore_password}",
                f"ssl.key.password={self.keystore_password}",
                # the broker's own (inter-broker) connections trust the local CA (a PEM file)
                "ssl.truststore.type=PEM",
                f"ssl.truststore.location={self.ca_pem}",
                "ssl.client.auth=none",
                "",
            ]
        )


def _secret(path: Path) -> str:
    if not path.exists():
        path.write_text(secrets.token_urlsafe(18) + "\n", encoding="utf-8")
        path.chmod(0o600)
    return path.read_text(encoding="utf-8").strip()


def _openssl(args: list[str], cwd: Path) -> None:
    exe = shutil.which("openssl")
    if exe is None:
        raise ToolMissingError("kafka up --secure: expected the openssl command (apt: openssl)")
    done = subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ToolMissingError(f"openssl {args[0]} failed: {done.stderr.strip()[-500:]}")


def prepare(state_dir: Path) -> SecureFiles:
    """Make the CA, the broker's keystore and the passwords once; later calls reuse them."""
    d = state_dir / "tls"
    d.mkdir(parents=True, exist_ok=True)
    d.chmod(0o700)
    files = SecureFiles(
        d, d / "ca.pem", d / "broker.p12", _secret(d / "keystore.password"),
        _secret(d / "broker.password"), _secret(d / "client.password"),
    )  # fmt: skip
    if not files.keystore.exists():
        (d / "san.cnf").write_text(
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
            "extendedKeyUsage=serverAuth,clientAuth\n",
            encoding="utf-8",
        )
        _openssl(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
                  "ca.pem", "-days", _DAYS, "-subj", "/CN=kvcompass local CA", "-addext",
                  "basicConstraints=critical,CA:TRUE", "-addext",
                  "keyUsage=critical,keyCertSign,cRLSign"], d)  # fmt: skip
        _openssl(["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "broker.key", "-out",
                  "broker.csr", "-subj", "/CN=localhost"], d)  # fmt: skip
        _openssl(["x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                  "-CAcreateserial", "-out", "broker.pem", "-days", _DAYS, "-extfile",
                  "san.cnf"], d)  # fmt: skip
        _openssl(["pkcs12", "-export", "-in", "broker.pem", "-inkey", "broker.key", "-certfile",
                  "ca.pem", "-name", "broker", "-out", "broker.p12", "-passout",
                  f"pass:{files.keystore_password}"], d)  # fmt: skip
    return files


def write_client_env(files: SecureFiles, bootstrap: str) -> Path:
    """``<state_dir>/tls/client.env`` (mode 0600): ``export`` lines for a shell."""
    path = files.directory / "client.env"
    text = "".join(f"export {k}={v}\n" for k, v in files.client_env(bootstrap).items())
    path.write_text(text, encoding="utf-8")
    path.chmod(0o600)
    return path
