"""Route-and-reserve between edges over HTTP: the shortlist a relayed request carries, the refusal.

Owns the request header an origin edge adds when it relays a request to the edge that owns the
worker's region (``kvcompass.decider.Shortlist``: the origin's candidates there, its match for
each, its λ and its best alternative elsewhere) and the shape of the owner's refusal (status
``REFUSED_STATUS`` with ``REFUSED_HEADER`` and its queue vector in ``X-KVC-Queue-Vector``, no
body). Must not decide: the deciders at both ends do (``Decider.on_relay``, ``on_refused``).

    X-KVC-Shortlist: v1;o=<origin>;r=<region>;p=<prompt tokens>;l=<λ>;a=<alternative ms|inf>;
                     z=<1: final>;w=<worker>:<matched tokens>:<tier>,...

Decimal ASCII; at most ``MAX_SHORTLIST`` workers (a region's). A relay without this header (a
baseline's choice, or a retry) is served on the worker ``X-KVC-Forward-To`` names, unbooked.
"""

from __future__ import annotations

import math

from kvcompass.decider import Shortlist

SHORTLIST_HEADER = "X-KVC-Shortlist"
REFUSED_HEADER = "X-KVC-Refused"
REFUSED_STATUS = 409
"""Conflict: the owner's booking says another region is better; the origin re-decides once."""
MAX_SHORTLIST = 4096


def encode_shortlist(sl: Shortlist) -> str:
    """The header value for ``sl``."""
    ws = ",".join(
        f"{w}:{m}:{t}" for w, m, t in zip(sl.workers, sl.matched_tokens, sl.tiers, strict=True)
    )
    alt = "inf" if math.isinf(sl.alternative_ms) else f"{sl.alternative_ms:.3f}"
    return (
        f"v1;o={sl.origin};r={sl.region};p={sl.prompt_tokens};l={sl.lambda_price:.6g};"
        f"a={alt};z={int(sl.final)};w={ws}"
    )


def decode_shortlist(value: str, n_regions: int, n_workers: int) -> Shortlist | None:
    """The shortlist in a header value, or None if malformed or out of range."""
    parts = value.split(";")
    if not parts or parts[0] != "v1":
        return None
    f: dict[str, str] = {}
    for p in parts[1:]:
        k, sep, v = p.partition("=")
        if not sep or k in f:
            return None
        f[k] = v
    if set(f) != {"o", "r", "p", "l", "a", "z", "w"}:
        return None
    try:
        origin, region, prompt = int(f["o"]), int(f["r"]), int(f["p"])
        lam, alt, final = float(f["l"]), float(f["a"]), f["z"]
        rows = [x.split(":") for x in f["w"].split(",")] if f["w"] else []
        if len(rows) > MAX_SHORTLIST or any(len(r) != 3 for r in rows):
            return None
        ws = tuple(int(a) for a, _, _ in rows)
        ms = tuple(int(b) for _, b, _ in rows)
        ts = tuple(int(c) for _, _, c in rows)
    except ValueError:
        return None
    ok = (
        0 <= origin < n_regions and 0 <= region < n_regions and origin != region
        and prompt >= 0 and math.isfinite(lam) and lam >= 0 and final in ("0", "1")
        and not math.isnan(alt) and ws and len(set(ws)) == len(ws)
        and all(0 <= w < n_workers for w in ws) and all(0 <= m <= prompt for m in ms)
        and all(0 <= t < 8 for t in ts)
    )  # fmt: skip
    if not ok:
        return None
    return Shortlist(origin, region, prompt, ws, ms, ts, lam, alt, final == "1")
