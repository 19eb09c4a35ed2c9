"""Registry of forwarding schemes: name -> class (one scheme per file, vidur-style).

``SCHEMES`` maps the CLI/JSON name to the class; ``ALL`` is the order of ``--schemes all``
(the paper's baselines, then KVCompass, then the paper's least-loaded Oracle); ``IDEAL`` the
exact-state references (``*_ideal``, see ``sim.schemes.base``'s information rules). Ablation
variants of KVCompass are registered under their own names (``kvcompass_no_load_aware`` ...)
but are not part of ``all``; nor is ``central_directory_no_booking``, the directory without its
dispatch ledger (issue 34: an ablation, never the baseline a verdict compares with).
"""

from __future__ import annotations

import importlib

from sim.schemes.base import Scheme

# name -> "module:Class"; imported lazily so a missing baseline never breaks the others' import.
_ENTRIES: dict[str, str] = {
    "oracle": "sim.schemes.oracle:Oracle",
    "oracle_ideal": "sim.schemes.oracle_ideal:OracleIdeal",
    "kvcompass": "sim.schemes.kvcompass:KVCompass",
    "kvcompass_no_booking": "sim.schemes.kvcompass:NoBooking",
    "kvcompass_no_load_aware": "sim.schemes.kvcompass:NoLoadAware",
    "kvcompass_no_xregion_reuse": "sim.schemes.kvcompass:NoXRegionReuse",
    "kvcompass_tier_blind": "sim.schemes.kvcompass:TierBlind",
    "kvcompass_no_migration": "sim.schemes.kvcompass:NoMigration",
    "kvcompass_no_herding_guard": "sim.schemes.kvcompass:NoHerdingGuard",
    "kvcompass_no_belief": "sim.schemes.kvcompass:NoBelief",
    "kvcompass_no_pending_holders": "sim.schemes.kvcompass:NoPendingHolders",
    "kvcompass_no_forward_ledger": "sim.schemes.kvcompass:NoLedger",
    "consistent_hash": "sim.schemes.consistent_hash:ConsistentHash",
    "chord": "sim.schemes.chord:Chord",
    "planetserve": "sim.schemes.planetserve:PlanetServe",
    "central_directory": "sim.schemes.central_directory:CentralDirectory",
    "central_directory_no_booking": "sim.schemes.central_directory:CentralDirectoryNoBooking",
    "central_directory_ideal": "sim.schemes.central_directory_ideal:CentralDirectoryIdeal",
    "joint_ideal": "sim.schemes.joint_ideal:JointIdeal",
    "skywalker": "sim.schemes.skywalker:SkyWalker",
    "dynamo": "sim.schemes.dynamo:Dynamo",
}

ALL: tuple[str, ...] = (
    "consistent_hash",
    "chord",
    "planetserve",
    "central_directory",
    "skywalker",
    "dynamo",
    "kvcompass",
    "oracle",
)

IDEAL: tuple[str, ...] = ("central_directory_ideal", "oracle_ideal", "joint_ideal")
"""References with exact live state (``*_ideal``): shown apart, never counted as wins."""

ABLATIONS: tuple[str, ...] = (
    "kvcompass",
    "kvcompass_no_load_aware",
    "kvcompass_no_xregion_reuse",
    "kvcompass_tier_blind",
    "kvcompass_no_migration",
)


def names() -> list[str]:
    """Every registered scheme name."""
    return list(_ENTRIES)


def get(name: str) -> type[Scheme]:
    """The scheme class registered as ``name``."""
    from kvcompass.errors import InvalidInputError

    if name not in _ENTRIES:
        raise InvalidInputError(f"unknown scheme {name!r}; expected one of {sorted(_ENTRIES)}")
    module, cls = _ENTRIES[name].split(":")
    scheme: type[Scheme] = getattr(importlib.import_module(module), cls)
    return scheme
