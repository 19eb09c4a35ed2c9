"""Edge request ids: minted unguessable, a client's kept per tenant, bounded, never replaced."""

from __future__ import annotations

import pytest

from edge.request_ids import AmbiguousClientId, ClientIds, RequestIds, client_id, mint


def test_mint__128_random_bits_no_shared_prefix() -> None:
    ids = [mint() for _ in range(1000)]
    assert len(set(ids)) == 1000 and all(len(i) == 32 for i in ids)
    assert len({i[:4] for i in ids}) > 500  # a counter behind a fixed prefix would give 1


@pytest.mark.parametrize("value", ["", "a" * 129, "a b", "x\n", None, 7, "é"])
def test_client_id__unusable_values_are_ignored(value: object) -> None:
    assert client_id(value) is None


def test_echo__the_clients_id_when_given() -> None:
    assert RequestIds("e1", "c1").headers() == {"X-Request-Id": "c1", "X-KVC-Request-Id": "e1"}
    assert RequestIds("e1").echo == "e1"


def test_client_ids__two_tenants_one_id__both_kept_and_ambiguous_without_tenant() -> None:
    ids = ClientIds(8)
    ids.add("acme", "dup", "e1")
    ids.add("globex", "dup", "e2")
    assert ids.resolve("dup", "acme", any_tenant=False) == "e1"
    assert ids.resolve("dup", "globex", any_tenant=False) == "e2"
    with pytest.raises(AmbiguousClientId) as err:
        ids.resolve("dup", None, any_tenant=True)
    assert err.value.tenants == ["acme", "globex"]
    ids.add("acme", "dup", "e3")  # the same tenant again: its newest request
    assert ids.resolve("dup", "acme", any_tenant=False) == "e3"
    assert ids.of_edge("e1") is None and ids.of_edge("e3") == ("acme", "dup")


def test_client_ids__bounded_oldest_goes() -> None:
    ids = ClientIds(2)
    for i in range(3):
        ids.add(None, f"c{i}", f"e{i}")
    assert ids.resolve("c0", None, any_tenant=True) is None and ids.of_edge("e0") is None
    assert ids.resolve("c2", None, any_tenant=False) == "e2"
