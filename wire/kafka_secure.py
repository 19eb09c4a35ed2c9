"""The local broker's security (``kvcompass kafka up --secure``): certificates, one SCRAM user
per role, and the server properties that turn them on.

Owns, in a broker's state directory ``tls/``: a throw-away CA and a broker certificate for
127.0.0.1 / localhost (subject ``CN=kvcompass-broker``), made with **openssl** (``openssl req
-x509``, ``openssl x509 -req``, then ``openssl pkcs12 -export`` into the PKCS12 keystore the
broker reads); SCRAM-SHA-512 users with random passwords, added to the KRaft metadata at format
time (``kafka-storage format --add-scram``, KIP-900: no running broker needed): ``broker`` (its
own inter-broker connections) and one per role, ``kvcompass-<role>`` for ``wire.acls.ROLES``
(sidecar, maintenance, edge, admin); and ``<role>.env``, the ``KVCOMPASS_*`` settings of a
process of that role (``PipelineConfig.from_env`` reads them).

No listener takes an unauthenticated client: the client port speaks only SASL_SSL (each role's
ACLs, ``wire.acls``, enforced by KRaft's ``StandardAuthorizer``; no ACL, no access), and the KRaft
controller listener speaks only TLS with a client certificate signed by the local CA (the
broker's own; ``ssl.client.auth=required``), so an anonymous admin client
(``bootstrap.controllers``, KIP-919) cannot even finish its handshake there. Super users: the
broker's two identities and ``kvcompass-admin``. Must not: start or stop processes
(``wire.kafka_local``).
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from wire.acls import ROLES, user
from wire.config import PipelineConfig
from wire.kafka_jars import ToolMissingError

MECHANISM = "SCRAM-SHA-512"
BROKER_USER = "broker"
BROKER_SUBJECT = "CN=kvcompass-broker"
"""The broker certificate's subject: its principal on the controller listener (mutual TLS)."""
SCHEME = "roles-v1"
"""Marker in ``tls/``: these users and listeners (issue 35). A state directory formatted before
has one shared client user and a PLAINTEXT controller: ``kafka_local`` refuses to start it."""
_DAYS = "3650"


@dataclass(frozen=True, slots=True)
class SecureFiles:
    """What ``prepare`` made (or found) in ``<state_dir>/tls``."""

    directory: Path
    ca_pem: Path
    keystore: Path
    keystore_password: str
    broker_password: str
    role_passwords: tuple[tuple[str, str], ...]
    """(role, password) for every role of ``wire.acls.ROLES``."""

    def password(self, role: str) -> str:
        for r, pw in self.role_passwords:
            if r == role:
                return pw
        raise KeyError(f"no role {role!r}; expected one of {', '.join(ROLES)}")

    def client_config(self, bootstrap: str, role: str = "admin") -> PipelineConfig:
        """How a process of ``role`` reaches the broker."""
        return PipelineConfig(
            bootstrap_servers=bootstrap,
            security_protocol="SASL_SSL",
            sasl_mechanism=MECHANISM,
            sasl_username=user(role),
            sasl_password=self.password(role),
            ssl_ca_location=str(self.ca_pem),
        )

    def client_env(self, bootstrap: str, role: str) -> dict[str, str]:
        c = self.client_config(bootstrap, role)
        return {
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "KVCOMPASS_SECURITY_PROTOCOL": c.security_protocol,
            "KVCOMPASS_SASL_MECHANISM": c.sasl_mechanism,
            "KVCOMPASS_SASL_USERNAME": c.sasl_username,
            "KVCOMPASS_SASL_PASSWORD": c.sasl_password,
            "KVCOMPASS_SSL_CA_LOCATION": c.ssl_ca_location,
        }

    def scram_args(self) -> list[str]:
        """``kafka-storage format`` arguments creating the broker's user and every role's."""
        users = [(BROKER_USER, self.broker_password),
                 *((user(r), pw) for r, pw in self.role_passwords)]  # fmt: skip
        out: list[str] = []
        for name, pw in users:
            out += ["--add-scram", f"{MECHANISM}=[name={name},password={pw}]"]
        return out

    def server_properties(self, port: int, controller_port: int) -> str:
        """Lines appended to the rendered template (later keys win in a Java properties file)."""
        jaas = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{BROKER_USER}" password="{self.broker_password}";'
        )
        supers = f"User:{BROKER_USER};User:{BROKER_SUBJECT};User:{user('admin')}"
        return "\n".join(
            [
                "",
                "# --secure (wire.kafka_secure): clients only over SASL_SSL with SCRAM-SHA-512,",
                "# each role's ACLs (wire.acls); the controller only over mutual TLS",
                f"listeners=SASL_SSL://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
                f"advertised.listeners=SASL_SSL://127.0.0.1:{port}",
                "listener.security.protocol.map=CONTROLLER:SSL,SASL_SSL:SASL_SSL",
                "inter.broker.listener.name=SASL_SSL",
                f"sasl.enabled.mechanisms={MECHANISM}",
                f"sasl.mechanism.inter.broker.protocol={MECHANISM}",
                f"listener.name.sasl_ssl.{MECHANISM.lower()}.sasl.jaas.config={jaas}",
                "ssl.keystore.type=PKCS12",
                f"ssl.keystore.location={self.keystore}",
                f"ssl.keystore.password={self.keystore_password}",
                f"ssl.key.password={self.keystore_password}",
                # the broker's own connections (inter-broker, to its controller) trust the local CA
                "ssl.truststore.type=PEM",
                f"ssl.truststore.location={self.ca_pem}",
                "ssl.client.auth=none",
                # the controller takes only a client certificate of the local CA: the broker's
                "listener.name.controller.ssl.client.auth=required",
                "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                "allow.everyone.if.no.acl.found=false",
                f"super.users={supers}",
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
        _secret(d / "broker.password"),
        tuple((r, _secret(d / f"{user(r)}.password")) for r in ROLES),
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
                  "broker.csr", "-subj", f"/{BROKER_SUBJECT}"], d)  # fmt: skip
        _openssl(["x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                  "-CAcreateserial", "-out", "broker.pem", "-days", _DAYS, "-extfile",
                  "san.cnf"], d)  # fmt: skip
        _openssl(["pkcs12", "-export", "-in", "broker.pem", "-inkey", "broker.key", "-certfile",
                  "ca.pem", "-name", "broker", "-out", "broker.p12", "-passout",
                  f"pass:{files.keystore_password}"], d)  # fmt: skip
        (d / SCHEME).write_text("per-role SCRAM users; controller over mutual TLS\n")
    return files


def current_scheme(state_dir: Path) -> bool:
    """Whether ``state_dir``'s ``tls/`` was made by this scheme (per-role users)."""
    return (state_dir / "tls" / SCHEME).exists()


def write_client_env(files: SecureFiles, bootstrap: str) -> dict[str, Path]:
    """``<state_dir>/tls/<role>.env`` (mode 0600) for every role: ``export`` lines for a shell."""
    out: dict[str, Path] = {}
    for role in ROLES:
        path = files.directory / f"{role}.env"
        text = "".join(f"export {k}={v}\n" for k, v in files.client_env(bootstrap, role).items())
        path.write_text(text, encoding="utf-8")
        path.chmod(0o600)
        out[role] = path
    (files.directory / "client.env").unlink(missing_ok=True)  # the old one shared user
    return out
