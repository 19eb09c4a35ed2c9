"""Config values from a mapping (a parsed TOML table, CLI flags): one rule for every frozen config.

Keys may be kebab-case (``n-shards``) or snake_case (``n_shards``); a key that names no field is
refused with the list of known ones, so a typo is never silently a default. Shared by
``PipelineConfig``, ``EdgeConfig`` and ``SidecarConfig`` (and any config built the same way).
Pure: the caller reads the file or the environment.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import fields
from typing import Any

from kvcompass.errors import ConfigError


def kwargs_from_mapping(
    config_cls: type[Any],
    values: Mapping[str, Any],
    what: str,
    *,
    exclude: Collection[str] = (),
    coerce: Callable[[str, Any], Any] | None = None,
) -> dict[str, Any]:
    """Keyword arguments of ``config_cls`` (a dataclass) from ``values``.

    ``what`` names the config in the error (``"edge config"``); ``exclude``: fields not taken
    from this mapping (the caller fills them from other tables); ``coerce(key, value)`` converts
    a value (e.g. a string from the environment) before it is passed on.
    """
    known = {f.name for f in fields(config_cls)} - set(exclude)
    out: dict[str, Any] = {}
    for raw_key, value in values.items():
        key = raw_key.replace("-", "_")
        if key not in known:
            raise ConfigError(f"{what}: expected keys in {sorted(known)}; got {raw_key!r}")
        out[key] = coerce(key, value) if coerce is not None else value
    return out
