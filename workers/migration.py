"""Migration executor: ``migrations`` records for this worker -> a prefill-only request.

Owns the filter (target worker), idempotence per ``request_id`` (a bounded set of ids done or in
flight), and the request itself: ``POST /generate`` with the prefix's ``input_ids`` and
``sampling_params.max_new_tokens = 0`` (prefill only). The engine caches the prefix and publishes
``BlockStored``; the bridge registers the replica like any other (paper §3.4: across regions the
prompt is shipped and recomputed). Must not: write kv-events itself.

``INTRA_REGION_COPY`` with a known source URL (``peers``) first tries a page copy: ``POST
{source}/kv/export`` then ``POST {target}/kv/import`` (the emulated worker's tiny-llama mode
implements both; their wire format is in ``workers/emulated/kv_copy.py``); the target publishes
``BlockStored(CPU_PINNED)`` for the copied pages. If the copy fails or covers less than the
page-aligned prefix, the executor recomputes (a prefill that reuses whatever was copied).

A real SGLang engine would need, for the copy: (1) an endpoint that exports the KV pages of a
token prefix from the source (SGLang's HiCache storage backends and PD-disaggregation transfer
engine move pages, but 0.5.x has no public "export prefix" API), (2) one that imports pages
for given token ids into the target's radix tree (host tier) without a forward pass, and (3)
the usual BlockStored event on import.
Against SGLang the export answers 404, so INTRA_REGION_COPY recomputes and is counted as such.
The requested tier (DRAM) cannot be forced through SGLang's HTTP API either: the prefix lands
in VRAM and moves to DRAM by the engine's own eviction.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import msgspec
import numpy as np

log = logging.getLogger(__name__)


@dataclass(slots=True)
class MigrationStats:
    accepted: int = 0
    duplicates: int = 0
    other_worker: int = 0
    done: int = 0
    failed: int = 0
    copied: int = 0
    copy_as_recompute: int = 0


class MigrationExecutor:
    def __init__(
        self,
        worker_id: int,
        engine_url: str,
        dedupe_entries: int = 10_000,
        peers: Mapping[int, str] | None = None,
    ) -> None:
        self.worker_id = worker_id
        self.engine_url = engine_url.rstrip("/")
        self.peers = {w: u.rstrip("/") for w, u in (peers or {}).items()}
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._cap = dedupe_entries
        self.stats = MigrationStats()

    def accept(self, rec: Mapping[str, Any]) -> bool:
        """Whether this record is ours and new; marks it seen (at-most-once per id)."""
        if rec["target_worker_id"] != self.worker_id:
            self.stats.other_worker += 1
            return False
        rid = str(rec["request_id"])
        if rid in self._seen:
            self.stats.duplicates += 1
            return False
        self._seen[rid] = None
        if len(self._seen) > self._cap:
            self._seen.popitem(last=False)
        self.stats.accepted += 1
        return True

    @staticmethod
    def request_body(rec: Mapping[str, Any]) -> dict[str, Any]:
        tokens = np.frombuffer(rec["prefix_tokens"], dtype="<i4")
        return {
            "input_ids": [int(t) for t in tokens],
            "sampling_params": {"max_new_tokens": 0},
            "rid": f"migration-{rec['request_id']}",
        }

    async def _copy(self, http: aiohttp.ClientSession, source: str, tokens: list[int]) -> bool:
        """Whether every whole page of ``tokens`` was copied from ``source`` into our engine."""
        try:
            async with http.post(source + "/kv/export", json={"input_ids": tokens}) as r:
                if r.status != 200:
                    return False
                blob = await r.read()
            page = int(msgspec.msgpack.decode(blob)["page_size"])
            headers = {"Content-Type": "application/msgpack"}
            async with http.post(self.engine_url + "/kv/import", data=blob, headers=headers) as r:
                if r.status != 200:
                    return False
                copied = int((await r.json())["imported_tokens"])
        except (aiohttp.ClientError, TimeoutError, ValueError, KeyError, msgspec.DecodeError) as e:
            log.info("kv copy from %s failed, recomputing: %s", source, e)
            return False
        return copied > 0 and copied >= len(tokens) // page * page

    async def execute(self, http: aiohttp.ClientSession, rec: Mapping[str, Any]) -> int | None:
        """Copy or prefill the prefix on the engine; tokens now cached, None on failure."""
        body = self.request_body(rec)
        source = self.peers.get(rec.get("source_worker_id"))  # type: ignore[arg-type]
        if rec.get("mode") == "INTRA_REGION_COPY":
            if source is not None and await self._copy(http, source, body["input_ids"]):
                self.stats.copied += 1
                self.stats.done += 1
                return len(body["input_ids"])
            self.stats.copy_as_recompute += 1
        try:
            async with http.post(self.engine_url + "/generate", json=body) as r:
                r.raise_for_status()
                body = await r.json()
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            self.stats.failed += 1
            log.warning("migration %s failed: %s", rec["request_id"], exc)
            return None
        self.stats.done += 1
        return int(body.get("meta_info", {}).get("cached_tokens", 0))
