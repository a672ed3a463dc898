"""Dedup across dates: a record published on one date is a duplicate when a later drop repeats it."""

import io
import json

import pyarrow.parquet as pq
from PIL import Image

from aigc.config import PrepareConfig, RawDropConfig
from aigc.lake import open_lake
from aigc.lake.keys import join
from aigc.prepare import publish_prepared
from aigc.prepare.drop import SUCCESS, drop_prefix
from aigc.prepare.history import KEYS_DIR
from aigc.prepare.run import MANIFEST
from aigc.workloads.image import prepare_image
from aigc.workloads.image.rawdrop import make_raw_drop
from aigc.workloads.world import png_bytes

DAY1, DAY2, DAY5 = "2026-11-27", "2026-11-28", "2026-12-01"
CFG = PrepareConfig(workers=1)


def clean_records(raw, date: str) -> list[dict]:
    drop = raw.sub(drop_prefix(date))
    files = [k for k in drop.list("", recursive=False) if k.endswith(".jsonl")]
    return [json.loads(line) for key in files for line in drop.iter_lines(key)]


def repeat_into(raw, date: str, copies: list[tuple[dict, bytes, str]]) -> None:
    """Append (record, image bytes, new id or None to keep the id) to the drop of ``date``."""
    drop = raw.sub(drop_prefix(date))
    lines = []
    for record, image, new_id in copies:
        record = {**record, "id": new_id or record["id"], "image": f"images/again-{new_id or record['id']}.png"}
        drop.put_bytes(record["image"], image)
        lines.append(json.dumps(record).encode())
    drop.put_bytes("records-99999.jsonl", b"\n".join(lines) + b"\n")
    marker = drop.get_json(SUCCESS)
    drop.put_json(SUCCESS, {**marker, "records": marker["records"] + len(copies)})


def test_a_later_drop_that_repeats_published_records_quarantines_them_naming_the_date(tmp_path):
    lake = open_lake(str(tmp_path))
    raw = lake.sub("raw/shapes")
    make_raw_drop(raw, DAY1, RawDropConfig(n=120, seed=1, dirt_rate=0.0))
    first = prepare_image(raw, lake, DAY1, CFG)
    publish_prepared(lake, "shapes", DAY1, first["run_id"])
    keys = lake.get_json(join(first["staging_uri"].split(lake.uri + "/")[1], MANIFEST))["dedup_keys"]
    assert sum(pq.read_metadata(lake.open_input(k["key"])).num_rows for k in keys) == first["curated"]
    assert all(f"/{KEYS_DIR}/" in k["key"] for k in keys)

    published = clean_records(raw, DAY1)[:3]
    day1 = raw.sub(drop_prefix(DAY1))
    image = [day1.get_bytes(r["image"]) for r in published]
    noisy = Image.eval(Image.open(io.BytesIO(image[2])).convert("RGB"), lambda v: max(0, v - 2))
    make_raw_drop(raw, DAY2, RawDropConfig(n=50, seed=2, dirt_rate=0.0))
    repeat_into(raw, DAY2, [(published[0], image[0], None),  # the same id again
                            (published[1], image[1], "again-1"),  # the same content under a new id
                            ({**published[2], "caption": published[2]["caption"] + "!"}, png_bytes(noisy),
                             "again-2")])  # a near copy
    second = prepare_image(raw, lake, DAY2, CFG)
    assert second["deduplicated_against"] == [{"date": DAY1, "run_id": first["run_id"], "rows": first["curated"],
                                              "near_duplicates_checked": True}]
    assert second["reasons"] == {"duplicate_id": 1, "exact_duplicate": 1, "near_duplicate": 1}
    assert second["curated"] == 50
    quarantine = open_lake(second["quarantine_uri"])
    rows = {r["reason"]: r["detail"] for r in lake.read_parquet(
        [join(second["quarantine_uri"].split(lake.uri + "/")[1], k) for k in quarantine.list("")
         if k.endswith(".parquet")], columns=["reason", "detail"]).to_pylist()}
    assert rows["duplicate_id"] == f"id {published[0]['id']!r} was published for dt={DAY1}"
    assert rows["exact_duplicate"] == \
        f"same image bytes and caption as {published[1]['id']!r} (published for dt={DAY1})"
    assert rows["near_duplicate"].startswith(f"near-duplicate of {published[2]['id']!r} (published for dt={DAY1})")

    # Looking back 0 days, or from a date past the lookback, the repeats are new data.
    alone = prepare_image(raw, lake, DAY2, PrepareConfig(workers=1, dedup_lookback_days=0))
    assert alone["quarantined"] == 0 and alone["deduplicated_against"] == []
    make_raw_drop(raw, DAY5, RawDropConfig(n=20, seed=5, dirt_rate=0.0))
    repeat_into(raw, DAY5, [(published[1], image[1], "again-5")])
    assert prepare_image(raw, lake, DAY5, CFG)["quarantined"] == 0  # DAY1 is 4 days back; the lookback is 3


def test_keys_written_under_other_settings_are_rebanded_or_checked_exactly_only(tmp_path):
    """Another threshold: the band keys are recomputed from the stored signatures, so near copies are still
    found. Another number of permutations: signatures cannot be compared, so only exact duplicates are, and
    the summary says which dates were checked for near ones."""
    lake = open_lake(str(tmp_path))
    raw = lake.sub("raw/shapes")
    make_raw_drop(raw, DAY1, RawDropConfig(n=60, seed=1, dirt_rate=0.0))
    publish_prepared(lake, "shapes", DAY1, prepare_image(raw, lake, DAY1, CFG)["run_id"])
    published = clean_records(raw, DAY1)[:2]
    day1 = raw.sub(drop_prefix(DAY1))
    image = [day1.get_bytes(r["image"]) for r in published]
    noisy = Image.eval(Image.open(io.BytesIO(image[1])).convert("RGB"), lambda v: max(0, v - 2))
    make_raw_drop(raw, DAY2, RawDropConfig(n=30, seed=2, dirt_rate=0.0))
    repeat_into(raw, DAY2, [(published[0], image[0], "again-0"),
                            ({**published[1], "caption": published[1]["caption"] + "!"}, png_bytes(noisy), "again-1")])
    rebanded = prepare_image(raw, lake, DAY2, PrepareConfig(workers=1, near_dup_threshold=0.6))
    assert rebanded["reasons"] == {"exact_duplicate": 1, "near_duplicate": 1}
    assert rebanded["deduplicated_against"][0]["near_duplicates_checked"] is True
    exact_only = prepare_image(raw, lake, DAY2, PrepareConfig(workers=1, near_dup_num_perm=64))
    assert exact_only["reasons"] == {"exact_duplicate": 1}
    assert exact_only["deduplicated_against"][0]["near_duplicates_checked"] is False
