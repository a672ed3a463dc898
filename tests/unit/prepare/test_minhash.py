"""MinHash estimates Jaccard similarity; the banded index finds similar signatures and not others."""

import random

import numpy as np
import pytest

from aigc.prepare.minhash import BandIndex, band_keys, bands_for, jaccard, signature, token_signatures


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


def test_token_signatures_are_each_tokens_signature_alone():
    tokens = ["w:a", "c3:17", "g:15_15_15"]
    assert np.array_equal(token_signatures(tokens, 64), np.stack([signature({t}, 64) for t in tokens]))


def keys(tokens: set[str]) -> np.ndarray:
    return band_keys(signature(tokens, 64), 0.7, 64)[None]


def test_index_finds_near_signatures_and_not_distant_ones():
    index = BandIndex(0.7, 64)
    near_hits = far_hits = 0
    for seed in range(50):
        a, b = sets_with_jaccard(0.9, seed=seed)
        c, d = sets_with_jaccard(0.1, seed=1000 + seed)
        index.insert(keys(a), np.array([2 * seed]))
        near_hits += 2 * seed in index.query(keys(b))[1].tolist()
        index.insert(keys(c), np.array([2 * seed + 1]))
        far_hits += 2 * seed + 1 in index.query(keys(d))[1].tolist()
    assert near_hits == 50 and far_hits <= 2
    assert len(index) == 100 and index.nbytes == 100 * index.bands * 16


def brute_force(stored: np.ndarray, queries: np.ndarray, per_bucket: int) -> set[tuple[int, int]]:
    """The definition: per query row and band, the first ``per_bucket`` stored rows with that band's key."""
    pairs = set()
    for q, row in enumerate(queries):
        for band, key in enumerate(row):
            same = [i for i in range(len(stored)) if stored[i, band] == key]
            pairs |= {(q, i) for i in same[:per_bucket]}
    return pairs


@pytest.mark.parametrize("filtered", [False, True])
@pytest.mark.parametrize("per_bucket", [1, 3, 32, 1000])
def test_index_queries_equal_the_definition_across_merged_runs(per_bucket, filtered, monkeypatch):
    """Few distinct keys, so buckets are crowded; inserts of uneven sizes, so runs merge at different depths;
    with every run filtered (a large run's key filter), or none."""
    from aigc.prepare import minhash

    monkeypatch.setattr(minhash._Run, "FILTERED", 1 if filtered else 1 << 60)
    rng = np.random.default_rng(per_bucket)
    index = BandIndex(0.7, 64, per_bucket)
    # The same rows, each inserted with the `full` flags of its own query first: a full bucket takes no entry.
    lean = BandIndex(0.7, 64, per_bucket)
    stored = np.empty((0, index.bands), dtype=np.uint64)
    for size in (1, 5, 2, 17, 1, 1, 40, 3, 9):
        queries = rng.integers(0, 4, size=(7, index.bands), dtype=np.uint64)
        for ix in (index, lean):
            owner, found = ix.query(queries)
            assert set(zip(owner.tolist(), found.tolist(), strict=True)) == brute_force(stored, queries, per_bucket)
            assert len(set(zip(owner.tolist(), found.tolist(), strict=True))) == len(owner)  # distinct
        new = rng.integers(0, 4, size=(size, index.bands), dtype=np.uint64)
        index.insert(new, np.arange(len(stored), len(stored) + size))
        *_, full = lean.query(new, full=True)
        lean.insert(new, np.arange(len(stored), len(stored) + size), full)
        stored = np.concatenate([stored, new])
    assert len(index._runs) < 9  # merged: runs grow like a binary counter, not one per insert
    assert len(lean) == len(index) == len(stored)
    if not filtered:  # (a filter's bytes depend on the run sizes)
        assert lean.nbytes <= index.nbytes
        if per_bucket <= 3:  # 4 keys a band: the buckets fill, and the lean index stops storing their newcomers
            assert lean.nbytes < index.nbytes / 2, (lean.nbytes, index.nbytes)


def test_a_crowded_bucket_costs_a_query_at_most_per_bucket_candidates_a_band():
    index = BandIndex(0.7, 64, per_bucket=8)
    same = np.zeros((1, index.bands), dtype=np.uint64)
    for start in range(0, 5000, 500):
        index.insert(np.repeat(same, 500, axis=0), np.arange(start, start + 500))
    owner, found = index.query(same)
    assert sorted(found.tolist()) == list(range(8))  # the earliest: the first-wins rule names those


def test_a_large_runs_filter_has_no_false_negatives_and_rules_out_most_absent_keys():
    from aigc.prepare.minhash import _Run

    rng = np.random.default_rng(3)
    keys = np.sort(rng.integers(0, 2**64 - 1, size=_Run.FILTERED, dtype=np.uint64))
    run = _Run(keys, np.arange(len(keys)))
    assert run.bits is not None and run.bits.nbytes == 2 * len(keys)  # 16 bits an entry
    assert len(run.may_hold(keys)) == len(keys)  # every key it holds
    absent = rng.integers(0, 2**64 - 1, size=100_000, dtype=np.uint64)
    assert len(run.may_hold(absent)) / len(absent) < 0.08  # ≈ 1 − e^(−1/16): 6 %
