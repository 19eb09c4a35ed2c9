"""The emulated worker's PD modes without a router: the bootstrap fields SGLang's PD router
sends, the ``/server_info`` fields of each mode, the prefill's bootstrap server, the priced KV
transfer the decode waits for, and the errors (a missing field, an unreachable prefill)."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from kvcompass import costs
from kvcompass.errors import ConfigError
from tests.integration.engines import engines_dir
from workers.emulated import disagg
from workers.emulated.costs import EmulatedCosts
from workers.emulated.disagg import Bootstrap, bootstrap_of
from workers.emulated.http_common import Invalid
from workers.emulated.worker import EmulatedConfig, EmulatedWorker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]
SCALE = 0.001


def _cfg(mode: str, **costs_kw: float) -> EmulatedConfig:
    return EmulatedConfig(
        model="emulated/pd", port=0, events_endpoint="tcp://127.0.0.1:*", replay_endpoint=None,
        costs=EmulatedCosts(time_scale=SCALE, **costs_kw), disaggregation_mode=mode,
        disaggregation_bootstrap_port=0,
    )  # fmt: skip


async def _post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as http, http.post(url, json=body) as r:
        return r.status, await r.json(content_type=None)


def test_bootstrap_fields__required_in_pd_mode_only() -> None:
    assert bootstrap_of({"text": "x"}, "null") is None
    body = {"bootstrap_host": "10.0.0.1", "bootstrap_port": 8998, "bootstrap_room": 7}
    assert bootstrap_of(body, "decode") == Bootstrap("10.0.0.1", 8998, 7)
    with pytest.raises(Invalid, match="bootstrap_host and bootstrap_room are required"):
        bootstrap_of({"text": "x"}, "prefill")
    with pytest.raises(Invalid, match="bootstrap_room"):
        bootstrap_of({**body, "bootstrap_room": [1, 2]}, "decode")
    with pytest.raises(Invalid, match="bootstrap_port"):
        bootstrap_of({**body, "bootstrap_port": "x"}, "decode")


@pytest.mark.parametrize(
    ("kw", "match"),
    [({"disaggregation_mode": "both"}, "disaggregation_mode"),
     ({"disaggregation_mode": "prefill", "disaggregation_transfer_backend": "fake"}, "fake"),
     ({"disaggregation_transfer_backend": "tcp"}, "transfer_backend")],
)  # fmt: skip
def test_pd_config__bad_values_are_clear_errors(kw: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        EmulatedConfig(**kw)


def test_pd_modes__server_info_and_the_priced_transfer() -> None:
    async def scenario() -> dict[str, Any]:
        # a decode worker across a WAN from its prefill: 1 Gb/s, 149 ms one way (paper §5.2)
        async with (
            EmulatedWorker(_cfg("prefill")) as p,
            EmulatedWorker(
                _cfg("decode", pd_link_bytes_per_s=1e9 / 8, pd_link_one_way_ms=149.0)
            ) as d,
        ):
            out: dict[str, Any] = {}
            async with aiohttp.ClientSession() as http:
                for name, w in (("prefill", p), ("decode", d)):
                    async with http.get(w.url + "/server_info") as r:
                        out[name] = await r.json()
                port = p.info.disaggregation_bootstrap_port
                async with http.get(f"http://127.0.0.1:{port}/health") as r:
                    out["health"] = (r.status, await r.text())
            boot = Bootstrap("127.0.0.1", port, 42)
            p.disagg.rooms.ready(42, 1000, 640)
            out["transfer_s"], out["cached"] = await d.disagg._transfer_s(d.engine, boot)
            out["rooms_left"] = len(p.disagg.rooms)
            out["bootstrap_port"] = port
            return out

    got = asyncio.run(scenario())
    assert got["prefill"]["disaggregation_mode"] == "prefill"
    assert got["prefill"]["disaggregation_bootstrap_port"] == got["bootstrap_port"] > 0
    assert got["prefill"]["disaggregation_transfer_backend"] == "mooncake"
    assert got["decode"]["disaggregation_mode"] == "decode"
    assert got["health"] == (200, "OK")
    want_ms = costs.kv_transfer_ms(1000, 1e9 / 8, 149.0)  # 149 + 1000 x 1.05 ms
    assert want_ms == pytest.approx(149.0 + 1000 * 131072 * 8 / 1e9 * 1e3)
    assert got["transfer_s"] == pytest.approx(want_ms * SCALE / 1000)
    assert got["rooms_left"] == 0
    assert got["cached"] == 640  # the prefill's cached tokens travel with the room


def test_pd_pair__one_request_split_and_the_errors() -> None:
    async def scenario() -> dict[str, Any]:
        async with EmulatedWorker(_cfg("prefill")) as p, EmulatedWorker(_cfg("decode")) as d:
            port = p.info.disaggregation_bootstrap_port
            body = {"text": "split me " * 8, "sampling_params": {"max_new_tokens": 4},
                    "bootstrap_host": "127.0.0.1", "bootstrap_port": port,
                    "bootstrap_room": 9}  # fmt: skip
            (ps, pb), (ds, db) = await asyncio.gather(
                _post(p.url + "/generate", body), _post(d.url + "/generate", body)
            )
            out: dict[str, Any] = {"prefill": (ps, pb), "decode": (ds, db)}
            out["missing"] = await _post(d.url + "/generate", {"text": "x"})
            dead = {**body, "bootstrap_port": 1, "bootstrap_room": 10}
            out["unreachable"] = await _post(d.url + "/generate", dead)
            fake = {**body, "bootstrap_host": "2.2.2.2", "bootstrap_room": 0}
            out["fake"] = await _post(d.url + "/generate", fake)
            out["decode_running"] = d.engine.loads.running
            out["decode_prefilled"] = d.engine.loads.prefill_prompt_tokens
            out["prefill_prefilled"] = p.engine.loads.prefill_prompt_tokens
            return out

    got = asyncio.run(scenario())
    status, body = got["prefill"]
    assert status == 200 and body["meta_info"]["completion_tokens"] == 1  # the first token only
    status, body = got["decode"]
    assert status == 200 and body["meta_info"]["completion_tokens"] == 4
    assert got["prefill_prefilled"] == len("split me " * 8)
    assert got["decode_prefilled"] == 0
    status, body = got["missing"]
    assert status == 400 and "bootstrap_host and bootstrap_room are required" in body["message"]
    status, body = got["unreachable"]
    assert status == 500 and "room 10: no KV from http://127.0.0.1:1" in body["error"]["message"]
    assert got["fake"][0] == 200  # SGLang's warmup host: no transfer to wait for
    assert got["decode_running"] == 0  # the failed request is not left running


def _assigned(path: Path, name: str) -> Any:
    """The literal value assigned to ``name`` at any level of ``path`` (an engine's source)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return ast.literal_eval(node.value)
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id == name
            and node.value is not None
        ):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{path}: no assignment to {name}")


def test_pd_flags_and_values_are_sglangs_own() -> None:
    """Read from SGLang 0.5.23's source (the engines dir): the modes, the backends, the
    defaults and the warmup host the emulated worker takes."""
    srt = engines_dir() / "sglang" / "srt"
    assert list(disagg.TRANSFER_BACKENDS) == _assigned(
        srt / "arg_groups" / "choices.py", "DISAGG_TRANSFER_BACKEND_CHOICES"
    )
    fake = _assigned(srt / "disaggregation" / "utils.py", "FAKE_BOOTSTRAP_HOST")
    assert fake == disagg.FAKE_BOOTSTRAP_HOST
    fields = srt / "arg_groups" / "fields" / "disagg.py"
    assert _assigned(fields, "disaggregation_bootstrap_port") == 8998
    assert disagg.DEFAULT_BOOTSTRAP_PORT == 8998 == EmulatedConfig().disaggregation_bootstrap_port
    assert _assigned(fields, "disaggregation_transfer_backend") == "mooncake"
    assert EmulatedConfig().disaggregation_transfer_backend == "mooncake"
    assert (
        _assigned(fields, "disaggregation_mode") == "null" == EmulatedConfig().disaggregation_mode
    )
    source = fields.read_text(encoding="utf-8")
    assert 'Literal["null", "prefill", "decode"]' in source
    assert disagg.MODES == ("null", "prefill", "decode")
