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
import pandas as pd

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
    rule would name anyway), and a full bucket takes no more entries (``insert``'s ``full``). Memory is at most 18
    bytes per (row, band): sorted numpy runs of (key, row) and a large run's key filter, merged like a
    binary counter (a log-structured merge), so a lookup is a few ``searchsorted`` calls for a whole batch and
    nothing is held per row in Python objects.
    """

    def __init__(self, threshold: float, num_perm: int, per_bucket: int = 32):
        self.bands, self.rows = bands_for(threshold, num_perm)
        self.per_bucket = per_bucket
        # Band b's key k is stored as k ^ salt[b]: one key space for all bands, one sorted array per run.
        self._salt = (np.arange(self.bands, dtype=np.uint64) + np.uint64(1)) * np.uint64(0xBF58476D1CE4E5B9)
        self._runs: list[_Run] = []  # older runs first
        self._stored = 0  # rows inserted

    def __len__(self) -> int:
        return self._stored

    @property
    def nbytes(self) -> int:
        return sum(run.nbytes for run in self._runs)

    def query(self, keys: np.ndarray, *, full: bool = False):
        """(owner, candidate): each distinct pair of a query row (its index in ``keys``, shape (n, bands)) and a
        stored row sharing a band with it, at most ``per_bucket`` stored rows per band of a query row, in no
        particular order.

        With ``full=True`` also (n, bands) bools: which of the query's buckets already hold ``per_bucket`` rows.
        Pass them to ``insert`` for the same rows: a row's entry in a full bucket can never be returned (a query
        takes the earliest), so it is not stored, and crowded buckets stop growing the index."""
        salted = (np.asarray(keys, dtype=np.uint64).reshape(-1, self.bands) ^ self._salt).ravel()
        # Sorted needles: each binary search starts near the last one's answer, a third of the cost of searching
        # in query order once the runs outgrow the CPU's caches. Everything below is in that sorted order.
        order = np.argsort(salted)
        needles, owner_of = salted[order], order // self.bands
        owners, found = [], []
        room = np.full(len(needles), self.per_bucket, dtype=np.int64)  # per (row, band), across runs
        for run in self._runs:
            run_keys = run.keys
            # Most needles are in no run or one: the run's filter rules most of them out with one read each, and
            # only the rest pay a binary search (a dozen reads, most of them cache misses in a large run).
            maybe = run.may_hold(needles)
            candidates = needles[maybe]
            lo = np.searchsorted(run_keys, candidates, side="left")
            inside = lo < len(run_keys)
            present = np.zeros(len(lo), dtype=bool)
            present[inside] = run_keys[lo[inside]] == candidates[inside]
            keep = present & (room[maybe] > 0)
            hits, lo = maybe[keep], lo[keep]
            if not len(hits):
                continue
            # A bucket's end: the next entry holds another key for most hits; only the others search for it.
            counts = np.ones(len(hits), dtype=np.int64)
            nxt = np.minimum(lo + 1, len(run_keys) - 1)
            more = np.flatnonzero((lo + 1 < len(run_keys)) & (run_keys[nxt] == needles[hits]))
            counts[more] = np.searchsorted(run_keys, needles[hits[more]], side="right") - lo[more]
            counts = np.minimum(counts, room[hits])
            room[hits] -= counts
            # Each hit's positions lo, lo+1, …: one arange, shifted per hit.
            starts = np.repeat(lo - (np.cumsum(counts) - counts), counts)
            found.append(run.rows[starts + np.arange(counts.sum())])
            owners.append(np.repeat(owner_of[hits], counts))
        if found:
            found_all = np.concatenate(found)
            span = int(found_all.max()) + 1
            # One int per pair; a hash table drops the repeats (a stored row found through several bands) in
            # linear time (a sort of every pair was a quarter of the parent's time at a million records).
            pairs = pd.unique(np.concatenate(owners) * span + found_all)
            owner, candidate = pairs // span, pairs % span
        else:
            owner = candidate = np.empty(0, dtype=np.int64)
        if not full:
            return owner, candidate
        is_full = np.empty(len(needles), dtype=bool)
        is_full[order] = room == 0
        return owner, candidate, is_full.reshape(-1, self.bands)

    def insert(self, keys: np.ndarray, values: np.ndarray, full: np.ndarray | None = None) -> None:
        """Store rows ``values`` (int64, ascending, after every stored row) under their band ``keys`` (k, bands),
        but not where ``full`` (k, bands), from ``query(…, full=True)`` of the same rows, says the bucket is full."""
        values = np.asarray(values, dtype=np.int64)
        if not len(values):
            return
        self._stored += len(values)
        salted = (np.asarray(keys, dtype=np.uint64).reshape(-1, self.bands) ^ self._salt).ravel()
        rows = np.repeat(values, self.bands)
        if full is not None:
            room = ~np.asarray(full, dtype=bool).ravel()
            salted, rows = salted[room], rows[room]
        order = np.argsort(salted, kind="stable")  # stable: equal keys keep row order, oldest first
        self._runs.append(_Run(salted[order], rows[order]))
        while len(self._runs) > 1 and len(self._runs[-2].keys) <= 2 * len(self._runs[-1].keys):
            self._runs[-2:] = [_Run(*_merge(self._runs[-2], self._runs[-1]))]


_FILTER_SLICE = 1 << 24  # filter bits built at once (16 MB of bools)
_BIT = np.array([1 << i for i in range(8)], dtype=np.uint8)


class _Run:
    """Sorted keys, the rows stored under them, and, for a large run, a filter of the keys it holds: 16 bits an
    entry, set at the key's top bits (keys are hashes, uniform, so a needle absent from the run finds its bit set
    about one time in sixteen). Sorted keys have sorted top bits, so the filter is built in one linear pass."""

    FILTERED = 1 << 16  # entries; a smaller run's binary search stays in the CPU's caches

    def __init__(self, keys: np.ndarray, rows: np.ndarray) -> None:
        self.keys, self.rows = keys, rows
        self.bits: np.ndarray | None = None
        if len(keys) >= self.FILTERED:
            width = int(np.ceil(np.log2(len(keys) * 16)))
            self.shift = np.uint64(64 - width)
            h = keys >> self.shift  # ascending
            self.bits = np.empty(1 << (width - 3), dtype=np.uint8)
            # A slice of the bit space at a time, as bools then packed: a bool per bit of the whole filter
            # would hold 16 bytes an entry for a moment.
            step = min(_FILTER_SLICE, 1 << width)
            scratch = np.empty(step, dtype=bool)
            ends = np.searchsorted(h, np.arange(step, (1 << width) + 1, step, dtype=np.uint64))
            lo = 0
            for k, hi in enumerate(ends.tolist()):
                scratch[:] = False
                scratch[(h[lo:hi] - np.uint64(k * step)).astype(np.intp)] = True
                self.bits[k * step // 8 : (k + 1) * step // 8] = np.packbits(scratch, bitorder="little")
                lo = hi

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.rows.nbytes + (self.bits.nbytes if self.bits is not None else 0)

    def may_hold(self, needles: np.ndarray) -> np.ndarray:
        """Indexes of the needles this run may hold (all of them, for a run without a filter): no false negatives."""
        if self.bits is None:
            return np.arange(len(needles))
        h = needles >> self.shift
        return np.flatnonzero(self.bits[h >> np.uint64(3)] & _BIT[h & np.uint64(7)])


def _merge(old: _Run, new: _Run) -> tuple[np.ndarray, np.ndarray]:
    """Two sorted runs as one, in linear time (no re-sort): each newer entry goes after the older entries with
    its key (``side="right"``), so equal keys stay oldest first."""
    k_old, r_old, k_new, r_new = old.keys, old.rows, new.keys, new.rows
    at = np.searchsorted(k_old, k_new, side="right") + np.arange(len(k_new))  # final places of the newer entries
    older = np.ones(len(k_old) + len(k_new), dtype=bool)
    older[at] = False
    keys, rows = np.empty(len(older), dtype=k_old.dtype), np.empty(len(older), dtype=r_old.dtype)
    keys[at], rows[at] = k_new, r_new
    keys[older], rows[older] = k_old, r_old
    return keys, rows
