"""Several models and tenants behind one edge: who is asking, for which model, in which namespace.

Owns the edge's tenancy settings (``ModelSpec``, ``TenantSpec``, ``Tenancy``, read from the
``[models.*]``, ``[tenants.*]`` tables and ``edge.admin_token``), API-key and admin-token checks
(``Authorization: Bearer <key>``, compared in constant time with ``hmac.compare_digest`` against
every configured key, so the time taken says nothing about which key or how much of it matched),
and ``Scope``: the key namespace (model id, model config, sharing-group salt; architecture §3,
``kvcompass.keys.KeyNamespace``) and the workers one request may be looked up in and sent to.
Must not know HTTP (it raises ``ApiError``, the handlers answer) nor hold routing state: a scope
is a hasher plus a worker set; the view and the router stay shared (``edge.service``).

Without ``[tenants]`` nobody is authenticated and keys carry no salt (the edge as before);
without ``[models]`` the one model is ``edge.model`` served by every worker.
"""

from __future__ import annotations

import hmac
import re
from dataclasses import dataclass, field
from typing import Any

from edge.openai_shapes import ApiError
from kvcompass.errors import ConfigError
from kvcompass.keys import KeyNamespace

_BEARER = "bearer "
_SALT = re.compile(r"[^@/\\\x00]{1,128}")
"""A sharing group is sent to the engines as ``cache_salt`` (``edge.isolation``): vLLM 0.33's
``validate_cache_salt`` refuses an empty one, one over 128 characters, and ``@ / \\`` or NUL."""


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """One served model: its key namespace and the workers that run it (None: all)."""

    name: str
    model_config: str = ""
    workers: frozenset[int] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"models: expected a non-empty model id, got {self.name!r}")
        if not isinstance(self.model_config, str):
            raise ConfigError(f"models.{self.name}.model_config: expected a string")


@dataclass(frozen=True, slots=True)
class TenantSpec:
    """One tenant: its API key, its sharing group (the key salt) and optionally its workers."""

    name: str
    api_key: str
    sharing_group: str
    """Tenants with the same group share prefix keys (and so cache hits); default: the name.
    Also the engines' ``cache_salt`` of its requests (``edge.isolation``): two groups never share
    a worker's cache pages, even on one worker."""
    workers: frozenset[int] | None = None
    """Workers its requests may go to (e.g. its group's pool); None: every worker of the model."""

    def __post_init__(self) -> None:
        if not isinstance(self.api_key, str) or len(self.api_key) < 8:
            raise ConfigError(f"tenants.{self.name}.api_key: expected a string of >= 8 "
                              "characters")  # fmt: skip
        if not isinstance(self.sharing_group, str) or not _SALT.fullmatch(self.sharing_group):
            raise ConfigError(f"tenants.{self.name}.sharing_group: expected 1-128 characters "
                              "without '@', '/', '\\' or NUL (it is the engines' cache_salt), "
                              f"got {self.sharing_group!r}"[:300])  # fmt: skip


@dataclass(frozen=True, slots=True)
class Scope:
    """Where one request is looked up and may be sent: a key namespace and a worker set."""

    namespace: KeyNamespace
    workers: frozenset[int] | None
    """None: every worker the edge can reach."""

    @property
    def cache_salt(self) -> str | None:
        """The engine cache namespace of the request (its sharing group; None: no tenants)."""
        return self.namespace.sharing_group

    def allows(self, worker: int) -> bool:
        return self.workers is None or worker in self.workers


def _worker_set(where: str, value: Any) -> frozenset[int] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(type(w) is int and w >= 0 for w in value):
        raise ConfigError(f"{where}.workers: expected a list of worker ids >= 0, got {value!r}")
    return frozenset(value)


def _table(where: str, value: Any, known: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a table, got {value!r}")
    extra = set(value) - known
    if extra:
        raise ConfigError(f"{where}: expected keys in {sorted(known)}, got {sorted(extra)}")
    return value


def models_from_mapping(models: dict[str, Any]) -> tuple[ModelSpec, ...]:
    """``[models."<id>"]`` tables: ``model_config`` (str), ``workers`` (list of ids)."""
    out = []
    for name, raw in models.items():
        t = _table(f"models.{name}", raw, {"model_config", "workers"})
        where = f"models.{name}"
        out.append(ModelSpec(name, t.get("model_config", ""), _worker_set(where, t.get("workers"))))
    return tuple(out)


def tenants_from_mapping(tenants: dict[str, Any]) -> tuple[TenantSpec, ...]:
    """``[tenants.<name>]`` tables: ``api_key``, ``sharing_group``, ``workers``."""
    out = []
    for name, raw in tenants.items():
        t = _table(f"tenants.{name}", raw, {"api_key", "sharing_group", "workers"})
        if "api_key" not in t:
            raise ConfigError(f"tenants.{name}.api_key: required")
        where = f"tenants.{name}"
        group = t.get("sharing_group", name)
        out.append(TenantSpec(name, t["api_key"], group, _worker_set(where, t.get("workers"))))
    return tuple(out)


def _bearer(authorization: str | None) -> str | None:
    if authorization is None or authorization[:7].lower() != _BEARER:
        return None
    token = authorization[7:].strip()
    return token or None


def _unauthorized(message: str) -> ApiError:
    return ApiError(401, message, "invalid_request_error", code="invalid_api_key")


@dataclass(frozen=True, slots=True)
class Tenancy:
    """Models, tenants and the admin token of one edge; answers "who, which model, where"."""

    models: tuple[ModelSpec, ...]
    default_model: str
    """The model of a request that names none (SGLang ``/generate``)."""
    tenants: tuple[TenantSpec, ...] = ()
    admin_token: str | None = None
    _by_model: dict[str, ModelSpec] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.models:
            raise ConfigError("models: expected at least one model")
        names = [m.name for m in self.models]
        if len(set(names)) != len(names):
            raise ConfigError(f"models: expected unique ids, got {names}")
        if self.default_model not in names:
            raise ConfigError(f"edge.model: expected one of {names}, got {self.default_model!r}")
        keys = [t.api_key for t in self.tenants]
        if len(set(keys)) != len(keys):
            raise ConfigError("tenants: two tenants have the same api_key")
        if self.admin_token is not None:
            if not isinstance(self.admin_token, str) or len(self.admin_token) < 8:
                raise ConfigError("edge.admin_token: expected a string of >= 8 characters")
            if self.admin_token in keys:
                raise ConfigError("edge.admin_token: must differ from every tenant's api_key")
        self._by_model.update((m.name, m) for m in self.models)

    @property
    def authenticates(self) -> bool:
        """True when tenants are configured (every API request needs a valid key)."""
        return bool(self.tenants)

    def authenticate(self, authorization: str | None) -> TenantSpec | None:
        """The tenant of ``Authorization: Bearer <key>``; None when no tenants are configured.

        Raises ``ApiError`` 401 (``invalid_api_key``) for a missing, malformed or unknown key.
        Every configured key is compared, in constant time, whatever matched before."""
        if not self.tenants:
            return None
        token = _bearer(authorization)
        if token is None:
            raise _unauthorized("missing API key: expected 'Authorization: Bearer <key>'")
        raw = token.encode("utf-8", "surrogateescape")
        found: TenantSpec | None = None
        for t in self.tenants:
            if hmac.compare_digest(raw, t.api_key.encode("utf-8")):
                found = t
        if found is None:
            raise _unauthorized("incorrect API key provided")
        return found

    def check_admin(self, authorization: str | None) -> None:
        """Admin and debug endpoints: 401 without a bearer token, 403 with a wrong one (or with
        tenants but no ``admin_token``: those endpoints would let one tenant probe another's
        prompts); open when neither tenants nor an admin token are configured (as before)."""
        if self.admin_token is None:
            if self.tenants:
                raise ApiError(403, "admin and debug endpoints are disabled: tenants are "
                                    "configured but edge.admin_token is not",
                               code="admin_disabled")  # fmt: skip
            return
        token = _bearer(authorization)
        if token is None:
            raise _unauthorized("missing admin token: expected 'Authorization: Bearer <token>'")
        if not hmac.compare_digest(
            token.encode("utf-8", "surrogateescape"), self.admin_token.encode("utf-8")
        ):
            raise ApiError(403, "this token may not use admin or debug endpoints",
                           code="forbidden")  # fmt: skip

    def model(self, name: object) -> ModelSpec:
        """The served model ``name`` (a request's ``model``; None: the default). 404
        ``model_not_found`` for an unknown one; a non-string is left to the request parser."""
        if name is None or not isinstance(name, str):
            return self._by_model[self.default_model]
        spec = self._by_model.get(name)
        if spec is None:
            raise ApiError(404, f"model: expected one of {list(self._by_model)}, got "
                                f"{name[:200]!r}", code="model_not_found",
                           param="model")  # fmt: skip
        return spec

    def tenant(self, name: object) -> TenantSpec:
        """The tenant called ``name`` (``/debug/lookup``'s ``tenant``); 400 if there is none."""
        for t in self.tenants:
            if t.name == name:
                return t
        shown = name[:100] if isinstance(name, str) else name
        raise ApiError(400, f"tenant: expected one of {[t.name for t in self.tenants]}, got "
                            f"{shown!r}", param="tenant")  # fmt: skip

    def scope(self, model: ModelSpec, tenant: TenantSpec | None) -> Scope:
        """Namespace (model, config, the tenant's group as salt) and the workers allowed."""
        ns = KeyNamespace(model.name, model.model_config,
                          tenant.sharing_group if tenant is not None else None)  # fmt: skip
        workers = model.workers
        if tenant is not None and tenant.workers is not None:
            workers = tenant.workers if workers is None else workers & tenant.workers
        return Scope(ns, workers)
