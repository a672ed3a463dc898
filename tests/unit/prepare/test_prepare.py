"""Stage 1 end to end on a dirty synthetic drop, on both lake backends."""

import dataclasses
import json

import pytest

from aigc.config import PrepareConfig, RawDropConfig
from aigc.lake.keys import join, partition
from aigc.lake.publish import NotPublished, resolve
from aigc.prepare import DropNotFound, publish_prepared
from aigc.prepare.run import MANIFEST
from aigc.workloads.image import prepare_image
from aigc.workloads.image.rawdrop import REPAIRED_KINDS, make_raw_drop

DATE = "2026-11-28"
# What each planted kind of dirt must become in quarantine.
EXPECTED_REASON = {
    "undecodable": "image_undecodable", "truncated": "image_undecodable", "zero_byte": "image_empty",
    "empty_caption": "caption_empty", "blocked_caption": "blocked_term", "long_caption": "caption_too_long",
    "invalid_utf8": "invalid_utf8", "malformed_json": "malformed_json", "missing_image": "image_missing",
    "decompression_bomb": "image_too_large", "duplicate_id": "duplicate_id",
    "exact_duplicate": "exact_duplicate", "near_duplicate": "near_duplicate",
}
DEDUP_REASONS = {"exact_duplicate", "near_duplicate"}
RAW = RawDropConfig(n=800, seed=7, dirt_rate=0.35)
CFG = PrepareConfig(workers=2, shard_target_bytes=256 * 1024, row_group_rows=64)


@pytest.fixture
def dirty(lake):
    raw = lake.sub("raw/shapes")
    planted = make_raw_drop(raw, DATE, RAW)
    return raw, planted


def test_counts_reconcile_and_every_planted_defect_is_quarantined_with_its_reason(lake, dirty):
    raw, planted = dirty
    summary = prepare_image(raw, lake, DATE, CFG)
    assert summary["input"] == RAW.n == summary["curated"] + summary["quarantined"]
    expected: dict[str, int] = {}
    for kind, n in planted["dirt"].items():
        if kind not in REPAIRED_KINDS:
            expected[EXPECTED_REASON[kind]] = expected.get(EXPECTED_REASON[kind], 0) + n
    found = summary["reasons"]
    for reason, n in expected.items():
        if reason in DEDUP_REASONS:
            # Clean records can duplicate each other by chance (identical small renders): those
            # are real duplicates too, so dedup may find a few more than were planted.
            assert n <= found[reason] <= n + RAW.n * 0.01, (reason, n, found[reason])
        else:
            assert found.get(reason, 0) == n, (reason, n, found.get(reason))
    assert set(found) <= set(expected)


def test_quarantine_keeps_every_rejected_record_with_reason_and_raw_bytes(lake, dirty):
    raw, _ = dirty
    summary = prepare_image(raw, lake, DATE, CFG)
    manifest = lake.get_json(join(summary["staging_uri"][len(lake.uri) + 1 :], MANIFEST))
    q = lake.read_parquet([s["key"] for s in manifest["quarantine"]["shards"]]).to_pylist()
    assert len(q) == summary["quarantined"]
    assert all(r["reason"] and r["detail"] and r["raw"] and r["raw_file"].endswith(".jsonl") for r in q)
    by_reason = {r["reason"]: r for r in q}
    assert "max_caption_chars=512" in by_reason["caption_too_long"]["detail"]
    assert "max_image_pixels" in by_reason["image_too_large"]["detail"]
    assert by_reason["image_undecodable"]["attachment"]  # the bad bytes are kept (the attachment), not just the verdict
    assert json.loads(by_reason["blocked_term"]["raw"])["caption"]


def test_curated_rows_are_normalised_rgb_squares_with_unique_hashes(lake, dirty):
    raw, planted = dirty
    summary = prepare_image(raw, lake, DATE, CFG)
    manifest = lake.get_json(join(summary["staging_uri"][len(lake.uri) + 1 :], MANIFEST))
    assert len(manifest["shards"]) > 1, "the small shard target should have rolled shards"
    assert manifest["rows"] == summary["curated"] == sum(s["rows"] for s in manifest["shards"])
    rows = lake.read_parquet([s["key"] for s in manifest["shards"]]).to_pylist()
    assert {(r["width"], r["height"], r["mode"]) for r in rows} == {(32, 32, "RGB")}
    assert len({r["id"] for r in rows}) == len(rows) == len({r["content_hash"] for r in rows})
    assert all(r["caption"] == " ".join(r["caption"].split()) for r in rows)
    # Repairable dirt was repaired and kept, not dropped.
    assert any(r["orig_mode"] != "RGB" for r in rows) and any(r["orig_width"] != 32 for r in rows)
    import io

    from PIL import Image

    assert Image.open(io.BytesIO(rows[0]["image"])).size == (32, 32)


def test_output_is_deterministic_whatever_the_worker_count(lake, dirty):
    raw, _ = dirty
    a = prepare_image(raw, lake, DATE, dataclasses.replace(CFG, workers=1))
    b = prepare_image(raw, lake, DATE, dataclasses.replace(CFG, workers=2))
    assert a["reasons"] == b["reasons"]
    ids = []
    for s in (a, b):
        m = lake.get_json(join(s["staging_uri"][len(lake.uri) + 1 :], MANIFEST))
        ids.append(lake.read_parquet([x["key"] for x in m["shards"]], columns=["id"]).column("id").to_pylist())
    assert ids[0] == ids[1]


def test_nothing_is_published_until_publish_and_rerun_replaces(lake, dirty):
    raw, _ = dirty
    first = prepare_image(raw, lake, DATE, CFG)
    with pytest.raises(NotPublished):
        resolve(lake, partition("curated", "shapes", DATE))
    publish_prepared(lake, "shapes", DATE, first["run_id"])
    second = prepare_image(raw, lake, DATE, CFG)
    out = publish_prepared(lake, "shapes", DATE, second["run_id"])
    assert out["replaced_run_id"] == first["run_id"]
    assert resolve(lake, partition("curated", "shapes", DATE))["run_id"] == second["run_id"]
    pointer = resolve(lake, partition("curated", "shapes", DATE))
    quarantine = partition("quarantine", "shapes", DATE)
    assert pointer["companions"] == {quarantine: f"{quarantine}/run={second['run_id']}"}  # one pointer for both
    third = prepare_image(raw, lake, DATE, CFG)
    publish_prepared(lake, "shapes", DATE, third["run_id"])
    kept = {k.split("/")[3] for k in lake.list(quarantine)}
    assert kept == {f"run={second['run_id']}", f"run={third['run_id']}"}  # the quarantine is collected alike


def test_a_missing_drop_fails_with_where_and_how(lake):
    with pytest.raises(DropNotFound, match=r"no complete raw drop at .*dt=2026-11-28.*aigc make-raw"):
        prepare_image(lake.sub("raw/shapes"), lake, DATE, CFG)
    assert lake.list("curated") == []


def test_a_drop_without_its_success_marker_is_not_read(lake, dirty):
    raw, _ = dirty
    raw.delete("dt=2026-11-28/_SUCCESS")
    with pytest.raises(DropNotFound, match="no _SUCCESS marker"):
        prepare_image(raw, lake, DATE, CFG)


def test_an_empty_drop_is_refused_with_what_to_do(lake):
    from aigc.prepare.drop import EmptyDrop

    raw = lake.sub("raw/shapes")
    raw.put_bytes(f"dt={DATE}/records-00000.jsonl", b"")  # a producer's complete drop without a record
    raw.put_bytes(f"dt={DATE}/_SUCCESS", b"{}")
    with pytest.raises(EmptyDrop, match=r"is complete but holds no records .* `aigc make-raw --date"):
        prepare_image(raw, lake, DATE, CFG)
    assert not lake.list(f"curated/shapes/dt={DATE}") or not lake.exists(f"curated/shapes/dt={DATE}/_PUBLISHED.json")
