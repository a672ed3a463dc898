"""Deduplication across a drop: ids, exact content, and near-duplicates.

The first record wins, in drop order, so results are deterministic. The indexes keep a few
compact keys per curated record (a 16-byte content digest, one int per LSH band, a 192-byte
thumbnail and its 24-byte quadrant sums): memory grows with the number of curated rows, never
with their bytes.

Rows arrive in batches (one per decoding task) and the near-duplicate search runs on a whole
batch at once: a few numpy calls per batch instead of a dozen per row, which matters because
this runs in the one parent process that every row passes through.
"""

from __future__ import annotations

import numpy as np

from aigc.prepare.checks import THUMB_SIDE, Rejected
from aigc.prepare.minhash import BandedLSH
from aigc.prepare.records import ExactDedup

_SAME = "image bytes and caption"  # what an exact duplicate shares
_THUMB_BYTES = THUMB_SIDE * THUMB_SIDE * 3
_HALF = THUMB_SIDE // 2
# (192,) thumbnail bytes @ (192, 12) → per quadrant and channel, the sum of its 16 cells
# ((y, x, RGB) cells; int16 holds 16·255).
_QUADRANT_SUMS = np.zeros((2, _HALF, 2, _HALF, 3, 2, 2, 3), dtype=np.int16)
for _qy in range(2):
    for _qx in range(2):
        _QUADRANT_SUMS[_qy, :, _qx, :, :, _qy, _qx, :] = np.eye(3, dtype=np.int16)
_QUADRANT_SUMS = _QUADRANT_SUMS.reshape(_THUMB_BYTES, 12)


class Deduplicator:
    """Ids, then exact content, then near-duplicates, for a batch of candidate rows at a time."""

    def __init__(self, threshold: float, num_perm: int, max_image_distance: float) -> None:
        self.exact = ExactDedup()
        self.near = NearDedup(threshold, num_perm, max_image_distance)

    def check_batch(self, rows: list[dict]) -> list[Rejected | None]:
        """Per row, in order: why it duplicates an earlier row (of this batch or before), or None
        when it is kept. Kept rows join the indexes, so later rows and batches are checked against them."""
        near = self.near.screen(rows)
        verdicts: list[Rejected | None] = []
        for j, row in enumerate(rows):
            verdict = self.exact.check_id(row["id"]) or self.exact.check(row, _SAME) or near.check(j)
            if verdict is None:
                self.exact.add(row)
                near.keep(j)
            verdicts.append(verdict)
        self.near.add_screened(near)
        return verdicts


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
        """One row against the kept rows (``screen`` does a batch at once)."""
        return self.screen([row]).check(0)

    def add(self, row: dict) -> None:
        screened = self.screen([row])
        screened.keep(0)
        self.add_screened(screened)

    def screen(self, rows: list[dict]) -> NearScreen:
        """Everything a batch's verdicts need, computed at once: each row's earliest near-duplicate
        among the kept rows, and the near-duplicate pairs inside the batch (which count only
        once the earlier row of the pair is kept, decided in order by ``NearScreen``)."""
        n = len(rows)
        thumbs = np.frombuffer(b"".join(row["_thumb"] for row in rows), dtype=np.uint8).reshape(n, _THUMB_BYTES)
        keys = np.frombuffer(b"".join(row["_bands"] for row in rows), dtype=np.uint64).reshape(n, self._lsh.bands)
        sums = thumbs @ _QUADRANT_SUMS  # (n, 12) int16
        key_lists = keys.tolist()
        # Against the index: candidates of every row in one flat array, `owner` saying whose.
        idx, counts = self._lsh.query_many(key_lists)
        owner = np.repeat(np.arange(n), counts)
        first_kept = self._earliest_hits(owner, idx, thumbs, sums)
        # Inside the batch: pairs (i < j) that share a band, confirmed the same way.
        shares = np.zeros((n, n), dtype=bool)
        for band in keys.T:
            shares |= band[:, None] == band[None, :]
        earlier, later = np.nonzero(np.triu(shares, 1))
        partners: dict[int, list[tuple[int, int]]] = {}
        for i, j, distance in self._confirmed(later, earlier, thumbs, sums, thumbs, sums):
            partners.setdefault(j, []).append((i, distance))  # ascending i: nonzero is row-major
        return NearScreen(self, rows, first_kept, partners, thumbs, sums, key_lists)

    def add_screened(self, screened: NearScreen) -> None:
        kept = screened.kept
        n, k = len(self._ids), len(kept)
        while n + k > len(self._thumbs):
            self._thumbs = np.concatenate([self._thumbs, np.empty_like(self._thumbs)])
            self._sums = np.concatenate([self._sums, np.empty_like(self._sums)])
        self._thumbs[n : n + k] = screened.thumbs[kept]
        self._sums[n : n + k] = screened.sums[kept]
        for offset, j in enumerate(kept):
            self._ids.append(screened.rows[j]["id"])
            self._lsh.insert(screened.key_lists[j], n + offset)

    def _confirmed(self, owner: np.ndarray, idx: np.ndarray, thumbs: np.ndarray, sums: np.ndarray,
                   other_thumbs: np.ndarray, other_sums: np.ndarray) -> list[tuple[int, int, int]]:
        """(other row, row, distance) for each candidate pair within the image distance."""
        if not len(idx):
            return []
        # (12, pairs): transposed, the max over the 12 sums is 12 vectorised steps. (`take` is
        # far cheaper than fancy indexing.)
        gaps = other_sums.take(idx, axis=0).T.copy()
        gaps -= sums.take(owner, axis=0).T
        close = np.abs(gaps, out=gaps).max(axis=0) <= self._max_sum_distance
        owner, idx = owner[close], idx[close]
        if not len(idx):
            return []
        a, b = other_thumbs.take(idx, axis=0), thumbs.take(owner, axis=0)  # uint8: |a − b| without widening
        distance = (np.maximum(a, b) - np.minimum(a, b)).max(axis=1)
        hit = distance <= self._max_distance
        return list(zip(idx[hit].tolist(), owner[hit].tolist(), distance[hit].tolist(), strict=True))

    def _earliest_hits(self, owner: np.ndarray, idx: np.ndarray, thumbs: np.ndarray,
                       sums: np.ndarray) -> dict[int, tuple[int, int]]:
        """Per row with any hit among the kept rows: (the earliest such kept row, its distance)."""
        first: dict[int, tuple[int, int]] = {}
        for i, j, distance in self._confirmed(owner, idx, thumbs, sums, self._thumbs, self._sums):
            if j not in first or i < first[j][0]:
                first[j] = (i, distance)
        return first

    def rejection(self, first_id: str, distance: int) -> Rejected:
        return Rejected("near_duplicate", f"near-duplicate of {first_id!r} (thumbnail distance "
                        f"{distance} ≤ near_dup_image_distance={self._max_distance})")

    def id_of(self, kept: int) -> str:
        """The id of the ``kept``-th kept row."""
        return self._ids[kept]


class NearScreen:
    """A batch's near-duplicate verdicts, taken in drop order as the caller keeps rows."""

    def __init__(self, index: NearDedup, rows: list[dict], first_kept: dict, partners: dict,
                 thumbs: np.ndarray, sums: np.ndarray, key_lists: list[list[int]]) -> None:
        self.index, self.rows, self.thumbs, self.sums, self.key_lists = index, rows, thumbs, sums, key_lists
        self._first_kept, self._partners = first_kept, partners
        self.kept: list[int] = []
        self._is_kept = [False] * len(rows)

    def check(self, j: int) -> Rejected | None:
        if j in self._first_kept:  # rows kept before this batch come before any row of it
            i, distance = self._first_kept[j]
            return self.index.rejection(self.index.id_of(i), distance)
        for i, distance in self._partners.get(j, ()):
            if self._is_kept[i]:
                return self.index.rejection(self.rows[i]["id"], distance)
        return None

    def keep(self, j: int) -> None:
        self.kept.append(j)
        self._is_kept[j] = True
