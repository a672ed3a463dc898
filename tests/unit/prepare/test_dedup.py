"""Deduplication: the pruned, batched, vectorised checks find exactly what plain pairwise ones do."""

import hashlib
import random

import numpy as np

from aigc.config import PrepareConfig, RawDropConfig
from aigc.lake import open_lake
from aigc.prepare import checks, make_raw_drop, minhash
from aigc.prepare.checks import Rejected
from aigc.prepare.dedup import Deduplicator, NearDedup
from aigc.prepare.drop import drop_prefix, iter_lines, record_files
from aigc.prepare.worker import examine_lines, init_worker

DATE = "2026-11-28"
CFG = PrepareConfig(workers=1)


def curated_rows(tmp_path, n: int = 1500) -> list[dict]:
    """The rows a drop's decoding processes send to dedup, in drop order."""
    raw = open_lake(str(tmp_path)).sub("raw/shapes")
    make_raw_drop(raw, DATE, RawDropConfig(n=n, seed=3, dirt_rate=0.3))
    init_worker(raw.sub(drop_prefix(DATE)), CFG)
    lines = list(iter_lines(raw, record_files(raw, DATE)))
    rows = []
    for i in range(0, len(lines), 256):
        examined = examine_lines(lines[i : i + 256])
        keys = [verdict for _, _, verdict in examined.outcomes if not isinstance(verdict, Rejected)]
        columns = examined.columns
        rows += [{**{name: columns[name][i] for name in columns}, **k} for i, k in enumerate(keys)]
    return rows


def pairwise_first_match(rows: list[dict]) -> list[str | None]:
    """The definition: the earliest kept row that shares an LSH band and is within the distance."""
    kept: list[tuple[set[int], np.ndarray, str]] = []
    out = []
    for row in rows:
        bands = {(b, k) for b, k in enumerate(np.frombuffer(row["_bands"], dtype=np.uint64).tolist())}
        thumb = np.frombuffer(row["_thumb"], dtype=np.uint8).astype(np.int16)
        match = next((rid for b, t, rid in kept
                      if bands & b and np.abs(t - thumb).max() <= CFG.near_dup_image_distance), None)
        out.append(match)
        if match is None:
            kept.append((bands, thumb, row["id"]))
    return out


def test_near_dedup_matches_the_pairwise_definition_on_a_generated_drop(tmp_path):
    rows = curated_rows(tmp_path)
    near = NearDedup(CFG.near_dup_threshold, CFG.near_dup_num_perm, CFG.near_dup_image_distance)
    found = []
    for row in rows:
        verdict = near.check(row)
        if verdict is None:
            near.add(row)
        found.append(verdict.detail.split("'")[1] if verdict else None)  # "near-duplicate of 'id' …"
    expected = pairwise_first_match(rows)
    assert found == expected
    assert sum(m is not None for m in expected) >= 10, "the drop should plant near-duplicates"


def test_cached_signature_parts_equal_the_signature_of_all_tokens(tmp_path):
    for row in curated_rows(tmp_path, n=300)[:200] + [{"caption": "!!!", "_thumb": bytes(192)}]:
        cells = np.frombuffer(row["_thumb"], dtype=np.uint8).reshape(-1, 3).astype(np.int16)
        background = np.sort(cells[checks._CORNERS], axis=0)[1:3].mean(axis=0)
        covered = np.flatnonzero(np.abs(cells - background).max(axis=1) > checks._MASK_MARGIN)
        tokens = checks._caption_tokens(row["caption"]) | {f"m{i}" for i in covered.tolist()}
        assert np.array_equal(checks.signature(row["caption"], row["_thumb"], 64), minhash.signature(tokens, 64))


def sequential_verdicts(rows: list[dict]) -> list[tuple[str, str] | None]:
    """The definition, one row at a time: a repeated id, then the same content, then a near-duplicate
    (as in ``pairwise_first_match``); only rows that pass all three are kept and can be matched later."""
    ids, content, out = set(), {}, []
    kept: list[tuple[set, np.ndarray, str]] = []
    for row in rows:
        bands = set(enumerate(np.frombuffer(row["_bands"], dtype=np.uint64).tolist()))
        thumb = np.frombuffer(row["_thumb"], dtype=np.uint8).astype(np.int16)
        if row["id"] in ids:
            out.append(("duplicate_id", row["id"]))
        elif row["content_hash"] in content:
            out.append(("exact_duplicate", content[row["content_hash"]]))
        elif match := next((rid for b, t, rid in kept
                            if bands & b and np.abs(t - thumb).max() <= CFG.near_dup_image_distance), None):
            out.append(("near_duplicate", match))
        else:
            out.append(None)
            ids.add(row["id"])
            content[row["content_hash"]] = row["id"]
            kept.append((bands, thumb, row["id"]))
    return out


def test_batched_dedup_matches_the_row_by_row_definition_whatever_the_batches(tmp_path):
    """Pairs inside one batch count once the earlier row is kept, in drop order, as across batches."""
    rows = curated_rows(tmp_path, n=900)
    expected = sequential_verdicts(rows)
    assert {v[0] for v in expected if v} == {"duplicate_id", "exact_duplicate", "near_duplicate"}
    rng = random.Random(11)
    for sizes in ([1], [len(rows)], [rng.randint(1, 300) for _ in range(100)]):
        dedup = Deduplicator(CFG.near_dup_threshold, CFG.near_dup_num_perm, CFG.near_dup_image_distance)
        found, start, i = [], 0, 0
        while start < len(rows):
            batch = rows[start : start + sizes[i % len(sizes)]]
            found += [(v.reason, v.detail.split("'")[1]) if v else None for v in dedup.check_batch(batch)]
            start, i = start + len(batch), i + 1
        assert found == expected, sizes[:5]


def test_a_row_near_only_to_a_rejected_row_of_its_batch_is_kept():
    """A chain a ~ b ~ c with a ≁ c: b is a near-duplicate of a, and c, close only to the rejected b, stays."""
    bands = np.arange(minhash.bands_for(CFG.near_dup_threshold, CFG.near_dup_num_perm)[0], dtype=np.uint64).tobytes()
    step = int(CFG.near_dup_image_distance) - 2  # within the distance; two steps are not

    def row(name: str, level: int) -> dict:
        return {"id": name, "content_hash": hashlib.sha256(name.encode()).hexdigest(), "_bands": bands,
                "_thumb": bytes([100 + level]) * 192}

    for sizes in ([3], [1]):
        dedup = Deduplicator(CFG.near_dup_threshold, CFG.near_dup_num_perm, CFG.near_dup_image_distance)
        rows = [row("a", 0), row("b", step), row("c", 2 * step)]
        verdicts = [v for size in sizes for i in range(0, 3, size) for v in dedup.check_batch(rows[i : i + size])]
        assert [v.reason if v else None for v in verdicts] == [None, "near_duplicate", None], sizes
        assert "near-duplicate of 'a' (thumbnail distance 4" in verdicts[1].detail
