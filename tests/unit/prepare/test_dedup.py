"""Deduplication: the pruned, batched, vectorised checks find exactly what plain pairwise ones do."""

import hashlib
import math
import random

import numpy as np

from aigc.config import PrepareConfig, RawDropConfig
from aigc.lake import open_lake
from aigc.prepare import minhash
from aigc.prepare.drop import drop_prefix, iter_lines, record_files
from aigc.prepare.worker import examine_lines, init_worker
from aigc.workloads.image import IMAGE, image_minhash
from aigc.workloads.image.checks import Rejected
from aigc.workloads.image.config import ImageSettings
from aigc.workloads.image.dedup import Deduplicator, NearDedup
from aigc.workloads.image.rawdrop import make_raw_drop
from aigc.workloads.world import Scene, random_scene, render

DATE = "2026-11-28"
CFG = PrepareConfig(workers=1)
DISTANCE = ImageSettings().near_dup_image_distance


def curated_rows(tmp_path, n: int = 1500) -> list[dict]:
    """The rows a drop's decoding processes send to dedup, in drop order."""
    raw = open_lake(str(tmp_path)).sub("raw/shapes")
    make_raw_drop(raw, DATE, RawDropConfig(n=n, seed=3, dirt_rate=0.3))
    init_worker(raw.sub(drop_prefix(DATE)), CFG, IMAGE.records(None))
    lines = list(iter_lines(raw, record_files(raw, DATE)))
    rows = []
    for i in range(0, len(lines), 256):
        examined = examine_lines(lines[i : i + 256])
        keys = [verdict for _, _, verdict in examined.outcomes if not isinstance(verdict, Rejected)]
        columns = examined.columns
        rows += [{**{name: columns[name][i] for name in columns}, **k} for i, k in enumerate(keys)]
    return rows


UNCAPPED = 10**6  # per_bucket: the definitions below compare every kept row (the cap is tested in test_minhash)


def near(row: dict, other: tuple) -> bool:
    """The definition of a near-duplicate pair: they share an LSH band, their signatures agree on at least the
    threshold's share of positions, and no thumbnail cell differs by more than the image distance."""
    bands, thumb, sig = keys_of(row)
    other_bands, other_thumb, other_sig, _ = other
    return bool(bands & other_bands) and np.mean(sig == other_sig) >= CFG.near_dup_threshold - 1e-9 and \
        np.abs(thumb - other_thumb).max() <= DISTANCE


def keys_of(row: dict) -> tuple[set, np.ndarray, np.ndarray]:
    return (set(enumerate(np.frombuffer(row["_bands"], dtype=np.uint64).tolist())),
            np.frombuffer(row["_thumb"], dtype=np.uint8).astype(np.int16), np.frombuffer(row["_sig"], dtype=np.uint32))


def pairwise_first_match(rows: list[dict]) -> list[str | None]:
    """The definition: the earliest kept row that is ``near``."""
    kept: list[tuple] = []
    out = []
    for row in rows:
        match = next((other[-1] for other in kept if near(row, other)), None)
        out.append(match)
        if match is None:
            kept.append((*keys_of(row), row["id"]))
    return out


def test_near_dedup_matches_the_pairwise_definition_on_a_generated_drop(tmp_path):
    rows = curated_rows(tmp_path)
    near = NearDedup(CFG.near_dup_threshold, CFG.near_dup_num_perm, DISTANCE, UNCAPPED)
    found = []
    for row in rows:
        verdict = near.check(row)
        if verdict is None:
            near.add(row)
        found.append(verdict.detail.split("'")[1] if verdict else None)  # "near-duplicate of 'id' …"
    expected = pairwise_first_match(rows)
    assert found == expected
    assert sum(m is not None for m in expected) >= 10, "the drop should plant near-duplicates"


def test_cached_signature_parts_equal_the_signature_of_all_tokens():
    rng = random.Random(5)
    scenes = [random_scene(rng) for _ in range(60)]
    pixels = np.stack([np.asarray(render(scene, 32)) for scene in scenes] + [np.full((32, 32, 3), 200, np.uint8)])
    captions = [scene.caption for scene in scenes] + ["!!!"]
    cells = image_minhash.grid(pixels)
    sigs = image_minhash.signatures(captions, cells, 64)
    for caption, row_cells, sig in zip(captions, cells, sigs, strict=True):
        assert np.array_equal(sig, minhash.signature(image_minhash.tokens(caption, row_cells), 64))


def test_renders_of_one_caption_are_not_near_duplicates_but_noisy_copies_are():
    """What the signature must tell apart: the same caption drawn again (another background, or the shape moved
    or scaled a little) is new data; a copy with re-encoding noise and a touched-up caption is not."""
    rng, noise = random.Random(8), np.random.default_rng(8)
    originals, redraws, copies = [], [], []
    for _ in range(200):
        scene = random_scene(rng)
        again = random_scene(rng)
        again = Scene(scene.colour, scene.shape, scene.size, scene.position, again.background, again.jitter,
                      again.scale)
        pixels = np.asarray(render(scene, 32))
        noisy = np.clip(pixels.astype(int) + noise.choice([-3, 0, 3], size=pixels.shape), 0, 255).astype(np.uint8)
        originals.append((scene.caption, pixels))
        redraws.append((again.caption, np.asarray(render(again, 32))))
        copies.append((scene.caption.replace("a ", "A ", 1) + rng.choice((".", " corner.", "!")), noisy))

    def sigs(pairs):
        return image_minhash.signatures([c for c, _ in pairs], image_minhash.grid(np.stack([p for _, p in pairs])), 64)

    base = sigs(originals)
    redrawn, copied = (np.mean(sigs(pairs) == base, axis=1) for pairs in (redraws, copies))
    threshold = CFG.near_dup_threshold
    assert np.mean(copied >= threshold) >= 0.95, np.quantile(copied, [0.05, 0.5])
    assert np.mean(redrawn >= threshold) <= 0.05, np.quantile(redrawn, [0.5, 0.95])


def sequential_verdicts(rows: list[dict]) -> list[tuple[str, str] | None]:
    """The definition, one row at a time: a repeated id, then the same content, then a near-duplicate
    (as in ``pairwise_first_match``); only rows that pass all three are kept and can be matched later."""
    ids, content, out = set(), {}, []
    kept: list[tuple] = []
    for row in rows:
        if row["id"] in ids:
            out.append(("duplicate_id", row["id"]))
        elif row["content_hash"] in content:
            out.append(("exact_duplicate", content[row["content_hash"]]))
            ids.add(row["id"])  # a removed record's id still names it: a later reuse is a duplicate_id
        elif match := next((other[-1] for other in kept if near(row, other)), None):
            out.append(("near_duplicate", match))
            ids.add(row["id"])
        else:
            out.append(None)
            ids.add(row["id"])
            content[row["content_hash"]] = row["id"]
            kept.append((*keys_of(row), row["id"]))
    return out


def test_batched_dedup_matches_the_row_by_row_definition_whatever_the_batches(tmp_path):
    """Pairs inside one batch count once the earlier row is kept, in drop order, as across batches."""
    rows = curated_rows(tmp_path, n=900)
    expected = sequential_verdicts(rows)
    assert {v[0] for v in expected if v} == {"duplicate_id", "exact_duplicate", "near_duplicate"}
    rng = random.Random(11)
    for sizes in ([1], [len(rows)], [rng.randint(1, 300) for _ in range(100)]):
        dedup = Deduplicator(CFG.near_dup_threshold, CFG.near_dup_num_perm, DISTANCE, UNCAPPED)
        found, start, i = [], 0, 0
        while start < len(rows):
            batch = rows[start : start + sizes[i % len(sizes)]]
            found += [(v.reason, v.detail.split("'")[1]) if v else None for v in dedup.check_batch(batch)]
            start, i = start + len(batch), i + 1
        assert found == expected, sizes[:5]


def test_a_row_near_only_to_a_rejected_row_of_its_batch_is_kept():
    """A chain a ~ b ~ c with a ≁ c: b is a near-duplicate of a, and c, close only to the rejected b, stays."""
    bands = np.arange(minhash.bands_for(CFG.near_dup_threshold, CFG.near_dup_num_perm)[0], dtype=np.uint64).tobytes()
    step = int(DISTANCE) - 2  # within the distance; two steps are not

    def row(name: str, level: int) -> dict:
        return {"id": name, "content_hash": hashlib.sha256(name.encode()).hexdigest(), "_bands": bands,
                "_thumb": bytes([100 + level]) * 192, "_sig": bytes(4 * CFG.near_dup_num_perm)}

    for sizes in ([3], [1]):
        dedup = Deduplicator(CFG.near_dup_threshold, CFG.near_dup_num_perm, DISTANCE)
        rows = [row("a", 0), row("b", step), row("c", 2 * step)]
        verdicts = [v for size in sizes for i in range(0, 3, size) for v in dedup.check_batch(rows[i : i + size])]
        assert [v.reason if v else None for v in verdicts] == [None, "near_duplicate", None], sizes
        assert "near-duplicate of 'a' (estimated similarity 1.00 ≥ near_dup_threshold=0.7, thumbnail distance 4 ≤ " \
               "near_dup_image_distance=6.0)" in verdicts[1].detail


def test_a_candidate_below_the_similarity_threshold_is_kept_however_close_its_thumbnail():
    """The verdict applies the configured similarity: sharing a band and a thumbnail is not enough."""
    bands = np.arange(minhash.bands_for(CFG.near_dup_threshold, CFG.near_dup_num_perm)[0], dtype=np.uint64).tobytes()
    agree = math.ceil(CFG.near_dup_threshold * CFG.near_dup_num_perm)  # positions the threshold asks for
    below = np.arange(CFG.near_dup_num_perm, dtype=np.uint32)
    below[agree - 1:] += 1000  # agrees with "a" on one position fewer…
    at = np.arange(CFG.near_dup_num_perm, dtype=np.uint32)
    at[agree:] += 2000  # …and exactly on as many (and with "b" on none past them)

    def row(name: str, sig: np.ndarray) -> dict:
        return {"id": name, "content_hash": hashlib.sha256(name.encode()).hexdigest(), "_bands": bands,
                "_thumb": bytes(192), "_sig": sig.tobytes()}

    dedup = Deduplicator(CFG.near_dup_threshold, CFG.near_dup_num_perm, DISTANCE)
    first = row("a", np.arange(CFG.near_dup_num_perm, dtype=np.uint32))
    verdicts = dedup.check_batch([first]) + dedup.check_batch([row("b", below)]) + dedup.check_batch([row("c", at)])
    assert [v.reason if v else None for v in verdicts] == [None, None, "near_duplicate"]
