"""Memory-mapped view files: one file per (table, shard, epoch) of the keyless index.

Owns the on-disk layout of a view and mapping it as ``ViewArrays`` (numpy arrays over the file),
so several edge processes on one host share one view and a restarted edge resumes from the file
and the Kafka offset stored in its header. It does not decide when to create, swap or delete
files: ``IndexView`` and the edge shell do (a new epoch is a new file; it becomes the served one
when its header says committed, so a swap is one header write and never a half-written view).

Layout (little-endian; every section starts at a multiple of 64 bytes)::

    offset  size  field
    0       8     magic b"KVCVIEW\\0"
    8       4     format version (1)
    12      4     header size in bytes (256)
    16      4     table id
    20      4     shard id
    24      4     number of LudoParams words that follow (n <= 16)
    28      4     flags: bit 0 = committed (epoch complete, may be served)
    32      128   LudoParams.to_array(): n uint64 words, zero padded to 16
    160     8     last applied per-shard sequence number (int64)
    168     8     consumer offset: opaque int64 (Kafka offset of the next patch record; -1 none)
    176     8     seeds section offset     (uint8[B])
    184     8     values section offset    (uint32[B * 4 * value_words])
    192     8     fps section offset       (uint8[B * 4 * fp_bytes])
    200     8     locator section offset   (uint64[n_locator_words])
    208     8     total file size in bytes
    216     40    reserved (zero)

File name: ``t{table:04d}-s{shard:04d}-e{epoch:08d}.kvview``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kvcompass.errors import ViewFileError
from kvcompass.ludo import LudoParams, ViewArrays

MAGIC = b"KVCVIEW\0"
VERSION = 1
HEADER_SIZE = 256
MAX_PARAM_WORDS = 16
FLAG_COMMITTED = 1
_FIXED = struct.Struct("<8sIIIIII")  # magic .. flags: 32 bytes
_TAIL = struct.Struct("<qqQQQQQ")  # seq, offset, 4 section offsets, file size: 56 bytes
_SEQ_AT = 160
_OFFSET_AT = 168
_FLAGS_AT = 28


def _align(n: int) -> int:
    return (n + 63) // 64 * 64


def file_name(table: int, shard: int, epoch: int) -> str:
    return f"t{table:04d}-s{shard:04d}-e{epoch:08d}.kvview"


@dataclass(frozen=True, slots=True)
class Sections:
    seeds: int
    values: int
    fps: int
    locator: int
    size: int


def sections_for(params: LudoParams) -> Sections:
    b = params.n_buckets
    seeds = HEADER_SIZE
    values = _align(seeds + b)
    fps = _align(values + 4 * b * 4 * params.value_words)
    locator = _align(fps + b * 4 * params.fp_bytes)
    size = _align(locator + 8 * params.n_locator_words)
    return Sections(seeds, values, fps, locator, size)


@dataclass(slots=True)
class ViewFile:
    """A mapped view file: its arrays plus header accessors."""

    path: Path
    table: int
    shard: int
    params: LudoParams
    arrays: ViewArrays
    _raw: np.memmap

    @property
    def last_seq(self) -> int:
        return int(self._raw[_SEQ_AT : _SEQ_AT + 8].view(np.int64)[0])

    @property
    def consumer_offset(self) -> int:
        return int(self._raw[_OFFSET_AT : _OFFSET_AT + 8].view(np.int64)[0])

    @property
    def committed(self) -> bool:
        return bool(int(self._raw[_FLAGS_AT : _FLAGS_AT + 4].view(np.uint32)[0]) & FLAG_COMMITTED)

    def set_progress(self, last_seq: int, consumer_offset: int) -> None:
        """Record what has been applied (written after the arrays, so a crash re-applies)."""
        self._raw[_SEQ_AT : _SEQ_AT + 8].view(np.int64)[0] = last_seq
        self._raw[_OFFSET_AT : _OFFSET_AT + 8].view(np.int64)[0] = consumer_offset

    def set_params(self, params: LudoParams) -> None:
        """Rewrite the header's parameters (same epoch and sizes: a locator rebuild's new seeds)."""
        if sections_for(params) != sections_for(self.params) or params.epoch != self.params.epoch:
            raise ViewFileError(f"{self.path}: new params must keep epoch and sizes")
        words = params.to_array().astype("<u8")
        self._raw[32 : 32 + 8 * words.size] = np.frombuffer(words.tobytes(), dtype=np.uint8)
        self.params = params

    def mark_committed(self) -> None:
        flags = self._raw[_FLAGS_AT : _FLAGS_AT + 4].view(np.uint32)
        flags[0] = flags[0] | np.uint32(FLAG_COMMITTED)

    def flush(self) -> None:
        self._raw.flush()


def _header(table: int, shard: int, params: LudoParams, sec: Sections) -> bytes:
    words = params.to_array()
    if words.size > MAX_PARAM_WORDS:
        raise ViewFileError(
            f"LudoParams has {words.size} words; the header holds {MAX_PARAM_WORDS}"
        )
    padded = np.zeros(MAX_PARAM_WORDS, dtype="<u8")
    padded[: words.size] = words
    head = _FIXED.pack(MAGIC, VERSION, HEADER_SIZE, table, shard, words.size, 0)
    tail = _TAIL.pack(0, -1, sec.seeds, sec.values, sec.fps, sec.locator, sec.size)
    out = head + padded.tobytes() + tail
    return out + b"\0" * (HEADER_SIZE - len(out))


def _map(path: Path, table: int, shard: int, params: LudoParams, raw: np.memmap) -> ViewFile:
    sec = sections_for(params)
    b = params.n_buckets
    arrays = ViewArrays(
        seeds=np.asarray(raw[sec.seeds : sec.seeds + b]),
        values=np.asarray(raw[sec.values : sec.values + 16 * b * params.value_words].view("<u4")),
        fps=np.asarray(raw[sec.fps : sec.fps + 4 * b * params.fp_bytes]),
        locator=np.asarray(raw[sec.locator : sec.locator + 8 * params.n_locator_words].view("<u8")),
    )
    return ViewFile(path, table, shard, params, arrays, raw)


def create(directory: Path, table: int, shard: int, params: LudoParams) -> ViewFile:
    """Create (or overwrite) the zeroed, uncommitted file of one (table, shard, epoch)."""
    sec = sections_for(params)
    path = Path(directory) / file_name(table, shard, params.epoch)
    raw = np.memmap(path, dtype=np.uint8, mode="w+", shape=(sec.size,))
    raw[:HEADER_SIZE] = np.frombuffer(_header(table, shard, params, sec), dtype=np.uint8)
    return _map(path, table, shard, params, raw)


def open_view(path: Path) -> ViewFile:
    """Map an existing view file, checking magic, version, sizes and length."""
    path = Path(path)
    try:
        raw = np.memmap(path, dtype=np.uint8, mode="r+")
    except (OSError, ValueError) as e:
        raise ViewFileError(f"{path}: cannot map view file ({e})") from e
    if raw.size < HEADER_SIZE:
        raise ViewFileError(f"{path}: truncated: {raw.size} bytes, header needs {HEADER_SIZE}")
    head = bytes(raw[: _FIXED.size])
    magic, version, hsize, table, shard, n_words, _flags = _FIXED.unpack(head)
    if magic != MAGIC:
        raise ViewFileError(f"{path}: bad magic {magic!r}, expected {MAGIC!r}")
    if version != VERSION:
        raise ViewFileError(f"{path}: format version {version}, this build reads {VERSION}")
    if hsize != HEADER_SIZE or not 0 < n_words <= MAX_PARAM_WORDS:
        raise ViewFileError(f"{path}: corrupt header (size {hsize}, {n_words} param words)")
    words = np.frombuffer(bytes(raw[32 : 32 + 8 * n_words]), dtype="<u8").astype(np.uint64)
    try:
        params = LudoParams.from_array(words)
    except Exception as e:
        raise ViewFileError(f"{path}: invalid parameters in header ({e})") from e
    sec = sections_for(params)
    stored = _TAIL.unpack(bytes(raw[_SEQ_AT : _SEQ_AT + _TAIL.size]))
    if stored[2:] != (sec.seeds, sec.values, sec.fps, sec.locator, sec.size):
        raise ViewFileError(f"{path}: section table disagrees with the parameters in the header")
    if raw.size < sec.size:
        raise ViewFileError(f"{path}: truncated: {raw.size} bytes, expected {sec.size}")
    return _map(path, table, shard, params, raw)


class ViewStore:
    """The view files of one edge host: allocation, commit marks, progress, restore.

    Plug ``allocate`` and ``adopt`` into ``IndexView(allocator=..., on_params=...)``. The shell
    deletes the paths ``superseded`` returns (the core does not delete files).
    """

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.files: dict[tuple[int, int, int], ViewFile] = {}

    def allocate(self, table: int, shard: int, params: LudoParams) -> ViewArrays:
        vf = create(self.directory, table, shard, params)
        self.files[(table, shard, params.epoch)] = vf
        return vf.arrays

    def adopt(self, table: int, shard: int, params: LudoParams, committed: bool) -> None:
        """A view took new params: mark a new epoch committed, or store new seeds in place."""
        vf = self.files[(table, shard, params.epoch)]
        vf.flush()
        vf.set_params(params)
        if committed:
            vf.mark_committed()
        vf.flush()

    def superseded(self) -> list[Path]:
        """Committed files older than the newest committed epoch of their (table, shard)."""
        newest: dict[tuple[int, int], int] = {}
        for (t, s, e), vf in self.files.items():
            if vf.committed:
                newest[(t, s)] = max(newest.get((t, s), -1), e)
        old = [k for k in self.files if k[2] < newest.get((k[0], k[1]), -1)]
        return [self.files.pop(k).path for k in old]

    def set_progress(self, shard: int, last_seq: int, consumer_offset: int) -> None:
        """Record the last applied seq and the next Kafka offset in every file of ``shard``."""
        for (_, s, _), vf in self.files.items():
            if s == shard:
                vf.set_progress(last_seq, consumer_offset)

    def flush(self) -> None:
        for vf in self.files.values():
            vf.flush()

    def restore(self) -> list[ViewFile]:
        """Map every committed file of the directory, newest epoch per (table, shard)."""
        best: dict[tuple[int, int], ViewFile] = {}
        for path in sorted(self.directory.glob("*.kvview")):
            vf = open_view(path)
            if not vf.committed:
                continue
            k = (vf.table, vf.shard)
            if k not in best or best[k].params.epoch < vf.params.epoch:
                best[k] = vf
        for vf in best.values():
            self.files[(vf.table, vf.shard, vf.params.epoch)] = vf
        return list(best.values())
