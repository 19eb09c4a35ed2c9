"""What the emulated worker's HTTP routes share: app keys, the 4xx error shape, input checks.

Must not: serve routes itself.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from workers.emulated.engine import Engine

ENGINE = web.AppKey("engine", Engine)
INFO = web.AppKey("info", dict)


class BadRequest(Exception):
    pass


def error(status: int, message: str, rid: str) -> web.Response:
    body = {"error": {"message": message, "type": "invalid_request_error", "code": status}}
    return web.json_response(body, status=status, headers={"X-Request-Id": rid})


def token_ids(value: Any, what: str) -> list[int]:
    ok = isinstance(value, list) and all(
        isinstance(t, int) and not isinstance(t, bool) and 0 <= t < 2**31 for t in value
    )
    if not ok:
        raise BadRequest(f"{what}: expected a list of non-negative int32 token ids")
    return list(value)
