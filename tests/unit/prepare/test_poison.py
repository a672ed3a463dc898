"""Poison-pill lines: each one is one quarantined record, never a failed stage (every retry would fail alike)."""

import io
import json

import pyarrow as pa
import pytest
from PIL import Image

from aigc.cli import main
from aigc.config import PrepareConfig, RawDropConfig
from aigc.jsonlines import JsonLimits
from aigc.lake import LocalLake
from aigc.lake.keys import join
from aigc.lines import LongLine
from aigc.prepare.drop import drop_prefix
from aigc.prepare.records import Rejected, parse_record
from aigc.workloads.image.rawdrop import make_raw_drop

DATE = "2026-11-28"
FIELDS = ("id", "caption")
RECORD = {"caption": "a red circle in the middle", "image": "images/x.png", "source": "s",
          "created_at": "2026-11-28T00:00:00+00:00"}


def line(**fields) -> bytes:
    return json.dumps({**RECORD, **fields}).encode()


# Each fails on a parser without bounds: RecursionError, then ValueError from int(), escape parse_record.
POISON = {
    "deeply_nested": (b'{"id": "deep", "caption": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "malformed_json",
                      "nested deeper"),
    "nested_past_the_setting": (line(id="d65", extra=json.loads("[" * 65 + "]" * 65)), "malformed_json",
                                "max_json_depth=64"),
    "huge_integer": (line(id="int")[:-1] + b', "n": ' + b"7" * 5000 + b"}", "malformed_json",
                     "integer of 5,000 digits is longer than max_json_int_digits=100"),
    "too_many_values": (line(id="many", tags=[0] * 150_000), "record_too_large", "max_json_values=100,000"),
    "long_line": (line(id="long", caption="x" * (3 << 20)), "record_too_large", "max_line_bytes=2,097,152"),
}


@pytest.mark.parametrize("name", sorted(POISON))
def test_a_poisoned_line_is_refused_with_its_own_reason_and_the_setting(name):
    data, reason, detail = POISON[name]
    got = parse_record(data, FIELDS, PrepareConfig().json_limits)
    assert isinstance(got, Rejected) and got.reason == reason and detail in got.detail, got
    if reason != "malformed_json" or "digits" in detail or "setting" in name:
        assert "--max-" in got.detail  # where to raise the bound


def test_a_long_line_cut_by_its_reader_is_refused_whatever_its_head_holds():
    got = parse_record(LongLine(b'{"id": "a", "caption": "b"}', 9 << 20), FIELDS, JsonLimits())
    assert got.reason == "record_too_large" and "9,437,184 bytes" in got.detail


def _png(colour, side: int = 32) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (side, side), colour).save(buf, format="PNG")
    return buf.getvalue()


def test_a_drop_of_poison_and_a_linked_image_is_prepared_and_nothing_outside_the_lake_enters_it(tmp_path, capsys):
    """The issue's 'done when': exit 0, each bad record quarantined with its reason, counts that reconcile, and no
    byte of an outside file anywhere in the lake (the linked image is a valid image: followed, it would be curated)."""
    lake_dir, outside = tmp_path / "lake", tmp_path / "outside"
    outside.mkdir()
    secret = _png((1, 2, 3))
    (outside / "secret.png").write_bytes(secret)
    raw = LocalLake(tmp_path / "producer")
    made = make_raw_drop(raw, DATE, RawDropConfig(n=120, seed=5, dirt_rate=0.0))
    drop = drop_prefix(DATE)
    poison = [data for data, _, _ in POISON.values()] + [line(id="linked", image="images/linked.png")]
    raw.put_bytes(join(drop, "records-poison.jsonl"), b"\n".join(poison) + b"\n")
    (tmp_path / "producer" / drop / "images" / "linked.png").symlink_to(outside / "secret.png")

    rc = main(["prepare", "--date", DATE, "--lake", str(lake_dir), "--raw", raw.uri, "--min-rows", "50",
               "--workers", "2"])
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 0 and summary["published"], summary
    expected = {reason for _, reason, _ in POISON.values()} | {"image_key_invalid"}
    assert set(summary["reasons"]) == expected
    assert summary["input"] == made["records"] + len(poison) == summary["curated"] + summary["quarantined"]
    assert summary["reasons"]["image_key_invalid"] == 1 and summary["quarantined"] == len(poison)

    lake = LocalLake(lake_dir)
    quarantine = lake.read_parquet([k for k in lake.list("quarantine") if k.endswith(".parquet")]).to_pylist()
    by_reason = {}
    for row in quarantine:
        by_reason.setdefault(row["reason"], []).append(row)
    linked = by_reason["image_key_invalid"][0]
    assert "symbolic link" in linked["detail"] and linked["attachment"] is None and linked["id"] == "linked"
    long = next(r for r in by_reason["record_too_large"] if "max_line_bytes" in r["detail"])
    assert len(long["raw"]) == LongLine.HEAD  # the head, not the 3 MiB line
    _assert_nowhere_in(lake, secret)


def _assert_nowhere_in(lake: LocalLake, needle: bytes) -> None:
    """No object of the lake holds ``needle``: plain files byte for byte, Parquet files value by value (they are
    compressed), images and their decoded pixels alike."""
    pixels = Image.open(io.BytesIO(needle)).tobytes()
    for key in lake.list(""):
        data = lake.get_bytes(key)
        assert needle not in data, key
        if not key.endswith(".parquet"):
            continue
        table = lake.parquet_file(key).read()
        for column in table.column_names:
            if pa.types.is_binary(table.schema.field(column).type):
                for value in table.column(column).to_pylist():
                    assert value is None or (needle not in value and value != pixels), (key, column)
