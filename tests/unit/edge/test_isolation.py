"""The worker's body: the tenant's sharing group as cache_salt, the edge's id for a client's."""

from __future__ import annotations

import json

import numpy as np
import pytest

from edge.isolation import payload, worker_body
from edge.openai_shapes import Parsed
from edge.request_ids import RequestIds
from edge.tenants import TenantSpec
from kvcompass.errors import ConfigError

IDS = RequestIds("edgeid", "client")


def _parsed(fwd: dict[str, object] | None) -> Parsed:
    return Parsed("generate", np.arange(3, dtype=np.int32), False, "/generate", fwd)


def test_no_tenants_no_client_id__client_bytes_go_as_they_came() -> None:
    p = _parsed(None)
    assert worker_body(p, {"input_ids": [0, 1, 2], "cache_salt": "own"}, None, IDS) is p


def test_tenant__salt_set_over_the_clients_and_client_ids_replaced() -> None:  # rebuilt
    body = {"input_ids": [0, 1, 2], "cache_salt": "acme", "rid": "x", "request_id": "y"}
    out = worker_body(_parsed(None), body, "globex", IDS).forward_body
    assert out == {"input_ids": [0, 1, 2], "cache_salt": "globex", "rid": "edgeid",
                   "request_id": "edgeid", "stream": True}  # fmt: skip  # worker always streams
    assert body["cache_salt"] == "acme"  # the client's body is not mutated


def test_rebuilt_body_is_kept__salt_added_to_it() -> None:
    fwd: dict[str, object] = {"prompt": [0, 1, 2]}
    out = worker_body(_parsed(fwd), {"prompt": "abc"}, "g", IDS).forward_body
    assert out == {"prompt": [0, 1, 2], "cache_salt": "g", "stream": True}


@pytest.mark.parametrize("group", ["a/b", "a@b", "a\\b", "a\x00", "", "x" * 129])
def test_sharing_group__must_be_a_valid_engine_cache_salt(group: str) -> None:
    with pytest.raises(ConfigError, match="cache_salt"):
        TenantSpec("t", "sk-0123456789", group)


@pytest.mark.parametrize("raw", [b'{"input_ids":[0,1,2]}', b' {"input_ids": [0, 1, 2]} \n'])
def test_salt_only__spliced_into_the_clients_bytes(raw: bytes) -> None:
    body = json.loads(raw)
    p = worker_body(_parsed(None), body, "gr\u00fcn", IDS)
    assert p.forward_body is None  # not re-encoded
    assert json.loads(payload(p, raw)) == {"input_ids": [0, 1, 2], "cache_salt": "gr\u00fcn"}


def test_payload__unchanged_or_rebuilt() -> None:
    raw = b'{"input_ids":[0,1,2]}'
    assert payload(_parsed(None), raw) is raw
    assert json.loads(payload(_parsed({"prompt": [1]}), raw)) == {"prompt": [1]}
