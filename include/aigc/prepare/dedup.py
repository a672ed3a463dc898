"""Deduplication across a drop: ids, exact content, and near-duplicates.

The first record wins, in drop order, so results are deterministic. The indexes keep a few
compact keys per curated record (a 16-byte content digest, one int per LSH band, a 192-byte
thumbnail and its 24-byte quadrant sums): memory grows with the number of curated rows, never
with their bytes.
"""

from __future__ import annotations

import numpy as np

from aigc.prepare.checks import THUMB_SIDE, Rejected
from aigc.prepare.minhash import BandedLSH

DEDUP_KEYS = ("id", "content_hash", "_thumb", "_bands")
"""What the dedup indexes read from a row: all the parent needs of a row before keeping it."""
_THUMB_BYTES = THUMB_SIDE * THUMB_SIDE * 3
_HALF = THUMB_SIDE // 2
# (192,) thumbnail bytes @ (192, 12) → per quadrant and channel, the sum of its 16 cells
# ((y, x, RGB) cells; int16 holds 16·255).
_QUADRANT_SUMS = np.zeros((2, _HALF, 2, _HALF, 3, 2, 2, 3), dtype=np.int16)
for _qy in range(2):
    for _qx in range(2):
        _QUADRANT_SUMS[_qy, :, _qx, :, :, _qy, _qx, :] = np.eye(3, dtype=np.int16)
_QUADRANT_SUMS = _QUADRANT_SUMS.reshape(_THUMB_BYTES, 12)


class ExactDedup:
    """Unique ids and unique content (image bytes + normalised caption)."""

    def __init__(self) -> None:
        self._ids: set[str] = set()
        self._content: dict[bytes, str] = {}

    def check_id(self, rec_id: str) -> Rejected | None:
        if rec_id in self._ids:
            return Rejected("duplicate_id", f"id {rec_id!r} appeared earlier in the drop")
        return None

    def check(self, row: dict) -> Rejected | None:
        first = self._content.get(_content_key(row))
        if first is not None:
            return Rejected("exact_duplicate", f"same image bytes and caption as {first!r}")
        return None

    def add(self, row: dict) -> None:
        self._ids.add(row["id"])
        self._content[_content_key(row)] = row["id"]


def _content_key(row: dict) -> bytes:
    return bytes.fromhex(row["content_hash"][:32])  # 16 bytes of SHA-256: collisions are not a concern


class NearDedup:
    """MinHash-LSH proposes candidates; the largest difference of 8×8 RGB thumbnails confirms them.

    A row has hundreds of candidates when captions repeat (a drop with few distinct captions),
    and almost none of them is a near-duplicate. Quadrant sums rule most out first, exactly:
    the sums of k cells differ by at most k · (the largest cell difference), so a candidate
    whose quadrant sums differ by more than 16 · max_image_distance cannot pass the full check.
    """

    def __init__(self, threshold: float, num_perm: int, max_image_distance: float) -> None:
        self._lsh = BandedLSH(threshold, num_perm)
        self._max_distance = max_image_distance
        self._max_sum_distance = _HALF * _HALF * max_image_distance
        self._thumbs = np.empty((1024, _THUMB_BYTES), dtype=np.uint8)
        self._sums = np.empty((1024, 12), dtype=np.int16)  # row-major: a gather copies 24-byte rows
        self._ids: list[str] = []

    def check(self, row: dict) -> Rejected | None:
        idx = self._lsh.query(np.frombuffer(row["_bands"], dtype=np.uint64).tolist())  # repeats included
        if not len(idx):
            return None
        thumb = np.frombuffer(row["_thumb"], dtype=np.uint8)
        # (12, candidates): transposed, the max over the 12 sums is 12 vectorised steps, where a
        # max along a short last axis would be one tiny reduction per candidate. (`take` is far
        # cheaper than fancy indexing.)
        gaps = self._sums.take(idx, axis=0).T.copy()
        gaps -= (thumb @ _QUADRANT_SUMS)[:, None]
        idx = idx[np.abs(gaps, out=gaps).max(axis=0) <= self._max_sum_distance]
        if not len(idx):
            return None
        others = self._thumbs.take(idx, axis=0)  # (candidates, 192) uint8: |a − b| without widening
        distance = (np.maximum(others, thumb) - np.minimum(others, thumb)).max(axis=1)
        hits = idx[distance <= self._max_distance]
        if not len(hits):
            return None
        first = int(hits.min())  # the earliest kept record is the one reported
        seen = int(distance[idx == first][0])
        return Rejected("near_duplicate", f"near-duplicate of {self._ids[first]!r} (thumbnail distance "
                        f"{seen} ≤ near_dup_image_distance={self._max_distance})")

    def add(self, row: dict) -> None:
        n = len(self._ids)
        if n == len(self._thumbs):
            self._thumbs = np.concatenate([self._thumbs, np.empty_like(self._thumbs)])
            self._sums = np.concatenate([self._sums, np.empty_like(self._sums)])
        self._thumbs[n] = np.frombuffer(row["_thumb"], dtype=np.uint8)
        self._sums[n] = self._thumbs[n] @ _QUADRANT_SUMS
        self._ids.append(row["id"])
        self._lsh.insert(np.frombuffer(row["_bands"], dtype=np.uint64).tolist(), n)
