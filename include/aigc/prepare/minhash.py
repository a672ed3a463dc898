"""MinHash signatures and a banded LSH index, small and vectorised.

Signatures are computed in the decoding processes (numpy over all permutations at once);
the index lives in the parent and holds, per kept record, one int per band: near-duplicate
candidates come from a dict lookup, never from comparing against every earlier record.
"""

from __future__ import annotations

import zlib
from array import array
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


class BandedLSH:
    """Candidate lookup by band keys (from ``band_keys``); values are row numbers (int64).

    Each bucket is an ``array`` of int64, not a list of ints: a query joins the buckets' bytes
    into one numpy array without touching a Python int, which matters when captions repeat and
    buckets hold hundreds of rows.
    """

    def __init__(self, threshold: float, num_perm: int):
        self.bands, self.rows = bands_for(threshold, num_perm)
        self._tables: list[dict[int, array]] = [{} for _ in range(self.bands)]

    def query(self, keys: list[int]) -> np.ndarray:
        """The values stored under any of the band ``keys``, in no particular order.

        A value appears once per band it shares: removing the repeats costs more than the
        vectorised checks that follow spend on them.
        """
        return self.query_many([keys])[0]

    def query_many(self, keys_per_row: list[list[int]]) -> tuple[np.ndarray, list[int]]:
        """``query`` for many rows at once: all their values in one array, and how many are each row's."""
        hits: list[array] = []
        counts = []
        for keys in keys_per_row:
            before = len(hits)
            hits += [table[key] for table, key in zip(self._tables, keys, strict=True) if key in table]
            counts.append(sum(map(len, hits[before:])))
        return np.frombuffer(b"".join(hits), dtype=np.int64), counts

    def insert(self, keys: list[int], value: int) -> None:
        for table, key in zip(self._tables, keys, strict=True):
            bucket = table.get(key)
            if bucket is None:
                table[key] = array("q", (value,))
            else:
                bucket.append(value)
