"""Request ids at the edge: the edge's own (minted, unguessable) and the client's (kept apart).

Owns minting the edge's request id (``mint``: 128 random bits from ``secrets``, so one tenant
cannot guess another's id, e.g. to read its ``/debug/explain`` entry or collide with it at a
worker), reading a client's ``X-Request-Id`` (1-128 of ``[A-Za-z0-9._:-]``, else ignored), which id
is echoed back, and ``ClientIds``: the bounded index from (tenant, client id) to the edge id, so
``/debug/explain/{id}`` finds a request by the id its client chose without one tenant's id ever
replacing another's. Must not know HTTP routes or routing state (``edge.service`` keeps the
decisions, by edge id only).

What goes where:
- the edge id keys the decision (``/debug/explain``, the ``routing-decisions`` record) and is what
  the worker sees: ``X-Request-Id`` (vLLM's request id) and, when the client sent one, ``rid``
  (SGLang) / ``request_id`` (vLLM) in the body (``edge.isolation.worker_body``): a worker's request
  id is the edge's or the engine's own, never a client's, so two tenants cannot collide there;
- the client's id (header, or ``/generate``'s body ``rid``) is echoed back in ``X-Request-Id`` and
  the error body's ``request_id`` (as before); the edge id always rides in ``X-KVC-Request-Id``.
"""

from __future__ import annotations

import re
import secrets
from collections import OrderedDict
from dataclasses import dataclass

EDGE_ID_HEADER = "X-KVC-Request-Id"
"""Response header carrying the edge's own id of the request (always set on completions)."""

_CLIENT_ID = re.compile(r"[A-Za-z0-9._:\-]{1,128}")


def mint() -> str:
    """A new edge request id: 32 hex digits of ``secrets`` randomness (uuid4's strength)."""
    return secrets.token_hex(16)


def client_id(value: object) -> str | None:
    """``value`` if it is a usable client id (a string of 1-128 ``[A-Za-z0-9._:-]``), else None."""
    if isinstance(value, str) and _CLIENT_ID.fullmatch(value):
        return value
    return None


@dataclass(slots=True)
class RequestIds:
    """The two ids of one request."""

    edge: str
    client: str | None = None

    @property
    def echo(self) -> str:
        """What the client gets back as ``X-Request-Id``: its own id if it sent one."""
        return self.client if self.client is not None else self.edge

    def headers(self) -> dict[str, str]:
        return {"X-Request-Id": self.echo, EDGE_ID_HEADER: self.edge}


class AmbiguousClientId(Exception):
    """Several tenants used the same client id: the caller must say whose."""

    def __init__(self, tenants: list[str]) -> None:
        super().__init__(f"several tenants used this id: {tenants}")
        self.tenants = tenants


class ClientIds:
    """(tenant, client id) → edge id of the most recent ``capacity`` requests, and back.

    The tenant is the authenticated one (None without tenants), so a tenant reusing another's id
    adds its own entry beside it; the same tenant reusing its own id points it at its newest
    request (as the id-keyed explain store did)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self._by_client: OrderedDict[tuple[str | None, str], str] = OrderedDict()
        self._by_edge: dict[str, tuple[str | None, str]] = {}

    def add(self, tenant: str | None, client: str, edge: str) -> None:
        key = (tenant, client)
        old = self._by_client.pop(key, None)
        if old is not None:
            self._by_edge.pop(old, None)
        self._by_client[key] = edge
        self._by_edge[edge] = key
        while len(self._by_client) > self.capacity:
            _, gone = self._by_client.popitem(last=False)
            self._by_edge.pop(gone, None)

    def of_edge(self, edge: str) -> tuple[str | None, str] | None:
        """(tenant, client id) of an edge id, if its client sent one."""
        return self._by_edge.get(edge)

    def resolve(self, client: str, tenant: str | None, any_tenant: bool) -> str | None:
        """The edge id of ``client``'s request: of ``tenant`` (``any_tenant`` False) or of the
        one tenant that used the id (True; ``AmbiguousClientId`` when several did)."""
        if not any_tenant:
            return self._by_client.get((tenant, client))
        found = [(t, e) for (t, c), e in self._by_client.items() if c == client]
        if len(found) > 1:
            raise AmbiguousClientId(sorted(str(t) for t, _ in found))
        return found[0][1] if found else None
