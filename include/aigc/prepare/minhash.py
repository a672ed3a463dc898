"""MinHash signatures and a banded LSH index, small and vectorised.

Signatures are computed in the decoding processes (numpy over all permutations at once);
the index lives in the parent and holds, per kept record, one key per band in sorted numpy runs:
near-duplicate candidates come from a binary search, never from comparing against every earlier
record, and at most a fixed number come from any one bucket.
"""

from __future__ import annotations

import zlib
from functools import lru_cache

import numpy as np

_PRIME = (1 << 31) - 1  # Mersenne prime: (a·x + b) stays below 2⁶² in uint64, no overflow
_SEED = 1  # fixed, so every process (and every run) draws the same permutations


@lru_cache(maxsize=8)
def _permutations(num_perm: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.RandomState(_SEED)
    a = rng.randint(1, _PRIME, size=num_perm, dtype=np.uint64)
    b = rng.randint(0, _PRIME, size=num_perm, dtype=np.uint64)
    return a, b


def signature(tokens: set[str], num_perm: int) -> np.ndarray:
    """The MinHash of ``tokens``: uint32[num_perm]; equal positions estimate Jaccard similarity."""
    if not tokens:
        return np.full(num_perm, _PRIME, dtype=np.uint32)
    x = np.fromiter(map(_token_hash, tokens), dtype=np.uint64, count=len(tokens))
    a, b = _permutations(num_perm)
    return ((np.outer(x, a) + b) % _PRIME).min(axis=0).astype(np.uint32)  # (tokens, perms) → (perms,)


def token_signatures(tokens: list[str], num_perm: int) -> np.ndarray:
    """(len(tokens), num_perm): ``signature({token})`` of each token alone, all at once."""
    x = np.fromiter(map(_token_hash, tokens), dtype=np.uint64, count=len(tokens))
    a, b = _permutations(num_perm)
    return ((np.outer(x, a) + b) % _PRIME).astype(np.uint32)


@lru_cache(maxsize=1 << 16)
def _token_hash(token: str) -> int:
    # crc32 is a fast, stable token hash (the affine maps do the mixing); cached because a
    # caption vocabulary repeats far more than it grows.
    return zlib.crc32(token.encode()) % _PRIME


def jaccard(sig_a: np.ndarray, sig_b: np.ndarray) -> float:
    return float(np.mean(sig_a == sig_b))


@lru_cache(maxsize=16)
def bands_for(threshold: float, num_perm: int, recall_at_threshold: float = 0.85) -> tuple[int, int]:
    """(bands, rows per band): the most rows per band (fewest false candidates) that still make a
    pair at exactly ``threshold`` a candidate with probability ≥ ``recall_at_threshold``."""
    best = (num_perm, 1)
    for rows in range(1, num_perm + 1):
        bands = num_perm // rows
        if 1 - (1 - threshold**rows) ** bands >= recall_at_threshold:
            best = (bands, rows)
    return best


def band_keys(sig: np.ndarray, threshold: float, num_perm: int) -> np.ndarray:
    """uint64[..., bands]: each band of the signature(s) ``sig[..., num_perm]`` folded to one int
    (a cheap dict key). A stack of signatures is folded at once.

    Computed where the signature is (a decoding process), so only these few ints travel.
    """
    bands, rows = bands_for(threshold, num_perm)
    used = sig[..., : bands * rows].reshape(*sig.shape[:-1], bands, rows).astype(np.uint64)
    mixed = used * np.arange(1, rows + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    return np.bitwise_xor.reduce(mixed ^ (used << np.uint64(29)), axis=-1)


class BandIndex:
    """Candidate lookup by band keys (from ``band_keys``): the kept rows that share a band with a query row.

    Work per query row is bounded: a bucket (one band's key) yields at most ``per_bucket`` of its members, the
    earliest kept, so a drop where thousands of rows look alike costs each row at most ``bands · per_bucket``
    candidates instead of a number that grows with the drop (the earliest members are the ones the first-wins
    rule would name anyway). Memory is 16 bytes per (row, band): sorted numpy runs of (key, row), merged like a
    binary counter (a log-structured merge), so a lookup is a few ``searchsorted`` calls for a whole batch and
    nothing is held per row in Python objects.
    """

    def __init__(self, threshold: float, num_perm: int, per_bucket: int = 32):
        self.bands, self.rows = bands_for(threshold, num_perm)
        self.per_bucket = per_bucket
        # Band b's key k is stored as k ^ salt[b]: one key space for all bands, one sorted array per run.
        self._salt = (np.arange(self.bands, dtype=np.uint64) + np.uint64(1)) * np.uint64(0xBF58476D1CE4E5B9)
        self._runs: list[tuple[np.ndarray, np.ndarray]] = []  # (sorted keys, their rows), older runs first

    def __len__(self) -> int:
        return sum(len(keys) for keys, _ in self._runs) // self.bands

    @property
    def nbytes(self) -> int:
        return sum(keys.nbytes + rows.nbytes for keys, rows in self._runs)

    def query(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(owner, candidate): each distinct pair of a query row (its index in ``keys``, shape (n, bands)) and a
        stored row sharing a band with it, at most ``per_bucket`` stored rows per band of a query row."""
        salted = (np.asarray(keys, dtype=np.uint64).reshape(-1, self.bands) ^ self._salt).ravel()
        # Sorted needles: each binary search starts near the last one's answer, a third of the cost of searching
        # in query order once the runs outgrow the CPU's caches. Everything below is in that sorted order.
        order = np.argsort(salted)
        needles, owner_of = salted[order], order // self.bands
        owners, found = [], []
        room = np.full(len(needles), self.per_bucket, dtype=np.int64)  # per (row, band), across runs
        for run_keys, run_rows in self._runs:
            lo = np.searchsorted(run_keys, needles, side="left")
            present = np.zeros(len(needles), dtype=bool)
            inside = np.flatnonzero(lo < len(run_keys))
            present[inside] = run_keys[lo[inside]] == needles[inside]
            hits = np.flatnonzero(present & (room > 0))
            if not len(hits):
                continue
            # Only a needle that is there needs the bucket's end.
            counts = np.minimum(np.searchsorted(run_keys, needles[hits], side="right") - lo[hits], room[hits])
            room[hits] -= counts
            # Each hit's positions lo, lo+1, …: one arange, shifted per hit.
            starts = np.repeat(lo[hits] - (np.cumsum(counts) - counts), counts)
            found.append(run_rows[starts + np.arange(counts.sum())])
            owners.append(np.repeat(owner_of[hits], counts))
        if not found:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        found_all = np.concatenate(found)
        span = int(found_all.max()) + 1
        pairs = np.unique(np.concatenate(owners) * span + found_all)  # one int per pair: a 1-D unique is cheap
        return pairs // span, pairs % span

    def insert(self, keys: np.ndarray, values: np.ndarray) -> None:
        """Store rows ``values`` (int64, ascending, after every stored row) under their band ``keys`` (k, bands)."""
        values = np.asarray(values, dtype=np.int64)
        if not len(values):
            return
        salted = (np.asarray(keys, dtype=np.uint64).reshape(-1, self.bands) ^ self._salt).ravel()
        order = np.argsort(salted, kind="stable")  # stable: equal keys keep row order, oldest first
        self._runs.append((salted[order], np.repeat(values, self.bands)[order]))
        while len(self._runs) > 1 and len(self._runs[-2][0]) <= 2 * len(self._runs[-1][0]):
            self._runs[-2:] = [_merge(*self._runs[-2], *self._runs[-1])]


def _merge(k_old: np.ndarray, r_old: np.ndarray, k_new: np.ndarray, r_new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two sorted runs as one, in linear time (no re-sort): each newer entry goes after the older entries with
    its key (``side="right"``), so equal keys stay oldest first."""
    at = np.searchsorted(k_old, k_new, side="right") + np.arange(len(k_new))  # final places of the newer entries
    older = np.ones(len(k_old) + len(k_new), dtype=bool)
    older[at] = False
    keys, rows = np.empty(len(older), dtype=k_old.dtype), np.empty(len(older), dtype=r_old.dtype)
    keys[at], rows[at] = k_new, r_new
    keys[older], rows[older] = k_old, r_old
    return keys, rows
