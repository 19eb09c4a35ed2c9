"""edge.tenants: models and tenants select disjoint key namespaces; keys and admin tokens."""

from __future__ import annotations

import hmac
from pathlib import Path

import numpy as np
import pytest

from edge.config import EdgeConfig
from edge.openai_shapes import ApiError
from edge.tenants import ModelSpec, Tenancy, TenantSpec
from kvcompass.errors import ConfigError
from kvcompass.keys import PrefixHasher

TOKENS = np.arange(256, dtype=np.int32)
LENGTHS = np.array([16, 64, 256], dtype=np.int64)

TOML = """
[edge]
region = "us"
model = "m-a"
admin_token = "admin-0123456789"
[workers]
0 = "http://127.0.0.1:30000"
[models."m-a"]
model_config = "bf16-tp1"
workers = [0, 1]
[models."m-b"]
workers = [2]
[tenants.acme]
api_key = "sk-acme-0123456789"
[tenants.initech]
api_key = "sk-initech-0123456789"
sharing_group = "acme"
[tenants.globex]
api_key = "sk-globex-0123456789"
workers = [1, 2]
"""


def _tenancy() -> Tenancy:
    return EdgeConfig.from_toml_text(TOML).tenancy()


def _keys(t: Tenancy, model: str, tenant: TenantSpec | None) -> set[int]:
    ns = t.scope(t.model(model), tenant).namespace
    return set(PrefixHasher(ns).keys_at(TOKENS, LENGTHS).tolist())


def _tenant(t: Tenancy, name: str) -> TenantSpec:
    return next(x for x in t.tenants if x.name == name)


def test_two_models__never_share_a_prefix_key() -> None:
    t = _tenancy()
    for tenant in (None, _tenant(t, "acme")):
        assert not _keys(t, "m-a", tenant) & _keys(t, "m-b", tenant)


def test_two_tenants__never_share_a_prefix_key_unless_in_one_sharing_group() -> None:
    t = _tenancy()
    acme, initech, globex = (_tenant(t, n) for n in ("acme", "initech", "globex"))
    assert not _keys(t, "m-a", acme) & _keys(t, "m-a", globex)
    assert not _keys(t, "m-a", acme) & _keys(t, "m-a", None)  # salted vs unsalted
    assert _keys(t, "m-a", acme) == _keys(t, "m-a", initech)  # same sharing_group


def test_scope__workers_are_the_models_intersected_with_the_tenants() -> None:
    t = _tenancy()
    assert t.scope(t.model("m-a"), None).workers == frozenset({0, 1})
    assert t.scope(t.model("m-a"), _tenant(t, "globex")).workers == frozenset({1})
    assert t.scope(t.model("m-b"), _tenant(t, "acme")).workers == frozenset({2})
    assert t.scope(t.model(None), None).namespace.model_config == "bf16-tp1"  # the default


def test_model__unknown__404_model_not_found() -> None:
    with pytest.raises(ApiError) as err:
        _tenancy().model("m-c")
    assert err.value.status == 404 and err.value.code == "model_not_found"


@pytest.mark.parametrize(
    "header",
    [None, "", "Bearer", "Bearer ", "Basic sk-acme-0123456789", "Bearer sk-acme-012345678",
     "Bearer sk-acme-0123456789x", "Bearer admin-0123456789"],
)  # fmt: skip
def test_authenticate__missing_malformed_or_unknown_key__401(header: str | None) -> None:
    with pytest.raises(ApiError) as err:
        _tenancy().authenticate(header)
    assert err.value.status == 401 and err.value.code == "invalid_api_key"


def test_authenticate__configured_key__its_tenant() -> None:
    t = _tenancy()
    got = t.authenticate("Bearer sk-initech-0123456789")
    assert got is not None and got.name == "initech" and got.sharing_group == "acme"
    got = t.authenticate("bearer  sk-globex-0123456789 ")
    assert got is not None and got.name == "globex"


def test_authenticate__compares_every_key_with_compare_digest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[bytes] = []
    real = hmac.compare_digest

    def recording(a: bytes, b: bytes) -> bool:
        seen.append(b)
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", recording)  # edge.tenants calls hmac.…
    t = _tenancy()
    t.authenticate("Bearer sk-acme-0123456789")  # the first key matches: the rest still compared
    assert seen == [x.api_key.encode() for x in t.tenants]


def test_authenticate__no_tenants__nobody_is_asked() -> None:
    t = EdgeConfig(region="us").tenancy()
    assert t.authenticate(None) is None and not t.authenticates
    t.check_admin(None)  # debug endpoints open, as before


def test_check_admin__401_without_token_403_with_a_wrong_one() -> None:
    t = _tenancy()
    with pytest.raises(ApiError) as err:
        t.check_admin(None)
    assert err.value.status == 401
    for wrong in ("Bearer sk-acme-0123456789", "Bearer admin-012345678"):
        with pytest.raises(ApiError) as err:
            t.check_admin(wrong)
        assert err.value.status == 403
    t.check_admin("Bearer admin-0123456789")


def test_check_admin__tenants_without_admin_token__403() -> None:
    t = Tenancy((ModelSpec("m"),), "m", (TenantSpec("a", "sk-a-0123456789", "a"),))
    with pytest.raises(ApiError) as err:
        t.check_admin("Bearer anything-at-all")
    assert err.value.status == 403 and err.value.code == "admin_disabled"


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ('[tenants.a]\napi_key = "sk-same-0123456789"\n'
         '[tenants.b]\napi_key = "sk-same-0123456789"\n', "same api_key"),
        ('[tenants.a]\nsharing_group = "x"\n', "api_key: required"),
        ('[tenants.a]\napi_key = "short"\n', ">= 8"),
        ('[tenants.a]\napi_key = "sk-a-0123456789"\nsalt = "x"\n', "expected keys"),
        ('[models.m]\nworkers = [-1]\n', "worker ids"),
        ('[models.m]\nworkers = "0"\n', "worker ids"),
        ('[edge]\nadmin_token = "sk-a-0123456789"\n', "differ"),
    ],
)  # fmt: skip
def test_config__bad_tenancy_tables__config_error(extra: str, needle: str) -> None:
    text = '[edge]\nregion = "us"\n' + extra
    if extra.startswith("[edge]"):  # an admin token equal to a tenant's key
        text = f'[edge]\nregion = "us"\n{extra.split(chr(10), 1)[1]}[tenants.a]\n'
        text += 'api_key = "sk-a-0123456789"\n'
    with pytest.raises(ConfigError, match=needle):
        EdgeConfig.from_toml_text(text)


def test_config__models_without_the_default__first_listed_is_default() -> None:
    cfg = EdgeConfig.from_toml_text('[edge]\nregion = "us"\n[models."q"]\n[models."r"]\n')
    assert cfg.tenancy().default_model == "q"
    assert [m.name for m in cfg.tenancy().models] == ["q", "r"]


def test_readme_example__parses_into_the_documented_scopes() -> None:
    text = (Path(__file__).parents[3] / "edge" / "README.md").read_text(encoding="utf-8")
    section = text.split("### Several models and tenants", 1)[1]
    toml = section.split("```toml\n", 1)[1].split("```", 1)[0]
    t = EdgeConfig.from_toml_text(toml).tenancy()
    acme, initech, globex = (_tenant(t, n) for n in ("acme", "initech", "globex"))
    llama = t.model(None)
    assert llama.model_config == "bf16-tp1"
    assert t.scope(llama, acme).namespace == t.scope(llama, initech).namespace
    assert t.scope(llama, acme).namespace != t.scope(llama, globex).namespace
    assert t.scope(t.model("Qwen/Qwen2.5-7B-Instruct"), globex).workers == frozenset({3})


def test_deployment_file_with_tenants__edge_tables_kept_out_of_the_deployment(
    tmp_path: Path,
) -> None:
    from edge.main import load

    path = tmp_path / "site.toml"
    path.write_text(
        'name = "t-1"\nwan_one_way_ms = [[0.0]]\n'
        '[[regions]]\nname = "us"\nn_workers = 2\nprefill_ms_per_token = 0.1\n'
        '[edge]\nregion = "us"\nmodel = "m"\n[models.m]\nworkers = [1]\n'
        '[tenants.a]\napi_key = "sk-a-0123456789"\n',
        encoding="utf-8",
    )
    cfg, dep = load(path, {})
    assert dep.n_workers == 2
    assert [t.name for t in cfg.tenants] == ["a"] and cfg.models[0].workers == frozenset({1})
