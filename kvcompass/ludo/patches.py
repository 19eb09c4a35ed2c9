"""Patch batches: whole images of view buckets and locator words produced by ``LudoTable``.

Owns: ``PatchBatch`` (what one maintenance call emits) and ``batch_from_arrays`` (cutting images
out of the table's own view-layout arrays). Must not: encode for a transport (the pipeline's codec
does that) or mutate any table state.

Images are idempotent: applying the latest image of every bucket and word of an epoch, in any
order, after the epoch's latest header, reproduces the maintenance side's view exactly. That is what
a compacted topic keeps.

Wire size accounting (``PatchBatch.wire_bytes``), our own, independent of the codec's framing:

* header image: 80 bytes (the 10 ``uint64`` fields of ``LudoParams.to_array()``);
* bucket image: 4 (bucket id) + 1 (seed) + 4 * value_bits/8 + 4 * fp_bits/8 bytes
  (21 + 4*fp_bytes for 32-bit values: 25 with 8-bit fingerprints);
* locator word image: 4 (word id) + 8 (word) = 12 bytes;
* commit marker: 8 bytes (the epoch).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from kvcompass.ludo.params import LudoParams

HEADER_WIRE_BYTES = 80
WORD_WIRE_BYTES = 12
COMMIT_WIRE_BYTES = 8


def bucket_wire_bytes(params: LudoParams) -> int:
    """Bytes of one bucket image on the wire (see module docstring)."""
    return 4 + 1 + 4 * (params.value_bits // 8) + 4 * params.fp_bytes


@dataclass(frozen=True, slots=True)
class PatchBatch:
    """Whole images produced by one LudoTable call.

    Apply order: params (if header) -> buckets -> words -> commit. ``bucket_ids`` and ``word_ids``
    are ascending and unique (the last image of each within the call).
    """

    params: LudoParams
    header: bool
    bucket_ids: NDArray[np.int64]
    bucket_seeds: NDArray[np.uint8]
    bucket_values: NDArray[np.uint64]
    bucket_fps: NDArray[np.uint16]
    word_ids: NDArray[np.int64]
    words: NDArray[np.uint64]
    commit: bool

    def __len__(self) -> int:
        """Number of images: buckets + words + header + commit."""
        return (
            int(self.bucket_ids.shape[0])
            + int(self.word_ids.shape[0])
            + int(self.header)
            + int(self.commit)
        )

    def wire_bytes(self) -> int:
        """Bytes of these images on the wire (formula in the module docstring)."""
        return (
            HEADER_WIRE_BYTES * int(self.header)
            + bucket_wire_bytes(self.params) * int(self.bucket_ids.shape[0])
            + WORD_WIRE_BYTES * int(self.word_ids.shape[0])
            + COMMIT_WIRE_BYTES * int(self.commit)
        )

    @staticmethod
    def empty(params: LudoParams) -> PatchBatch:
        """A batch with no images (nothing changed)."""
        return PatchBatch(
            params=params,
            header=False,
            bucket_ids=np.zeros(0, np.int64),
            bucket_seeds=np.zeros(0, np.uint8),
            bucket_values=np.zeros((0, 4), np.uint64),
            bucket_fps=np.zeros((0, 4), np.uint16),
            word_ids=np.zeros(0, np.int64),
            words=np.zeros(0, np.uint64),
            commit=False,
        )


def batch_from_arrays(
    params: LudoParams,
    seeds: NDArray[np.uint8],
    values: NDArray[np.uint32],
    fps: NDArray[np.uint8],
    locator: NDArray[np.uint64],
    bucket_ids: NDArray[np.int64],
    word_ids: NDArray[np.int64],
    *,
    header: bool,
    commit: bool,
) -> PatchBatch:
    """Copy the images of ``bucket_ids`` / ``word_ids`` (ascending, unique) out of view arrays."""
    n_buckets = params.n_buckets
    if params.value_words == 1:
        vals = values.reshape(n_buckets, 4)[bucket_ids].astype(np.uint64)
    else:
        halves = values.reshape(n_buckets, 4, 2)[bucket_ids].astype(np.uint64)
        vals = halves[:, :, 0] | (halves[:, :, 1] << np.uint64(32))
    if params.fp_bytes == 0:
        fpv = np.zeros((bucket_ids.shape[0], 4), np.uint16)
    elif params.fp_bytes == 1:
        fpv = fps.reshape(n_buckets, 4)[bucket_ids].astype(np.uint16)
    else:
        pair = fps.reshape(n_buckets, 4, 2)[bucket_ids].astype(np.uint16)
        fpv = pair[:, :, 0] | (pair[:, :, 1] << np.uint16(8))
    return PatchBatch(
        params=params,
        header=header,
        bucket_ids=bucket_ids,
        bucket_seeds=seeds[bucket_ids].copy(),
        bucket_values=vals,
        bucket_fps=fpv,
        word_ids=word_ids,
        words=locator[word_ids].copy(),
        commit=commit,
    )
