"""Deduplication across a drop: ids, exact content, and near-duplicates.

The first record wins, in drop order, so results are deterministic. The indexes hold a few
hashes per kept record (about 1 KiB each with the LSH bands): memory grows with the number
of curated rows, not with their bytes.
"""

from __future__ import annotations

import numpy as np
from datasketch import MinHash, MinHashLSH

from aigc.prepare.checks import MINHASH_SCHEME, Rejected


class ExactDedup:
    """Unique ids and unique content (image bytes + normalised caption)."""

    def __init__(self) -> None:
        self._ids: set[str] = set()
        self._content: dict[str, str] = {}

    def check_id(self, rec_id: str) -> Rejected | None:
        if rec_id in self._ids:
            return Rejected("duplicate_id", f"id {rec_id!r} appeared earlier in the drop")
        return None

    def check(self, row: dict) -> Rejected | None:
        first = self._content.get(row["content_hash"])
        if first is not None:
            return Rejected("exact_duplicate", f"same image bytes and caption as {first!r}")
        return None

    def add(self, row: dict) -> None:
        self._ids.add(row["id"])
        self._content[row["content_hash"]] = row["id"]


class NearDedup:
    """MinHash-LSH proposes candidates; the largest difference of their 8×8 RGB thumbnails confirms them."""

    def __init__(self, threshold: float, num_perm: int, max_image_distance: float) -> None:
        # Weighted against false negatives: a missed pair is a duplicate trained on twice, while
        # a false candidate only costs one thumbnail comparison.
        self._lsh = MinHashLSH(threshold=threshold, num_perm=num_perm, weights=(0.1, 0.9))
        self._num_perm = num_perm
        self._thumbs: dict[str, np.ndarray] = {}
        self._max_distance = max_image_distance

    def check(self, row: dict) -> tuple[Rejected | None, MinHash]:
        mh = MinHash(num_perm=self._num_perm, seed=1, hashvalues=row["_signature"], scheme=MINHASH_SCHEME)
        thumb = np.frombuffer(row["_thumb"], dtype=np.uint8).astype(np.int16)
        for other in self._lsh.query(mh):
            distance = float(np.abs(self._thumbs[other] - thumb).max())
            if distance <= self._max_distance:
                return (
                    Rejected("near_duplicate", f"near-duplicate of {other!r} (thumbnail distance {distance:.1f} "
                             f"≤ near_dup_image_distance={self._max_distance})"),
                    mh,
                )
        return None, mh

    def add(self, row: dict, mh: MinHash) -> None:
        self._lsh.insert(row["id"], mh)
        self._thumbs[row["id"]] = np.frombuffer(row["_thumb"], dtype=np.uint8).astype(np.int16)
