"""Prompt files: bounded, read once and pinned by the run, each shard on its own slice; a bad line is one refused
prompt. The tests marked so fail on d70b129, where a shard re-read the whole file and one bad line failed the run."""

import dataclasses
import json

import pytest

from aigc.config import GenerateConfig
from aigc.generate import pinned
from aigc.generate import run as gen_run
from aigc.generate.prompts import claim_prompt_file, prompts_key
from aigc.lake import LocalLake
from aigc.quality.generation import validate_generation
from aigc.workloads.image import IMAGE
from tests.training_fixtures import DATE
from tests.unit.generate.test_generate import config, rows_of

KEY = prompts_key("shapes", DATE)


def lines(*rows) -> bytes:
    return b"".join((r if isinstance(r, bytes) else json.dumps(r).encode()) + b"\n" for r in rows)


def test_a_file_that_cannot_be_answered_at_all_is_refused_naming_the_bound(tmp_path):
    lake = LocalLake(tmp_path)
    with pytest.raises(pinned.BadPrompts, match="no prompt file at"):
        pinned.pin(lake, KEY, "run", GenerateConfig(), 2)
    lake.put_bytes(KEY, b"\n \n")
    with pytest.raises(pinned.BadPrompts, match="holds no prompts"):
        pinned.pin(lake, KEY, "run", GenerateConfig(), 2)
    lake.put_bytes(KEY, lines(*[{"prompt_id": str(i), "prompt": "x"} for i in range(50)]))
    with pytest.raises(pinned.BadPrompts, match=r"over max_prompt_file_bytes=100; .*--max-prompt-file-bytes"):
        pinned.pin(lake, KEY, "run", GenerateConfig(max_prompt_file_bytes=100), 2)
    with pytest.raises(pinned.BadPrompts, match="more than max_prompts=10 prompts"):
        pinned.pin(lake, KEY, "run", GenerateConfig(max_prompts=10), 2)


def test_a_file_larger_than_its_head_said_is_refused_once_read_past_the_bound(tmp_path, monkeypatch):
    """A HEAD's size is a claim: a reply cut inside its headers reads as 0 bytes (AIRFLOW_NOTES)."""
    lake = LocalLake(tmp_path)
    lake.put_bytes(KEY, lines(*[{"prompt_id": str(i), "prompt": "x" * 50} for i in range(100)]))
    monkeypatch.setattr(LocalLake, "size", lambda self, key: 0)
    with pytest.raises(pinned.BadPrompts, match="or more, over max_prompt_file_bytes=2,000"):
        pinned.pin(lake, KEY, "run", GenerateConfig(max_prompt_file_bytes=2000), 2)


POISON = [
    (b'{"prompt_id": "deep", "prompt": ' + b"[" * 50_000 + b"]" * 50_000 + b"}", "record_too_large"),
    (b'{"prompt_id": "nest", "prompt": ' + b"[" * 5000 + b"]" * 5000 + b"}", "malformed_json: nested deeper"),
    (b'{"prompt_id": "int", "prompt": "x", "seed": ' + b"7" * 5000 + b"}", "malformed_json: an integer of 5,000"),
    (json.dumps({"prompt_id": "long", "prompt": "x" * 100_000}).encode(), "record_too_large: line of"),
    (b"[1, 2]", "malformed_json: a line must hold a JSON object"),
    (json.dumps({"prompt": "no id"}).encode(), "missing_field"),
    (json.dumps({"prompt_id": "p-000", "prompt": "again"}).encode(), "duplicate_prompt_id: prompt_id 'p-000'"),
    (json.dumps({"prompt_id": "neg", "prompt": "x", "seed": -1}).encode(), "seed_invalid"),
]


def test_each_bad_line_is_one_refused_prompt_and_every_other_prompt_is_answered(deployed_lake):
    """Fails on d70b129: a deeply nested line escaped the parser (RecursionError), a 5,000-digit seed int()'s
    limit (ValueError), and any bad line failed the whole plan: every retry the same."""
    cfg = config(shards=3)
    good = [{"prompt_id": f"p-{i:03d}", "prompt": "a small red circle on the left", "seed": i} for i in range(9)]
    deployed_lake.put_bytes(KEY, lines(*good[:4], *[data for data, _ in POISON], *good[4:]))
    plan = gen_run.plan_generation(deployed_lake, DATE, cfg, IMAGE, model_ref="v0001", prompts_key=KEY)
    assert (plan["prompts"], plan["refused_lines"]) == (len(good) + len(POISON), len(POISON))
    for s in plan["shards"]:
        gen_run.generate_shard(deployed_lake, plan, s, cfg, IMAGE)
    summary = gen_run.finish_generation(deployed_lake, plan, cfg, IMAGE)
    assert validate_generation(deployed_lake, summary, cfg, IMAGE)["success"]
    rows = {r["prompt_id"]: r for r in rows_of(deployed_lake, plan)}
    assert {p["prompt_id"] for p in good} <= rows.keys() and len(rows) == len(good) + len(POISON)
    assert all(rows[p["prompt_id"]]["status"] == "generated" for p in good)
    for n, (_, reason) in enumerate(POISON, start=5):  # the poison sits on lines 5…
        assert rows[f"#line-{n}"]["status"] == "refused" and rows[f"#line-{n}"]["reason"].startswith(reason), n


def test_the_run_answers_the_version_it_pinned_when_the_file_is_dropped_again_mid_run(deployed_lake):
    """Fails on d70b129: each shard re-read the file, so the shards after a re-drop answered the new file."""
    cfg = config(shards=2)
    first = [{"prompt_id": f"a{i}", "prompt": "a small red circle on the left", "seed": i} for i in range(6)]
    deployed_lake.put_bytes(KEY, lines(*first))
    plan = gen_run.plan_generation(deployed_lake, DATE, cfg, IMAGE, model_ref="v0001", prompts_key=KEY)
    gen_run.generate_shard(deployed_lake, plan, plan["shards"][0], cfg, IMAGE)
    deployed_lake.put_bytes(KEY, lines(*[{**p, "prompt_id": "b" + p["prompt_id"][1:]} for p in first]))
    gen_run.generate_shard(deployed_lake, plan, plan["shards"][1], cfg, IMAGE)
    summary = gen_run.finish_generation(deployed_lake, plan, cfg, IMAGE)
    assert sorted(r["prompt_id"] for r in rows_of(deployed_lake, plan)) == [p["prompt_id"] for p in first]
    assert deployed_lake.get_json(f"{gen_run.generation_prefix('shapes-cvae', DATE, plan['run_id'])}/_MANIFEST.json")[
        "prompts_sha256"] == plan["prompts_sha256"]
    assert validate_generation(deployed_lake, summary, cfg, IMAGE)["success"]


def test_each_shard_reads_only_its_slice_and_refuses_one_that_changed(tmp_path, monkeypatch):
    lake = LocalLake(tmp_path)
    lake.put_bytes(KEY, lines(*[{"prompt_id": f"p{i}", "prompt": f"prompt {i}"} for i in range(30)]))
    pin = pinned.pin(lake, KEY, "run=1", GenerateConfig(), 3)
    assert [(s["lo"], s["hi"]) for s in pin["slices"]] == [(0, 10), (10, 20), (20, 30)]
    read = []
    real = LocalLake.read_range
    monkeypatch.setattr(LocalLake, "read_range",
                        lambda self, key, start, n: read.append(n) or real(self, key, start, n))
    monkeypatch.setattr(LocalLake, "get_bytes", lambda *_: pytest.fail("a shard read a whole object"))
    middle = pinned.read_slice(lake, pin["pinned"], pin["slices"][1])
    assert [e["prompt_id"] for e in middle] == [f"p{i}" for i in range(10, 20)]
    assert read == [pin["slices"][1]["bytes"]] and read[0] < lake.size(pin["pinned"]) / 2
    monkeypatch.undo()
    copy = lake.get_bytes(pin["pinned"])
    lake.put_bytes(pin["pinned"], copy.replace(b"prompt 15", b"prompt 51"))
    with pytest.raises(pinned.PromptsChanged, match="are not the bytes the plan pinned"):
        pinned.read_slice(lake, pin["pinned"], pin["slices"][1])


def test_the_watcher_streams_the_file_and_notices_a_change_of_the_same_size(tmp_path, monkeypatch):
    """Fails on d70b129: the watcher read the whole file into the triggerer's memory, and a re-drop of the same
    size went unnoticed (it compared sizes)."""
    lake = LocalLake(tmp_path)
    lake.put_bytes(KEY, lines({"prompt_id": "a", "prompt": "a small red circle"}))
    real = LocalLake.get_bytes
    monkeypatch.setattr(LocalLake, "get_bytes", lambda self, key: pytest.fail(f"read {key} whole")
                        if key == KEY else real(self, key))
    first = claim_prompt_file(lake, "shapes")
    assert first and claim_prompt_file(lake, "shapes") is None
    assert "version" not in first  # an event's "version" is the model a deployment made: the file's has its own name
    import os
    import time

    time.sleep(0.01)  # a later modification time, as a real re-drop has
    lake.put_bytes(KEY, lines({"prompt_id": "b", "prompt": "a small red square"}))  # the same size
    os.utime(tmp_path / KEY, ns=(time.time_ns(), time.time_ns()))
    again = claim_prompt_file(lake, "shapes")
    assert again and again["size"] == first["size"] and again["sha256"] != first["sha256"]


def test_the_prompt_bounds_are_settings_with_their_names():
    with pytest.raises(ValueError, match="GenerateConfig.max_line_bytes must be in"):
        dataclasses.replace(GenerateConfig(), max_line_bytes=0)
