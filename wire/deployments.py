"""The one place that reads a deployment file: ``load_deployment(name_or_path)``.

Shells (simulator, edge, pipeline, CLI) call this; the core only parses text
(``Deployment.from_toml_text``) and reads its own package data (``builtin_deployment``).
Not a subcommand: a helper for the subcommands that take ``--deployment``.
"""

from __future__ import annotations

from pathlib import Path

from kvcompass.deployment import Deployment, builtin_deployment, builtin_deployment_names
from kvcompass.errors import ConfigError


def load_deployment(name_or_path: str | Path) -> Deployment:
    """A built-in deployment by name (``paper-testbed-14x3``...) or a TOML file by path.

    A string is a path if it names an existing file or ends in ``.toml``; otherwise it must be
    a built-in name. Raises ``ConfigError`` (unknown name, missing file, invalid content).
    """
    text = str(name_or_path)
    if isinstance(name_or_path, Path) or text.endswith(".toml") or Path(text).is_file():
        path = Path(name_or_path)
        try:
            raw = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"deployment file: expected a readable TOML file: {exc}") from exc
        return Deployment.from_toml_text(raw)
    if text not in builtin_deployment_names():
        raise ConfigError(
            f"deployment: expected a built-in name {builtin_deployment_names()} "
            f"or a path to a .toml file, got {text!r}"
        )
    return builtin_deployment(text)
