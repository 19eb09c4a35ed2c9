"""KV page copy between emulated workers (tiny-llama mode): ``/kv/export`` and ``/kv/import``.

Owns the wire format of a copied prefix and its validation. Must not: touch the cache directly
(``Engine.export_kv``/``import_kv`` do). Not SGLang (our intra-region copy):
``POST /kv/export`` with JSON
``{"input_ids": [...]}`` answers, and ``POST /kv/import`` takes, one msgpack map::

    {"page_size": int, "input_ids": [int, ...]  (whole pages of the prefix),
     "shape": [2, n_layers, n_tokens, n_kv_heads, head_dim], "dtype": "float32",
     "kv": bytes  (C order, little-endian; index 0 = K after RoPE, 1 = V)}

``/kv/import`` answers JSON ``{"imported_tokens": n}`` and publishes the pages' BlockStored.
The tensors are torch (``tiny_llama``) in the worker; the bytes are the same as numpy's
``tobytes()`` of a ``<f4`` array, so a peer needs neither torch nor this code to read them.
A bad header (page size, dtype, shape, byte count) is a 400 naming what was expected.
"""

from __future__ import annotations

import json
import math
import uuid

import msgspec
from aiohttp import web

from workers.emulated.http_common import ENGINE, BadRequest, error, token_ids


async def kv_export(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    rid = request.headers.get("X-Request-Id", uuid.uuid4().hex)
    if engine.model is None:
        return error(404, "kv export: this worker has no KV tensors (cost-model mode)", rid)
    try:
        body = await request.json()
        tokens = token_ids(body.get("input_ids") if isinstance(body, dict) else None, "input_ids")
    except (BadRequest, json.JSONDecodeError) as exc:
        return error(400, str(exc), rid)
    held, kv = engine.export_kv(tokens)
    arr = engine.model.empty_kv() if kv is None else kv
    out = {"page_size": engine.cache.page_size, "input_ids": held, "shape": list(arr.shape),
           "dtype": "float32", "kv": engine.model.to_bytes(arr)}  # fmt: skip
    return web.Response(body=msgspec.msgpack.encode(out), content_type="application/msgpack")


async def kv_import(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    rid = request.headers.get("X-Request-Id", uuid.uuid4().hex)
    if engine.model is None:
        return error(404, "kv import: this worker has no KV tensors (cost-model mode)", rid)
    try:
        body = msgspec.msgpack.decode(await request.read())
        tokens = token_ids(body["input_ids"], "input_ids")
        shape = tuple(int(x) for x in body["shape"])
        expected = engine.model.empty_kv().shape
        if body["page_size"] != engine.cache.page_size or body["dtype"] != "float32":
            raise BadRequest(f"page_size/dtype: expected {engine.cache.page_size}/float32")
        if len(shape) != 5 or shape[:2] + shape[3:] != expected[:2] + expected[3:]:
            raise BadRequest(f"shape: expected [2, L, n, kvh, hd] like {list(expected)}")
        if shape[2] != len(tokens):
            raise BadRequest(f"shape: expected {len(tokens)} tokens, got {shape[2]}")
        if not isinstance(body["kv"], bytes) or len(body["kv"]) != 4 * math.prod(shape):
            raise BadRequest(f"kv: expected {4 * math.prod(shape)} bytes for shape {list(shape)}")
        kv = engine.model.from_bytes(body["kv"], shape)
    except (BadRequest, msgspec.DecodeError, KeyError, TypeError, ValueError) as exc:
        return error(400, f"kv import: {exc}", rid)
    n = await engine.import_kv(tokens, kv)
    return web.json_response({"imported_tokens": n})
