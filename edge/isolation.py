"""Tenant isolation at the worker: each sharing group its own engine cache namespace.

Owns the body a worker receives for a tenant's request: the sharing group as the engine's
``cache_salt`` (set by the edge, whatever the client sent) and the request ids the worker sees
(``edge.request_ids``). Must not authenticate (``edge.tenants``) or route.

Why a salt per group (issue 26 item 1). A worker shared by two sharing groups (the default: a
tenant's ``workers`` is optional) kept one prefix cache for both, and the worker's reuse count
(``usage.prompt_tokens_details.cached_tokens``, ``/generate``'s ``meta_info.cached_tokens``)
went back to the client verbatim: a page-granular oracle on another group's prompts. Both engines
the workers run accept a cache namespace per request today:

- SGLang 0.5.23: ``cache_salt`` on ``/generate`` (``GenerateReqInput``) and the OpenAI requests
  (``CompletionRequest``/``ChatCompletionRequest``); the radix key is ``(extra_key, cache_salt)``,
  a salted path never matches another salt's, and its ``BlockStored`` events carry
  ``cache_salt`` with block hashes chained from a salt-derived root (``mem_cache/utils.py``);
- vLLM 0.33: ``cache_salt`` (non-empty, <= 128 characters, none of ``@ / \\`` or NUL), hashed into
  the first block's extra keys, so every block hash of the prompt depends on it; its
  ``BlockStored.extra_keys`` carry it.

So the edge sends every request of a tenant with ``cache_salt`` = its sharing group: tenants of one
group (which share prefix keys in the index, architecture §3) keep reusing each other's pages,
two groups never do, even on one worker, and the ``cached_tokens`` a client reads can only count
its own group's pages. Nothing is refused at start-up and no reuse that was safe is lost. A
client's own ``cache_salt`` is overwritten (it could otherwise name another group's). Without
tenants the edge adds nothing (one trust domain; a client's salt is its own business).

The index side agrees by construction: the key namespace's ``sharing_group`` is the same string
(``kvcompass.keys.KeyNamespace``), so a sidecar configured with a pool's group hashes the pages
into the namespace the group's requests are looked up in.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from edge.openai_shapes import Parsed
from edge.request_ids import RequestIds

SALT_FIELD = "cache_salt"
CLIENT_ID_FIELDS = ("rid", "request_id")
"""Body fields an engine takes as its request id: SGLang's ``rid``, vLLM's ``request_id``."""


def worker_body(parsed: Parsed, body: dict[str, Any], salt: str | None, ids: RequestIds) -> Parsed:
    """``parsed`` with the body the worker must get: ``cache_salt`` = ``salt`` (when tenants are
    configured), and a client's ``rid``/``request_id`` replaced by the edge id. Unchanged (the
    client's bytes forwarded as they came) when neither applies."""
    named = [k for k in CLIENT_ID_FIELDS if k in body]
    if salt is None and not named:
        return parsed
    if parsed.forward_body is None and not named and SALT_FIELD not in body:
        # the client's bytes already say everything else: add the salt without re-encoding
        member = f',"{SALT_FIELD}":{json.dumps(salt)}'.encode()
        return replace(parsed, forward_suffix=parsed.forward_suffix + member)
    fwd = dict(parsed.forward_body if parsed.forward_body is not None else body)
    fwd["stream"] = True  # the worker always streams (edge.responses)
    for k in named:
        fwd[k] = ids.edge
    if salt is not None:
        fwd[SALT_FIELD] = salt
    return replace(parsed, forward_body=fwd)


def payload(parsed: Parsed, raw: bytes) -> bytes:
    """The bytes the worker gets: the rebuilt body, or the client's with ``forward_suffix``
    spliced in before its closing brace (the body parsed as a non-empty JSON object, so it ends
    in ``}`` after optional whitespace and already has a member to follow)."""
    fwd = parsed.forward_body
    if fwd is not None:
        return json.dumps(fwd, separators=(",", ":")).encode()
    if not parsed.forward_suffix:
        return raw
    end = raw.rstrip()
    return end[:-1] + parsed.forward_suffix + b"}"
