"""The one error root of the project.

Messages say what was expected and what was got. Shells map these to dead letters (Kafka) or
4xx responses (HTTP); the core only raises them. No retry flag on the classes: nothing retries by
error class (a ``retriable`` flag nobody read was removed); the one shell that retries, the edge's
forwarder (on another worker), decides on what the transport reports.
"""

from __future__ import annotations


class KVCompassError(Exception):
    """Root of every error this project raises on purpose."""


class InvalidInputError(KVCompassError, ValueError):
    """An argument or record does not have the expected type, shape, range or content."""


class UnknownWorkerError(InvalidInputError):
    """A worker id (or name) is not part of the deployment."""


class ConfigError(InvalidInputError):
    """A deployment or process configuration is inconsistent."""


class ViewFileError(KVCompassError):
    """A view file is truncated, has the wrong magic or version, or disagrees with its header."""
