"""A drop is read, never written; the run records what it read, and a drop that changes is noticed, not mixed."""

import dataclasses

import pytest

from aigc.lake.keys import join
from aigc.prepare import publish_prepared
from aigc.prepare.delivery import SNAPSHOT, DropChanged
from aigc.prepare.drop import drop_prefix
from aigc.prepare.fanout import merge_parts, plan_prepare, prepare_part
from aigc.prepare.run import MANIFEST
from aigc.workloads.image import prepare_image
from tests.unit.prepare.test_fanout import CFG, DATE, RULES, drop  # noqa: F401 - drop: the fixture


def _everything(lake, prefix: str) -> dict[str, bytes]:
    return {key: lake.get_bytes(key) for key in lake.list(prefix)}


def test_a_run_reads_the_drop_byte_for_byte_and_records_what_it_read(lake, drop):  # noqa: F811 - the fixture
    before = _everything(drop, "")
    summary = prepare_image(drop, lake, DATE, CFG)
    publish_prepared(lake, "shapes", DATE, summary["run_id"])
    assert _everything(drop, "") == before  # nothing written, nothing deleted under the producer's root
    run = summary["staging_uri"][len(lake.uri) + 1:]
    recorded = lake.get_json(join(run, MANIFEST))["drop"]
    files = sorted(k.rsplit("/", 1)[-1] for k in before if k.endswith(".jsonl"))
    assert sorted(recorded["record_files"]) == files and recorded["objects"] == len(before)
    assert recorded["bytes"] == sum(len(v) for v in before.values())
    import hashlib

    for name, sha in recorded["record_files"].items():
        assert sha == hashlib.sha256(before[join(drop_prefix(DATE), name)]).hexdigest()
    listed = [line for line in lake.iter_lines(join(run, SNAPSHOT))]
    assert len(listed) == len(before) and "redelivered" not in summary


def test_a_drop_delivered_again_with_other_bytes_is_reported_by_the_next_run_of_its_date(lake, drop):  # noqa: F811 - the fixture
    first = prepare_image(drop, lake, DATE, CFG)
    publish_prepared(lake, "shapes", DATE, first["run_id"])
    image = next(k for k in drop.list(join(drop_prefix(DATE), "images")))
    drop.put_bytes(image, drop.get_bytes(image) + b"\0")  # the producer re-sends one image, changed
    drop.put_bytes(join(drop_prefix(DATE), "images", "extra.png"), b"new")
    second = prepare_image(drop, lake, DATE, CFG)
    report = second["redelivered"]
    assert (report["replaced"], report["added"], report["removed"]) == (1, 1, 0)
    assert report["previous_run_id"] == first["run_id"]
    assert report["examples"]["replaced"] == [image[len(drop_prefix(DATE)) + 1:]]
    run = second["staging_uri"][len(lake.uri) + 1:]
    assert lake.get_json(join(run, MANIFEST))["redelivered"] == report
    unchanged = prepare_image(drop, lake, DATE, CFG)  # the date still publishes the first run: the report stands
    assert unchanged["redelivered"]["replaced"] == 1


def test_a_drop_replaced_between_the_parts_of_a_run_fails_it_instead_of_mixing_two_deliveries(lake, drop):  # noqa: F811 - the fixture
    """Fails without the snapshot: part 1 read the new delivery, part 0 the old one, and the merge published both."""
    cfg = dataclasses.replace(CFG, parts=2)
    plan = plan_prepare(drop, lake, DATE, cfg, "20261128T000000-mix")
    prepare_part(drop, lake, plan, plan["parts"][0], cfg, RULES)
    records = join(drop_prefix(DATE), "records-00001.jsonl")
    drop.put_bytes(records, drop.get_bytes(records).replace(b"circle", b"square"))
    with pytest.raises(DropChanged, match=r"changed since the run was planned: 1 replaced \(records-00001.jsonl\)"):
        prepare_part(drop, lake, plan, plan["parts"][1], cfg, RULES)


def test_a_drop_replaced_after_the_last_part_fails_the_merge(lake, drop):  # noqa: F811 - the fixture
    cfg = dataclasses.replace(CFG, parts=2)
    plan = plan_prepare(drop, lake, DATE, cfg, "20261128T000000-late")
    for part in plan["parts"]:
        prepare_part(drop, lake, plan, part, cfg, RULES)
    drop.delete(join(drop_prefix(DATE), "records-00002.jsonl"))
    with pytest.raises(DropChanged, match="1 removed"):
        merge_parts(drop, lake, plan, cfg, RULES, "image")
    assert not lake.exists(f"curated/shapes/dt={DATE}/_PUBLISHED.json")
