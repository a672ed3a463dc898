"""Deduplication across a drop: ids, exact content, and near-duplicates.

The first record wins, in drop order, so results are deterministic. The indexes keep a few
compact keys per curated record (a 16-byte content digest, up to 18 bytes per LSH band, the MinHash
signature, a 192-byte thumbnail and its 24-byte quadrant sums): memory grows with the number of
curated rows, never with their bytes, and each row's work is bounded (``BandIndex``), never a
function of how many rows came before it.

Rows arrive in batches (one per decoding task) and the near-duplicate search runs on a whole
batch at once: a few numpy calls per batch instead of a dozen per row, which matters because
this runs in the one parent process that every row passes through.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from aigc.prepare.minhash import BandIndex
from aigc.prepare.records import ExactDedup
from aigc.workloads.image.checks import THUMB_SIDE, Rejected

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

    def __init__(self, threshold: float, num_perm: int, max_image_distance: float, per_bucket: int = 32) -> None:
        self.exact = ExactDedup()
        self.near = NearDedup(threshold, num_perm, max_image_distance, per_bucket, published=self.exact.published)

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
            elif verdict.reason != "duplicate_id":
                self.exact.see(row["id"])
            verdicts.append(verdict)
        self.near.add_screened(near)
        return verdicts

    def stats(self) -> dict:
        """What dedup cost: near-duplicate candidates compared (against kept rows) and the index's bytes."""
        return {"near_candidates": self.near.candidates, "index_bytes": self.near.nbytes}

    def seed(self, rows: list[dict], origin: str) -> None:
        """Rows an earlier date kept and published (their dedup keys): later rows that repeat them are duplicates.
        They were deduplicated when they were prepared, so they join the indexes without a check."""
        for row in rows:
            self.exact.add(row, origin)
        self.near.add_many([row for row in rows if row.get("_sig") is not None])  # None: exact checks only


class NearDedup:
    """MinHash-LSH proposes candidates; a candidate is a near-duplicate when both its similarity (the share of
    MinHash positions the two signatures agree on, an unbiased estimate of their tokens' Jaccard similarity) is
    at least ``threshold`` and the largest difference of their 8×8 RGB thumbnails is at most
    ``max_image_distance``.

    Quadrant sums rule most remaining candidates out before the thumbnails are compared, exactly: the sums of
    k cells differ by at most k · (the largest cell difference), so a candidate whose quadrant sums differ by
    more than 16 · max_image_distance cannot pass the full check.
    """

    def __init__(self, threshold: float, num_perm: int, max_image_distance: float, per_bucket: int = 32,
                 published: Callable[[str], str] = lambda rec_id: "") -> None:
        self._lsh = BandIndex(threshold, num_perm, per_bucket)
        self._published = published  # ' (published for dt=…)' for a row an earlier date kept
        self._threshold, self._num_perm = threshold, num_perm
        self._min_agree = int(np.ceil(threshold * num_perm - 1e-9))  # positions: no float compare per pair
        self._max_distance = max_image_distance
        self._max_sum_distance = _HALF * _HALF * max_image_distance
        self._thumbs = np.empty((1024, _THUMB_BYTES), dtype=np.uint8)
        self._sums = np.empty((1024, 12), dtype=np.int16)  # row-major: a gather copies 24-byte rows
        self._sigs = np.empty((1024, num_perm), dtype=np.uint16)
        self._ids: list[str] = []
        self.candidates = 0  # pairs the index proposed: the bench's "candidates per row"

    @property
    def nbytes(self) -> int:
        """Bytes of the index's arrays (ids aside): what a kept row costs the parent, measured by the bench."""
        return self._lsh.nbytes + self._thumbs.nbytes + self._sums.nbytes + self._sigs.nbytes

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
        sigs = np.frombuffer(b"".join(row["_sig"] for row in rows), dtype=np.uint32).reshape(n, self._num_perm)
        sigs = sigs.astype(np.uint16)  # 16 bits a position: a chance agreement is 1 in 65,536, half the memory
        mine = _Rows(thumbs, thumbs @ _QUADRANT_SUMS, sigs)  # sums: (n, 12) int16
        # Against the index: each row's candidates (at most per_bucket a band), `owner` saying whose.
        owner, idx, full = self._lsh.query(keys, full=True)
        self.candidates += len(idx)
        first_kept = self._earliest_hits(owner, idx, mine)
        # Inside the batch: pairs (i < j) that share a band, confirmed the same way. No cap here (a batch is at most
        # prepare.curate.DEDUP_BLOCK rows), so where the cap cuts depends on the block boundaries: they are fixed (every
        # DEDUP_BLOCK candidates in drop order, however the drop was split), so a drop's verdicts are deterministic,
        # but a row deep in a crowded bucket can be matched when its copy comes in the same block and missed when it
        # comes later.
        shares = np.zeros((n, n), dtype=bool)
        for band in keys.T:
            shares |= band[:, None] == band[None, :]
        earlier, later = np.nonzero(np.triu(shares, 1))
        partners: dict[int, list[tuple[int, int, float]]] = {}
        for i, j, distance, similarity in self._confirmed(later, earlier, mine, mine):
            partners.setdefault(j, []).append((i, distance, similarity))  # ascending i: nonzero is row-major
        return NearScreen(self, rows, first_kept, partners, mine, keys, full)

    def add_many(self, rows: list[dict]) -> None:
        """Rows known to be kept, without screening them against each other (a published date's)."""
        n = len(rows)
        thumbs = np.frombuffer(b"".join(row["_thumb"] for row in rows), dtype=np.uint8).reshape(n, _THUMB_BYTES)
        sigs = np.frombuffer(b"".join(row["_sig"] for row in rows), dtype=np.uint32).reshape(n, self._num_perm)
        keys = np.frombuffer(b"".join(row["_bands"] for row in rows), dtype=np.uint64).reshape(n, self._lsh.bands)
        self._append(_Rows(thumbs, thumbs @ _QUADRANT_SUMS, sigs.astype(np.uint16)), keys, [r["id"] for r in rows])

    def add_screened(self, screened: NearScreen) -> None:
        kept = screened.kept
        mine = screened.mine
        self._append(_Rows(mine.thumbs[kept], mine.sums[kept], mine.sigs[kept]), screened.keys[kept],
                     [screened.rows[j]["id"] for j in kept], screened.full[kept])

    def _append(self, rows: _Rows, keys: np.ndarray, ids: list[str], full: np.ndarray | None = None) -> None:
        n, k = len(self._ids), len(ids)
        while n + k > len(self._thumbs):
            self._thumbs = np.concatenate([self._thumbs, np.empty_like(self._thumbs)])
            self._sums = np.concatenate([self._sums, np.empty_like(self._sums)])
            self._sigs = np.concatenate([self._sigs, np.empty_like(self._sigs)])
        self._thumbs[n : n + k] = rows.thumbs
        self._sums[n : n + k] = rows.sums
        self._sigs[n : n + k] = rows.sigs
        self._ids += ids
        self._lsh.insert(keys, np.arange(n, n + k), full)

    def _confirmed(self, owner: np.ndarray, idx: np.ndarray, mine: _Rows,
                   other: _Rows) -> list[tuple[int, int, int, float]]:
        """(other row, row, distance, similarity) for each candidate pair at or above the similarity threshold
        and within the image distance."""
        if not len(idx):
            return []
        # The cheapest test first: 24 bytes of quadrant sums a pair rule out most candidates (renders of one
        # caption in other places or sizes share LSH buckets), before 256 bytes of signature a pair are gathered.
        # Every test must pass, so their order changes no verdict. (12, pairs): transposed, the max over the 12
        # sums is 12 vectorised steps; `take` is far cheaper than fancy indexing.
        gaps = other.sums.take(idx, axis=0).T.copy()
        gaps -= mine.sums.take(owner, axis=0).T
        close = np.abs(gaps, out=gaps).max(axis=0) <= self._max_sum_distance
        owner, idx = owner[close], idx[close]
        if not len(idx):
            return []
        agree = np.count_nonzero(other.sigs.take(idx, axis=0) == mine.sigs.take(owner, axis=0), axis=1)
        similar = agree >= self._min_agree
        owner, idx, agree = owner[similar], idx[similar], agree[similar]
        if not len(idx):
            return []
        a, b = other.thumbs.take(idx, axis=0), mine.thumbs.take(owner, axis=0)  # uint8: |a − b| without widening
        distance = (np.maximum(a, b) - np.minimum(a, b)).max(axis=1)
        hit = distance <= self._max_distance
        similarity = (agree[hit] / self._num_perm).tolist()
        return list(zip(idx[hit].tolist(), owner[hit].tolist(), distance[hit].tolist(), similarity, strict=True))

    def _earliest_hits(self, owner: np.ndarray, idx: np.ndarray, mine: _Rows) -> dict[int, tuple[int, int, float]]:
        """Per row with any hit among the kept rows: (the earliest such kept row, its distance, its similarity)."""
        first: dict[int, tuple[int, int, float]] = {}
        kept = _Rows(self._thumbs, self._sums, self._sigs)
        for i, j, distance, similarity in self._confirmed(owner, idx, mine, kept):
            if j not in first or i < first[j][0]:
                first[j] = (i, distance, similarity)
        return first

    def rejection(self, first_id: str, distance: int, similarity: float) -> Rejected:
        return Rejected("near_duplicate", f"near-duplicate of {first_id!r}{self._published(first_id)} (estimated "
                        f"similarity {similarity:.2f} ≥ "
                        f"near_dup_threshold={self._threshold}, thumbnail distance {distance} ≤ "
                        f"near_dup_image_distance={self._max_distance})")

    def id_of(self, kept: int) -> str:
        """The id of the ``kept``-th kept row."""
        return self._ids[kept]


@dataclass(frozen=True)
class _Rows:
    """What the near-duplicate checks compare, for some rows: thumbnails, their quadrant sums, signatures."""

    thumbs: np.ndarray
    sums: np.ndarray
    sigs: np.ndarray


class NearScreen:
    """A batch's near-duplicate verdicts, taken in drop order as the caller keeps rows."""

    def __init__(self, index: NearDedup, rows: list[dict], first_kept: dict, partners: dict, mine: _Rows,
                 keys: np.ndarray, full: np.ndarray) -> None:
        self.index, self.rows, self.mine, self.keys, self.full = index, rows, mine, keys, full  # full: (n, bands)
        self._first_kept, self._partners = first_kept, partners
        self.kept: list[int] = []
        self._is_kept = [False] * len(rows)

    def check(self, j: int) -> Rejected | None:
        if j in self._first_kept:  # rows kept before this batch come before any row of it
            i, distance, similarity = self._first_kept[j]
            return self.index.rejection(self.index.id_of(i), distance, similarity)
        for i, distance, similarity in self._partners.get(j, ()):
            if self._is_kept[i]:
                return self.index.rejection(self.rows[i]["id"], distance, similarity)
        return None

    def keep(self, j: int) -> None:
        self.kept.append(j)
        self._is_kept[j] = True
