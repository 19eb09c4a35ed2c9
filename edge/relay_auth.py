"""Relays between edges are signed: only a peer edge holding the deployment's relay key can make
this edge act on ``X-KVC-*`` headers (issue 35 item 5).

Before, any client could send ``X-KVC-Forward-To`` (pin a worker, skipping the router) or
``X-KVC-Origin-Region`` (and be handed this region's queue vector). Now an edge that relays a
request signs it, and the serving edge acts on the ``X-KVC-*`` headers of a request only if the
signature is valid; otherwise it drops all of them (the request is routed as any client's) and
counts ``relay_headers_stripped_total`` by reason.

Signature (HMAC-SHA256 with ``EdgeConfig.relay_key``, one key per deployment)::

    X-KVC-Relay-Signature: v1;t=<unix ms>;n=<nonce, 32 hex>;s=<hex HMAC>

over ``kvc-relay-v1``, ``t``, ``n``, the request path, the SHA-256 of the body and every other
``X-KVC-*`` header of the request (name lower-cased, sorted, ``name:value``), one per line. So a
signature holds only for the request it was made for (its path, body and relay headers); it
expires ``MAX_AGE_MS`` after ``t`` (clocks of a deployment agree to well within that), a
timestamp further in the future is refused, and each nonce is accepted once (kept until it
expires: a captured relay cannot be replayed). Must not route or parse bodies.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import deque
from collections.abc import Callable, Mapping

from kvcompass.errors import ConfigError

SIGNATURE_HEADER = "X-KVC-Relay-Signature"
PREFIX = "x-kvc-"
MAX_AGE_MS = 30_000.0
"""A signature is good for this long after its time, and its time at most this far ahead."""
MIN_KEY_CHARS = 32
_TAG = b"kvc-relay-v1"


def relay_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The ``X-KVC-*`` headers of a request, the signature excluded."""
    return {k: v for k, v in headers.items()
            if k.lower().startswith(PREFIX) and k.lower() != SIGNATURE_HEADER.lower()}  # fmt: skip


def check_key(key: str) -> None:
    """A relay key must be long enough not to be guessed (``secrets.token_hex(32)`` is 64)."""
    if not isinstance(key, str) or len(key) < MIN_KEY_CHARS:
        raise ConfigError(
            f"edge.relay_key: expected a secret of at least {MIN_KEY_CHARS} characters (e.g. "
            f"`python -c 'import secrets; print(secrets.token_hex(32))'`), got "
            f"{len(key) if isinstance(key, str) else type(key).__name__} characters"
        )


class RelayAuth:
    """Signs this edge's relays and checks the ones it receives."""

    def __init__(self, key: str, clock_ms: Callable[[], float] | None = None) -> None:
        check_key(key)
        self._key = key.encode()
        self._clock_ms = clock_ms or (lambda: time.time() * 1000.0)
        self._seen: set[str] = set()
        self._expiry: deque[tuple[float, str]] = deque()

    def _mac(self, t: str, nonce: str, path: str, body: bytes, kvc: Mapping[str, str]) -> str:
        lines = [_TAG, t.encode(), nonce.encode(), path.encode(),
                 hashlib.sha256(body).hexdigest().encode()]  # fmt: skip
        lines += sorted(f"{k.lower()}:{v}".encode() for k, v in kvc.items())
        return hmac.new(self._key, b"\n".join(lines), hashlib.sha256).hexdigest()

    def sign(self, path: str, body: bytes, headers: Mapping[str, str]) -> str:
        """The signature header value for a relay of ``body`` to ``path`` with ``headers``."""
        t = str(int(self._clock_ms()))
        nonce = secrets.token_hex(16)
        mac = self._mac(t, nonce, path, body, relay_headers(headers))
        return f"v1;t={t};n={nonce};s={mac}"

    def verify(self, path: str, body: bytes, headers: Mapping[str, str]) -> str | None:
        """None if the request's relay headers are signed by a holder of the key; else why not
        (``missing``, ``malformed``, ``expired``, ``future``, ``bad_signature``, ``replayed``)."""
        value = headers.get(SIGNATURE_HEADER)
        if value is None:
            return "missing"
        fields = dict(p.partition("=")[::2] for p in value.split(";")[1:])
        t, nonce, mac = fields.get("t", ""), fields.get("n", ""), fields.get("s", "")
        if not value.startswith("v1;") or not t.isdigit() or len(nonce) != 32 or len(mac) != 64:
            return "malformed"
        now = self._clock_ms()
        if int(t) < now - MAX_AGE_MS:
            return "expired"
        if int(t) > now + MAX_AGE_MS:
            return "future"
        want = self._mac(t, nonce, path, body, relay_headers(headers))
        if not hmac.compare_digest(want, mac):
            return "bad_signature"
        self._forget(now)
        if nonce in self._seen:
            return "replayed"
        self._seen.add(nonce)
        self._expiry.append((int(t) + 2 * MAX_AGE_MS, nonce))
        return None

    def _forget(self, now_ms: float) -> None:
        while self._expiry and self._expiry[0][0] < now_ms:
            self._seen.discard(self._expiry.popleft()[1])
