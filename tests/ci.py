"""What a test does when something it needs is missing: skip on a developer's machine, FAIL under
``CI=true``, so that a green CI can never hide a missing broker, data file or tool."""

from __future__ import annotations

import os
from pathlib import Path
from typing import NoReturn

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def missing(why: str) -> NoReturn:
    """Skip the test with ``why``, or fail it under CI."""
    if in_ci():
        pytest.fail(why, pytrace=False)
    pytest.skip(why)


def require_file(path: Path) -> Path:
    """``path`` if it is a file; otherwise ``missing`` (data files: ``sim.datasets``)."""
    if not path.is_file():
        missing(
            f"data file not found: {path} (data/ in the repository, vendored; or set "
            "KVCOMPASS_DATA_DIR)"
        )
    return path
