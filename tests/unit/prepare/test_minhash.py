"""MinHash estimates Jaccard similarity; the banded index finds similar signatures and not others."""

import random

import numpy as np
import pytest

from aigc.prepare.minhash import BandedLSH, band_keys, bands_for, jaccard, signature


def sets_with_jaccard(j: float, size: int = 200, seed: int = 0) -> tuple[set[str], set[str]]:
    rng = random.Random(seed)
    shared = round(2 * size * j / (1 + j))  # |A∩B| / |A∪B| = j with |A| = |B| = size
    common = {f"s{rng.random()}" for _ in range(shared)}
    return common | {f"a{i}" for i in range(size - shared)}, common | {f"b{i}" for i in range(size - shared)}


@pytest.mark.parametrize("j", [0.1, 0.5, 0.8, 0.95])
def test_signature_agreement_estimates_jaccard(j):
    a, b = sets_with_jaccard(j)
    assert abs(jaccard(signature(a, 256), signature(b, 256)) - j) < 0.08


def test_signatures_are_deterministic_and_order_free():
    tokens = {"w:a", "w:red", "c3:17"}
    assert np.array_equal(signature(tokens, 64), signature(set(sorted(tokens, reverse=True)), 64))
    assert signature(tokens, 64).dtype == np.uint32 and signature(set(), 64).shape == (64,)


def test_bands_trade_recall_at_the_threshold_for_fewer_candidates():
    bands, rows = bands_for(0.7, 64)
    assert bands * rows <= 64
    assert 1 - (1 - 0.7**rows) ** bands >= 0.85
    assert 1 - (1 - 0.7 ** (rows + 1)) ** (64 // (rows + 1)) < 0.85  # one more row would miss too many


def keys(tokens: set[str]) -> list[int]:
    return band_keys(signature(tokens, 64), 0.7, 64).tolist()


def test_index_finds_near_signatures_and_not_distant_ones():
    index = BandedLSH(0.7, 64)
    near_hits = far_hits = 0
    for seed in range(50):
        a, b = sets_with_jaccard(0.9, seed=seed)
        c, d = sets_with_jaccard(0.1, seed=1000 + seed)
        index.insert(keys(a), seed)
        near_hits += seed in index.query(keys(b)).tolist()
        index.insert(keys(c), 1000 + seed)
        far_hits += (1000 + seed) in index.query(keys(d)).tolist()
    assert near_hits == 50 and far_hits <= 2
