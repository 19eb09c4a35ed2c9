"""The one error root of the project, with the retry policy on the class.

Messages say what was expected and what was got. Shells map these to dead letters (Kafka) or
4xx responses (HTTP); the core only raises them.
"""

from __future__ import annotations

from typing import ClassVar


class KVCompassError(Exception):
    """Root of every error this project raises on purpose."""

    retriable: ClassVar[bool] = False


class InvalidInputError(KVCompassError, ValueError):
    """An argument or record does not have the expected type, shape, range or content."""


class UnknownWorkerError(InvalidInputError):
    """A worker id (or name) is not part of the deployment."""


class ConfigError(InvalidInputError):
    """A deployment or process configuration is inconsistent."""


class ViewFileError(KVCompassError):
    """A view file is truncated, has the wrong magic or version, or disagrees with its header."""


class CapacityError(KVCompassError):
    """A table cannot place a key at its current size; the caller grows it into a new epoch."""

    retriable = True
