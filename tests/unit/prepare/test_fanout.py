"""Stage 1 across tasks: any number of parts gives the bytes a one-host run gives, and parts survive retries."""

import dataclasses

import pytest

from aigc.config import PrepareConfig, RawDropConfig
from aigc.lake.keys import join, partition
from aigc.prepare import prepare, publish_prepared
from aigc.prepare.drop import iter_lines, iter_segments, record_files, split_drop
from aigc.prepare.fanout import PART_DONE, PartMissing, merge_parts, parts_prefix, plan_prepare, prepare_part
from aigc.prepare.run import MANIFEST
from aigc.workloads import load_workload
from aigc.workloads.image.rawdrop import make_raw_drop

DATE = "2026-11-28"
# Small files, so cuts fall inside files and parts span several; dirt of every kind, copies across the cuts.
RAW = RawDropConfig(n=700, seed=11, dirt_rate=0.3, records_per_file=130)
CFG = PrepareConfig(workers=1, shard_target_bytes=128 * 1024, row_group_rows=64)
RULES = load_workload("image").records(None)


@pytest.fixture
def drop(lake):
    raw = lake.sub("raw/shapes")
    make_raw_drop(raw, DATE, RAW)
    return raw


def fanned_out(raw, lake, parts: int, run_id: str) -> dict:
    cfg = dataclasses.replace(CFG, parts=parts)
    plan = plan_prepare(raw, lake, DATE, cfg, run_id)
    for part in reversed(plan["parts"]):  # mapped tasks finish in any order
        prepare_part(raw, lake, plan, part, cfg, RULES)
    return merge_parts(raw, lake, plan, cfg, RULES, "image")


def written(lake, summary: dict) -> dict:
    """Every object the run wrote, by content: shard checksums and row counts, reasons, stats."""
    manifest = lake.get_json(join(summary["staging_uri"][len(lake.uri) + 1 :], MANIFEST))
    digest = [(s["sha256"], s["rows"]) for s in manifest["shards"]]
    return {"curated": digest, "quarantine": [(s["sha256"], s["rows"]) for s in manifest["quarantine"]["shards"]],
            "keys": [(s["sha256"], s["rows"]) for s in manifest["dedup_keys"]], "reasons": manifest["quarantined"],
            "stats": manifest["stats"], "rows": manifest["rows"], "input": manifest["input_records"]}


def test_any_number_of_parts_writes_the_bytes_of_a_one_host_run(lake, drop):
    one_host = written(lake, prepare(drop, lake, DATE, CFG, run_id="20261128T000000-one", rules=RULES,
                                     workload="image"))
    assert one_host["reasons"]["near_duplicate"] > 0 and one_host["reasons"]["exact_duplicate"] > 0
    assert len(record_files(drop, DATE)) == 6
    for parts in (1, 3, 8):
        summary = fanned_out(drop, lake, parts, f"20261128T000000-p{parts}")
        assert summary["fanout"]["parts"] == parts and summary["input"] == RAW.n
        assert written(lake, summary) == one_host, parts


def test_the_parts_cover_every_line_once_in_drop_order(lake, drop):
    files = record_files(drop, DATE)
    whole = [(line.file, line.line_no, line.data) for line in iter_lines(drop, files)]
    for parts in (1, 2, 5, 13):
        split = split_drop(drop, files, parts)
        assert len(split) == parts
        lines = [(line.file, line.line_no, line.data) for segments in split for line in iter_segments(drop, segments)]
        assert lines == whole, parts


def test_more_parts_than_bytes_leaves_the_extra_parts_empty(tmp_path):
    from aigc.lake import LocalLake

    raw = LocalLake(tmp_path)
    raw.put_bytes("a.jsonl", b'{"x": 1}\n\n{"x": 2}\n')  # 19 bytes, a blank line inside
    split = split_drop(raw, ["a.jsonl", "a.jsonl"], 50)
    lines = [(line.line_no, line.data) for segments in split for line in iter_segments(raw, segments)]
    assert lines == [(1, b'{"x": 1}'), (3, b'{"x": 2}')] * 2
    assert sum(1 for segments in split if not segments) == 50 - 38


def test_lines_over_the_bound_are_cut_where_they_are_and_every_part_counts_them_once(tmp_path):
    """A line too long to keep is yielded as its head: the parts still cut at its true length."""
    from aigc.lake import LocalLake
    from aigc.lines import LongLine

    raw = LocalLake(tmp_path)
    raw.put_bytes("a.jsonl", b'{"x": 1}\n' + b"y" * 5000 + b'\n{"x": 2}\n' + b" " * 3000 + b'{"x": 3}\n{"x": 4}\n')
    whole = [(line.line_no, line.data) for line in iter_lines(raw, ["a.jsonl"], max_line_bytes=1000)]
    assert [n for n, _ in whole] == [1, 2, 3, 4, 5] and isinstance(whole[3][1], LongLine)  # never "blank"
    for parts in (1, 2, 3, 7, 40):
        split = split_drop(raw, ["a.jsonl"], parts)
        lines = [(line.line_no, line.data) for segments in split
                 for line in iter_segments(raw, segments, max_line_bytes=1000)]
        assert lines == whole, parts


def test_a_finished_part_is_not_redone_and_a_half_written_one_starts_again(lake, drop):
    cfg = dataclasses.replace(CFG, parts=2)
    plan = plan_prepare(drop, lake, DATE, cfg, "20261128T000000-retry")
    first = prepare_part(drop, lake, plan, plan["parts"][0], cfg, RULES)
    assert prepare_part(drop, lake, plan, plan["parts"][0], cfg, RULES) == first  # read back, not redone
    part_1 = join(parts_prefix(cfg.dataset, DATE, plan["run_id"]), "part-00001")
    lake.put_bytes(join(part_1, "candidates", "part-00007.parquet"), b"left by a killed try")
    with pytest.raises(PartMissing, match=r"part 1 of run 20261128T000000-retry has not finished.*prepare_part"):
        merge_parts(drop, lake, plan, cfg, RULES, "image")
    prepare_part(drop, lake, plan, plan["parts"][1], cfg, RULES)
    assert not lake.exists(join(part_1, "candidates", "part-00007.parquet")) and lake.exists(join(part_1, PART_DONE))
    summary = merge_parts(drop, lake, plan, cfg, RULES, "image")
    assert summary["curated"] + summary["quarantined"] == RAW.n
    publish_prepared(lake, cfg.dataset, DATE, plan["run_id"])
    assert lake.list(partition("parts", cfg.dataset, DATE)) == []  # the parts go once the run is published
